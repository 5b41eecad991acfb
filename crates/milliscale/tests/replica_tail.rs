//! Tails of the log's chains, polled while a database commits, hand out
//! every part the writer wrote, each once and in chain order, across
//! segment rollovers, in append mode and in put mode; and what they read
//! equals what recovery reads once the writer has closed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use milliscale::internals::keys::Chain;
use milliscale::internals::record::Part;
use milliscale::internals::tail::ChainTail;
use milliscale::{Database, Options};
use objstore::{MemoryStore, ObjectStore};

fn tail_while_writing(put_per_flush: bool) {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = Database::open(
        Options::new()
            .add_store_handle(store.clone())
            .workers(4)
            .log_lanes(3)
            .segment_parts_max(3)
            .put_per_flush(put_per_flush)
            .checkpoint_log_bytes(0),
    )
    .expect("open");
    let log = db.manifest().expect("a log").log;
    let mut tails: Vec<ChainTail> = log
        .chains()
        .map(|c| ChainTail::new(c, log.start(c).expect("its chain"), log.parts_max))
        .collect();
    let mut read: BTreeMap<Chain, Vec<Part>> = BTreeMap::new();
    let mut poll_all = |tails: &mut Vec<ChainTail>| {
        for t in tails.iter_mut() {
            let got = t.poll(&store).expect("poll");
            read.entry(t.chain()).or_default().extend(got.parts);
        }
    };
    let t = db.create_table("t").expect("table");
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..4u32)
            .map(|w| {
                let (db, t) = (&db, &t);
                s.spawn(move || {
                    for i in 0..150u32 {
                        let mut tx = db.begin().expect("begin");
                        tx.put(t, format!("w{w}-{}", i % 13).as_bytes(), &i.to_be_bytes())
                            .expect("put");
                        tx.commit_and_wait().expect("commit");
                    }
                })
            })
            .collect();
        let polls = s.spawn(|| {
            let mut n = 0;
            while !done.load(Ordering::Acquire) {
                poll_all(&mut tails);
                n += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            n
        });
        for w in writers {
            w.join().expect("writer");
        }
        done.store(true, Ordering::Release);
        assert!(polls.join().expect("poller") > 10, "the tails polled while the writer wrote");
    });
    db.close().expect("close");
    // After the close every part has landed: one more poll reads the rest.
    for t in &mut tails {
        let got = t.poll(&store).expect("poll");
        read.entry(t.chain()).or_default().extend(got.parts);
        assert!(t.poll(&store).expect("poll").parts.is_empty(), "nothing twice");
    }

    let (_, scan) = milliscale::internals::scan_log(&store).expect("scan");
    let mut parts = 0;
    for (chain, found) in &scan.chains {
        let recovered: Vec<&Part> = found.parts.iter().map(|(_, p)| p).collect();
        let tailed: Vec<&Part> = read.get(chain).map(|v| v.iter().collect()).unwrap_or_default();
        assert_eq!(tailed, recovered, "{chain}: the tail read what recovery reads");
        parts += recovered.len();
    }
    assert!(parts > 3 * 3, "the chains rolled over to later segments: {parts} parts");
    // Every CSN the writer handed out, once.
    let mut csns: Vec<u64> =
        read.values().flatten().flat_map(|p| p.entries.iter()).map(|e| e.csn()).collect();
    csns.sort_unstable();
    let next = db.stats().next_csn;
    assert_eq!(csns, (1..next).collect::<Vec<_>>());
}

#[test]
fn a_tail_reads_every_appended_part_once_in_order() {
    tail_while_writing(false);
}

#[test]
fn a_tail_reads_every_put_part_once_in_order() {
    tail_while_writing(true);
}
