//! A shard's committed versions in the engine: [`EngineVersions`], the
//! [`Versions`] of the server's shards (design record 0008), in the layout
//! of [`crate::versions`].

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockWriteGuard};

use foldhash::HashMap;
use milliscale::{AsyncDatabase, AsyncTransaction, Direction, Table};

use crate::types::{CommitTs, HeldKey, Key, Timestamp, Value, cluster_key, split_cluster_key};
use crate::versions::{Gone, STAMP_BYTES, Versions, in_range, row_value, split_row};

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
    tables: Tables,
    staging: bool,
    staged: Vec<RowWrite>,
    history: Arc<Mutex<History>>,
    /// Known newest versions (see the type's comment), each with where
    /// the engine found its key's row, once a batch's read found it
    /// ([`EngineVersions::version_and_hint_at`]).
    latest: RefCell<HashMap<HeldKey, (CommitTs, Option<milliscale::RowHint>)>>,
    /// How many keys `latest` holds before it is cleared.
    latest_cap: usize,
    /// Rows read a moment ago by the caller, by cluster key, offered to
    /// the next install in place of reading them again
    /// ([`EngineVersions::offer_rows`]).
    offered: HashMap<HeldKey, KeptRow>,
    /// Ranges being copied to another shard, and the keys installed in
    /// them since ([`EngineVersions::tracked`]).
    tracked: Tracked,
}

/// The most keys whose newest version [`EngineVersions`] remembers.
pub const LATEST_MEMO_KEYS: usize = 1 << 18;

/// One row's new version, for the caller's engine transaction.
#[derive(Debug, Clone)]
pub struct RowWrite {
    table: Table,
    /// The key in its table (the cluster key without the table's name).
    key: Key,
    /// The whole row.
    row: Vec<u8>,
    /// The byte ranges of `row` that changed, if the row kept its length
    /// and they are a small part of it: written in place, so that the log
    /// holds only them (the engine's delta logging).
    changed: Option<Vec<(usize, usize)>>,
    /// Where the engine found the key's row, if a read the caller keeps
    /// open found it ([`KeptRow`]).
    hint: Option<milliscale::RowHint>,
}

impl RowWrite {
    /// Write it in `tx` (an empty row: delete the key's).
    pub fn apply(&self, tx: &mut AsyncTransaction) -> milliscale::Result<()> {
        let table = &self.table;
        if let Some(hint) = self.hint {
            tx.assume_row(table, &self.key, hint);
        }
        match &self.changed {
            None if self.row.is_empty() => tx.delete(table, &self.key).map(drop),
            None => tx.put(table, &self.key, &self.row),
            Some(ranges) => {
                let patches: Vec<(usize, &[u8])> =
                    ranges.iter().map(|&(from, to)| (from, &self.row[from..to])).collect();
                tx.update_ranges(table, &self.key, &patches)
            }
        }
    }

