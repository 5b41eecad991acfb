//! The change feed (`milliscale::feed`) against an oracle: a writer
//! records, for every transaction it commits, the CSN it got and each
//! write's whole value as its own model of the rows computes it (puts,
//! deltas, deletes, in two tables). The feed must deliver exactly those
//! transactions, whole, in CSN order, and then a resolved point past the
//! last; a map built from the feed then equals the database. A feed
//! opened after a cursor delivers exactly the transactions above it; one
//! whose cursor the newest checkpoint covers is refused, naming the
//! oldest cursor it can serve.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{fast_polls as fast, followed_writer as writer};
use milliscale::feed::{Feed, FeedChange, FeedEvent, FeedFilter, FeedTxn};
use milliscale::{Database, Direction, Error};
use objstore::{MemoryStore, ObjectStore};

/// A small seeded generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

pub(crate) type Rows = BTreeMap<(String, Vec<u8>), Vec<u8>>;

/// Commit `n` random transactions, each 1-4 writes (a put, a patch of an
/// existing row, or a delete) in tables `a` and `b`; the transactions as
/// a feed must deliver them, and the rows after them.
fn write(db: &Database, rows: &mut Rows, rng: &mut Rng, n: usize) -> Vec<FeedTxn> {
    let tables = [db.open_table("a").expect("a"), db.open_table("b").expect("b")];
    let mut out = Vec::new();
    for _ in 0..n {
        let mut tx = db.begin().expect("begin");
        let mut changes: Vec<FeedChange> = Vec::new();
        for _ in 0..1 + rng.below(4) {
            let t = rng.below(2) as usize;
            let name = tables[t].name().to_owned();
            let key = format!("k{:02}", rng.below(40)).into_bytes();
            let id = (name.clone(), key.clone());
            let value = match (rng.below(3), rows.get(&id)) {
                (0, Some(old)) => {
                    let mut v = old.clone();
                    let at = rng.below(v.len() as u64 - 2) as usize;
                    let bytes = [rng.below(256) as u8, rng.below(256) as u8];
                    tx.update_range(&tables[t], &key, at, &bytes).expect("patch");
                    v[at..at + 2].copy_from_slice(&bytes);
                    Some(v)
                }
                (1, Some(_)) => {
                    tx.delete(&tables[t], &key).expect("delete");
                    None
                }
                _ => {
                    let v = format!("value-{}-{}", rng.below(1 << 20), "x".repeat(8)).into_bytes();
                    tx.put(&tables[t], &key, &v).expect("put");
                    Some(v)
                }
            };
            match &value {
                Some(v) => rows.insert(id, v.clone()),
                None => rows.remove(&id),
            };
            changes.push(FeedChange { table: name, key, value });
        }
        let info = tx.commit().expect("commit").wait().expect("durable");
        out.push(FeedTxn { csn: info.csn.expect("a write"), changes });
    }
    out
}

/// Read `feed` until its resolved point passes `last`: the transactions
/// it delivered, checked to come in CSN order and resolved in order.
fn read_until(feed: &mut Feed, last: u64) -> Vec<FeedTxn> {
    let (mut got, mut resolved) = (Vec::<FeedTxn>::new(), 0);
    let until = Instant::now() + Duration::from_secs(30);
    while resolved <= last {
        assert!(Instant::now() < until, "resolved {resolved}, waiting for {last}");
        match feed.next_timeout(Duration::from_millis(50)).expect("feed") {
            Some(FeedEvent::Commit(t)) => {
                assert!(t.csn >= resolved, "CSN {} after resolved {resolved}", t.csn);
                assert!(got.last().is_none_or(|p| p.csn < t.csn), "CSN order");
                got.push(t);
            }
            Some(FeedEvent::Resolved(n)) => {
                assert!(n > resolved, "resolved {n} after {resolved}");
                resolved = n;
            }
            None => {}
        }
    }
    got
}

