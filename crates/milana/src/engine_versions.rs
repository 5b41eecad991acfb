//! A shard's committed versions as engine rows: [`EngineVersions`], the
//! [`Versions`] of the server's shards (design record 0008), in the layout
//! of [`crate::versions`].

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use milliscale::{AsyncDatabase, Direction, Table};

use crate::types::{CommitTs, Key, Timestamp, Value};
use crate::versions::{
    Versions, range_at, range_of, row_value, split_versioned_key, versioned_key,
};

/// The value a row holds; `None` for a deletion. Panics on bytes
/// [`row_value`] cannot have made (a corrupt table).
fn value_of(row: &[u8]) -> Option<Value> {
    match row.split_first() {
        Some((0, [])) => None,
        Some((1, v)) => Some(v.to_vec()),
        _ => panic!("a version row that is neither a value nor a deletion: {row:?}"),
    }
}

/// Versions as rows of one engine table (design record 0008).
///
/// Two ways to write:
/// - by itself ([`EngineVersions::open`]): each `install` and `collect` is
///   an engine transaction of its own, pre-committed and not waited for
///   (the simulation's tests and the property tests use this);
/// - staged ([`EngineVersions::staged`]): `install` only collects the rows,
///   and the caller takes them ([`EngineVersions::take_staged`]) into the
///   engine transaction that also writes the decision's outcome row, so
///   that a commit's versions and its outcome are durable together. The
///   server's shard writes this way, under one lock, so no read comes
///   between an install and its transaction.
///
/// Each key's newest version, once a read or an install has learned it,
/// is kept in a small memo ([`LATEST_MEMO_KEYS`] keys at most, then
/// cleared), so that a prepare's validation, which asks for the newest
/// version of every key its transaction read a moment before, reads no
/// row again, and a read at or above a key's known newest version is a
/// point read of that row (a range read that must find the row costs
/// several times more: it descends, then walks the leaf). Every row this
/// table gains comes through `install`, which updates the memo; a
/// collection keeps each key's newest version; a caller that deletes rows
/// by itself (a dropped table) calls [`EngineVersions::forget_prefix`].
///
/// A collection visits only the keys written since it last found them
/// settled (one version, at or below the watermark). It knows each such
/// key's versions without reading them when it can: a settled key's one
/// version is its newest (the memo's), and each install adds one; it
/// deletes the old ones by their keys. It walks a key's rows only when
/// the memo did not know the version the key had. So its work follows
/// the writes, not the table; the first collection after opening visits
/// every key.
///
/// An engine failure (the store unavailable, the writer fenced) panics:
/// the shard must stop, as it does when its log fails.
pub struct EngineVersions {
    db: AsyncDatabase,
    table: Table,
    staging: bool,
    staged: Vec<(Vec<u8>, Vec<u8>)>,
    /// Keys that may hold versions to collect, each with its versions
    /// when they are all known (oldest first), else `None` (a walk of its
    /// rows finds them); the whole map `None`: not known yet.
    unsettled: Option<Unsettled>,
    /// Known newest versions (see the type's comment).
    latest: RefCell<HashMap<Key, CommitTs>>,
    /// How many keys `latest` holds before it is cleared.
    latest_cap: usize,
}

/// Reads one version's value from the rows of an [`EngineVersions`]
/// ([`EngineVersions::rows`]); shared across threads.
#[derive(Clone)]
pub struct VersionRows {
    db: AsyncDatabase,
    table: Table,
}

impl VersionRows {
    /// The value of `key` at `version` (`Some(None)`: a deletion), or
    /// `None` if there is no such row (collected, or its table dropped).
    pub fn value(&self, key: &[u8], version: CommitTs) -> Option<Option<Value>> {
        if version == CommitTs::INITIAL {
            return Some(None);
        }
        let mut tx = self.db.begin().expect("begin a read");
        tx.get_with(&self.table, &versioned_key(key, version), value_of).expect("read a version")
    }
}

impl std::fmt::Debug for VersionRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VersionRows").field("table", &self.table.name()).finish()
    }
}

/// Keys that may hold versions to collect (see [`EngineVersions`]).
type Unsettled = BTreeMap<Key, Option<Vec<CommitTs>>>;

