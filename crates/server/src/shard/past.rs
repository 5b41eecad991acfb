//! A cluster's past at a commit timestamp (design record 0012, "A
//! cluster's past"): every key's newest version with a commit timestamp
//! at or below `T` that committed, from every shard's log; read from the
//! object store alone, with no shard running.
//!
//! A shard's state at `T` is not a CSN cut of its log: commits reach the
//! log in the order they are decided, not in commit timestamp order, and
//! a decision may be written after `T`. So each shard's log is read row
//! by row ([`milliscale::history::changes`]):
//!
//! 1. **A base**: the shard's past at time `T − margin`, in which every
//!    row's version is at or below `T` (checked; the margin grows until
//!    it holds, and a base before the window is refused naming it).
//! 2. **Forward**, from the base, every change in CSN order: each row's
//!    value is followed (deltas applied), and the newest version at or
//!    below `T` each key ever held is its candidate. A row deleted by the
//!    engine (a range that moved away, a table dropped) drops its
//!    candidate only if it was deleted at or before `T`'s point in the log
//!    (the CSN of time `T`): a range that moved away after `T` was still
//!    here at `T`.
//! 3. **Until settled**: the first change that raises the shard's forget
//!    bound above `T`. No prepare at or below the bound is accepted from
//!    then on, and the bound never passes a transaction undecided on any
//!    shard, so every transaction at or below `T` is decided, and its
//!    decision is in each participant's log before that point. A shard
//!    whose log ends first (a stopped cluster, or `T` too recent) leaves
//!    its prepared transactions at or below `T` to the termination rule
//!    across all shards' logs (`coordinator::terminate`), applied by
//!    [`cluster_at`]; a live cluster settles within seconds, and the
//!    report says which shards were read to their end.
//!
//! Then across shards: each key's candidate with the highest version
//! (a version is one transaction's write, so a copy a move made of it is
//! the same), assigned to the shard that owns it in the map as of `T`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use milliscale::history::changes::{ChangeOp, oldest_point, point_of, read_changes};
use milliscale::{At, Csn, Database, Direction, Options};
use milliscale_milana::coordinator::terminate;
use milliscale_milana::log::Prepare;
use milliscale_milana::shard_map::{MapStore, ShardMap};
use milliscale_milana::tables::TxnRow;
use milliscale_milana::types::{
    CommitTs, Key, ShardId, Timestamp, TxnId, TxnStatus, Value, split_cluster_key,
};
use milliscale_milana::versions::{row_value, split_row};

use super::tables::{FORGOTTEN_KEY, META, NAMES, TXNS, txn_rows};

/// The first margin before `T` the base is read at; it grows fourfold
/// while the base holds a version above `T`.
pub const BASE_MARGIN: Duration = Duration::from_secs(2);

/// What reading one shard's past found.
#[derive(Debug, Clone, Default)]
pub struct ShardPastReport {
    /// The shard.
    pub shard: ShardId,
    /// The base's CSN and how far before `T` it was read.
    pub base_csn: Csn,
    /// The margin the base was read at.
    pub margin: Duration,
    /// The CSN of time `T` on this shard's log.
    pub t_csn: Csn,
    /// The last CSN read: where the forget bound passed `T`, or the end
    /// of the log.
    pub end_csn: Csn,
    /// Whether the forget bound passed `T` (else the log ended first).
    pub settled: bool,
    /// Committed transactions read after the base.
    pub transactions: usize,
    /// Log bytes read after the base.
    pub log_bytes: u64,
    /// Keys with a version at or below `T` here.
    pub keys: usize,
    /// Transactions prepared here at or below `T` and undecided where the
    /// reading stopped (only when not settled).
    pub undecided: usize,
}

/// One shard's candidates at `T`.
#[derive(Debug, Default)]
pub struct ShardPast {
    /// Each key (a cluster key) with the newest version at or below `T`
    /// this shard's log shows, as its engine row (stamp, then value).
    pub rows: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The cluster's table names this shard knew at `T`.
    pub tables: BTreeSet<String>,
    /// The transaction table where the reading stopped.
    pub txns: BTreeMap<TxnId, TxnRow>,
    /// The shard where the reading stopped.
    pub end: ShardEnd,
    /// What was read.
    pub report: ShardPastReport,
}