/// `got` equals `expected`, or the first transaction where they differ.
fn same(got: &[FeedTxn], expected: &[FeedTxn], what: &str) {
    if let Some(i) = (0..got.len().min(expected.len())).find(|&i| got[i] != expected[i]) {
        panic!("{what}: transaction {i} differs:\n got {:?}\nwant {:?}", got[i], expected[i]);
    }
    assert_eq!(got.len(), expected.len(), "{what}: as many transactions");
}

/// A database opened with `o`, with the tables `a` and `b` that
/// [`write`] writes.
fn with_two_tables(o: milliscale::Options) -> Database {
    let db = Database::open(o).expect("open");
    db.create_table("a").expect("a");
    db.create_table("b").expect("b");
    db
}

fn db_rows(db: &Database) -> Rows {
    rows_in(db, &["a", "b"])
}

/// Every row of `tables` in `db`.
pub(crate) fn rows_in(db: &Database, tables: &[&str]) -> Rows {
    let mut out = Rows::new();
    for &name in tables {
        let t = db.open_table(name).expect("table");
        let mut tx = db.begin().expect("begin");
        for (k, v) in tx
            .scan(&t, Bound::Unbounded, Bound::Unbounded, Direction::Forward, usize::MAX)
            .expect("scan")
        {
            out.insert((name.to_owned(), k), v);
        }
    }
    out
}

fn applied(txns: &[FeedTxn]) -> Rows {
    let mut rows = Rows::new();
    for t in txns {
        for c in &t.changes {
            let id = (c.table.clone(), c.key.clone());
            match &c.value {
                Some(v) => rows.insert(id, v.clone()),
                None => rows.remove(&id),
            };
        }
    }
    rows
}

#[test]
fn the_feed_delivers_every_transaction_whole_with_whole_values() {
    for seed in [1u64, 2, 3] {
        let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let db = with_two_tables(writer(&store));
        let mut feed =
            Feed::open_with(writer(&store), fast(), None, FeedFilter::default()).expect("feed");
        let (mut rows, mut rng) = (Rows::new(), Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        let expected = write(&db, &mut rows, &mut rng, 600);
        let last = expected.last().expect("some").csn;
        let got = read_until(&mut feed, last);
        same(&got, &expected, &format!("seed {seed}"));
        assert_eq!(applied(&got), db_rows(&db), "seed {seed}");
        assert_eq!(rows, db_rows(&db), "the oracle's own model, seed {seed}");
    }
}

#[test]
fn a_feed_resumes_after_its_cursor_and_refuses_one_the_checkpoint_covers() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = with_two_tables(writer(&store));
    let (mut rows, mut rng) = (Rows::new(), Rng(7));
    let expected = write(&db, &mut rows, &mut rng, 200);
    let last = expected.last().expect("some").csn;
    // A consumer handles the first 80 transactions, saves its cursor and
    // dies; another resumes after it.
    let cursor = expected[79].csn;
    let mut resumed =
        Feed::open_with(writer(&store), fast(), Some(cursor), FeedFilter::default()).expect("feed");
    same(&read_until(&mut resumed, last), &expected[80..], "exactly the ones after it");
    drop(resumed);

    // A filter: table `b`, keys starting `k1`.
    let filter = FeedFilter { tables: vec!["b".into()], prefix: Some(b"k1".to_vec()) };
    let mut filtered = Feed::open_with(writer(&store), fast(), None, filter).expect("feed");
    let kept: Vec<FeedTxn> = expected
        .iter()
        .map(|t| FeedTxn {
            csn: t.csn,
            changes: t
                .changes
                .iter()
                .filter(|c| c.table == "b" && c.key.starts_with(b"k1"))
                .cloned()
                .collect(),
        })
        .filter(|t| !t.changes.is_empty())
        .collect();
    same(&read_until(&mut filtered, last), &kept, "filtered");
    drop(filtered);

    // A checkpoint covers the log so far: a feed starts after it, and an
    // older cursor is refused with the oldest one it can serve.
    let at = db.checkpoint().expect("checkpoint");
    match Feed::open_with(writer(&store), fast(), Some(cursor), FeedFilter::default()) {
        Err(Error::ChangesGone { cursor: c, oldest }) => {
            assert_eq!(c, cursor);
            assert!(oldest >= last && oldest < at.max(last + 1), "oldest {oldest}, at {at}");
        }
        other => panic!("expected ChangesGone, got {other:?}"),
    }
    let mut fresh =
        Feed::open_with(writer(&store), fast(), None, FeedFilter::default()).expect("feed");
    let more = write(&db, &mut rows, &mut rng, 50);
    let got = read_until(&mut fresh, more.last().expect("some").csn);
    same(&got, &more, "after the checkpoint, the new transactions");
}

