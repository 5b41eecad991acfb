//! Interactive transactions and one-shot batches.

use std::time::Duration;

use bytes::Bytes;

use crate::Client;
use crate::error::{Error, Result};
use crate::proto;

/// The isolation level of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// The server's default (snapshot isolation unless configured).
    #[default]
    Default,
    /// Each read sees the latest committed version.
    ReadCommitted,
    /// Reads see the snapshot taken when the transaction begins (see
    /// [`Transaction`]); first updater wins.
    Snapshot,
    /// Snapshot isolation plus read validation at commit.
    Serializable,
}

impl Isolation {
    pub(crate) fn wire(self) -> i32 {
        (match self {
            Isolation::Default => proto::Isolation::Unspecified,
            Isolation::ReadCommitted => proto::Isolation::ReadCommitted,
            Isolation::Snapshot => proto::Isolation::Snapshot,
            Isolation::Serializable => proto::Isolation::Serializable,
        }) as i32
    }

    fn of_wire(i: i32) -> Isolation {
        match proto::Isolation::try_from(i) {
            Ok(proto::Isolation::ReadCommitted) => Isolation::ReadCommitted,
            Ok(proto::Isolation::Snapshot) => Isolation::Snapshot,
            Ok(proto::Isolation::Serializable) => Isolation::Serializable,
            _ => Isolation::Default,
        }
    }
}

/// What a read-only transaction sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadAt {
    /// The latest committed state (a replica: what it has applied).
    #[default]
    Latest,
    /// Only durable commits (writer only): its reads never wait.
    Durable,
}

/// When a commit answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Once durable on the log's stores.
    #[default]
    Wait,
    /// Once visible to other transactions; wait for the token later with
    /// [`Client::wait_for`].
    Precommit,
}

impl Durability {
    pub(crate) fn wire(self) -> i32 {
        (match self {
            Durability::Wait => proto::Durability::Wait,
            Durability::Precommit => proto::Durability::Precommit,
        }) as i32
    }
}

/// How to begin a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxnOptions {
    /// The isolation level.
    pub isolation: Isolation,
    /// Refuse writes (required on a replica and with a read-only token).
    pub read_only: bool,
    /// What a read-only transaction sees.
    pub read_at: ReadAt,
    /// Read-your-writes: see the commit with this token and all before it
    /// (a replica waits for it, up to `wait`).
    pub at_token: Option<u64>,
    /// How long a replica may wait for `at_token` (zero: the server's
    /// default).
    pub wait: Duration,
}

impl TxnOptions {
    /// A read-only transaction.
    pub fn read_only() -> TxnOptions {
        TxnOptions { read_only: true, ..TxnOptions::default() }
    }

    /// A read-only transaction that sees the commit `token` (and all
    /// before it).
    pub fn at_token(token: u64) -> TxnOptions {
        TxnOptions { read_only: true, at_token: Some(token), ..TxnOptions::default() }
    }

    /// A transaction at `isolation`.
    pub fn isolation(isolation: Isolation) -> TxnOptions {
        TxnOptions { isolation, ..TxnOptions::default() }
    }
}

pub(crate) fn wait_ms(d: Duration) -> u32 {
    d.as_millis().min(u32::MAX as u128) as u32
}

/// A committed transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// The commit's CSN: a token for [`Client::wait_for`] and for
    /// read-your-writes on a replica. `None` if it wrote nothing.
    pub token: Option<u64>,
    /// True if the commit was durable when the server answered.
    pub durable: bool,
}

/// The most bytes of writes a transaction holds back before sending them
/// alone (see [`Transaction`]): well under the size at which a request
/// leaves the stream for a unary call, so the writes and the call they
/// travel with stay one message.
pub const WRITE_BEHIND_BYTES: usize = 256 << 10;

