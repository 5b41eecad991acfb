//! A shard's committed versions in the engine: [`EngineVersions`], the
//! [`Versions`] of the server's shards (design record 0008), in the layout
//! of [`crate::versions`].

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use foldhash::HashMap;
use milliscale::{AsyncDatabase, AsyncTransaction, Direction, Table};

use crate::types::{CommitTs, Key, Timestamp, Value};
use crate::versions::{Gone, STAMP_BYTES, Versions, row_value, split_row};

/// The version and value of a row; panics on bytes [`row_value`] cannot
/// have made (a corrupt table).
fn parse(row: &[u8]) -> (CommitTs, Option<&[u8]>) {
    split_row(row).unwrap_or_else(|| panic!("a row that is no version: {row:?}"))
}

/// Versions in the engine (design record 0008): each key's newest version
/// is the engine row of the key itself (its stamp, then its value),
/// replaced in place by the next; the versions it replaced are kept in
/// memory ([`History`]) for as long as a read at an earlier timestamp may
/// ask for them, that is until the watermark reaches the version that
/// replaced them. A restart keeps the rows and loses that history: a read
/// that needs a version from before it is told [`Gone`] and begins again
/// (a transaction in flight across a shard's restart).
///
/// So a read at or above a key's newest version (nearly every read) is one
/// point read of a short key; a write is an update in place, logged as the
/// bytes it changed when the value keeps its length (a patch); and the
/// engine's index holds one entry per key, as for `milliscale serve`.
///
/// Two ways to write:
/// - by itself ([`EngineVersions::open`]): each `install` is an engine
///   transaction of its own, pre-committed and not waited for (the
///   simulation's tests and the property tests use this);
/// - staged ([`EngineVersions::staged`]): `install` only collects the
///   writes, and the caller takes them ([`EngineVersions::take_staged`])
///   into the engine transaction that also writes the decision's outcome
///   row, so that a commit's versions and its outcome are durable
///   together. The server's shard writes this way, under one lock, so no
///   read comes between an install and its transaction.
///
/// Each key's newest version, once a read or an install has learned it,
/// is kept in a small memo ([`LATEST_MEMO_KEYS`] keys at most, then
/// cleared), so that a prepare's validation, which asks for the newest
/// version of every key its transaction read a moment before, reads no
/// row again. A caller that deletes rows by itself (a dropped table)
/// calls [`EngineVersions::forget_prefix`].
///
/// An engine failure (the store unavailable, the writer fenced) panics:
/// the shard must stop, as it does when its log fails.
pub struct EngineVersions {
    db: AsyncDatabase,
    table: Table,
    staging: bool,
    staged: Vec<RowWrite>,
    history: Arc<Mutex<History>>,
    /// Known newest versions (see the type's comment).
    latest: RefCell<HashMap<Key, CommitTs>>,
    /// How many keys `latest` holds before it is cleared.
    latest_cap: usize,
}

/// The most keys whose newest version [`EngineVersions`] remembers.
pub const LATEST_MEMO_KEYS: usize = 1 << 18;

/// One row's new version, for the caller's engine transaction.
#[derive(Debug, Clone)]
pub struct RowWrite {
    key: Key,
    /// The whole row.
    row: Vec<u8>,
    /// The byte ranges of `row` that changed, if the row kept its length
    /// and they are a small part of it: written in place, so that the log
    /// holds only them (the engine's delta logging).
    changed: Option<Vec<(usize, usize)>>,
}

impl RowWrite {
    /// Write it in `tx`.
    pub fn apply(&self, tx: &mut AsyncTransaction, table: &Table) -> milliscale::Result<()> {
        match &self.changed {
            None => tx.put(table, &self.key, &self.row),
            Some(ranges) => ranges.iter().try_for_each(|&(from, to)| {
                tx.update_range(table, &self.key, from, &self.row[from..to])
            }),
        }
    }

