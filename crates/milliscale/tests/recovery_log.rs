//! Reading the log back: crash images taken at random moments of a bank
//! workload (some while checkpoints run and delete segments) must hold
//! every acknowledged transfer, and recovery by the rule of invariant 3
//! must give a consistent cut (the bank's total holds). Without a
//! checkpoint, the engine's replay must equal an independent model of the
//! log. Torn tails are cut and reported; damage elsewhere is `Corrupt`.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use milliscale::internals::record::{Entry, Op};
use milliscale::internals::{plan_replay, scan_log};
use milliscale::{CommitAck, CommitProtocol, Database, Error, Options};
use objstore::{Bytes, MemoryStore, ObjectMeta, ObjectStore, Result};
use parking_lot::{Mutex, RwLock, RwLockReadGuard};

const ACCOUNTS: u64 = 16;
const INITIAL: u64 = 1000;

/// Writes hold the lock shared for their whole length; freezing takes it
/// exclusively, so it waits for writes in flight and blocks new ones.
/// Reads pass.
#[derive(Debug)]
struct Freeze {
    inner: Arc<dyn ObjectStore>,
    lock: RwLock<()>,
}

impl Freeze {
    fn pass(&self) -> RwLockReadGuard<'_, ()> {
        self.lock.read()
    }
}

impl ObjectStore for Freeze {
    fn put(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        let _writing = self.pass();
        self.inner.put(key, body)
    }
    fn put_if_absent(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        let _writing = self.pass();
        self.inner.put_if_absent(key, body)
    }
    fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> Result<ObjectMeta> {
        let _writing = self.pass();
        self.inner.put_if_match(key, body, etag)
    }
    fn append(&self, key: &str, offset: u64, body: Bytes) -> Result<ObjectMeta> {
        let _writing = self.pass();
        self.inner.append(key, offset, body)
    }
    delegate_reads!();
}

/// A copy of every object in `store`: what a new process would find.
fn image(store: &dyn ObjectStore) -> Arc<dyn ObjectStore> {
    let copy = MemoryStore::new();
    for o in store.list("").expect("list") {
        // The freeze holds writes, not deletes: an obsolete segment a
        // finished checkpoint deletes may go between the list and the get.
        // The image without it is a state a crash could leave too (a
        // delete only removes what no manifest names any more).
        match store.get(&o.key) {
            Ok(bytes) => copy.put(&o.key, bytes).expect("put"),
            Err(objstore::StoreError::NotFound(_)) => continue,
            Err(e) => panic!("get {}: {e}", o.key),
        };
    }
    Arc::new(copy)
}

/// Replay `entries` (CSN order) into a key -> value model.
fn apply(entries: &[Entry]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for e in entries {
        let Entry::Commit { records, .. } = e else { panic!("only commits are replayed") };
        for r in records.to_vec() {
            let k = r.key.to_vec();
            match &r.op {
                Op::Insert(v) | Op::Update(v) => {
                    m.insert(k, v.to_vec());
                }
                Op::Delta { offset, bytes } => {
                    let v = m.get_mut(&k).expect("a delta applies to a replayed value");
                    v[*offset as usize..*offset as usize + bytes.len()].copy_from_slice(bytes);
                }
                Op::Delete => {
                    m.remove(&k);
                }
            }
        }
    }
    m
}

fn balance(v: &[u8]) -> u64 {
    u64::from_le_bytes(v.try_into().expect("8 bytes"))
}

/// Every row of `table`, read in one transaction.
fn rows(db: &Database, table: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let t = db.open_table(table).expect("table");
    let mut tx = db.begin().expect("begin");
    let (all, forward) = (std::ops::Bound::Unbounded, milliscale::Direction::Forward);
    tx.scan(&t, all, all, forward, usize::MAX).expect("scan").into_iter().collect()
}