/// A shard's state where the reading of its log stopped (its settled
/// point, or the end of its log): what a clone of it at that CSN starts
/// from, before its overlay ([`clone_shard`]).
#[derive(Debug, Default)]
pub struct ShardEnd {
    /// The CSN.
    pub csn: Csn,
    /// Its cluster tables' rows (cluster keys, engine rows).
    pub rows: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The cluster table names it knew.
    pub tables: BTreeSet<String>,
    /// The keys of its transaction table's rows.
    pub txns: Vec<Vec<u8>>,
    /// Its meta rows.
    pub meta: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// A transaction's writes on one shard (`None`: a delete).
type Writes = Vec<(Key, Option<Value>)>;

/// Rows as an engine table holds them: keys and values, in key order.
type Rows = Vec<(Vec<u8>, Vec<u8>)>;

fn us_time(t: Timestamp) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(t)
}

fn err(shard: ShardId, what: impl std::fmt::Display) -> String {
    format!("shard {shard}: {what}")
}

/// A version at or below `t` beats `cand` (none: anything does).
fn newer(row: &[u8], cand: Option<&Vec<u8>>) -> bool {
    let v = split_row(row).map(|(v, _)| v);
    let c = cand.and_then(|c| split_row(c)).map(|(v, _)| v);
    v > c
}

fn stamp(row: &[u8]) -> Result<CommitTs, String> {
    split_row(row).map(|(v, _)| v).ok_or_else(|| format!("a row that is no version: {row:?}"))
}

/// Shard `shard`'s candidates at commit timestamp `t` (microseconds),
/// from its log on `options`' stores (which must keep a retention window
/// reaching past `t`).
pub fn shard_at(shard: ShardId, options: &Options, t: Timestamp) -> Result<ShardPast, String> {
    let mut report = ShardPastReport { shard, ..ShardPastReport::default() };
    report.t_csn = point_of(options, At::Time(us_time(t))).map_err(|e| err(shard, e))?;
    // 1. The base: every row's version at or below `t`.
    let (base, margin, tables0, rows0) = base_at(shard, options, t)?;
    report.base_csn = base;
    report.margin = margin;
    // 2. Forward from the base.
    let changes = read_changes(options, At::Csn(base), None).map_err(|e| err(shard, e))?;
    report.log_bytes = changes.report.log_bytes;
    let ids: HashMap<&str, u32> =
        changes.tables_at(base).into_iter().map(|(i, n)| (n, i)).collect();
    let mut fw = Forward {
        t,
        t_csn: report.t_csn,
        cur: HashMap::new(),
        cand: HashMap::new(),
        names: tables0.clone(),
        names_end: tables0,
        txns: rows0.txns,
        meta: rows0.meta,
        end: None,
    };
    for (name, rows) in rows0.clusters {
        let Some(&id) = ids.get(name.as_str()) else { continue };
        for (k, row) in rows {
            fw.cand.insert((id, k.clone()), row.clone());
            fw.cur.insert((id, k), row);
        }
    }
    let mut tx_seen = BTreeSet::new();
    for c in changes.iter() {
        if fw.end.is_some_and(|e| c.csn > e) {
            break;
        }
        tx_seen.insert(c.csn);
        fw.apply(&c).map_err(|e| err(shard, format!("CSN {}: {e}", c.csn)))?;
    }
    let Forward { cur, cand, names, names_end, txns, meta, end, .. } = fw;
    report.transactions = tx_seen.len();
    report.settled = end.is_some();
    report.end_csn = end.unwrap_or(changes.to);
    // What the shard held where the reading stopped (what a clone there
    // starts from).
    let live_end: HashMap<u32, &str> = changes
        .tables_at(report.end_csn)
        .into_iter()
        .filter(|(_, n)| names_end.contains(*n))
        .collect();
    let end_rows = cur
        .into_iter()
        .filter_map(|((id, k), row)| {
            live_end.get(&id).map(|name| (milliscale_milana::types::cluster_key(name, &k), row))
        })
        .collect();
    let end_state = ShardEnd {
        csn: report.end_csn,
        rows: end_rows,
        tables: names_end,
        txns: txns.keys().cloned().collect(),
        meta: meta.clone(),
    };
    // The tables at `t`: those the catalog named then, as the engine
    // tables of that name then.
    let live: HashMap<u32, &str> = changes
        .tables_at(report.t_csn.max(base))
        .into_iter()
        .filter(|(_, n)| names.contains(*n))
        .collect();
    let mut rows = BTreeMap::new();
    for ((id, k), row) in cand {
        if let Some(name) = live.get(&id) {
            rows.insert(milliscale_milana::types::cluster_key(name, &k), row);
        }
    }
    let txns = txn_rows(txns.into_iter().map(Ok)).map_err(|e| err(shard, e))?;
    if !report.settled {
        report.undecided =
            txns.values().filter(|r| matches!(r, TxnRow::Prepared(p) if p.version.ts <= t)).count();
    }
    report.keys = rows.len();
    Ok(ShardPast { rows, tables: names, txns, end: end_state, report })
}

