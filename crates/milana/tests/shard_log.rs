//! A shard's log on the engine: records come back whole and in order
//! after a close, and every acknowledged append survives a crash (the
//! database dropped without closing, then opened again by a new writer);
//! the primary rebuilt from them is the one that wrote them.

use std::sync::Arc;

use milliscale::Options;
use milliscale_milana::log::{Prepare, Record};
use milliscale_milana::participant::{Mutations, Participant, Recovered, Vote};
use milliscale_milana::shard_log::ShardLog;
use milliscale_milana::types::{TxnId, TxnStatus, Version};

fn options(dir: &tempfile::TempDir) -> Options {
    Options::new().store(format!("file://{}", dir.path().display()))
}

fn prepare(client: u32, seq: u64, ts: u64, key: &str, participants: Vec<u32>) -> Prepare {
    Prepare {
        txn: TxnId { client, seq },
        version: Version { ts, client },
        reads: vec![(key.as_bytes().to_vec(), Version::INITIAL)],
        writes: vec![(key.as_bytes().to_vec(), Some(format!("{client}-{seq}").into_bytes()))],
        participants,
    }
}

#[test]
fn records_come_back_in_append_order_after_a_close() {
    let dir = tempfile::tempdir().expect("dir");
    let (log, records) = ShardLog::open(options(&dir)).expect("open");
    assert!(records.is_empty());
    let log = Arc::new(log);
    // Four threads append at once; each thread's records stay in its
    // order, and every number is used once.
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
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
                    log.append(&r).expect("append");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    Arc::try_unwrap(log).expect("one owner").close().expect("close");
    let (log, records) = ShardLog::open(options(&dir)).expect("reopen");
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
    log.append(&Record::ReadLease(9)).expect("append");
    log.close().expect("close");
    let (_, records) = ShardLog::open(options(&dir)).expect("reopen");
    assert_eq!(records.last(), Some(&Record::ReadLease(9)));
}

#[test]
fn acknowledged_appends_survive_a_crash_and_rebuild_the_primary() {
    let dir = tempfile::tempdir().expect("dir");
    let (log, _) = ShardLog::open(options(&dir)).expect("open");
    // A primary that logs what it does, as a server would.
    let mut p = Participant::new(0, 1_000, Mutations::default());
    let act = |r: Option<Record>| {
        if let Some(r) = r {
            log.append(&r).expect("append");
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
    act(p.decide(single.txn, true));
    act(p.decide(decided.txn, true));
    act(Some(Record::ReadLease(500)));
    // The crash: no close, no flush beyond what the appends waited for.
    std::mem::forget(log);

    let (log, records) = ShardLog::open(options(&dir)).expect("a new writer recovers");
    assert_eq!(records.len(), 6);
    let Recovered { participant: q, logged, ask } =
        Participant::recover(0, 1_000, Mutations::default(), &records);
    assert!(logged.is_empty(), "nothing left for recovery to decide alone");
    assert_eq!(ask, vec![(multi.txn, vec![0, 1])], "the undecided multi-shard prepare");
    assert_eq!(q.known(single.txn), Some(TxnStatus::Committed));
    assert_eq!(q.known(decided.txn), Some(TxnStatus::Committed));
    assert_eq!(q.committed(), p.committed(), "the same committed versions");
    log.close().expect("close");
}