/// Check one crash image against the acks seen while it was frozen.
fn check_image(store: &Arc<dyn ObjectStore>, acked: &BTreeSet<u64>) -> usize {
    let (_, scan) = scan_log(store).expect("a crash image scans");
    let plan = plan_replay(&scan).expect("and plans");
    let replayed: BTreeSet<u64> = plan.replay.iter().map(Entry::csn).collect();
    // Acks below the checkpoint's CSN are in the checkpoint.
    let lost: Vec<&u64> =
        acked.iter().filter(|c| **c >= scan.from && !replayed.contains(c)).collect();
    assert!(lost.is_empty(), "acknowledged but not replayed: {lost:?} (prefix {})", plan.prefix);
    // The engine's own recovery of the image.
    let db = Database::open_read_only(
        Options::new().add_store_handle(Arc::clone(store)).recovery_threads(3),
    )
    .expect("the image recovers");
    let state = match db.open_table("accounts") {
        Ok(_) => rows(&db, "accounts"),
        Err(_) => BTreeMap::new(),
    };
    if !state.is_empty() {
        assert_eq!(state.len() as u64, ACCOUNTS, "the accounts were created in one transaction");
        let total: u64 = state.values().map(|v| balance(v)).sum();
        assert_eq!(total, ACCOUNTS * INITIAL, "a consistent cut keeps the bank's total");
    }
    if scan.from == 1 {
        assert_eq!(state, apply(&plan.replay), "replay equals the model of the log");
    }
    plan.replay.len()
}

fn bank_run(seed: u64, groups: usize, checkpoints: bool) {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    let freeze = Arc::new(Freeze { inner: Arc::new(MemoryStore::new()), lock: RwLock::new(()) });
    let db = Database::open(
        Options::new()
            .add_store_handle(freeze.clone())
            .workers(4)
            .log_group_size(4 / groups)
            .log_buffer_bytes(4096)
            .flush_timeout(Duration::from_millis(1))
            // Seeds 3 and 7: autonomous commit (workers flush, steal, ack).
            .commit_protocol(if seed % 4 == 3 {
                CommitProtocol::Autonomous
            } else {
                CommitProtocol::Pipelined
            }),
    )
    .expect("open");
    let t = db.create_table("accounts").expect("table");
    let mut tx = db.begin().expect("begin");
    for a in 0..ACCOUNTS {
        tx.put(&t, &a.to_be_bytes(), &INITIAL.to_le_bytes()).expect("put");
    }
    tx.commit_and_wait().expect("load");
    let acks: Mutex<Vec<CommitAck>> = Mutex::new(Vec::new());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut images = 0;
    std::thread::scope(|s| {
        for w in 0..4u64 {
            let (db, t, acks, stop) = (&db, &t, &acks, &stop);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed * 10 + w);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let (a, b) = (rng.random_range(0..ACCOUNTS), rng.random_range(0..ACCOUNTS));
                    if a == b {
                        continue;
                    }
                    let mut tx = db.begin().expect("begin");
                    let mut run = |tx: &mut milliscale::Transaction<'_>| -> milliscale::Result<()> {
                        let ba = balance(&tx.get(t, &a.to_be_bytes())?.expect("account"));
                        let bb = balance(&tx.get(t, &b.to_be_bytes())?.expect("account"));
                        let x = rng.random_range(0..=ba.min(50));
                        // Deltas: the whole 8-byte value at offset 0.
                        tx.update_range(t, &a.to_be_bytes(), 0, &(ba - x).to_le_bytes())?;
                        tx.update_range(t, &b.to_be_bytes(), 0, &(bb + x).to_le_bytes())?;
                        Ok(())
                    };
                    match run(&mut tx) {
                        Ok(()) => match tx.commit() {
                            Ok(ack) => acks.lock().push(ack),
                            Err(Error::Conflict(_)) => {}
                            Err(e) => panic!("commit: {e}"),
                        },
                        Err(Error::Conflict(_)) => {}
                        Err(e) => panic!("transfer: {e}"),
                    }
                }
            });
        }
        // A failed check must stop the workers, or the test hangs instead
        // of failing (the freeze guard is released by the unwind).
        struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let _stop = Stop(&stop);
        if checkpoints {
            let (db, stop) = (&db, &stop);
            s.spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(7));
                    match db.checkpoint() {
                        Ok(_) | Err(Error::Closed) => {}
                        Err(e) => panic!("checkpoint: {e}"),
                    }
                }
            });
        }
        let mut rng = SmallRng::seed_from_u64(seed);
        for _ in 0..6 {
            std::thread::sleep(Duration::from_millis(rng.random_range(2..30)));
            let frozen = freeze.lock.write();
            // Frozen, with no write in flight: nothing more lands, so
            // nothing more becomes durable, and every ack that resolves
            // now is for bytes in the image.
            let img = image(&*freeze);
            let acked: BTreeSet<u64> = acks
                .lock()
                .iter()
                .filter(|a| a.is_acknowledged())
                .filter_map(CommitAck::csn)
                .collect();
            check_image(&img, &acked);
            images += 1;
            drop(frozen);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let next = db.stats().next_csn;
    db.close().expect("close");
    let whole: Arc<dyn ObjectStore> = freeze.clone();
    let (_, scan) = scan_log(&whole).expect("scan");
    assert!(
        scan.chains.values().all(|g| g.truncated.is_none()),
        "a clean close leaves no torn tail"
    );
    let plan = plan_replay(&scan).expect("plan");
    assert_eq!(plan.prefix, next, "after a clean close every CSN is in the log");
    assert!(plan.dropped.is_empty());
    let acked: BTreeSet<u64> = acks.lock().iter().filter_map(CommitAck::csn).collect();
    assert!(checkpoints || check_image(&whole, &acked) > 1);
    check_image(&whole, &acked);
    assert_eq!(images, 6);
}

