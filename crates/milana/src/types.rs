//! The names the protocol is written in: keys, values, shards, clients,
//! transactions and versions.

/// A key: bytes, ordered as bytes.
pub type Key = Vec<u8>;
/// A value; `None` in a write deletes the key.
pub type Value = Vec<u8>;
/// A shard (its primary is the participant in two-phase commit).
pub type ShardId = u32;
/// A client: the coordinator of its transactions.
pub type ClientId = u32;
/// Microseconds on a clock (a client's hybrid clock, or a shard's).
pub type Timestamp = u64;

/// A version stamp, ⟨timestamp, client id⟩ (MILANA §4.1; the paper calls
/// it a version): the commit timestamp of the transaction that wrote it,
/// made unique and totally ordered by the client id. Named `CommitTs` so
/// that `Version` means one thing: the engine's version of a row in its
/// chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct CommitTs {
    /// The writer's commit timestamp.
    pub ts: Timestamp,
    /// The writer.
    pub client: ClientId,
}

impl CommitTs {
    /// The version every key has before its first write.
    pub const INITIAL: CommitTs = CommitTs { ts: 0, client: 0 };
}

/// A transaction: its client and the client's sequence number for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnId {
    /// The coordinator.
    pub client: ClientId,
    /// The client's count of its transactions.
    pub seq: u64,
}

/// What a participant knows of a transaction (the states of the
/// cooperative termination protocol, MILANA §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnStatus {
    /// Validated, its prepare record durable; the decision is not known.
    Prepared,
    /// Committed here.
    Committed,
    /// Aborted here (it failed validation, the coordinator said so, or a
    /// termination query found it unknown here and aborted it).
    Aborted,
}