    /// The new row for `key` at `version`, given the row it replaces.
    fn new(
        table: Table,
        key: &[u8],
        version: CommitTs,
        value: Option<&[u8]>,
        old: Option<&[u8]>,
    ) -> RowWrite {
        let row = row_value(version, value);
        let changed = old.filter(|o| o.len() == row.len()).and_then(|old| {
            // The stamp always changes; then the span of the value that did.
            let first = first_difference(&row[STAMP_BYTES..], &old[STAMP_BYTES..]);
            let ranges = match first.map(|i| i + STAMP_BYTES) {
                None => vec![(0, STAMP_BYTES)],
                Some(first) => {
                    let last =
                        first + last_difference(&row[first..], &old[first..]).expect("first");
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
        RowWrite { table, key: key.to_vec(), row, changed, hint: None }
    }
}

/// The bytes compared at once by [`first_difference`] and
/// [`last_difference`] (slices of equal length compare as one `memcmp`).
const COMPARED_AT_ONCE: usize = 32;

/// The first index at which `a` and `b` (of one length) differ.
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + COMPARED_AT_ONCE <= a.len()
        && a[i..i + COMPARED_AT_ONCE] == b[i..i + COMPARED_AT_ONCE]
    {
        i += COMPARED_AT_ONCE;
    }
    (i..a.len()).find(|&j| a[j] != b[j])
}

/// The last index at which `a` and `b` (of one length) differ.
fn last_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    let mut end = a.len();
    while end >= COMPARED_AT_ONCE
        && a[end - COMPARED_AT_ONCE..end] == b[end - COMPARED_AT_ONCE..end]
    {
        end -= COMPARED_AT_ONCE;
    }
    (0..end).rev().find(|&j| a[j] != b[j])
}

mod history;
use history::History;
mod reads;
pub use reads::{HeldRead, KeptRow, ValueRead, VersionRows};
mod moved;
mod tracked;
pub use tracked::Tracked;

/// The engine tables holding the rows, by cluster table name, shared by
/// an [`EngineVersions`] and its [`VersionRows`]; in name order, which is
/// the order of the cluster keys (a name holds no `0x00`).
type Tables = Arc<RwLock<BTreeMap<String, Table>>>;

/// `key`'s table's name and the key in it; panics on a key that is not a
/// cluster key (`table ‖ 0x00 ‖ key`).
fn split(key: &[u8]) -> (&str, &[u8]) {
    split_cluster_key(key).unwrap_or_else(|| panic!("not a cluster key: {key:?}"))
}

fn table_named(tables: &Tables, name: &str) -> Option<Table> {
    tables.read().unwrap_or_else(PoisonError::into_inner).get(name).cloned()
}

/// The tables, to change (a poisoned lock's map is still whole: each
/// change is one map operation).
fn tables_mut(tables: &Tables) -> RwLockWriteGuard<'_, BTreeMap<String, Table>> {
    tables.write().unwrap_or_else(PoisonError::into_inner)
}

fn lock(h: &Mutex<History>) -> MutexGuard<'_, History> {
    h.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Drop the versions replaced at or below `watermark`, a thousand
/// replacements at a time, letting the history go between parts; how
/// many versions it dropped.
fn collect_in_parts(history: &Mutex<History>, watermark: Timestamp) -> usize {
    const BUDGET: usize = 1024;
    let mut dropped = 0;
    loop {
        let (n, more) = lock(history).collect_some(watermark, BUDGET);
        dropped += n;
        if !more {
            return dropped;
        }
    }
}

impl std::fmt::Debug for EngineVersions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineVersions").finish_non_exhaustive()
    }
}

impl EngineVersions {
    /// The versions in `db`, each cluster table's rows in the engine table
    /// of its name (every table of `db` but the shard's own, `_milana.*`;
    /// a write to a table that has none creates it), each write an engine
    /// transaction of its own.
    pub fn open(db: impl Into<AsyncDatabase>) -> EngineVersions {
        let db = db.into();
        // Every table but the shard's own (`_milana.`, which no cluster
        // table's name starts with) holds a cluster table's rows.
        let tables = db
            .table_names()
            .into_iter()
            .filter(|n| !n.starts_with("_milana."))
            .filter_map(|n| Some((n.clone(), db.open_table(&n).ok()?)))
            .collect();
        EngineVersions {
            db,
            tables: Arc::new(RwLock::new(tables)),
            staging: false,
            staged: Vec::new(),
            history: Arc::default(),
            latest: RefCell::default(),
            latest_cap: LATEST_MEMO_KEYS,
            offered: HashMap::default(),
            tracked: Tracked::default(),
        }
    }

    /// The versions in `db`, installs staged for the caller's transaction.
    /// The caller registers each cluster table's engine table
    /// ([`EngineVersions::register`]) before a write to it.
    pub fn staged(db: impl Into<AsyncDatabase>) -> EngineVersions {
        EngineVersions { staging: true, ..EngineVersions::open(db) }
    }

    /// Hold cluster table `table`'s rows in the engine table `table`.
    pub fn register(&mut self, table: Table) {
        tables_mut(&self.tables).insert(table.name().to_owned(), table);
    }

    /// The engine tables holding rows, in name order.
    pub fn tables(&self) -> Vec<Table> {
        self.tables.read().unwrap_or_else(PoisonError::into_inner).values().cloned().collect()
    }

    /// The engine table of cluster table `name`: registered, or (written
    /// by itself, not staged) found in the engine, then registered. A
    /// staged one's tables are only those its caller registered, so a
    /// table the caller is dropping is not found again.
    fn table(&self, name: &str) -> Option<Table> {
        if let Some(t) = table_named(&self.tables, name) {
            return Some(t);
        }
        if self.staging {
            return None;
        }
        let t = match self.db.open_table(name) {
            Err(milliscale::Error::TableNotFound(_)) => return None,
            t => t.expect("open a table"),
        };
        Some(tables_mut(&self.tables).entry(name.to_owned()).or_insert(t).clone())
    }