/// Step 2 of [`shard_at`]: the shard's tables followed change by change.
struct Forward {
    t: Timestamp,
    t_csn: Csn,
    /// Each cluster row now, by engine table id and key.
    cur: HashMap<(u32, Vec<u8>), Vec<u8>>,
    /// Each cluster row's newest version at or below `t` seen.
    cand: HashMap<(u32, Vec<u8>), Vec<u8>>,
    /// The catalog at `t`, and now.
    names: BTreeSet<String>,
    names_end: BTreeSet<String>,
    /// The transaction table's and the meta table's rows now.
    txns: BTreeMap<Vec<u8>, Vec<u8>>,
    meta: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The CSN where the forget bound passed `t`.
    end: Option<Csn>,
}

impl Forward {
    fn apply(&mut self, c: &milliscale::history::changes::Change<'_>) -> Result<(), String> {
        let bad = |e: milliscale::Error| e.to_string();
        match c.table {
            META => {
                let row = c.op.apply(self.meta.get(c.key).map(Vec::as_slice)).map_err(bad)?;
                if c.key == FORGOTTEN_KEY
                    && let Some(b) = &row
                    && b.len() == 8
                    && u64::from_be_bytes(b[..8].try_into().expect("8 bytes")) > self.t
                    && self.end.is_none()
                {
                    self.end = Some(c.csn);
                }
                match row {
                    Some(r) => self.meta.insert(c.key.to_vec(), r),
                    None => self.meta.remove(c.key),
                };
            }
            TXNS => {
                match c.op.apply(self.txns.get(c.key).map(Vec::as_slice)).map_err(bad)? {
                    Some(r) => self.txns.insert(c.key.to_vec(), r),
                    None => self.txns.remove(c.key),
                };
            }
            NAMES => {
                let name = String::from_utf8_lossy(c.key).into_owned();
                let deleted = c.op == ChangeOp::Delete;
                if c.csn <= self.t_csn {
                    if deleted {
                        self.names.remove(&name)
                    } else {
                        self.names.insert(name.clone())
                    };
                }
                if deleted {
                    self.names_end.remove(&name)
                } else {
                    self.names_end.insert(name)
                };
            }
            name if name.starts_with("_milana.") => {}
            _ => {
                let key = (c.table_id, c.key.to_vec());
                match c.op.apply(self.cur.get(&key).map(Vec::as_slice)).map_err(bad)? {
                    Some(row) => {
                        if stamp(&row)?.ts <= self.t && newer(&row, self.cand.get(&key)) {
                            self.cand.insert(key.clone(), row.clone());
                        }
                        self.cur.insert(key, row);
                    }
                    None => {
                        // Gone from this shard at or before `t` (a range
                        // moved away): its candidate goes; after `t`, the
                        // key was still here at `t`.
                        if c.csn <= self.t_csn {
                            self.cand.remove(&key);
                        }
                        self.cur.remove(&key);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Step 1 of [`shard_at`]: the base (its CSN, the margin it was read at,
/// its catalog and rows), the shard's past before `t` in which no row
/// holds a version above `t`.
pub(super) fn base_at(
    shard: ShardId,
    options: &Options,
    t: Timestamp,
) -> Result<(Csn, Duration, BTreeSet<String>, BaseRows), String> {
    let mut margin = BASE_MARGIN;
    let (oldest_csn, oldest_ms) = oldest_point(options).map_err(|e| err(shard, e))?;
    loop {
        let base_us = t.saturating_sub(margin.as_micros() as u64);
        // Not before the window: its oldest point is the earliest base.
        let first = base_us / 1000 <= oldest_ms;
        let at = if first { At::Csn(oldest_csn) } else { At::Time(us_time(base_us)) };
        let db = Database::open_at(options.clone(), at).map_err(|e| {
            err(shard, format!("its past {margin:?} before the point (the base): {e}"))
        })?;
        match base_rows(&db, t).map_err(|e| err(shard, e))? {
            Some((tables, rows)) => {
                let csn = db.past_report().map_or(0, |r| r.csn);
                return Ok((csn, margin, tables, rows));
            }
            None if first => {
                return Err(err(
                    shard,
                    format!(
                        "the window's oldest point (CSN {oldest_csn}) already holds a version \
                         above {t}: the point is too close to the window's start"
                    ),
                ));
            }
            None => margin *= 4,
        }
    }
}

/// A base's rows: its cluster tables' rows by table name, its
/// transaction table and meta rows.
pub(super) struct BaseRows {
    clusters: Vec<(String, Rows)>,
    txns: BTreeMap<Vec<u8>, Vec<u8>>,
    meta: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// The base's catalog and rows, or `None` if a row holds a version above
/// `t` (the base is too late: the version it replaced is not in it).
fn base_rows(db: &Database, t: Timestamp) -> Result<Option<(BTreeSet<String>, BaseRows)>, String> {
    let all = |tx: &mut milliscale::Transaction, name: &str| -> Result<Rows, String> {
        let Ok(table) = db.open_table(name) else { return Ok(Vec::new()) };
        tx.range(&table, Bound::Unbounded, Bound::Unbounded, Direction::Forward)
            .collect::<milliscale::Result<Vec<_>>>()
            .map_err(|e| e.to_string())
    };
    let mut tx = db.begin().map_err(|e| e.to_string())?;
    let names: BTreeSet<String> = all(&mut tx, NAMES)?
        .into_iter()
        .map(|(k, _)| String::from_utf8_lossy(&k).into_owned())
        .collect();
    let mut clusters = Vec::new();
    for name in &names {
        let rows = all(&mut tx, name)?;
        for (_, row) in &rows {
            if stamp(row)?.ts > t {
                return Ok(None);
            }
        }
        clusters.push((name.clone(), rows));
    }
    let txns = all(&mut tx, TXNS)?.into_iter().collect();
    let meta = all(&mut tx, META)?.into_iter().collect();
    tx.abort();
    Ok(Some((names, BaseRows { clusters, txns, meta })))
}

/// The cluster at `t`, shard by shard.
#[derive(Debug)]
pub struct ClusterPast {
    /// The commit timestamp.
    pub t: Timestamp,
    /// The map as of `t`.
    pub map: ShardMap,
    /// The cluster's tables at `t`.
    pub tables: BTreeSet<String>,
    /// Each shard of the map's rows at `t` (cluster keys, engine rows).
    pub shards: BTreeMap<ShardId, BTreeMap<Vec<u8>, Vec<u8>>>,
    /// What each shard's log gave.
    pub reports: Vec<ShardPastReport>,
    /// Each shard where its reading stopped.
    pub ends: BTreeMap<ShardId, ShardEnd>,
    /// Transactions at or below `t` undecided where a shard's log ended,
    /// that the termination rule committed and aborted.
    pub resolved: (usize, usize),
}

/// The cluster whose map is on `maps` at commit timestamp `t`
/// (microseconds since the Unix epoch): each shard's log read by
/// [`shard_at`], through `options_of` (a shard's engine options from
/// its map entry), then merged.
pub fn cluster_at(
    maps: &MapStore,
    t: Timestamp,
    options_of: impl Fn(ShardId, &str) -> Result<Options, String>,
    mut progress: impl FnMut(&ShardPastReport),
) -> Result<ClusterPast, String> {
    let map = maps
        .as_of(t)
        .map_err(|e| format!("the shard map: {e}"))?
        .ok_or_else(|| format!("no shard map was published at or before {t} µs"))?;
    // Every shard's log at once, each on a thread of its own (each read
    // is mostly waiting on its store).
    let options: Vec<(ShardId, Options)> = map
        .shards
        .iter()
        .map(|(id, info)| Ok((*id, options_of(*id, &info.log)?)))
        .collect::<Result<_, String>>()?;
    let read: Vec<Result<ShardPast, String>> = std::thread::scope(|s| {
        let reads: Vec<_> =
            options.iter().map(|(id, o)| s.spawn(move || shard_at(*id, o, t))).collect();
        reads.into_iter().map(|r| r.join().expect("a shard's reader")).collect()
    });
    let mut pasts = BTreeMap::new();
    for p in read {
        let p = p?;
        progress(&p.report);
        pasts.insert(p.report.shard, p);
    }
    // Undecided transactions, by the termination rule over every
    // participant's transaction table where its reading stopped.
    let (mut committed, mut aborted) = (BTreeSet::new(), BTreeSet::new());
    let mut commits: Vec<(CommitTs, Writes)> = Vec::new();
    for p in pasts.values().filter(|p| !p.report.settled) {
        for row in p.txns.values() {
            let TxnRow::Prepared(Prepare { txn, version, writes, participants, .. }) = row else {
                continue;
            };
            if version.ts > t {
                continue;
            }
            let answers: Vec<Option<TxnStatus>> = participants
                .iter()
                .map(|s| match pasts.get(s).and_then(|q| q.txns.get(txn)) {
                    Some(TxnRow::Prepared(_)) => Some(TxnStatus::Prepared),
                    Some(TxnRow::Committed(_)) => Some(TxnStatus::Committed),
                    Some(TxnRow::Aborted(_)) => Some(TxnStatus::Aborted),
                    // Not prepared there: it has not committed (a query
                    // would abort it there).
                    None => Some(TxnStatus::Aborted),
                })
                .collect();
            if terminate(&answers) == Some(true) {
                committed.insert(*txn);
                commits.push((*version, writes.clone()));
            } else {
                aborted.insert(*txn);
            }
        }
    }
    // Each key's highest version at or below `t` over every shard.
    let mut best: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut tables = BTreeSet::new();
    let mut reports = Vec::new();
    let mut ends = BTreeMap::new();
    for p in pasts.into_values() {
        ends.insert(p.report.shard, p.end);
        reports.push(p.report);
        tables.extend(p.tables);
        for (k, row) in p.rows {
            if newer(&row, best.get(&k)) {
                best.insert(k, row);
            }
        }
    }
    for (version, writes) in commits {
        for (k, value) in writes {
            let row = row_value(version, value.as_deref());
            if newer(&row, best.get(&k)) {
                best.insert(k, row);
            }
        }
    }
    let mut shards: BTreeMap<ShardId, BTreeMap<Vec<u8>, Vec<u8>>> =
        map.shards.keys().map(|s| (*s, BTreeMap::new())).collect();
    for (k, row) in best {
        let Some((table, _)) = split_cluster_key(&k) else { continue };
        if !tables.contains(table) {
            continue;
        }
        shards.entry(map.shard_of(&k)).or_default().insert(k, row);
    }
    Ok(ClusterPast {
        t,
        map,
        tables,
        shards,
        reports,
        ends,
        resolved: (committed.len(), aborted.len()),
    })
}

/// Rows one engine transaction of [`write_shard`] writes.
const WRITE_BATCH_ROWS: usize = 1_000;

/// What [`write_shard`] wrote.
#[derive(Debug, Clone, Copy, Default)]
pub struct Written {
    /// Rows (versions) written.
    pub rows: usize,
    /// Cluster tables created.
    pub tables: usize,
}

/// Write shard `shard` of `past` as a new shard database on `target`'s
/// stores (which must hold nothing): the cluster's tables (each an
/// engine table), the rows at `past.t`, the catalog, the layout, and a
/// forget bound above `past.t`, so that every version written from then
/// on is above those restored (a key's versions only go up). It ends
/// with a checkpoint. `progress` is told the rows written so far.
pub fn write_shard(
    target: &Options,
    target_urls: &[String],
    past: &ClusterPast,
    shard: ShardId,
    mut progress: impl FnMut(usize),
) -> Result<Written, String> {
    for url in target_urls {
        let store = milliscale::store::open(url).map_err(|e| format!("{url}: {e}"))?;
        let held = store.list("").map_err(|e| format!("{url}: {e}"))?;
        if !held.is_empty() {
            return Err(format!(
                "{url} holds {} objects: a restored shard is written to an empty store",
                held.len()
            ));
        }
    }
    let e = |e: milliscale::Error| format!("shard {shard}: {e}");
    let db = Database::open(target.clone()).map_err(e)?;
    let meta = db.create_table(META).map_err(e)?;
    db.create_table(TXNS).map_err(e)?;
    let names = db.create_table(NAMES).map_err(e)?;
    let mut tables = HashMap::new();
    for name in &past.tables {
        tables.insert(name.as_str(), db.create_table(name).map_err(e)?);
    }
    let mut tx = db.begin().map_err(e)?;
    tx.put(&meta, super::tables::LAYOUT_KEY, &super::tables::LAYOUT.to_be_bytes()).map_err(e)?;
    tx.put(&meta, FORGOTTEN_KEY, &(past.t + 1).to_be_bytes()).map_err(e)?;
    for name in &past.tables {
        tx.put(&names, name.as_bytes(), b"").map_err(e)?;
    }
    let mut last = tx.commit().map_err(e)?;
    let empty = BTreeMap::new();
    let rows = past.shards.get(&shard).unwrap_or(&empty);
    let mut written = 0;
    for batch in rows.iter().collect::<Vec<_>>().chunks(WRITE_BATCH_ROWS) {
        let mut tx = db.begin().map_err(e)?;
        for (k, row) in batch {
            let (name, key) =
                split_cluster_key(k).ok_or_else(|| format!("a key of no table: {k:?}"))?;
            let table = tables
                .get(name)
                .ok_or_else(|| format!("a row of table {name}, not at the point"))?;
            tx.put(table, key, row).map_err(e)?;
        }
        written += batch.len();
        last = tx.commit().map_err(e)?;
        progress(written);
    }
    last.wait().map_err(e)?;
    db.checkpoint().map_err(e)?;
    db.close().map_err(e)?;
    Ok(Written { rows: written, tables: past.tables.len() })
}

/// A clone of shard `shard` of `past` on `target`'s stores (empty),
/// without copying its data (design record 0012, "Clone"): the shard's
/// database cloned where its log's reading stopped, with an overlay that
/// makes that state the one at `past.t`: each row of a key it owns at
/// `past.t` as it was then, no other row, no transaction in its table,
/// no move in flight, the catalog at `past.t`, and a forget bound above
/// `past.t` (as [`write_shard`]). Its first writer (`serve --cluster`)
/// loads the source's objects, then stands alone. Refused if a table of
/// `past.t` was dropped before the clone point (`write_shard` it).
pub fn clone_shard(
    source: &Options,
    target: &Options,
    past: &ClusterPast,
    shard: ShardId,
) -> Result<milliscale::CloneReport, String> {
    let end = past.ends.get(&shard).ok_or_else(|| format!("shard {shard} was not read"))?;
    if let Some(gone) = past.tables.iter().find(|t| !end.tables.contains(*t)) {
        return Err(format!(
            "shard {shard}: table {gone} was dropped after the point (by CSN {}): a clone \
             cannot bring it back; restore the cluster instead",
            end.csn
        ));
    }
    let empty = BTreeMap::new();
    let want = past.shards.get(&shard).unwrap_or(&empty);
    let mut overlay: Vec<milliscale::OverlayWrite> = Vec::new();
    let split = |k: &[u8]| {
        split_cluster_key(k)
            .map(|(t, key)| (t.to_owned(), key.to_vec()))
            .ok_or_else(|| format!("a key of no table: {k:?}"))
    };
    for (k, row) in &end.rows {
        if !want.contains_key(k) {
            let (t, key) = split(k)?;
            overlay.push((t, key, None));
        } else if want.get(k) != Some(row) {
            let (t, key) = split(k)?;
            overlay.push((t, key, Some(want[k].clone())));
        }
    }
    for (k, row) in want {
        if !end.rows.contains_key(k) {
            let (t, key) = split(k)?;
            overlay.push((t, key, Some(row.clone())));
        }
    }
    for name in end.tables.iter().filter(|t| !past.tables.contains(*t)) {
        overlay.push((NAMES.into(), name.as_bytes().to_vec(), None));
    }
    for k in &end.txns {
        overlay.push((TXNS.into(), k.clone(), None));
    }
    for k in end.meta.keys() {
        let kept = [super::tables::LAYOUT_KEY, super::tables::LEASE_KEY, FORGOTTEN_KEY];
        if !kept.contains(&k.as_slice()) {
            overlay.push((META.into(), k.clone(), None));
        }
    }
    overlay.push((META.into(), FORGOTTEN_KEY.to_vec(), Some((past.t + 1).to_be_bytes().to_vec())));
    milliscale::clone_with(source, At::Csn(end.csn), target, &overlay)
        .map_err(|e| format!("shard {shard}: {e}"))
}