/// The most keys whose newest version [`EngineVersions`] remembers.
pub const LATEST_MEMO_KEYS: usize = 1 << 18;

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
            unsettled: None,
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

    /// A reader of single versions' values that needs no `&self`: for a
    /// caller that learned a version under its lock
    /// ([`crate::participant::Participant::read_version`]) and reads the
    /// value after releasing it.
    pub fn rows(&self) -> VersionRows {
        VersionRows { db: self.db.clone(), table: self.table.clone() }
    }

    /// The rows staged by installs since the last call: `(engine key,
    /// row)`, to put in the caller's transaction.
    pub fn take_staged(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
        std::mem::take(&mut self.staged)
    }

    /// Forget what is known of the keys starting with `prefix`: their
    /// rows were deleted without `install` or `collect` (a table dropped).
    pub fn forget_prefix(&mut self, prefix: &[u8]) {
        self.latest.get_mut().retain(|k, _| !k.starts_with(prefix));
        if let Some(u) = self.unsettled.as_mut() {
            u.retain(|k, _| !k.starts_with(prefix));
        }
    }

    fn remember(&self, key: &[u8], version: CommitTs) {
        let mut memo = self.latest.borrow_mut();
        if memo.len() >= self.latest_cap && !memo.contains_key(key) {
            memo.clear();
        }
        memo.insert(key.to_vec(), version);
    }

    /// `key`'s newest version, and its newest version at or below `at`
    /// with its value (`None` when `at` is `None`, or none is). One walk
    /// of the key's rows, newest first, that copies one value at most.
    fn walk(
        &self,
        key: &[u8],
        at: Option<Timestamp>,
    ) -> (CommitTs, Option<(CommitTs, Option<Value>)>) {
        debug_assert!(self.staged.is_empty(), "a read between an install and its transaction");
        let (lower, upper) = range_at(key, Timestamp::MAX);
        let mut tx = self.db.begin().expect("begin a read");
        let (mut latest, mut found) = (None, None);
        let range = (Bound::Included(&lower[..]), Bound::Excluded(&upper[..]));
        tx.scan_with(&self.table, range.0, range.1, Direction::Forward, |k, v| {
            let version = split_versioned_key(k).expect("a versioned key").1;
            latest.get_or_insert(version);
            match at {
                Some(at) if version.ts > at => true,
                Some(_) => {
                    found = Some((version, value_of(v)));
                    false
                }
                None => false,
            }
        })
        .expect("read a version");
        let latest = latest.unwrap_or(CommitTs::INITIAL);
        self.remember(key, latest);
        (latest, found)
    }

    /// Visit the versions in `[lower, upper)` for a collection at
    /// `watermark`: per key, newest first, the first version at or below
    /// the watermark stays and every older one goes to `doomed`; a key
    /// that keeps a version above the watermark goes to `unsettled`, with
    /// the versions it keeps (all of its rows were seen).
    fn collect_range(
        tx: &mut milliscale::AsyncTransaction,
        table: &Table,
        (lower, upper): (Bound<&[u8]>, Bound<&[u8]>),
        watermark: Timestamp,
        doomed: &mut Vec<Vec<u8>>,
        unsettled: &mut Unsettled,
    ) {
        // The key being visited and the versions it keeps, newest first.
        let mut key: Option<(Key, Vec<CommitTs>)> = None;
        let mut settle = |(k, mut kept): (Key, Vec<CommitTs>)| {
            if kept.first().is_some_and(|v| v.ts > watermark) {
                kept.reverse();
                unsettled.insert(k, Some(kept));
            }
        };
        tx.scan_with(table, lower, upper, Direction::Forward, |row, _| {
            let (k, version) = split_versioned_key(row).expect("a versioned key");
            if key.as_ref().is_none_or(|(last, _)| *last != k)
                && let Some(done) = key.replace((k, Vec::new()))
            {
                settle(done);
            }
            let kept = &mut key.as_mut().expect("just set").1;
            if kept.last().is_some_and(|v| v.ts <= watermark) {
                doomed.push(row.to_vec());
            } else {
                kept.push(version);
            }
            true
        })
        .expect("scan versions");
        if let Some(done) = key {
            settle(done);
        }
    }

    /// Collect one key whose versions are all known (`versions`, oldest
    /// first): those below the newest at or below `watermark` go to
    /// `doomed`; the key stays unsettled while it keeps one above.
    fn collect_known(
        key: Key,
        mut versions: Vec<CommitTs>,
        watermark: Timestamp,
        doomed: &mut Vec<Vec<u8>>,
        unsettled: &mut Unsettled,
    ) {
        let below = versions.iter().take_while(|v| v.ts <= watermark).count();
        if below > 1 {
            doomed.extend(versions.drain(..below - 1).map(|v| versioned_key(&key, v)));
        }
        if versions.last().is_some_and(|v| v.ts > watermark) {
            unsettled.insert(key, Some(versions));
        }
    }
}