    /// The engine table to write cluster table `name`'s rows in, created
    /// if missing (the server's shard creates it with the cluster table,
    /// so only a restart in the middle of a drop leaves one missing).
    fn table_for_write(&self, name: &str) -> Table {
        if let Some(t) = self.table(name) {
            return t;
        }
        let t = self.db.blocking().create_table(name).expect("create a table");
        tables_mut(&self.tables).entry(name.to_owned()).or_insert(t).clone()
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
            tables: self.tables.clone(),
            history: self.history.clone(),
        }
    }

    /// Rows the caller read a moment ago (cluster key and whole row, as
    /// [`VersionRows::values`] keeps them), for the next install to use
    /// in place of reading them again: one that is still its key's newest
    /// version (the memo knows it) is the key's row. Those of an earlier
    /// offer are dropped; an install drops them all.
    pub fn offer_rows<'k>(&mut self, rows: impl IntoIterator<Item = (&'k [u8], KeptRow)>) {
        self.offered.clear();
        self.offered.extend(rows.into_iter().map(|(k, row)| (HeldKey::from_slice(k), row)));
    }

    /// The writes staged by installs since the last call, to apply in the
    /// caller's transaction ([`RowWrite::apply`]).
    pub fn take_staged(&mut self) -> Vec<RowWrite> {
        std::mem::take(&mut self.staged)
    }

    /// Forget cluster table `name`: its engine table is being dropped by
    /// the caller. Returns how many replaced versions of its keys it
    /// dropped from memory.
    pub fn forget_table(&mut self, name: &str) -> usize {
        let prefix = cluster_key(name, b"");
        tables_mut(&self.tables).remove(name);
        self.tracked.clear();
        self.latest.get_mut().retain(|k, _| !k.starts_with(&prefix));
        lock(&self.history).forget_prefix(&prefix)
    }

    /// Forget what is remembered of the keys in `[start, end)` (an empty
    /// `end`: no end; cluster keys): their newest versions and the
    /// versions they replaced, for a caller that replaces or deletes the
    /// range's rows by itself (a range moved in or out, design record
    /// 0009). How many replaced versions it dropped.
    pub fn forget_range(&mut self, start: &[u8], end: &[u8]) -> usize {
        self.latest.get_mut().retain(|k, _| !in_range(k, start, end));
        lock(&self.history).forget_range(start, end)
    }

    /// The part of `[start, end)` (cluster keys) in each table, as bounds
    /// on the keys in it, in key order.
    pub fn table_ranges(&self, start: &[u8], end: &[u8]) -> Vec<(Table, Bound<Key>, Bound<Key>)> {
        self.ranges(start, end)
    }

    /// The ranges whose installed keys are recorded, for a range copied
    /// while it is served (design record 0009).
    pub fn tracked(&mut self) -> &mut Tracked {
        &mut self.tracked
    }

    /// The engine table of cluster table `name`, created if it has none.
    pub fn table_for(&self, name: &str) -> Table {
        self.table_for_write(name)
    }

    /// How many replaced versions are held in memory.
    pub fn history_len(&self) -> usize {
        lock(&self.history).count
    }

    fn remember(&self, key: &[u8], version: CommitTs) {
        self.remember_with(key, version, None);
    }

    /// [`EngineVersions::remember`], and where the engine found the key's
    /// row if `hint` says (else the hint known before stays: a new
    /// version of a key is written in its row, in place).
    fn remember_with(&self, key: &[u8], version: CommitTs, hint: Option<milliscale::RowHint>) {
        let mut memo = self.latest.borrow_mut();
        // `get_mut` first: `insert` copies the key.
        if let Some((v, h)) = memo.get_mut(key) {
            *v = version;
            if hint.is_some() {
                *h = hint;
            }
            return;
        }
        if memo.len() >= self.latest_cap {
            memo.clear();
        }
        memo.insert(HeldKey::from_slice(key), (version, hint));
    }

    /// [`Versions::version_at`] and, with the version, where the engine
    /// last found the key's row if known, in one lookup: for a read that
    /// takes the hint ([`VersionRows::values_held`]) and skips the index's
    /// descent. The engine ignores a hint whose record id may have gone
    /// to another key since ([`milliscale::Transaction::assume_row`]).
    pub fn version_and_hint_at(
        &self,
        key: &[u8],
        at: Timestamp,
    ) -> Option<(CommitTs, Option<milliscale::RowHint>)> {
        // The newest version known and at or below `at`; a key known to
        // have none reads as INITIAL at any `at`.
        let (known, hint) = *self.latest.borrow().get(key)?;
        (known == CommitTs::INITIAL || known.ts <= at).then_some((known, hint))
    }

    /// Read `key`'s row with `f` (`None`: no row, or no table).
    fn get_row<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let (name, k) = split(key);
        let table = self.table(name)?;
        let mut tx = self.db.begin().expect("begin a read");
        tx.get_with(&table, k, f).expect("read a version")
    }

    /// `key`'s row: its version and value (`None`: no row).
    fn row(&self, key: &[u8]) -> Option<(CommitTs, Option<Value>)> {
        debug_assert!(self.staged.is_empty(), "a read between an install and its transaction");
        let row = self.get_row(key, |row| {
            let (v, value) = parse(row);
            (v, value.map(<[u8]>::to_vec))
        });
        self.remember(key, row.as_ref().map_or(CommitTs::INITIAL, |r| r.0));
        row
    }

    /// The row `key` has before the write being staged: a staged one, or
    /// the engine's.
    fn row_before(&self, table: &Table, cluster_key: &[u8], key: &[u8]) -> Option<Arc<[u8]>> {
        self.row_and_hint_before(table, cluster_key, key).0
    }

    /// [`EngineVersions::row_before`], with where the engine found it if
    /// the caller offered it ([`EngineVersions::offer_rows`]).
    fn row_and_hint_before(
        &self,
        table: &Table,
        cluster_key: &[u8],
        key: &[u8],
    ) -> (Option<Arc<[u8]>>, Option<milliscale::RowHint>) {
        let found =
            self.staged.iter().rev().find(|w| w.key == key && w.table.name() == table.name());
        if let Some(w) = found {
            return ((!w.row.is_empty()).then(|| Arc::from(&w.row[..])), None);
        }
        if let Some(kept) = self.offered.get(cluster_key)
            && self.latest.borrow().get(cluster_key).map(|(v, _)| *v) == Some(parse(&kept.row).0)
        {
            // The key's newest version, so its row: a version is
            // written once.
            return (Some(kept.row.clone()), kept.hint);
        }
        let mut tx = self.db.begin().expect("begin a read");
        (tx.get_with(table, key, |r: &[u8]| Arc::<[u8]>::from(r)).expect("read a version"), None)
    }

    /// The part of `[start, end)` (cluster keys; an empty `end`: no end)
    /// in each table, as bounds on the keys in it, in key order.
    fn ranges(&self, start: &[u8], end: &[u8]) -> Vec<(Table, Bound<Key>, Bound<Key>)> {
        let mut out = Vec::new();
        for table in self.tables() {
            let name = table.name();
            // The table's keys are [name ‖ 0x00, name ‖ 0x01).
            let (first, past) = (cluster_key(name, b""), [name.as_bytes(), &[1]].concat());
            let lo = if start > first.as_slice() { start } else { &first };
            let hi = if !end.is_empty() && end < past.as_slice() { end } else { &past };
            if lo >= hi {
                continue;
            }
            let lower = Bound::Included(lo[first.len()..].to_vec());
            let upper = if hi == past.as_slice() {
                Bound::Unbounded
            } else {
                Bound::Excluded(hi[first.len()..].to_vec())
            };
            out.push((table, lower, upper));
        }
        out
    }
}