    /// The new row for `key` at `version`, given the row it replaces.
    fn new(key: &[u8], version: CommitTs, value: Option<&[u8]>, old: Option<&[u8]>) -> RowWrite {
        let row = row_value(version, value);
        let changed = old.filter(|o| o.len() == row.len()).and_then(|old| {
            // The stamp always changes; then the span of the value that did.
            let first = (STAMP_BYTES..row.len()).find(|&i| row[i] != old[i]);
            let ranges = match first {
                None => vec![(0, STAMP_BYTES)],
                Some(first) => {
                    let last = (first..row.len()).rev().find(|&i| row[i] != old[i]).expect("first");
                    if first == STAMP_BYTES {
                        vec![(0, last + 1)]
                    } else {
                        vec![(0, STAMP_BYTES), (first, last + 1)]
                    }
                }
            };
            let bytes: usize = ranges.iter().map(|(a, b)| b - a).sum();
            (bytes * 2 <= row.len()).then_some(ranges)
        });
        RowWrite { key: key.to_vec(), row, changed }
    }
}

/// The versions that rows replaced, in memory until the watermark passes
/// the versions that replaced them.
#[derive(Debug, Default)]
struct History {
    /// Per key, its replaced versions, oldest first. A key first written
    /// since the shard started holds its absence before that write
    /// ([`CommitTs::INITIAL`]), so that a read below it finds "none".
    keys: HashMap<Key, VecDeque<Older>>,
    /// When each replaced version may go: the replacing version's
    /// timestamp and the key, in the order they were replaced. Commits
    /// arrive in nearly timestamp order, so a collection pops from the
    /// front while the front may go: one that came early with a late
    /// timestamp holds the ones behind it a little longer, and none goes
    /// early.
    due: VecDeque<(Timestamp, Key)>,
    /// How many versions (not absences) are held.
    count: usize,
}

#[derive(Debug)]
struct Older {
    version: CommitTs,
    value: Option<Value>,
    /// The timestamp of the version that replaced it.
    by: Timestamp,
}

impl History {
    fn push(&mut self, key: &[u8], version: CommitTs, value: Option<Value>, by: Timestamp) {
        self.count += usize::from(version != CommitTs::INITIAL);
        self.keys.entry(key.to_vec()).or_default().push_back(Older { version, value, by });
        self.due.push_back((by, key.to_vec()));
    }

    /// The newest replaced version of `key` at or below `at`; [`Gone`] if
    /// there is none (`row`: the key's row's version, the oldest held when
    /// nothing of it is in memory).
    fn at(
        &self,
        key: &[u8],
        at: Timestamp,
        row: CommitTs,
    ) -> Result<(CommitTs, Option<Value>), Gone> {
        let older = self.keys.get(key);
        if let Some(o) = older.and_then(|o| o.iter().rev().find(|o| o.version.ts <= at)) {
            return Ok((o.version, o.value.clone()));
        }
        let oldest = older.and_then(|o| o.front()).map_or(row, |o| o.version);
        Err(Gone { oldest: oldest.ts })
    }

    /// The value of `key` at exactly `version`, if held.
    fn exact(&self, key: &[u8], version: CommitTs) -> Option<Option<Value>> {
        let o = self.keys.get(key)?.iter().find(|o| o.version == version)?;
        Some(o.value.clone())
    }

    /// Drop the versions replaced at or below `watermark`; how many.
    fn collect(&mut self, watermark: Timestamp) -> usize {
        let mut dropped = 0;
        while let Some((by, _)) = self.due.front()
            && *by <= watermark
        {
            let (_, key) = self.due.pop_front().expect("a front");
            let Some(older) = self.keys.get_mut(&key) else { continue };
            while older.front().is_some_and(|o| o.by <= watermark) {
                let o = older.pop_front().expect("a front");
                dropped += usize::from(o.version != CommitTs::INITIAL);
            }
            if older.is_empty() {
                self.keys.remove(&key);
            }
        }
        self.count -= dropped;
        dropped
    }

    fn forget_prefix(&mut self, prefix: &[u8]) -> usize {
        let mut dropped = 0;
        self.keys.retain(|k, older| {
            let keep = !k.starts_with(prefix);
            if !keep {
                dropped += older.iter().filter(|o| o.version != CommitTs::INITIAL).count();
            }
            keep
        });
        self.count -= dropped;
        dropped
    }
}

