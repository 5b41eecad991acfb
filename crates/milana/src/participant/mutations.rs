//! Deliberate protocol bugs ([`Mutations`]), each caught by the
//! simulation's oracles (`tests/dst.rs`).

/// Deliberate protocol bugs, for showing that the simulation catches them.
/// All off in real use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mutations {
    /// Validate writes without Algorithm 1's latest-read check (line 13)
    /// and without the floor a recovery sets.
    pub skip_latest_read_check: bool,
    /// Vote yes before the prepare record is durable (the caller's
    /// business: it answers at once instead of waiting for the log).
    pub vote_before_durable: bool,
    /// At recovery, commit a prepared multi-shard transaction without
    /// asking the other participants.
    pub commit_prepared_without_asking: bool,
    /// At recovery, ignore the read leases logged: start every key's
    /// latest read at zero (MILANA §4.5's pitfall, left open).
    pub forget_read_floor: bool,
    /// At a restart, keep only the prepared rows of the transaction table
    /// and drop the decided ones (a plausible saving: "only prepares need
    /// recovering"); a participant still asking about a transaction
    /// decided here then hears "aborted".
    pub restart_forgets_decided: bool,
    /// Validate a prepare without its scanned ranges (phantoms go
    /// unnoticed).
    pub skip_range_check: bool,
    /// Forget decided transactions below the client watermark alone,
    /// without the shards' oldest undecided prepares (the caller's
    /// business: the simulation computes the bound). A participant whose
    /// decision was lost then asks about a transaction no one remembers.
    pub forget_below_watermark_only: bool,
    /// Answer a read of a version that the single-shard fast path
    /// installed before its write is durable (the caller's business; see
    /// [`crate::fresh`]). A crash then takes back a version a reader saw.
    pub read_fresh_versions: bool,
    /// A range's old owner validates prepares in it while it is frozen
    /// for a move and after it moved away (the caller's business: the
    /// simulation's shards check what they own).
    pub old_owner_prepares_moved: bool,
    /// A range's new owner does not raise its read floor to the latest
    /// read its old owner served there (MILANA §4.5's pitfall, met again
    /// by a move).
    pub new_owner_forgets_read_floor: bool,
    /// Install a prepared transaction's writes as versions when it votes
    /// yes, before its decision (a plausible shortcut: "the commit only
    /// flips a flag"), and leave them if it aborts.
    pub install_before_decision: bool,
    /// A read or scan that waited (for its read lease, or a prepared
    /// write's decision) is checked again against the freezes alone, not
    /// the map (the caller's business; the server did so until
    /// `Shard::refuse_moved`): one that waited through a whole move and
    /// its release is served by the old owner from the rows it deleted.
    pub waited_reads_skip_the_map: bool,
}