fn bound(b: &Bound<Key>) -> Bound<&[u8]> {
    b.as_ref().map(Vec::as_slice)
}

impl Versions for EngineVersions {
    fn latest(&self, key: &[u8]) -> CommitTs {
        if let Some((v, _)) = self.latest.borrow().get(key) {
            return *v;
        }
        debug_assert!(self.staged.is_empty(), "a read between an install and its transaction");
        let v = self.get_row(key, |row| parse(row).0).unwrap_or(CommitTs::INITIAL);
        self.remember(key, v);
        v
    }

    fn version_at(&self, key: &[u8], at: Timestamp) -> Option<CommitTs> {
        self.version_and_hint_at(key, at).map(|(v, _)| v)
    }

    fn read_at(&self, key: &[u8], at: Timestamp) -> Result<(CommitTs, Option<Value>), Gone> {
        let known = self.latest.borrow().get(key).map(|(v, _)| *v);
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
            let mut last: Option<Table> = None;
            for (key, value) in writes {
                let (name, k) = split(key);
                // A transaction's writes are mostly to one table: found once.
                let table = match last.take() {
                    Some(t) if t.name() == name => t,
                    _ => self.table_for_write(name),
                };
                last = Some(table.clone());
                let (old, hint) = self.row_and_hint_before(&table, key, k);
                let old_version = old.as_deref().map_or(CommitTs::INITIAL, |r| parse(r).0);
                debug_assert!(old_version < version, "versions go up");
                let mut row = RowWrite::new(table, k, version, value.as_deref(), old.as_deref());
                row.hint = hint;
                rows.push(row);
                // Into the history before the row changes: a reader that
                // finds the row replaced finds the version there.
                history.push(key, old_version, old, version.ts);
                self.remember_with(key, version, hint);
                if !self.tracked.is_empty() {
                    self.tracked.written(key);
                }
            }
        }
        // Not waited for when written by itself: the caller makes its
        // record durable before it answers, and a recovery installs a
        // logged commit again.
        self.write(rows);
    }

    fn adopt(&mut self, key: &[u8], version: CommitTs, value: Option<Value>) {
        self.adopt_row(key, version, value);
    }

    fn drop_range(&mut self, start: &[u8], end: &[u8]) -> usize {
        self.drop_rows(start, end)
    }

    fn collect(&mut self, watermark: Timestamp) -> usize {
        collect_in_parts(&self.history, watermark)
    }

    fn drop_history(&mut self) {
        *lock(&self.history) = History::default();
    }

    fn count(&self) -> usize {
        let mut tx = self.db.begin().expect("begin a count");
        let rows: usize = self
            .tables()
            .iter()
            .map(|t| tx.range(t, Bound::Unbounded, Bound::Unbounded, Direction::Forward).count())
            .sum();
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
        let history = lock(&self.history);
        let mut tx = self.db.begin().expect("begin a scan");
        let (mut out, mut gone) = (Vec::new(), None);
        for (table, lower, upper) in self.ranges(start, end) {
            let name = table.name();
            tx.scan_with(&table, bound(&lower), bound(&upper), Direction::Forward, |k, row| {
                let key = cluster_key(name, k);
                let (v, value) = parse(row);
                let (v, value) = if v.ts <= at {
                    (v, value.map(<[u8]>::to_vec))
                } else {
                    match history.at(&key, at, v) {
                        Ok(found) => found,
                        Err(g) => {
                            gone = Some(g);
                            return false;
                        }
                    }
                };
                if let Some(value) = value {
                    out.push((key, v, value));
                }
                limit == 0 || out.len() < limit
            })
            .expect("scan versions");
            if gone.is_some() || (limit > 0 && out.len() >= limit) {
                break;
            }
        }
        match gone {
            Some(g) => Err(g),
            None => Ok(out),
        }
    }

    fn changed_after(&self, start: &[u8], end: &[u8], at: Timestamp) -> bool {
        let mut tx = self.db.begin().expect("begin a scan");
        let mut changed = false;
        for (table, lower, upper) in self.ranges(start, end) {
            tx.scan_with(&table, bound(&lower), bound(&upper), Direction::Forward, |_, row| {
                changed = parse(row).0.ts > at;
                !changed
            })
            .expect("scan versions");
            if changed {
                break;
            }
        }
        changed
    }

    fn all(&self) -> BTreeMap<Key, Vec<(CommitTs, Option<Value>)>> {
        let history = lock(&self.history);
        let mut tx = self.db.begin().expect("begin a read");
        let mut out = BTreeMap::new();
        for table in self.tables() {
            for row in tx.range(&table, Bound::Unbounded, Bound::Unbounded, Direction::Forward) {
                let (k, row) = row.expect("scan versions");
                let key = cluster_key(table.name(), &k);
                let (v, value) = parse(&row);
                let older = history.keys.get(key.as_slice()).into_iter().flatten();
                let mut versions: Vec<_> = older
                    .filter(|o| o.version != CommitTs::INITIAL)
                    .map(|o| (o.version, o.value()))
                    .collect();
                versions.push((v, value.map(<[u8]>::to_vec)));
                out.insert(key, versions);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
