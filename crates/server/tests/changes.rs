//! `Changes` through the Rust client: the server's feed sends every
//! committed transaction whole, in CSN order, with whole values, then a
//! resolved point past it; a feed resumed after a cursor sends exactly the
//! ones after it; a filter keeps a table; a cursor the checkpoint covers
//! is OUT_OF_RANGE naming the oldest; past `FEEDS_MAX` feeds a server
//! refuses more (RESOURCE_EXHAUSTED); a shard refuses the call.

use std::time::Duration;

use milliscale_client::{Change, ChangeEvent, ChangeFilter, Changes};
use milliscale_server::Backend;
use tonic::Code;

use crate::common::*;

/// Read `feed` until its resolved point passes `last`: the transactions.
async fn read_until(feed: &mut Changes, last: u64) -> Vec<(u64, Vec<Change>)> {
    let (mut got, mut resolved) = (Vec::new(), 0);
    while resolved <= last {
        let e = tokio::time::timeout(Duration::from_secs(20), feed.next())
            .await
            .expect("an event in time")
            .expect("the feed")
            .expect("not ended");
        match e {
            ChangeEvent::Commit { csn, changes } => {
                assert!(csn >= resolved);
                got.push((csn, changes));
            }
            ChangeEvent::Resolved(n) => {
                assert!(n > resolved);
                resolved = n;
            }
        }
    }
    got
}

/// A feed after `cursor`, once the server has a place for it (a feed
/// its client dropped frees its place when the server notices).
async fn when_free(
    c: &milliscale_client::Client,
    cursor: Option<u64>,
    filter: ChangeFilter,
) -> Changes {
    for _ in 0..200 {
        match c.changes(cursor, filter.clone()).await {
            Ok(f) => return f,
            Err(e) if e.code() == Code::ResourceExhausted => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("feed: {e}"),
        }
    }
    panic!("no place for a feed in 10 s")
}

fn put(table: &str, key: &str, value: Option<&str>) -> Change {
    Change {
        table: table.into(),
        key: key.as_bytes().to_vec(),
        value: value.map(|v| v.as_bytes().to_vec()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_feed_sends_each_transaction_whole_and_resumes_after_a_cursor() {
    let s = start(Backend::Writer(writer("memory://").await), |_| {}).await;
    let c = client(&s).await;
    c.create_table("t").await.expect("create");
    c.create_table("u").await.expect("create");
    let mut csns = Vec::new();
    for i in 0..20 {
        let mut tx = c.begin().await.expect("begin");
        tx.put("t", format!("k{i}").as_bytes(), b"value-0000").await.expect("put");
        tx.put("u", b"counter", i.to_string().as_bytes()).await.expect("put");
        if i % 5 == 4 {
            tx.patch("t", b"k0", 6, i.to_string().as_bytes()).await.expect("patch");
            tx.delete("t", format!("k{}", i - 1).as_bytes()).await.expect("delete");
        }
        csns.push(tx.commit().await.expect("commit").token.expect("a write"));
    }
    let last = *csns.last().expect("some");
    let mut feed = c.changes(None, ChangeFilter::default()).await.expect("feed");
    let all = read_until(&mut feed, last).await;
    assert_eq!(all.iter().map(|(c, _)| *c).collect::<Vec<_>>(), csns);
    assert_eq!(all[0].1, [put("t", "k0", Some("value-0000")), put("u", "counter", Some("0"))]);
    // A patch arrives as the row's whole value; a delete as none.
    assert_eq!(
        all[4].1,
        [
            put("t", "k4", Some("value-0000")),
            put("u", "counter", Some("4")),
            put("t", "k0", Some("value-4000")),
            put("t", "k3", None)
        ]
    );
    drop(feed);

    let mut after = c.changes(Some(csns[9]), ChangeFilter::default()).await.expect("feed");
    assert_eq!(read_until(&mut after, last).await, all[10..]);
    drop(after);
    // The same events as a Stream, and as a blocking iterator on a plain
    // thread.
    let mut stream = c.changes(Some(csns[14]), ChangeFilter::default()).await.expect("feed");
    let mut by_stream = Vec::new();
    while by_stream.len() < 5 {
        match tokio_stream::StreamExt::next(&mut stream).await.expect("not ended").expect("feed") {
            ChangeEvent::Commit { csn, changes } => by_stream.push((csn, changes)),
            ChangeEvent::Resolved(_) => {}
        }
    }
    assert_eq!(by_stream, all[15..]);
    drop(stream);
    let blocking = when_free(&c, Some(csns[16]), ChangeFilter::default()).await;
    let rt = tokio::runtime::Handle::current();
    let by_iterator = tokio::task::spawn_blocking(move || {
        blocking
            .blocking(rt)
            .map(|e| e.expect("feed"))
            .filter_map(|e| match e {
                ChangeEvent::Commit { csn, changes } => Some((csn, changes)),
                ChangeEvent::Resolved(_) => None,
            })
            .take(3)
            .collect::<Vec<_>>()
    })
    .await
    .expect("the iterator's thread");
    assert_eq!(by_iterator, all[17..]);
    let only_u = ChangeFilter { tables: vec!["u".into()], prefix: None };
    let mut u = when_free(&c, Some(csns[17]), only_u).await;
    let got = read_until(&mut u, last).await;
    assert_eq!(
        got,
        [
            (csns[18], vec![put("u", "counter", Some("18"))]),
            (csns[19], vec![put("u", "counter", Some("19"))])
        ]
    );
    drop(u);

    // A cursor the newest checkpoint covers.
    let Backend::Writer(db) = s.backend() else { panic!("a writer") };
    db.checkpoint().await.expect("checkpoint");
    let e = c.changes(Some(csns[0]), ChangeFilter::default()).await.expect_err("too old");
    assert_eq!((e.code(), e.kind()), (Code::OutOfRange, "cursor"), "{e}");
    assert!(e.message().contains("oldest cursor"), "{e}");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_runs_a_few_feeds_at_once() {
    let s = start(Backend::Writer(writer("memory://").await), |_| {}).await;
    let c = client(&s).await;
    c.create_table("t").await.expect("create");
    let mut open = Vec::new();
    for _ in 0..milliscale_server::FEEDS_MAX {
        open.push(c.changes(None, ChangeFilter::default()).await.expect("under the cap"));
    }
    let e = c.changes(None, ChangeFilter::default()).await.expect_err("over the cap");
    assert_eq!((e.code(), e.kind()), (Code::ResourceExhausted, "limit"), "{e}");
    // A feed ended by its client frees its place.
    drop(open.pop());
    let again = async {
        loop {
            match c.changes(None, ChangeFilter::default()).await {
                Ok(f) => return f,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    };
    let _f: Changes =
        tokio::time::timeout(Duration::from_secs(10), again).await.expect("a place again");
    drop(open);
    s.shutdown().await;
}