impl Versions for EngineVersions {
    fn latest(&self, key: &[u8]) -> CommitTs {
        if let Some(v) = self.latest.borrow().get(key) {
            return *v;
        }
        self.walk(key, None).0
    }

    fn version_at(&self, key: &[u8], at: Timestamp) -> Option<CommitTs> {
        // The newest version known and at or below `at`; a key known to
        // have none reads as INITIAL at any `at`.
        let known = self.latest.borrow().get(key).copied()?;
        (known == CommitTs::INITIAL || known.ts <= at).then_some(known)
    }

    fn read_at(&self, key: &[u8], at: Timestamp) -> (CommitTs, Option<Value>) {
        // The newest version known and at or below `at`: one point read of
        // its row, where a walk starts a range (several times the work).
        let known = self.latest.borrow().get(key).copied();
        if known == Some(CommitTs::INITIAL) {
            return (CommitTs::INITIAL, None);
        }
        if let Some(v) = known.filter(|v| v.ts <= at) {
            debug_assert!(self.staged.is_empty(), "a read between an install and its transaction");
            let mut tx = self.db.begin().expect("begin a read");
            let row = tx.get_with(&self.table, &versioned_key(key, v), value_of);
            if let Some(value) = row.expect("read a version") {
                return (v, value);
            }
        }
        self.walk(key, Some(at)).1.unwrap_or((CommitTs::INITIAL, None))
    }

    fn install(&mut self, version: CommitTs, writes: &[(Key, Option<Value>)]) {
        for (key, _) in writes {
            if let Some(u) = self.unsettled.as_mut() {
                let versions = u.entry(key.clone()).or_insert_with(|| {
                    // Not unsettled: the key has one version, its newest,
                    // or none.
                    match self.latest.borrow().get(key) {
                        Some(&CommitTs::INITIAL) => Some(Vec::new()),
                        Some(&v) => Some(vec![v]),
                        None => None,
                    }
                });
                if let Some(v) = versions {
                    v.push(version);
                }
            }
            self.remember(key, version);
        }
        let rows = writes
            .iter()
            .map(|(key, value)| (versioned_key(key, version), row_value(value.as_deref())));
        if self.staging {
            self.staged.extend(rows);
            return;
        }
        let mut tx = self.db.begin().expect("begin an install");
        for (k, row) in rows {
            tx.put(&self.table, &k, &row).expect("put a version");
        }
        // Not waited for: the caller makes its record durable before it
        // answers, and a recovery installs a logged commit again.
        let _pre_committed = tx.precommit().expect("commit an install");
    }

    fn collect(&mut self, watermark: Timestamp) -> usize {
        let mut tx = self.db.begin().expect("begin a collection");
        let (mut doomed, mut unsettled) = (Vec::new(), Unsettled::new());
        match self.unsettled.take() {
            None => {
                let all = (Bound::Unbounded, Bound::Unbounded);
                Self::collect_range(
                    &mut tx,
                    &self.table,
                    all,
                    watermark,
                    &mut doomed,
                    &mut unsettled,
                );
            }
            Some(keys) => {
                for (key, versions) in keys {
                    if let Some(versions) = versions {
                        Self::collect_known(key, versions, watermark, &mut doomed, &mut unsettled);
                        continue;
                    }
                    let (lower, upper) = range_at(&key, Timestamp::MAX);
                    let range = (Bound::Included(&lower[..]), Bound::Excluded(&upper[..]));
                    Self::collect_range(
                        &mut tx,
                        &self.table,
                        range,
                        watermark,
                        &mut doomed,
                        &mut unsettled,
                    );
                }
            }
        }
        self.unsettled = Some(unsettled);
        for k in &doomed {
            tx.delete(&self.table, k).expect("delete a version");
        }
        let _pre_committed = tx.precommit().expect("commit a collection");
        doomed.len()
    }