/// Reads one version's value (the row's, or one replaced and still held)
/// without `&EngineVersions`; shared across threads.
#[derive(Clone)]
pub struct VersionRows {
    db: AsyncDatabase,
    table: Table,
    history: Arc<Mutex<History>>,
}

impl VersionRows {
    /// The value of `key` at `version` (`Some(None)`: a deletion), or
    /// `None` if it is not held (collected, or its table dropped).
    pub fn value(&self, key: &[u8], version: CommitTs) -> Option<Option<Value>> {
        if version == CommitTs::INITIAL {
            return Some(None);
        }
        let mut tx = self.db.begin().expect("begin a read");
        let row = tx.get_with(&self.table, key, |row| {
            let (v, value) = parse(row);
            (v == version).then(|| value.map(<[u8]>::to_vec))
        });
        if let Some(Some(value)) = row.expect("read a version") {
            return Some(value);
        }
        // Replaced since the caller learned it: in the history (a version
        // is put there before its row changes).
        lock(&self.history).exact(key, version)
    }
}

impl std::fmt::Debug for VersionRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VersionRows").field("table", &self.table.name()).finish()
    }
}

fn lock(h: &Mutex<History>) -> MutexGuard<'_, History> {
    h.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl std::fmt::Debug for EngineVersions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineVersions").field("table", &self.table.name()).finish()
    }
}

impl EngineVersions {
    /// The versions in `table` of `db` (created if missing), each write an
    /// engine transaction of its own.
    pub fn open(db: impl Into<AsyncDatabase>, table: &str) -> milliscale::Result<EngineVersions> {
        let db = db.into();
        let table = match db.open_table(table) {
            Err(milliscale::Error::TableNotFound(_)) => db.blocking().create_table(table)?,
            t => t?,
        };
        Ok(EngineVersions {
            db,
            table,
            staging: false,
            staged: Vec::new(),
            history: Arc::default(),
            latest: RefCell::default(),
            latest_cap: LATEST_MEMO_KEYS,
        })
    }

    /// The versions in `table` of `db` (created if missing), installs
    /// staged for the caller's transaction.
    pub fn staged(db: impl Into<AsyncDatabase>, table: &str) -> milliscale::Result<EngineVersions> {
        Ok(EngineVersions { staging: true, ..EngineVersions::open(db, table)? })
    }

    /// The table the rows are in.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The database the rows are in.
    pub fn database(&self) -> AsyncDatabase {
        self.db.clone()
    }

    /// A reader of single versions' values that needs no `&self`: for a
    /// caller that learned a version under its lock
    /// ([`crate::participant::Participant::read_version`]) and reads the
    /// value after releasing it.
    pub fn rows(&self) -> VersionRows {
        VersionRows {
            db: self.db.clone(),
            table: self.table.clone(),
            history: self.history.clone(),
        }
    }

    /// The writes staged by installs since the last call, to apply in the
    /// caller's transaction ([`RowWrite::apply`]).
    pub fn take_staged(&mut self) -> Vec<RowWrite> {
        std::mem::take(&mut self.staged)
    }

    /// Forget what is known of the keys starting with `prefix`: their
    /// rows were deleted without `install` (a table dropped). Returns how
    /// many replaced versions of theirs it dropped.
    pub fn forget_prefix(&mut self, prefix: &[u8]) -> usize {
        self.latest.get_mut().retain(|k, _| !k.starts_with(prefix));
        lock(&self.history).forget_prefix(prefix)
    }

    /// How many replaced versions are held in memory.
    pub fn history_len(&self) -> usize {
        lock(&self.history).count
    }

    fn remember(&self, key: &[u8], version: CommitTs) {
        let mut memo = self.latest.borrow_mut();
        if memo.len() >= self.latest_cap && !memo.contains_key(key) {
            memo.clear();
        }
        memo.insert(key.to_vec(), version);
    }