/// An interactive transaction on the server.
///
/// On a client with streamed calls (the default) a transaction's writes
/// (`put`, `patch`) do not wait: they are held and sent with its next
/// call that answers something (`get`, `get_many`, `delete`, `scan`,
/// `commit`), in one message, and run first, in the order they were
/// made. A write's error (a conflict, an unknown table) is that next
/// call's error; [`Transaction::flush`] sends them at once and reports it.
/// Past [`WRITE_BEHIND_BYTES`] held, a write sends them and waits. With
/// unary calls every call is one round trip. Dropping a transaction
/// unfinished aborts it in the background.
///
/// A transaction from [`Client::begin_with`] has begun when it is
/// returned: its snapshot was taken then. One from
/// [`Client::transaction`] begins with its first call, in the same
/// message (a round trip fewer), and takes its snapshot there, as
/// PostgreSQL's and MySQL's transactions take theirs at their first
/// statement; [`Transaction::begin_now`] begins it at once.
#[derive(Debug)]
pub struct Transaction {
    client: Client,
    /// 0 until it has begun.
    id: u64,
    snapshot: u64,
    isolation: Isolation,
    /// Until it has begun: how to begin it, with its first call.
    begin: Option<proto::BeginRequest>,
    finished: bool,
    read_only: bool,
    /// The writes held back, and their size on the wire.
    held: Option<proto::WriteRequest>,
    held_bytes: usize,
}

type Call = proto::call_stream_request::Call;
type Outcome = proto::call_stream_response::Outcome;

impl Transaction {
    /// A transaction that begins with its first call.
    pub(crate) fn deferred(client: Client, o: TxnOptions) -> Transaction {
        let read_at = match o.read_at {
            ReadAt::Latest => proto::ReadAt::Latest,
            ReadAt::Durable => proto::ReadAt::Durable,
        } as i32;
        let begin = proto::BeginRequest {
            isolation: o.isolation.wire(),
            read_only: o.read_only,
            read_at,
            at_token: o.at_token,
            wait_ms: wait_ms(o.wait),
        };
        Transaction {
            client,
            id: 0,
            snapshot: 0,
            isolation: Isolation::Default,
            begin: Some(begin),
            finished: false,
            read_only: o.read_only,
            held: None,
            held_bytes: 0,
        }
    }

    /// A transaction begun now.
    pub(crate) async fn begin(client: Client, o: TxnOptions) -> Result<Transaction> {
        let mut tx = Transaction::deferred(client, o);
        tx.begin_now().await?;
        Ok(tx)
    }

