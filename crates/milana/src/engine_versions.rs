//! A shard's committed versions as engine rows: [`EngineVersions`], the
//! [`Versions`] of the server's shards (design record 0008), in the layout
//! of [`crate::versions`].

use std::collections::{BTreeMap, BTreeSet};
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
/// A collection visits only the keys written since it last found them
/// settled (one version, at or below the watermark), so its work follows
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
    /// Keys that may hold versions to collect; `None`: not known yet.
    unsettled: Option<BTreeSet<Key>>,
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
        Ok(EngineVersions { db, table, staging: false, staged: Vec::new(), unsettled: None })
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

    /// The rows staged by installs since the last call: `(engine key,
    /// row)`, to put in the caller's transaction.
    pub fn take_staged(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
        std::mem::take(&mut self.staged)
    }

    fn first_at(&self, key: &[u8], at: Timestamp) -> Option<(CommitTs, Option<Value>)> {
        debug_assert!(self.staged.is_empty(), "a read between an install and its transaction");
        let (lower, upper) = range_at(key, at);
        let mut tx = self.db.begin().expect("begin a read");
        let rows = tx
            .scan(
                &self.table,
                Bound::Included(&lower),
                Bound::Excluded(&upper),
                Direction::Forward,
                1,
            )
            .expect("read a version");
        let (k, v) = rows.into_iter().next()?;
        let (_, version) = split_versioned_key(&k).expect("a versioned key");
        Some((version, value_of(&v)))
    }

    /// Visit the versions in `[lower, upper)` for a collection at
    /// `watermark`: per key, newest first, the first version at or below
    /// the watermark stays and every older one goes to `doomed`; a key
    /// that keeps a version above the watermark goes to `unsettled`.
    fn collect_range(
        tx: &mut milliscale::AsyncTransaction,
        table: &Table,
        (lower, upper): (Bound<&[u8]>, Bound<&[u8]>),
        watermark: Timestamp,
        doomed: &mut Vec<Vec<u8>>,
        unsettled: &mut BTreeSet<Key>,
    ) {
        let mut last: Option<Key> = None;
        let mut kept_below = false;
        for row in tx.range(table, lower, upper, Direction::Forward) {
            let (k, _) = row.expect("scan versions");
            let (key, version) = split_versioned_key(&k).expect("a versioned key");
            if last.as_deref() != Some(&key) {
                last = Some(key.clone());
                kept_below = false;
            }
            if version.ts > watermark {
                unsettled.insert(key);
            } else if kept_below {
                doomed.push(k);
            } else {
                kept_below = true;
            }
        }
    }
}

impl Versions for EngineVersions {
    fn latest(&self, key: &[u8]) -> CommitTs {
        self.first_at(key, Timestamp::MAX).map_or(CommitTs::INITIAL, |v| v.0)
    }

    fn read_at(&self, key: &[u8], at: Timestamp) -> (CommitTs, Option<Value>) {
        self.first_at(key, at).unwrap_or((CommitTs::INITIAL, None))
    }

    fn install(&mut self, version: CommitTs, writes: &[(Key, Option<Value>)]) {
        let rows = writes.iter().map(|(key, value)| {
            if let Some(u) = self.unsettled.as_mut() {
                u.insert(key.clone());
            }
            (versioned_key(key, version), row_value(value.as_deref()))
        });
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
        let (mut doomed, mut unsettled) = (Vec::new(), BTreeSet::new());
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
                for key in keys {
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
        for row in tx.range(&self.table, Bound::Included(&lower[..]), upper, Direction::Forward) {
            let (k, v) = row.expect("scan versions");
            let (key, version) = split_versioned_key(&k).expect("a versioned key");
            // Newest first: the first version at or below `at` is the
            // key's; its older ones are skipped.
            if version.ts > at || done.as_deref() == Some(&key) {
                continue;
            }
            done = Some(key.clone());
            if let Some(value) = value_of(&v) {
                out.push((key, version, value));
                if limit != 0 && out.len() >= limit {
                    break;
                }
            }
        }
        out
    }

    fn changed_after(&self, start: &[u8], end: &[u8], at: Timestamp) -> bool {
        let (lower, upper) = range_of(start, end);
        let upper = upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let mut tx = self.db.begin().expect("begin a scan");
        tx.range(&self.table, Bound::Included(&lower[..]), upper, Direction::Forward).any(|row| {
            let (k, _) = row.expect("scan versions");
            split_versioned_key(&k).expect("a versioned key").1.ts > at
        })
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

    fn engine() -> EngineVersions {
        let db = milliscale::Database::open(Options::new().store("memory://")).expect("open");
        EngineVersions::open(Arc::new(db), "versions").expect("table")
    }

    proptest! {
        /// The engine's layout answers as the map does, through installs,
        /// reads at any timestamp and collections.
        #[test]
        fn engine_rows_answer_as_the_map_does(
            ops in prop::collection::vec((0u8..4, 0usize..3, 0u64..50, any::<bool>()), 1..60),
        ) {
            let keys: [&[u8]; 3] = [b"a", b"a\x00", b"b"];
            let (mut map, mut rows) = (MapVersions::default(), engine());
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