    /// `key`'s row: its version and value (`None`: no row).
    fn row(&self, key: &[u8]) -> Option<(CommitTs, Option<Value>)> {
        debug_assert!(self.staged.is_empty(), "a read between an install and its transaction");
        let mut tx = self.db.begin().expect("begin a read");
        let row = tx.get_with(&self.table, key, |row| {
            let (v, value) = parse(row);
            (v, value.map(<[u8]>::to_vec))
        });
        let row = row.expect("read a version");
        self.remember(key, row.as_ref().map_or(CommitTs::INITIAL, |r| r.0));
        row
    }

    /// The row `key` has before the write being staged: a staged one, or
    /// the engine's.
    fn row_before(&self, key: &[u8]) -> Option<Vec<u8>> {
        if let Some(w) = self.staged.iter().rev().find(|w| w.key == key) {
            return Some(w.row.clone());
        }
        let mut tx = self.db.begin().expect("begin a read");
        tx.get_with(&self.table, key, <[u8]>::to_vec).expect("read a version")
    }
}

impl Versions for EngineVersions {
    fn latest(&self, key: &[u8]) -> CommitTs {
        if let Some(v) = self.latest.borrow().get(key) {
            return *v;
        }
        debug_assert!(self.staged.is_empty(), "a read between an install and its transaction");
        let mut tx = self.db.begin().expect("begin a read");
        let v = tx.get_with(&self.table, key, |row| parse(row).0).expect("read a version");
        let v = v.unwrap_or(CommitTs::INITIAL);
        self.remember(key, v);
        v
    }

    fn version_at(&self, key: &[u8], at: Timestamp) -> Option<CommitTs> {
        // The newest version known and at or below `at`; a key known to
        // have none reads as INITIAL at any `at`.
        let known = self.latest.borrow().get(key).copied()?;
        (known == CommitTs::INITIAL || known.ts <= at).then_some(known)
    }

    fn read_at(&self, key: &[u8], at: Timestamp) -> Result<(CommitTs, Option<Value>), Gone> {
        let known = self.latest.borrow().get(key).copied();
        match known {
            Some(CommitTs::INITIAL) => return Ok((CommitTs::INITIAL, None)),
            // Newer than `at`: its row need not be read.
            Some(v) if v.ts > at => return lock(&self.history).at(key, at, v),
            _ => {}
        }
        match self.row(key) {
            None => Ok((CommitTs::INITIAL, None)),
            Some((v, value)) if v.ts <= at => Ok((v, value)),
            Some((v, _)) => lock(&self.history).at(key, at, v),
        }
    }

    fn install(&mut self, version: CommitTs, writes: &[(Key, Option<Value>)]) {
        let mut rows = Vec::with_capacity(writes.len());
        {
            let mut history = lock(&self.history);
            for (key, value) in writes {
                let old = self.row_before(key);
                let (old_version, old_value) =
                    old.as_deref().map_or((CommitTs::INITIAL, None), |r| {
                        let (v, value) = parse(r);
                        (v, value.map(<[u8]>::to_vec))
                    });
                debug_assert!(old_version < version, "versions go up");
                // Into the history before the row changes: a reader that
                // finds the row replaced finds the version there.
                history.push(key, old_version, old_value, version.ts);
                rows.push(RowWrite::new(key, version, value.as_deref(), old.as_deref()));
                self.remember(key, version);
            }
        }
        if self.staging {
            self.staged.extend(rows);
            return;
        }
        let mut tx = self.db.begin().expect("begin an install");
        for w in &rows {
            w.apply(&mut tx, &self.table).expect("write a version");
        }
        // Not waited for: the caller makes its record durable before it
        // answers, and a recovery installs a logged commit again.
        let _pre_committed = tx.precommit().expect("commit an install");
    }

    fn collect(&mut self, watermark: Timestamp) -> usize {
        lock(&self.history).collect(watermark)
    }

    fn drop_history(&mut self) {
        *lock(&self.history) = History::default();
    }

    fn count(&self) -> usize {
        let mut tx = self.db.begin().expect("begin a count");
        let rows =
            tx.range(&self.table, Bound::Unbounded, Bound::Unbounded, Direction::Forward).count();
        rows + self.history_len()
    }