    /// Begin now, if it has not begun: one round trip, and the snapshot
    /// is taken here.
    pub async fn begin_now(&mut self) -> Result<()> {
        if let Some(b) = self.begin.take() {
            match self.client.txn_begin(b).await {
                Ok(began) => self.began(began),
                Err(e) => {
                    self.begin = Some(b);
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    fn began(&mut self, b: proto::BeginResponse) {
        (self.id, self.snapshot) = (b.txn_id, b.snapshot);
        self.isolation = Isolation::of_wire(b.isolation);
    }

    /// The transaction's id on the server; `None` until it has begun.
    pub fn id(&self) -> Option<u64> {
        self.begin.is_none().then_some(self.id)
    }

    /// Its snapshot: commits with a smaller CSN are visible. `None` until
    /// it has begun.
    pub fn snapshot(&self) -> Option<u64> {
        self.begin.is_none().then_some(self.snapshot)
    }

    /// Its isolation level, as the server chose it; `None` until it has
    /// begun.
    pub fn isolation(&self) -> Option<Isolation> {
        self.begin.is_none().then_some(self.isolation)
    }

    /// Send `call` with the writes held back, and its answer (a failure
    /// of the call or of a write as an error).
    async fn send(&mut self, call: Call) -> Result<Outcome> {
        let writes = self.held.take();
        self.held_bytes = 0;
        self.send_with(call, writes).await
    }

    /// Send `call` with `writes`, beginning the transaction with them if
    /// it has not begun. A begin that failed is tried again by the next
    /// call (the writes sent with it are dropped).
    async fn send_with(
        &mut self,
        call: Call,
        writes: Option<proto::WriteRequest>,
    ) -> Result<Outcome> {
        let begin = self.begin.take();
        let (began, r) = self.client.txn_send(call, writes, begin).await;
        match began {
            Some(b) => self.began(b),
            None => self.begin = begin,
        }
        Ok(r?)
    }

    /// A write: held back on a streamed client (sent with the next call,
    /// or now, alone, once [`WRITE_BEHIND_BYTES`] are held), else sent as
    /// its own call.
    async fn write(&mut self, table: &str, op: proto::operation::Op) -> Result<()> {
        if self.read_only {
            // As the server would refuse it, but at once.
            return Err(Error::read_only_txn());
        }
        if !self.client.streams_calls() {
            self.begin_now().await?;
            let (txn_id, table) = (self.id, table.to_owned());
            return match op {
                proto::operation::Op::Put(row) => {
                    let r = proto::PutRequest { txn_id, table, key: row.key, value: row.value };
                    self.client.fits(&r)?;
                    self.client.txn_put(r).await.map(drop).map_err(Into::into)
                }
                proto::operation::Op::Patch(p) => {
                    let r = proto::PatchRequest { txn_id, table, ..p };
                    self.client.fits(&r)?;
                    self.client.txn_patch(r).await.map(drop).map_err(Into::into)
                }
                _ => unreachable!("a held write is a put or a patch"),
            };
        }
        let held = self.held.get_or_insert_with(|| proto::WriteRequest {
            txn_id: 0,
            table: table.into(),
            writes: Vec::new(),
        });
        let table = if table == held.table { String::new() } else { table.into() };
        let op = proto::Operation { table, op: Some(op) };
        // A write goes whole in one message, and the writes held stay well
        // under the connection's message limit.
        let len = prost::Message::encoded_len(&op) + 4;
        let limit = self.client.max_message_bytes();
        if len + 64 > limit {
            return Err(Error::too_large(len + 64, limit));
        }
        self.held_bytes += len;
        held.writes.push(op);
        if self.held_bytes >= WRITE_BEHIND_BYTES.min(limit / 4) {
            self.flush().await?;
        }
        Ok(())
    }

    /// Send the writes held back, if any, and wait for them to run: their
    /// error, if one failed.
    pub async fn flush(&mut self) -> Result<()> {
        let Some(mut w) = self.held.take() else { return Ok(()) };
        self.held_bytes = 0;
        w.txn_id = self.id;
        match self.send_with(Call::Write(w), None).await? {
            Outcome::Write(_) => Ok(()),
            _ => Err(wrong_answer()),
        }
    }

    /// Read `key`; `None` if it has no visible value.
    pub async fn get(&mut self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        crate::limits::key(key)?;
        let request = proto::GetRequest {
            txn_id: self.id,
            table: table.into(),
            key: Bytes::copy_from_slice(key),
        };
        self.client.fits(&request)?;
        match self.send(Call::Get(request)).await? {
            Outcome::Get(r) => Ok(r.value.map(Vec::from)),
            _ => Err(wrong_answer()),
        }
    }

    /// Read several keys in one call, each as [`Self::get`] reads it: one
    /// value (or `None`) per key, in order.
    pub async fn get_many(&mut self, table: &str, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let request = proto::GetManyRequest {
            txn_id: self.id,
            table: table.into(),
            keys: keys.iter().map(|k| Bytes::copy_from_slice(k)).collect(),
            tables: Vec::new(),
        };
        self.read_many(request).await
    }

    /// [`Self::get_many`] of keys in several tables, each `(table, key)`:
    /// one call, one value (or `None`) per key, in order.
    pub async fn get_many_across(
        &mut self,
        keys: &[(&str, &[u8])],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let table = keys.first().map_or("", |(t, _)| *t);
        let request = proto::GetManyRequest {
            txn_id: self.id,
            table: table.into(),
            keys: keys.iter().map(|(_, k)| Bytes::copy_from_slice(k)).collect(),
            // The first key's table is `table`: the others' named only
            // where they differ from it (none if none does).
            tables: if keys.iter().all(|(t, _)| *t == table) {
                Vec::new()
            } else {
                keys.iter()
                    .map(|(t, _)| if *t == table { String::new() } else { (*t).to_owned() })
                    .collect()
            },
        };
        self.read_many(request).await
    }

    async fn read_many(&mut self, request: proto::GetManyRequest) -> Result<Vec<Option<Vec<u8>>>> {
        for k in &request.keys {
            crate::limits::key(k)?;
        }
        let asked = request.keys.len();
        self.client.fits(&request)?;
        let values = match self.send(Call::GetMany(request)).await? {
            Outcome::GetMany(r) => r.values,
            _ => return Err(wrong_answer()),
        };
        if values.len() != asked {
            return Err(Error::local(format!(
                "{} values for {asked} keys from the server",
                values.len()
            )));
        }
        Ok(values.into_iter().map(|v| v.value.map(Vec::from)).collect())
    }

    /// Write `value` under `key` (held back on a streamed client: see
    /// [`Transaction`]).
    pub async fn put(&mut self, table: &str, key: &[u8], value: &[u8]) -> Result<()> {
        crate::limits::write(key, value.len())?;
        let row =
            proto::Row { key: Bytes::copy_from_slice(key), value: Bytes::copy_from_slice(value) };
        self.write(table, proto::operation::Op::Put(row)).await
    }

    /// Delete `key`; whether it had a value.
    pub async fn delete(&mut self, table: &str, key: &[u8]) -> Result<bool> {
        crate::limits::key(key)?;
        let request = proto::DeleteRequest {
            txn_id: self.id,
            table: table.into(),
            key: Bytes::copy_from_slice(key),
        };
        self.client.fits(&request)?;
        match self.send(Call::Delete(request)).await? {
            Outcome::Delete(r) => Ok(r.existed),
            _ => Err(wrong_answer()),
        }
    }

    /// Overwrite `bytes.len()` bytes of `key`'s value at `offset` (logged
    /// as a delta; held back on a streamed client, as a put is).
    pub async fn patch(
        &mut self,
        table: &str,
        key: &[u8],
        offset: u32,
        bytes: &[u8],
    ) -> Result<()> {
        crate::limits::patch(key, offset, bytes)?;
        let p = proto::PatchRequest {
            key: Bytes::copy_from_slice(key),
            offset,
            bytes: Bytes::copy_from_slice(bytes),
            ..Default::default()
        };
        self.write(table, proto::operation::Op::Patch(p)).await
    }

    /// The rows in `range`, collected: on a streamed client a batch a call
    /// (each from after the last row), else from the `Scan` call's stream.
    pub async fn scan(&mut self, table: &str, range: KeyRange) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut rows = Vec::new();
        if !self.client.streams_calls() {
            let mut stream = self.scan_stream(table, range).await?;
            while let Some(batch) = stream.message().await? {
                rows.extend(batch.rows.into_iter().map(|r| (Vec::from(r.key), Vec::from(r.value))));
            }
            return Ok(rows);
        }
        let mut range = range.without_prefix();
        loop {
            let request = proto::ScanRequest {
                txn_id: self.id,
                table: table.into(),
                range: Some(range.clone().wire()),
            };
            let batch = match self.send(Call::Scan(request)).await? {
                Outcome::Scan(r) => r,
                _ => return Err(wrong_answer()),
            };
            let got = batch.rows.len() as u64;
            rows.extend(batch.rows.into_iter().map(|r| (Vec::from(r.key), Vec::from(r.value))));
            let last = rows.last().map(|(k, _)| k.as_slice());
            match (batch.more, last) {
                (true, Some(last)) if range.limit != got => range = range.after(last, got),
                _ => return Ok(rows),
            }
        }
    }

    /// The rows in `range` as the server's `Scan` call streams them: call
    /// `.message()` until it yields `None`. The writes held back are sent
    /// first.
    pub async fn scan_stream(
        &mut self,
        table: &str,
        range: KeyRange,
    ) -> Result<tonic::Streaming<proto::ScanResponse>> {
        self.begin_now().await?;
        self.flush().await?;
        let r = self.client.req(proto::ScanRequest {
            txn_id: self.id,
            table: table.into(),
            range: Some(range.wire()),
        });
        Ok(self.client.stub().scan(r).await?.into_inner())
    }

    /// Commit, and answer once durable.
    pub async fn commit(self) -> Result<Commit> {
        self.commit_with(Durability::Wait).await
    }

    /// Commit, answering as `durability` says. The writes held back go
    /// with it; if one fails, the transaction is aborted and this is its
    /// error.
    pub async fn commit_with(mut self, durability: Durability) -> Result<Commit> {
        self.finished = true;
        if self.begin.is_some() && self.held.is_none() {
            return Ok(NOTHING_DONE);
        }
        let r = proto::CommitRequest { txn_id: self.id, durability: durability.wire() };
        match self.send(Call::Commit(r)).await? {
            Outcome::Commit(c) => Ok(Commit { token: c.token, durable: c.durable }),
            _ => Err(wrong_answer()),
        }
    }

    /// Commit pipelined: answer once the commit is visible (pre-commit),
    /// with an ack that resolves once it is durable; on a streamed client
    /// the server tells that on the stream, so the caller may begin its
    /// next transaction at once, as the embedded engine's workers do.
    pub async fn commit_pipelined(mut self) -> Result<(Commit, crate::CommitAck)> {
        self.finished = true;
        let durability = Durability::Precommit.wire();
        if self.begin.is_some() && self.held.is_none() {
            return Ok((NOTHING_DONE, crate::CommitAck::already_durable()));
        }
        let r = proto::CommitRequest { txn_id: self.id, durability };
        let (writes, begin) = (self.held.take(), self.begin.take());
        let (c, ack) = self.client.txn_commit_told(Call::Commit(r), writes, begin).await?;
        Ok((Commit { token: c.token, durable: c.durable }, ack))
    }

    /// Abort: undo every write (the ones held back are dropped).
    pub async fn abort(mut self) -> Result<()> {
        self.finished = true;
        self.held = None;
        if self.begin.is_some() {
            return Ok(()); // nothing on the server
        }
        self.client.txn_abort(proto::AbortRequest { txn_id: self.id }).await?;
        Ok(())
    }
}

/// The commit of a transaction that never began: nothing to do, nothing
/// written.
const NOTHING_DONE: Commit = Commit { token: None, durable: true };

fn wrong_answer() -> Error {
    Error::local("the server answered a call with another call's answer".into())
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if self.finished || self.begin.is_some() {
            return;
        }
        // Abort it on the server now, rather than at its idle timeout.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            let r = proto::AbortRequest { txn_id: self.id };
            rt.spawn(async move {
                let _ = client.txn_abort(r).await;
            });
        }
    }
}

/// A range of keys: `start <= key < end` (either bound may be open), or
/// the keys that start with a prefix; at most `limit` rows (0: all), in
/// key order or reversed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRange {
    /// The first key, inclusive.
    pub start: Option<Vec<u8>>,
    /// The end, exclusive.
    pub end: Option<Vec<u8>>,
    /// Keys starting with this (instead of start and end).
    pub prefix: Option<Vec<u8>>,
    /// In reverse key order.
    pub reverse: bool,
    /// At most this many rows (0: all).
    pub limit: u64,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> KeyRange {
        KeyRange::default()
    }