#[test]
fn crash_images_hold_every_acknowledged_transfer_and_a_consistent_cut() {
    for seed in 0..8 {
        bank_run(seed, if seed % 2 == 0 { 4 } else { 2 }, false);
    }
}

#[test]
fn crash_images_during_checkpoints_recover_every_acknowledged_transfer() {
    for seed in 0..8 {
        bank_run(seed, if seed % 2 == 0 { 4 } else { 2 }, true);
    }
}

/// Several segments of one chain (one group, one lane) in `store`, closed
/// cleanly.
fn small_log(store: Arc<dyn ObjectStore>) {
    let db = Database::open(
        Options::new()
            .add_store_handle(store)
            .workers(1)
            .log_lanes(1)
            .segment_parts_max(3)
            .flush_timeout(Duration::from_millis(1)),
    )
    .expect("open");
    let t = db.create_table("t").expect("table");
    for i in 0..20u32 {
        let mut tx = db.begin().expect("begin");
        tx.put(&t, &i.to_be_bytes(), b"value").expect("put");
        tx.commit_and_wait().expect("commit");
    }
    db.close().expect("close");
}

#[test]
fn a_torn_tail_is_cut_and_reported_and_damage_elsewhere_is_corrupt() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    small_log(store.clone());
    let keys: Vec<String> = store.list("log/").expect("list").into_iter().map(|o| o.key).collect();
    // A clean close leaves no fence: the log ends at its last part.
    assert!(keys.len() >= 3, "rolled over: {keys:?}");
    let last = keys.last().expect("a segment").clone();
    let bytes = store.get(&last).expect("get");

    // A torn last append: the tail is cut, the rest replays.
    store.put(&last, bytes.slice(..bytes.len() - 7)).expect("tear");
    let (_, scan) = scan_log(&store).expect("a torn tail is not corruption");
    let t = scan.chains[&milliscale::internals::keys::Chain::new(0, 0)]
        .truncated
        .as_ref()
        .expect("reported");
    assert_eq!(t.key, last);
    let plan = plan_replay(&scan).expect("plan");
    assert!(plan.prefix > 1 && plan.replay.len() as u64 == plan.prefix - 1);

    // The same damage in a segment that is followed by another: corrupt.
    store.put(&last, bytes.clone()).expect("restore");
    let first = keys[0].clone();
    let mut b = store.get(&first).expect("get").to_vec();
    let at = b.len() / 2;
    b[at] ^= 0x40;
    store.put(&first, Bytes::from(b)).expect("flip");
    match scan_log(&store) {
        Err(Error::Corrupt(m)) => assert!(m.contains(&keys[1]) || m.contains(&first), "{m}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }

    // A missing segment in the middle: corrupt, naming the one after it.
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    small_log(store.clone());
    store.delete(&keys[1]).expect("delete");
    match scan_log(&store) {
        Err(Error::Corrupt(m)) => assert!(m.contains(&keys[2]), "{m}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

/// A part lost at the end of one lane while a later part of its group
/// landed in another (invariants 1 and 3 with lanes). T1's part is held in
/// lane 0; T2 (a blind insert, DSN 0) lands in lane 1 and is acknowledged
/// at once by record tracking; T3 read T1's write and waits. The process
/// "dies" with T1's part still on its way: recovery must keep T2, drop T3
/// (its DSN is at the hole) and T1, and report the hole.
#[test]
fn a_part_lost_behind_a_later_lane_is_a_hole_recovery_respects() {
    let inner: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let gate = common::Gate::new(inner.clone());
    let db = Database::open(
        Options::new()
            .add_store_handle(gate.clone())
            .workers(1)
            .log_lanes(2)
            .flush_timeout(Duration::from_millis(1)),
    )
    .expect("open");
    let _open = gate.open_on_drop();
    let t = db.create_table("t").expect("table");
    let put = |k: &[u8]| {
        let mut tx = db.begin().expect("begin");
        tx.put(&t, k, b"v").expect("put");
        tx.commit().expect("pre-commit")
    };
    let acked_within = |ack: &CommitAck, ms: u64| {
        let end = std::time::Instant::now() + Duration::from_millis(ms);
        while std::time::Instant::now() < end && !ack.is_acknowledged() {
            std::thread::sleep(Duration::from_millis(1));
        }
        ack.is_acknowledged()
    };
    // Hold lane 0; commit until a transaction's part is stuck there (a free
    // lane takes each flush, so which lane gets a part is not fixed).
    gate.close_lane(0, 0);
    let mut n = 0u32;
    let (t1, t1_key) = loop {
        n += 1;
        assert!(n < 100, "no part went to lane 0");
        let key = format!("t1-{n}").into_bytes();
        let ack = put(&key);
        if !acked_within(&ack, 50) {
            break (ack, key);
        }
    };
    let t2 = put(b"t2");
    let t3 = {
        let mut tx = db.begin().expect("begin");
        assert_eq!(tx.get(&t, &t1_key).expect("get"), Some(b"v".to_vec()));
        tx.put(&t, b"t3", b"v").expect("put");
        tx.commit().expect("pre-commit")
    };
    assert_eq!(t3.dsn(), t1.csn().expect("csn"), "T3 read T1's version");
    assert!(acked_within(&t2, 5_000), "T2's own part landed in lane 1 and it depends on nothing");
    assert!(!acked_within(&t3, 50), "T3 depends on T1, whose part is held");
    assert!(!t1.is_acknowledged());
    // The crash: what the store holds now, with T1's part never arriving.
    let crashed = image(inner.as_ref());
    let rec = Database::open_read_only(Options::new().add_store_handle(crashed)).expect("recover");
    let r = rec.recovery_report().expect("report");
    let t1_csn = t1.csn().expect("csn");
    assert_eq!(r.prefix, t1_csn, "the hole is T1's CSN: {r:?}");
    assert!(r.max_csn > t1_csn, "later CSNs landed in the other lane: {r:?}");
    assert!(r.dropped.iter().any(|&(c, _)| Some(c) == t3.csn()), "T3 is dropped: {r:?}");
    let tt = rec.open_table("t").expect("table");
    let mut tx = rec.begin().expect("begin");
    assert_eq!(tx.get(&tt, b"t2").expect("get"), Some(b"v".to_vec()), "acknowledged T2 survives");
    assert_eq!(tx.get(&tt, &t1_key).expect("get"), None, "T1 never landed");
    assert_eq!(tx.get(&tt, b"t3").expect("get"), None, "T3 depends on the hole");
    drop(tx);
    gate.open_all();
    assert!(acked_within(&t1, 5_000) && acked_within(&t3, 5_000), "all land once let through");
}

/// `checkpoint_log_ratio` measures the log since the last checkpoint
/// against that checkpoint's size. A reopened database knows the size of
/// the checkpoint it stands on (it used to start from 0, so its first
/// checkpoint came at the ratio's 16 MiB floor whatever its live data).
#[test]
fn a_reopened_database_measures_its_log_against_the_checkpoint_it_stands_on() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let open = || {
        Database::open(
            Options::new()
                .add_store_handle(Arc::clone(&store))
                .workers(1)
                .checkpoint_log_ratio(1.0)
                .flush_timeout(Duration::from_millis(1)),
        )
        .expect("open")
    };
    let db = open();
    let t = db.create_table("t").expect("table");
    for i in 0..1000u32 {
        let mut tx = db.begin().expect("begin");
        tx.put(&t, &i.to_be_bytes(), &[7u8; 100]).expect("put");
        tx.commit_and_wait().expect("commit");
    }
    db.checkpoint().expect("checkpoint");
    let written = db.checkpoint_stats();
    assert!(written.last_bytes > 100_000, "1,000 rows of 100 bytes: {written:?}");
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"after", b"the checkpoint").expect("put");
    tx.commit_and_wait().expect("commit");
    db.close().expect("close");

    // The recovery replays the row after the checkpoint and seals the old
    // log (this writer checkpoints in the background): the stats start
    // from the checkpoint it stands on, then from the one its checkpointer
    // writes at once, which drops the seal.
    let db = open();
    assert!(db.recovery_report().is_some_and(|r| r.sealed_old_log), "{:?}", db.recovery_report());
    let s = db.checkpoint_stats();
    assert!(
        s.last_bytes >= written.last_bytes && s.last_rows >= written.last_rows,
        "after recovery: {s:?}, before: {written:?}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let s = loop {
        let s = db.checkpoint_stats();
        if s.last_rows == written.last_rows + 1
            && db.manifest().is_some_and(|m| m.sealed.is_empty())
        {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "no checkpoint after recovery: {s:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(s.last_bytes >= written.last_bytes, "after the checkpoint: {s:?}");
    db.close().expect("close");

    // Nothing to replay: no new checkpoint, the stats start from the old.
    let db = open();
    let again = db.checkpoint_stats();
    assert_eq!((again.last_bytes, again.last_rows), (s.last_bytes, s.last_rows));
    db.close().expect("close");
}

/// One worker on `store`, recovering with `threads` threads, checkpoints
/// only when asked.
fn replay_options(store: &Arc<dyn ObjectStore>, threads: usize) -> Options {
    Options::new()
        .add_store_handle(Arc::clone(store))
        .workers(1)
        .recovery_threads(threads)
        .checkpoint_log_bytes(0)
}

/// Replay on top of a checkpoint: a key the log only patches is loaded
/// from the checkpoint with its patches applied (one version, no second
/// search of the index); a key the log puts or deletes is not loaded at
/// all (what it held is replaced), even when a delta comes first, and
/// the log's own last value is installed. Every mix below recovers to the
/// model's value, with one and with three threads, and the recovered
/// database writes and recovers again.
#[test]
fn replay_patches_checkpointed_values_as_they_load_and_skips_rows_the_log_replaces() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let options = |threads: usize| replay_options(&store, threads);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let db = Database::open(options(1)).expect("open");
    let t = db.create_table("t").expect("table");
    let write = |f: &dyn Fn(&mut milliscale::Transaction)| {
        let mut tx = db.begin().expect("begin");
        f(&mut tx);
        tx.commit_and_wait().expect("commit");
    };
    for i in 0..8u8 {
        write(&|tx| tx.put(&t, &[b'k', i], &[i; 16]).expect("put"));
        model.insert(vec![b'k', i], vec![i; 16]);
    }
    db.checkpoint().expect("checkpoint");
    // k0: a delta, then a delete.
    write(&|tx| tx.update_range(&t, b"k\x00", 0, b"AA").expect("patch"));
    write(&|tx| tx.delete(&t, b"k\x00").map(drop).expect("delete"));
    model.remove(&b"k\x00"[..]);
    // k1: a delta, then a put.
    write(&|tx| tx.update_range(&t, b"k\x01", 2, b"BB").expect("patch"));
    write(&|tx| tx.put(&t, b"k\x01", b"new").expect("put"));
    model.insert(b"k\x01".to_vec(), b"new".to_vec());
    // k2: two deltas in two transactions, and two in one.
    write(&|tx| tx.update_range(&t, b"k\x02", 0, b"C").expect("patch"));
    write(&|tx| tx.update_range(&t, b"k\x02", 4, b"D").expect("patch"));
    write(&|tx| {
        tx.update_range(&t, b"k\x02", 8, b"E").expect("patch");
        tx.update_range(&t, b"k\x02", 15, b"F").expect("patch");
    });
    let mut k2 = vec![2u8; 16];
    for (at, b) in [(0, b'C'), (4, b'D'), (8, b'E'), (15, b'F')] {
        k2[at] = b;
    }
    model.insert(b"k\x02".to_vec(), k2);
    // k3: a delete, then a put. k4: a delta, a delete and a put.
    write(&|tx| tx.delete(&t, b"k\x03").map(drop).expect("delete"));
    write(&|tx| tx.put(&t, b"k\x03", b"back").expect("put"));
    model.insert(b"k\x03".to_vec(), b"back".to_vec());
    write(&|tx| tx.update_range(&t, b"k\x04", 0, b"G").expect("patch"));
    write(&|tx| tx.delete(&t, b"k\x04").map(drop).expect("delete"));
    write(&|tx| tx.put(&t, b"k\x04", b"again").expect("put"));
    model.insert(b"k\x04".to_vec(), b"again".to_vec());
    // A new key, put and deleted; another put and patched.
    write(&|tx| tx.put(&t, b"n0", b"gone").expect("put"));
    write(&|tx| tx.delete(&t, b"n0").map(drop).expect("delete"));
    write(&|tx| tx.put(&t, b"n1", b"xxxx").expect("put"));
    write(&|tx| tx.update_range(&t, b"n1", 1, b"Y").expect("patch"));
    model.insert(b"n1".to_vec(), b"xYxx".to_vec());
    drop(db); // no close: the recovery below replays the log

    let rows = |db: &Database| rows(db, "t");
    for threads in [1, 3] {
        let db = Database::open_read_only(options(threads)).expect("recover");
        let r = db.recovery_report().expect("report");
        assert!(r.replayed > 0);
        // k0, which the log deletes, and k1, k3 and k4, which it puts
        // (after a delta, or a deletion), are not loaded from the
        // checkpoint at all: k2 (patched as it loads) and k5-k7 are.
        assert_eq!(r.checkpoint_rows_loaded, 4, "{r:?}");
        assert_eq!(rows(&db), model, "{threads} threads");
    }
    // The recovered writer's records and index agree: a removed key comes
    // back, a patched one takes another patch, and all of it recovers.
    let db = Database::open(options(2)).expect("recover as the writer");
    assert_eq!(rows(&db), model);
    let t = db.open_table("t").expect("table");
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"k\x00", b"re").expect("put");
    tx.update_range(&t, b"k\x02", 1, b"H").expect("patch");
    tx.delete(&t, b"n1").expect("delete");
    tx.commit_and_wait().expect("commit");
    model.insert(b"k\x00".to_vec(), b"re".to_vec());
    model.get_mut(&b"k\x02"[..]).expect("k2")[1] = b'H';
    model.remove(&b"n1"[..]);
    assert_eq!(rows(&db), model);
    drop(db);
    assert_eq!(rows(&Database::open(options(2)).expect("recover again")), model);
}

/// One step of [`recovery_matches_the_model_whatever_the_log_does_after_its_checkpoints`].
#[derive(Debug, Clone)]
enum Step {
    Put(u8, Vec<u8>),
    Delete(u8),
    /// A patch at `offset` (taken modulo what fits in the value).
    Patch(u8, usize, Vec<u8>),
    /// The transaction so far commits; a new one begins.
    Commit,
    Checkpoint,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    let key = 0u8..10;
    prop_oneof![
        3 => (key.clone(), proptest::collection::vec(any::<u8>(), 4..16))
            .prop_map(|(k, v)| Step::Put(k, v)),
        1 => key.clone().prop_map(Step::Delete),
        4 => (key, 0usize..16, proptest::collection::vec(any::<u8>(), 1..4))
            .prop_map(|(k, o, b)| Step::Patch(k, o, b)),
        3 => Just(Step::Commit),
        1 => Just(Step::Checkpoint),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Random puts, deletions and patches (logged as deltas), grouped into
    /// transactions, with checkpoints between them; then a crash (no
    /// close) with the last transaction still open. Recovery, with one
    /// thread and with three, holds exactly the model's rows (every
    /// committed transaction, nothing of the open one), whatever mix each key's records after the last
    /// checkpoint make (only patches, patches then a put or a deletion, a
    /// deletion then a put, a key new since), and so does a second
    /// recovery after the recovered writer closes.
    #[test]
    fn recovery_matches_the_model_whatever_the_log_does_after_its_checkpoints(
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let options = |threads: usize| replay_options(&store, threads);
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let db = Database::open(options(1)).expect("open");
        let t = db.create_table("t").expect("table");
        // The transaction open, and the model as it will be once it commits.
        let mut tx = db.begin().expect("begin");
        let mut pending = model.clone();
        for s in &steps {
            match s {
                Step::Put(k, v) => {
                    tx.put(&t, &[*k], v).expect("put");
                    pending.insert(vec![*k], v.clone());
                }
                Step::Delete(k) => {
                    tx.delete(&t, &[*k]).expect("delete");
                    pending.remove(&[*k][..]);
                }
                Step::Patch(k, offset, bytes) => {
                    // Only a patch that fits (the engine refuses others).
                    let Some(v) = pending.get_mut(&[*k][..]) else { continue };
                    let Some(room) = (v.len() + 1).checked_sub(bytes.len()) else { continue };
                    let at = offset % room;
                    tx.update_range(&t, &[*k], at, bytes).expect("patch");
                    v[at..at + bytes.len()].copy_from_slice(bytes);
                }
                Step::Commit | Step::Checkpoint => {
                    // The next transaction begins after this one commits
                    // (and after the checkpoint).
                    tx.commit_and_wait().expect("commit");
                    model = pending.clone();
                    if matches!(s, Step::Checkpoint) {
                        db.checkpoint().expect("checkpoint");
                    }
                    tx = db.begin().expect("begin");
                }
            }
        }
        // The last transaction is left open: what it wrote is not in the log.
        drop(tx);
        drop(db); // no close: recovery replays the log after the last checkpoint
        for threads in [1, 3] {
            let db = Database::open_read_only(options(threads)).expect("recover");
            proptest::prop_assert_eq!(&rows(&db, "t"), &model, "{} threads", threads);
        }
        let db = Database::open(options(2)).expect("recover as the writer");
        proptest::prop_assert_eq!(&rows(&db, "t"), &model);
        db.close().expect("close");
        let db = Database::open_read_only(options(2)).expect("recover again");
        proptest::prop_assert_eq!(&rows(&db, "t"), &model);
    }
}