    fn scan_at(
        &self,
        start: &[u8],
        end: &[u8],
        at: Timestamp,
        limit: usize,
    ) -> Result<Vec<(Key, CommitTs, Value)>, Gone> {
        debug_assert!(self.staged.is_empty(), "a scan between an install and its transaction");
        let upper = if end.is_empty() { Bound::Unbounded } else { Bound::Excluded(end) };
        let history = lock(&self.history);
        let mut tx = self.db.begin().expect("begin a scan");
        let (mut out, mut gone) = (Vec::new(), None);
        tx.scan_with(&self.table, Bound::Included(start), upper, Direction::Forward, |k, row| {
            let (v, value) = parse(row);
            let (v, value) = if v.ts <= at {
                (v, value.map(<[u8]>::to_vec))
            } else {
                match history.at(k, at, v) {
                    Ok(found) => found,
                    Err(g) => {
                        gone = Some(g);
                        return false;
                    }
                }
            };
            if let Some(value) = value {
                out.push((k.to_vec(), v, value));
            }
            limit == 0 || out.len() < limit
        })
        .expect("scan versions");
        match gone {
            Some(g) => Err(g),
            None => Ok(out),
        }
    }

    fn changed_after(&self, start: &[u8], end: &[u8], at: Timestamp) -> bool {
        let upper = if end.is_empty() { Bound::Unbounded } else { Bound::Excluded(end) };
        let mut tx = self.db.begin().expect("begin a scan");
        let mut changed = false;
        tx.scan_with(&self.table, Bound::Included(start), upper, Direction::Forward, |_, row| {
            changed = parse(row).0.ts > at;
            !changed
        })
        .expect("scan versions");
        changed
    }