    /// The keys that start with `prefix`.
    pub fn prefix(prefix: &[u8]) -> KeyRange {
        KeyRange { prefix: Some(prefix.to_vec()), ..KeyRange::default() }
    }

    /// `start <= key < end`.
    pub fn between(start: &[u8], end: &[u8]) -> KeyRange {
        KeyRange { start: Some(start.to_vec()), end: Some(end.to_vec()), ..KeyRange::default() }
    }

    /// At most `n` rows.
    pub fn limit(mut self, n: u64) -> KeyRange {
        self.limit = n;
        self
    }

    /// In reverse key order.
    pub fn reversed(mut self) -> KeyRange {
        self.reverse = true;
        self
    }

    /// The same range with a prefix as its start and end.
    fn without_prefix(mut self) -> KeyRange {
        if let Some(p) = self.prefix.take() {
            self.end = proto::KeyRange::prefix_end(&p);
            self.start = Some(p);
        }
        self
    }

    /// What is left of the range (without a prefix) after `got` rows up
    /// to `last`, in its direction.
    fn after(mut self, last: &[u8], got: u64) -> KeyRange {
        if self.reverse {
            self.end = Some(last.to_vec());
        } else {
            // The first key after `last`.
            let mut next = last.to_vec();
            next.push(0);
            self.start = Some(next);
        }
        if self.limit > 0 {
            self.limit -= got;
        }
        self
    }

    pub(crate) fn wire(self) -> proto::KeyRange {
        proto::KeyRange {
            start: self.start.map(Bytes::from),
            end: self.end.map(Bytes::from),
            prefix: self.prefix.map(Bytes::from),
            reverse: self.reverse,
            limit: self.limit,
        }
    }
}