/// The writer goes away without closing (a crash: its log stays as it
/// was) and a new one recovers (a new epoch) under a running feed: every
/// acknowledged transaction of both is delivered once, in order, and the
/// rows from the feed are the new writer's.
#[test]
fn a_feed_follows_a_new_writer_without_a_gap() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = with_two_tables(writer(&store));
    let mut feed =
        Feed::open_with(writer(&store), fast(), None, FeedFilter::default()).expect("feed");
    let (mut rows, mut rng) = (Rows::new(), Rng(11));
    let mut expected = write(&db, &mut rows, &mut rng, 150);
    std::mem::forget(db);
    let db2 = Database::open(writer(&store)).expect("recover");
    let more = write(&db2, &mut rows, &mut rng, 150);
    assert!(more[0].csn > expected.last().expect("some").csn);
    expected.extend(more);
    let got = read_until(&mut feed, expected.last().expect("some").csn);
    same(&got, &expected, "across the new writer");
    assert_eq!(applied(&got), db_rows(&db2));
    assert_eq!(feed.replica().metrics().epoch, 2);
}

/// With a retention window, a cursor the newest checkpoint covers is
/// served from the window's history: the transactions after it, whole,
/// their deltas applied to the rows as they were, then the live ones; a
/// cursor below the window is refused naming its oldest point.
#[test]
fn a_cursor_the_checkpoint_covers_is_served_from_the_window() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let with_window = || writer(&store).retention(Some(Duration::from_secs(3600)));
    let db = with_two_tables(with_window());
    let (mut rows, mut rng) = (Rows::new(), Rng(23));
    let mut expected = write(&db, &mut rows, &mut rng, 150);
    db.checkpoint().expect("checkpoint");
    expected.extend(write(&db, &mut rows, &mut rng, 100));
    db.checkpoint().expect("checkpoint");
    expected.extend(write(&db, &mut rows, &mut rng, 50));
    let last = expected.last().expect("some").csn;
    for from in [0, 40, 149, 200] {
        let cursor = expected[from].csn;
        let mut feed = Feed::open_with(with_window(), fast(), Some(cursor), FeedFilter::default())
            .expect("from the window");
        same(&read_until(&mut feed, last), &expected[from + 1..], &format!("after {cursor}"));
    }
    // Rows from before the first transaction the test wrote: all of them.
    let mut all = Feed::open_with(with_window(), fast(), Some(0), FeedFilter::default())
        .expect("the whole window");
    let got = read_until(&mut all, last);
    same(&got, &expected, "the whole window");
    assert_eq!(applied(&got), db_rows(&db));
}