    fn all(&self) -> BTreeMap<Key, Vec<(CommitTs, Option<Value>)>> {
        let history = lock(&self.history);
        let mut tx = self.db.begin().expect("begin a read");
        let mut out = BTreeMap::new();
        for row in tx.range(&self.table, Bound::Unbounded, Bound::Unbounded, Direction::Forward) {
            let (k, row) = row.expect("scan versions");
            let (v, value) = parse(&row);
            let older = history.keys.get(&k).into_iter().flatten();
            let mut versions: Vec<_> = older
                .filter(|o| o.version != CommitTs::INITIAL)
                .map(|o| (o.version, o.value.clone()))
                .collect();
            versions.push((v, value.map(<[u8]>::to_vec)));
            out.insert(k, versions);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::MapVersions;
    use milliscale::Options;
    use proptest::prelude::*;

    /// Rows in a fresh engine; with `small_memo` the memo of newest
    /// versions holds 2 keys of the test's 3, so that it is cleared again
    /// and again.
    fn engine(db: &Arc<milliscale::Database>, small_memo: bool) -> EngineVersions {
        let v = EngineVersions::open(Arc::clone(db), "versions").expect("table");
        EngineVersions { latest_cap: if small_memo { 2 } else { LATEST_MEMO_KEYS }, ..v }
    }

    proptest! {
        /// The engine's layout answers as the map does, through installs
        /// (of values of one length, so that some are patches in place),
        /// reads at any timestamp, collections and restarts.
        #[test]
        fn engine_rows_answer_as_the_map_does(
            ops in prop::collection::vec((0u8..5, 0usize..3, 0u64..50, 0u8..4), 1..60),
            small_memo in any::<bool>(),
        ) {
            let keys: [&[u8]; 3] = [b"a", b"a\x00", b"b"];
            let db = Arc::new(milliscale::Database::open(Options::new().store("memory://")).expect("open"));
            let (mut map, mut rows) = (MapVersions::default(), engine(&db, small_memo));
            let mut ts = 0;
            for (op, k, t, kind) in ops {
                let key = keys[k];
                match op {
                    0 | 1 => {
                        ts += 1 + t % 3;
                        // A deletion, a short value, or one of 64 bytes that
                        // differs from the last in a byte or not at all.
                        let value = match kind {
                            0 => None,
                            1 => Some(ts.to_be_bytes().to_vec()),
                            2 => Some(vec![7; 64]),
                            _ => Some([vec![7; 40], ts.to_be_bytes().to_vec(), vec![7; 16]].concat()),
                        };
                        let writes = vec![(key.to_vec(), value)];
                        let v = CommitTs { ts, client: k as u32 };
                        map.install(v, &writes);
                        rows.install(v, &writes);
                    }
                    2 => prop_assert_eq!(map.collect(t), rows.collect(t)),
                    3 if t % 4 == 0 => {
                        // A restart: the rows stay, the history goes.
                        map.drop_history();
                        rows = engine(&db, small_memo);
                    }
                    _ => {}
                }
                for (a, b) in [(&b""[..], &b""[..]), (b"a", b"a\x01"), (b"a\x00", b"b")] {
                    for at in [0, t, ts] {
                        prop_assert_eq!(map.scan_at(a, b, at, 0), rows.scan_at(a, b, at, 0));
                        prop_assert_eq!(map.scan_at(a, b, at, 1), rows.scan_at(a, b, at, 1));
                        prop_assert_eq!(map.changed_after(a, b, at), rows.changed_after(a, b, at));
                    }
                }
                for key in keys {
                    prop_assert_eq!(map.latest(key), rows.latest(key));
                    for at in [0, t, ts, Timestamp::MAX] {
                        let read = map.read_at(key, at);
                        prop_assert_eq!(&read, &rows.read_at(key, at));
                        if let Ok((v, value)) = read {
                            prop_assert_eq!(rows.rows().value(key, v), Some(value));
                        }
                    }
                }
            }
            prop_assert_eq!(map.count(), rows.count());
            prop_assert_eq!(map.all(), rows.all());
        }
    }

    /// A replaced version goes once the watermark reaches the version that
    /// replaced it, never before; one replaced with a late timestamp holds
    /// those replaced after it (the queue is in the order of commits).
    #[test]
    fn a_replaced_version_goes_once_the_watermark_passes_its_replacement() {
        let v = |ts| CommitTs { ts, client: 1 };
        let mut h = History::default();
        h.push(b"a", v(90), Some(b"a90".to_vec()), 100);
        h.push(b"b", CommitTs::INITIAL, None, 40);
        h.push(b"b", v(40), None, 50);
        assert_eq!(h.collect(99), 0, "a's replacement is at 100: a stays, and b waits behind it");
        assert_eq!(h.at(b"a", 95, v(100)), Ok((v(90), Some(b"a90".to_vec()))));
        assert_eq!(h.at(b"b", 45, v(50)), Ok((v(40), None)));
        assert_eq!(h.collect(100), 2, "a's and b's at 40 (b's absence before it does not count)");
        assert_eq!(h.at(b"a", 95, v(100)), Err(Gone { oldest: 100 }));
        assert_eq!(h.count, 0);
        assert!(h.keys.is_empty() && h.due.is_empty());
    }

    /// A patch in place logs the changed bytes and leaves the whole row.
    #[test]
    fn a_write_that_keeps_the_length_changes_only_its_bytes() {
        let v = |ts| CommitTs { ts, client: 1 };
        let old = row_value(v(1), Some(&[5; 100]));
        let mut value = vec![5; 100];
        value[50] = 9;
        let w = RowWrite::new(b"k", v(2), Some(&value), Some(&old));
        assert_eq!(w.changed, Some(vec![(0, STAMP_BYTES), (STAMP_BYTES + 50, STAMP_BYTES + 51)]));
        assert_eq!(w.row, row_value(v(2), Some(&value)));
        // A new length, or most of the row changed: the whole row.
        assert_eq!(RowWrite::new(b"k", v(2), Some(&[5; 99]), Some(&old)).changed, None);
        assert_eq!(RowWrite::new(b"k", v(2), Some(&[6; 100]), Some(&old)).changed, None);
        assert_eq!(RowWrite::new(b"k", v(2), None, Some(&old)).changed, None);
    }
}