    fn count(&self) -> usize {
        let mut tx = self.db.begin().expect("begin a count");
        tx.range(&self.table, Bound::Unbounded, Bound::Unbounded, Direction::Forward).count()
    }

    fn scan_at(
        &self,
        start: &[u8],
        end: &[u8],
        at: Timestamp,
        limit: usize,
    ) -> Vec<(Key, CommitTs, Value)> {
        debug_assert!(self.staged.is_empty(), "a scan between an install and its transaction");
        let (lower, upper) = range_of(start, end);
        let upper = upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let mut tx = self.db.begin().expect("begin a scan");
        let mut out = Vec::new();
        let mut done: Option<Key> = None;
        let lower = Bound::Included(&lower[..]);
        tx.scan_with(&self.table, lower, upper, Direction::Forward, |k, v| {
            let (key, version) = split_versioned_key(k).expect("a versioned key");
            // Newest first: the first version at or below `at` is the
            // key's; its older ones are skipped.
            if version.ts > at || done.as_deref() == Some(&key) {
                return true;
            }
            done = Some(key.clone());
            if let Some(value) = value_of(v) {
                out.push((key, version, value));
                return limit == 0 || out.len() < limit;
            }
            true
        })
        .expect("scan versions");
        out
    }

    fn changed_after(&self, start: &[u8], end: &[u8], at: Timestamp) -> bool {
        let (lower, upper) = range_of(start, end);
        let upper = upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let mut tx = self.db.begin().expect("begin a scan");
        let mut changed = false;
        tx.scan_with(
            &self.table,
            Bound::Included(&lower[..]),
            upper,
            Direction::Forward,
            |k, _| {
                changed = split_versioned_key(k).expect("a versioned key").1.ts > at;
                !changed
            },
        )
        .expect("scan versions");
        changed
    }

    fn all(&self) -> BTreeMap<Key, Vec<(CommitTs, Option<Value>)>> {
        let mut tx = self.db.begin().expect("begin a read");
        let mut out: BTreeMap<Key, Vec<(CommitTs, Option<Value>)>> = BTreeMap::new();
        for row in tx.range(&self.table, Bound::Unbounded, Bound::Unbounded, Direction::Forward) {
            let (k, v) = row.expect("scan versions");
            let (key, version) = split_versioned_key(&k).expect("a versioned key");
            out.entry(key).or_default().push((version, value_of(&v)));
        }
        // The rows are newest first; the trait's order is oldest first.
        out.values_mut().for_each(|versions| versions.reverse());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::MapVersions;
    use milliscale::Options;
    use proptest::prelude::*;
    use std::sync::Arc;

    /// Rows in a fresh engine; with `small_memo` the memo of newest
    /// versions holds 2 keys of the test's 3, so that it is cleared again
    /// and again.
    fn engine(small_memo: bool) -> EngineVersions {
        let db = milliscale::Database::open(Options::new().store("memory://")).expect("open");
        let v = EngineVersions::open(Arc::new(db), "versions").expect("table");
        EngineVersions { latest_cap: if small_memo { 2 } else { LATEST_MEMO_KEYS }, ..v }
    }

    proptest! {
        /// The engine's layout answers as the map does, through installs,
        /// reads at any timestamp and collections.
        #[test]
        fn engine_rows_answer_as_the_map_does(
            ops in prop::collection::vec((0u8..4, 0usize..3, 0u64..50, any::<bool>()), 1..60),
            small_memo in any::<bool>(),
        ) {
            let keys: [&[u8]; 3] = [b"a", b"a\x00", b"b"];
            let (mut map, mut rows) = (MapVersions::default(), engine(small_memo));
            let mut ts = 0;
            for (op, k, t, delete) in ops {
                let key = keys[k];
                match op {
                    0 | 1 => {
                        ts += 1 + t % 3;
                        let value = (!delete).then(|| ts.to_be_bytes().to_vec());
                        let writes = vec![(key.to_vec(), value)];
                        let v = CommitTs { ts, client: k as u32 };
                        map.install(v, &writes);
                        rows.install(v, &writes);
                    }
                    2 => prop_assert_eq!(map.collect(t), rows.collect(t)),
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
                        prop_assert_eq!(map.read_at(key, at), rows.read_at(key, at));
                    }
                }
            }
            prop_assert_eq!(map.count(), rows.count());
            prop_assert_eq!(map.all(), rows.all());
        }
    }
}