/// A cursor older than a short window is refused with the window's oldest
/// point, which a feed after it then serves.
#[test]
fn a_cursor_below_the_window_is_refused_naming_its_oldest_point() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let short = || writer(&store).retention(Some(Duration::from_secs(1)));
    let db = with_two_tables(short());
    let (mut rows, mut rng) = (Rows::new(), Rng(29));
    let mut expected = write(&db, &mut rows, &mut rng, 100);
    std::thread::sleep(Duration::from_millis(1200));
    db.checkpoint().expect("checkpoint");
    expected.extend(write(&db, &mut rows, &mut rng, 50));
    std::thread::sleep(Duration::from_millis(1200));
    db.checkpoint().expect("checkpoint");
    let last = expected.last().expect("some").csn;
    let oldest =
        match Feed::open_with(short(), fast(), Some(expected[0].csn), FeedFilter::default()) {
            Err(Error::ChangesGone { cursor, oldest }) => {
                assert_eq!(cursor, expected[0].csn);
                assert!(oldest > cursor && oldest <= last, "oldest {oldest}");
                oldest
            }
            other => panic!("expected ChangesGone, got {other:?}"),
        };
    let mut feed =
        Feed::open_with(short(), fast(), Some(oldest), FeedFilter::default()).expect("feed");
    let from = expected.iter().position(|t| t.csn > oldest).unwrap_or(expected.len());
    same(&read_until(&mut feed, last), &expected[from..], "after the oldest point");
}

/// Read `feed` until it ends with an error; the transactions before it.
fn read_until_error(feed: &mut Feed) -> (Vec<FeedTxn>, Error) {
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < until, "the feed did not end");
        match feed.next_timeout(Duration::from_millis(50)) {
            Ok(Some(FeedEvent::Commit(t))) => got.push(t),
            Ok(_) => {}
            Err(e) => return (got, e),
        }
    }
}

/// Read each of `feeds` on a thread of its own while `work` runs, until
/// its resolved point passes the CSN `work` returns: what each delivered.
fn reading<R: Send>(
    feeds: Vec<&mut Feed>,
    work: impl FnOnce() -> (u64, R) + Send,
) -> (Vec<Vec<FeedTxn>>, R) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let last = AtomicU64::new(u64::MAX);
    std::thread::scope(|s| {
        let readers: Vec<_> = feeds
            .into_iter()
            .map(|feed| {
                let last = &last;
                s.spawn(move || {
                    let (mut got, mut resolved) = (Vec::<FeedTxn>::new(), 0);
                    let until = Instant::now() + Duration::from_secs(90);
                    while last.load(Ordering::Acquire) == u64::MAX
                        || resolved <= last.load(Ordering::Acquire)
                    {
                        assert!(Instant::now() < until, "resolved {resolved}");
                        match feed.next_timeout(Duration::from_millis(50)).expect("feed") {
                            Some(FeedEvent::Commit(t)) => got.push(t),
                            Some(FeedEvent::Resolved(n)) => resolved = n,
                            None => {}
                        }
                    }
                    got
                })
            })
            .collect();
        let (csn, r) = work();
        last.store(csn, Ordering::Release);
        (readers.into_iter().map(|h| h.join().expect("reader")).collect(), r)
    })
}

