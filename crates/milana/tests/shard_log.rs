//! A shard's log on the engine: records come back whole and in order
//! after a close, every acknowledged append survives a crash (the
//! database dropped without closing, then opened again by a new writer),
//! the primary rebuilt from them is the one that wrote them, and records
//! after a gap are dropped for good.

use std::sync::Arc;

use milliscale::{Database, Options};
use milliscale_milana::log::{Prepare, Record};
use milliscale_milana::participant::{Mutations, Participant, Recovered, Vote};
use milliscale_milana::shard_log::{ShardLog, TABLE};
use milliscale_milana::types::{CommitTs, TxnId, TxnStatus};

fn options(dir: &tempfile::TempDir) -> Options {
    Options::new().store(format!("file://{}", dir.path().display()))
}

fn prepare(client: u32, seq: u64, ts: u64, key: &str, participants: Vec<u32>) -> Prepare {
    Prepare {
        txn: TxnId { client, seq },
        version: CommitTs { ts, client },
        reads: vec![(key.as_bytes().to_vec(), CommitTs::INITIAL)],
        writes: vec![(key.as_bytes().to_vec(), Some(format!("{client}-{seq}").into_bytes()))],
        participants,
    }
}

async fn open(dir: &tempfile::TempDir) -> (ShardLog, Vec<Record>) {
    let o = options(dir);
    tokio::task::spawn_blocking(move || ShardLog::open(o)).await.expect("task").expect("open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_come_back_in_append_order_after_a_close() {
    let dir = tempfile::tempdir().expect("dir");
    let (log, records) = open(&dir).await;
    assert!(records.is_empty());
    let log = Arc::new(log);
    // Four tasks append at once, each awaiting every other record's
    // durability; each task's records stay in its order, and every number
    // is used once.
    let tasks: Vec<_> = (0..4u32)
        .map(|t| {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut waits = Vec::new();
                for i in 0..50u64 {
                    let r = if i % 2 == 0 {
                        Record::Prepare(prepare(
                            t,
                            i,
                            1_000 * i + u64::from(t),
                            &format!("k{t}"),
                            vec![0],
                        ))
                    } else {
                        Record::Commit(TxnId { client: t, seq: i - 1 })
                    };
                    let appended = log.append(&r).expect("append");
                    if i % 2 == 0 {
                        appended.durable().await.expect("durable");
                    } else {
                        waits.push(appended);
                    }
                }
                for w in waits {
                    w.durable().await.expect("durable");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    Arc::try_unwrap(log).expect("one owner").close().await.expect("close");
    let (log, records) = open(&dir).await;
    assert_eq!(records.len(), 200);
    for t in 0..4u32 {
        let mine: Vec<&Record> = records
            .iter()
            .filter(|r| match r {
                Record::Prepare(p) => p.txn.client == t,
                Record::Commit(x) => x.client == t,
                _ => false,
            })
            .collect();
        assert_eq!(mine.len(), 50);
        for (i, r) in mine.iter().enumerate() {
            match r {
                Record::Prepare(p) => assert_eq!(p.txn.seq, i as u64),
                Record::Commit(x) => assert_eq!(x.seq, i as u64 - 1),
                _ => unreachable!(),
            }
        }
    }
    // Appends go on after the last number.
    let n = log.append(&Record::ReadLease(9)).expect("append").durable().await.expect("durable");
    assert_eq!(n, 200);
    log.close().await.expect("close");
    let (_, records) = open(&dir).await;
    assert_eq!(records.last(), Some(&Record::ReadLease(9)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_appends_survive_a_crash_and_rebuild_the_primary() {
    let dir = tempfile::tempdir().expect("dir");
    let (log, _) = open(&dir).await;
    // A primary that logs what it does, as a server would: the last
    // append's durability covers the ones before it.
    let mut p = Participant::new(0, 1_000, Mutations::default());
    let mut last = None;
    let mut act = |r: Option<Record>| {
        if let Some(r) = r {
            last = Some(log.append(&r).expect("append"));
        }
    };
    let single = prepare(1, 1, 10, "a", vec![0]);
    let multi = prepare(2, 1, 20, "b", vec![0, 1]);
    let decided = prepare(3, 1, 30, "c", vec![0, 1]);
    for prep in [single.clone(), multi.clone(), decided.clone()] {
        let (vote, r) = p.prepare(prep);
        assert_eq!(vote, Vote::Yes);
        act(r);
    }
    act(p.decide(single.txn, true, 0));
    act(p.decide(decided.txn, true, 0));
    act(Some(Record::ReadLease(500)));
    last.expect("appended").durable().await.expect("durable");
    // The crash: no close, no flush beyond what the appends waited for.
    std::mem::forget(log);

    let (log, records) = open(&dir).await;
    assert_eq!(records.len(), 6);
    let Recovered { participant: q, logged, ask } =
        Participant::recover(0, 1_000, Mutations::default(), &records);
    assert!(logged.is_empty(), "nothing left for recovery to decide alone");
    assert_eq!(ask, vec![(multi.txn, vec![0, 1])], "the undecided multi-shard prepare");
    assert_eq!(q.known(single.txn), Some(TxnStatus::Committed));
    assert_eq!(q.known(decided.txn), Some(TxnStatus::Committed));
    assert_eq!(q.committed(), p.committed(), "the same committed versions");
    log.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_after_a_gap_are_dropped_and_deleted() {
    let dir = tempfile::tempdir().expect("dir");
    let (log, _) = open(&dir).await;
    for t in 0..3 {
        log.append(&Record::ReadLease(t)).expect("append").durable().await.expect("durable");
    }
    log.close().await.expect("close");
    // What a crash can leave: record 4 durable, record 3 lost.
    let o = options(&dir);
    tokio::task::spawn_blocking(move || {
        let db = Database::open(o).expect("open");
        let t = db.open_table(TABLE).expect("table");
        let bytes = milliscale_milana::codec::encode(&Record::ReadLease(99));
        db.put(&t, &4u64.to_be_bytes(), &bytes).expect("put");
        db.close().expect("close");
    })
    .await
    .expect("task");
    let (log, records) = open(&dir).await;
    assert_eq!(records, vec![Record::ReadLease(0), Record::ReadLease(1), Record::ReadLease(2)]);
    // The next append takes number 3; number 4 is gone for good, so a
    // later open sees no gap and nothing of it.
    let n = log.append(&Record::ReadLease(7)).expect("append").durable().await.expect("durable");
    assert_eq!(n, 3);
    log.close().await.expect("close");
    let (log, records) = open(&dir).await;
    assert_eq!(records.len(), 4);
    assert_eq!(records.last(), Some(&Record::ReadLease(7)));
    log.close().await.expect("close");
}