/// The feeds of one database share one follower: each delivers every
/// transaction after its start, whole and in order; one that joins later
/// starts where the follower is; a cursor the follower has passed gets a
/// follower of its own; a consumer that stops reading holds the others
/// back at most `SHARED_FEED_STALL`, is let go with `FeedTooSlow`, and
/// opened again after the cursor it names, misses nothing.
#[test]
fn feeds_of_one_database_share_a_follower_and_a_stalled_one_is_let_go() {
    use milliscale::feed::SHARED_FEED_STALL;
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = with_two_tables(writer(&store));
    let all = FeedFilter::default;
    let mut f1 = db.changes(None, all()).expect("feed 1");
    let mut f2 = db.changes(None, all()).expect("feed 2");
    assert_eq!((f1.sharing(), f2.sharing()), (2, 2), "one follower");
    let (mut rows, mut rng) = (Rows::new(), Rng(11));
    let (got, a) = reading(vec![&mut f1, &mut f2], || {
        let a = write(&db, &mut rows, &mut rng, 300);
        (a.last().expect("some").csn, a)
    });
    same(&got[0], &a, "feed 1, first part");
    same(&got[1], &a, "feed 2, first part");

    // Joins after the first part: starts where the follower is.
    let mut f3 = db.changes(None, all()).expect("feed 3");
    assert_eq!(f3.sharing(), 3);
    let last_a = a.last().expect("some").csn;
    assert!(f3.resolved() > last_a, "joined at {}, after {last_a}", f3.resolved());
    // A cursor inside the first part: behind the follower, so its own.
    let mut f4 = db.changes(Some(a[99].csn), all()).expect("feed 4");
    assert_eq!(f4.sharing(), 1, "a follower of its own");
    let (got, b) = reading(vec![&mut f1, &mut f2, &mut f3, &mut f4], || {
        let b = write(&db, &mut rows, &mut rng, 300);
        (b.last().expect("some").csn, b)
    });
    let ab: Vec<FeedTxn> = a.iter().chain(&b).cloned().collect();
    same(&got[0], &b, "feed 1, second part");
    same(&got[1], &b, "feed 2, second part");
    same(&got[2], &b, "feed 3, from where it joined");
    same(&got[3], &ab[100..], "feed 4, after its cursor");
    drop((f2, f3, f4));

    // Feed 5 is never read while feed 1 is, and the writer commits one
    // transaction at a time (many runs) past the stall limit: the follower
    // waits for feed 5, then lets it go, and feed 1 gets everything.
    let mut f5 = db.changes(None, all()).expect("feed 5");
    let started = Instant::now();
    let (got, c) = reading(vec![&mut f1], || {
        let mut c = Vec::new();
        while c.len() < 150 || started.elapsed() < SHARED_FEED_STALL + Duration::from_secs(2) {
            c.extend(write(&db, &mut rows, &mut rng, 1));
        }
        (c.last().expect("some").csn, c)
    });
    same(&got[0], &c, "feed 1 beside a stalled feed");
    let (got5, e) = read_until_error(&mut f5);
    let Error::FeedTooSlow { cursor, .. } = e else { panic!("expected FeedTooSlow, got {e:?}") };
    assert!(cursor < c.last().expect("some").csn, "let go before the end");
    let mut again = db.changes(Some(cursor), all()).expect("feed 5 again");
    let mut got5: Vec<FeedTxn> = got5.into_iter().filter(|t| t.csn <= cursor).collect();
    got5.extend(read_until(&mut again, c.last().expect("some").csn));
    same(&got5, &c, "feed 5, let go and opened again");
}

/// The feed for async code: the same transactions through `AsyncFeed`,
/// taken by `next` and as a `Stream` in turn, on a current-thread runtime
/// while a thread writes.
#[test]
fn an_async_feed_delivers_the_same_transactions_as_a_stream() {
    use futures_core::Stream;
    use milliscale::AsyncDatabase;
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = Arc::new(with_two_tables(writer(&store)));
    let adb = AsyncDatabase::from(Arc::clone(&db));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let mut feed = adb.changes(None, FeedFilter::default()).await.expect("feed");
        let mut writing = Some(std::thread::spawn(move || {
            let (mut rows, mut rng) = (Rows::new(), Rng(21));
            write(&db, &mut rows, &mut rng, 300)
        }));
        let (mut got, mut resolved, mut expected) = (Vec::<FeedTxn>::new(), 0, None);
        let until = Instant::now() + Duration::from_secs(60);
        for i in 0u64.. {
            assert!(Instant::now() < until, "resolved {resolved}");
            if writing.as_ref().is_some_and(|w| w.is_finished()) {
                expected = writing.take().map(|w| w.join().expect("writer"));
            }
            if let Some(e) = &expected
                && resolved > e.last().expect("some").csn
            {
                break;
            }
            let wait = Duration::from_millis(200);
            let event = if i % 2 == 0 {
                tokio::time::timeout(wait, feed.next()).await
            } else {
                let next = std::future::poll_fn(|cx| std::pin::Pin::new(&mut feed).poll_next(cx));
                tokio::time::timeout(wait, next).await
            };
            match event.ok().flatten().transpose().expect("feed") {
                Some(FeedEvent::Commit(t)) => got.push(t),
                Some(FeedEvent::Resolved(n)) => resolved = n,
                None => {}
            }
        }
        same(&got, &expected.expect("written"), "async feed");
    });
}
