//! The server end to end, in process, through the Rust client: tables,
//! interactive transactions at each isolation level, one-shot batches,
//! conflicts and retry, auth, caps, idle expiry, limits and
//! read-your-writes on a replica. Connections, TLS, the standard services
//! and shutdown are in `connections.rs`.

use std::time::Duration;

use crate::common::*;
use milliscale::{AsyncReplica, Options};
use milliscale_client::{Batch, Client, Isolation, KeyRange, TxnOptions};
use milliscale_server::{Backend, Tokens};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_crud_and_scans() {
    let s = start(Backend::Writer(writer("memory://").await), |_| {}).await;
    let c = client(&s).await;
    c.create_table("t").await.expect("create");
    assert_eq!(c.create_table("t").await.expect_err("twice").code(), Code::AlreadyExists);
    assert_eq!(c.list_tables().await.expect("list"), vec!["t".to_string()]);
    let token = c.put("t", b"a", b"1").await.expect("put");
    assert!(token > 0);
    assert_eq!(c.get("t", b"a").await.expect("get"), Some(b"1".to_vec()));
    assert_eq!(c.get("t", b"zz").await.expect("get"), None);
    assert!(c.delete("t", b"a").await.expect("delete"));
    assert!(!c.delete("t", b"a").await.expect("delete again"));
    assert_eq!(c.get("nope", b"a").await.expect_err("no table").code(), Code::NotFound);

    // 3,000 rows of 1 KiB: the scan spans several messages (1,024 rows or
    // 1 MiB each) and sees them all, in order, both ways.
    let mut tx = c.begin().await.expect("begin");
    for i in 0..3000u32 {
        tx.put("t", format!("k{i:05}").as_bytes(), &[7u8; 1024]).await.expect("put");
    }
    tx.commit().await.expect("commit");
    let mut r = c.begin_with(TxnOptions::read_only()).await.expect("begin");
    let all = r.scan("t", KeyRange::all()).await.expect("scan");
    assert_eq!(all.len(), 3000);
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
    let back = r.scan("t", KeyRange::prefix(b"k01").reversed().limit(5)).await.expect("scan");
    let keys: Vec<_> = back.iter().map(|(k, _)| String::from_utf8_lossy(k).into_owned()).collect();
    assert_eq!(keys, ["k01999", "k01998", "k01997", "k01996", "k01995"]);
    let mid = r.scan("t", KeyRange::between(b"k00010", b"k00013")).await.expect("scan");
    assert_eq!(mid.len(), 3);
    r.commit().await.expect("read-only commit");

    // A one-shot batch: reads, writes and a bounded scan, in order.
    let mut b = Batch::new();
    b.get("t", b"k00000")
        .put("t", b"new", b"x")
        .delete("t", b"k00001")
        .scan("t", KeyRange::prefix(b"k0000").limit(3));
    let out = c.execute(b).await.expect("execute");
    assert_eq!(out.value(0), Some(&[7u8; 1024][..]));
    assert!(out.existed(2));
    assert_eq!(out.rows(3).len(), 3);
    assert!(out.token.is_some() && out.durable && out.attempts == 1);
    let mut unbounded = Batch::new();
    unbounded.scan("t", KeyRange::all());
    assert_eq!(c.execute(unbounded).await.expect_err("no limit").code(), Code::InvalidArgument);

    c.drop_table("t").await.expect("drop");
    assert!(c.list_tables().await.expect("list").is_empty());
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_names_its_table_once_and_other_tables_per_operation() {
    use milliscale_proto::v1::{self as proto, milliscale_client::MilliscaleClient, operation};
    let s = start(Backend::Writer(writer("memory://").await), |_| {}).await;
    let c = client(&s).await;
    c.create_table("t").await.expect("create t");
    c.create_table("u").await.expect("create u");
    // The client sends "t" once (the first operation's table) and "u" on
    // the operations on u; the server runs each on its own table.
    let mut b = Batch::new();
    b.put("t", b"k", b"in t").put("u", b"k", b"in u").get("t", b"k").get("u", b"k");
    let out = c.execute(b).await.expect("execute");
    assert_eq!(out.value(2), Some(&b"in t"[..]));
    assert_eq!(out.value(3), Some(&b"in u"[..]));
    assert_eq!(c.get("u", b"k").await.expect("get"), Some(b"in u".to_vec()));

    // On the wire: an operation with no table is on the request's table;
    // with neither, the batch fails as on an unknown table, writing nothing.
    let mut stub =
        MilliscaleClient::connect(format!("http://{}", s.local_addr())).await.expect("stub");
    let get = |key: &[u8], table: &str| proto::Operation {
        table: table.into(),
        op: Some(operation::Op::Get(key.to_vec().into())),
    };
    let req = proto::ExecuteRequest {
        operations: vec![get(b"k", ""), get(b"k", "u")],
        table: "t".into(),
        ..Default::default()
    };
    let r = stub.execute(req).await.expect("execute").into_inner();
    let value = |i: usize| match &r.results[i].result {
        Some(proto::operation_result::Result::Get(g)) => g.value.clone(),
        other => panic!("not a get: {other:?}"),
    };
    assert_eq!(value(0).as_deref(), Some(&b"in t"[..]));
    assert_eq!(value(1).as_deref(), Some(&b"in u"[..]));
    let put = proto::Operation {
        table: String::new(),
        op: Some(operation::Op::Put(proto::Row {
            key: b"nowhere".to_vec().into(),
            value: b"x".to_vec().into(),
        })),
    };
    let req = proto::ExecuteRequest { operations: vec![put], ..Default::default() };
    assert_eq!(stub.execute(req).await.expect_err("no table").code(), Code::NotFound);
    assert_eq!(c.get("t", b"nowhere").await.expect("get"), None);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_isolation_level_reads_what_it_promises() {
    let s = start(Backend::Writer(writer("memory://").await), |_| {}).await;
    let c = client(&s).await;
    c.create_table("t").await.expect("create");
    c.put("t", b"x", b"old").await.expect("put");
    c.put("t", b"y", b"0").await.expect("put");

    let mut snap = c.begin_with(TxnOptions::isolation(Isolation::Snapshot)).await.expect("si");
    let mut rc = c.begin_with(TxnOptions::isolation(Isolation::ReadCommitted)).await.expect("rc");
    assert_eq!(snap.isolation(), Some(Isolation::Snapshot));
    assert_eq!(rc.isolation(), Some(Isolation::ReadCommitted));
    c.put("t", b"x", b"new").await.expect("put");
    assert_eq!(snap.get("t", b"x").await.expect("get"), Some(b"old".to_vec()));
    assert_eq!(rc.get("t", b"x").await.expect("get"), Some(b"new".to_vec()));
    snap.commit().await.expect("commit");
    rc.commit().await.expect("commit");

    // Write skew: each reads both keys and writes one. Snapshot isolation
    // lets both commit; serializable aborts the second.
    for (iso, both_commit) in [(Isolation::Snapshot, true), (Isolation::Serializable, false)] {
        let mut a = c.begin_with(TxnOptions::isolation(iso)).await.expect("a");
        let mut b = c.begin_with(TxnOptions::isolation(iso)).await.expect("b");
        for t in [&mut a, &mut b] {
            t.get("t", b"x").await.expect("read x");
            t.get("t", b"y").await.expect("read y");
        }
        a.put("t", b"x", b"a").await.expect("a writes x");
        b.put("t", b"y", b"b").await.expect("b writes y");
        a.commit().await.expect("a commits");
        let second = b.commit().await;
        assert_eq!(second.is_ok(), both_commit, "{iso:?}: {second:?}");
        if let Err(e) = second {
            assert_eq!(e.code(), Code::Aborted);
            assert!(e.is_retryable(), "{e}");
        }
    }
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_are_retryable_and_the_retry_helper_resolves_them() {
    let s = start(Backend::Writer(writer("memory://").await), |_| {}).await;
    let c = client(&s).await;
    c.create_table("t").await.expect("create");
    c.put("t", b"n", b"0").await.expect("put");
    // Two writers of one key: the second is refused, retryably.
    let mut a = c.begin().await.expect("a");
    let mut b = c.begin().await.expect("b");
    a.put("t", b"n", b"1").await.expect("a writes");
    a.flush().await.expect("a's write runs");
    // b's write is held back: its conflict comes with b's next call.
    b.put("t", b"n", b"2").await.expect("held");
    let e = b.get("t", b"n").await.expect_err("b conflicts");
    assert_eq!((e.code(), e.kind(), e.is_retryable()), (Code::Aborted, "conflict", true));
    a.commit().await.expect("a commits");
    drop(b);

    // 8 tasks each add 1 to a counter 25 times, every read-modify-write
    // in an interactive transaction under the retry helper: no increment
    // is lost.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                milliscale_client::retry(1000, || async {
                    let mut tx = c.begin().await?;
                    let v = tx.get("t", b"n").await?.unwrap_or_default();
                    let n: u64 = String::from_utf8_lossy(&v).parse().unwrap_or(0);
                    tx.put("t", b"n", (n + 1).to_string().as_bytes()).await?;
                    tx.commit().await
                })
                .await
                .expect("an increment commits");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(c.get("t", b"n").await.expect("get"), Some(b"201".to_vec()));
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_gate_every_call_and_read_only_tokens_write_nothing() {
    let mut tokens = Tokens::none();
    tokens.add(RW, milliscale_server::Role::ReadWrite).expect("rw");
    tokens.add(RO, milliscale_server::Role::ReadOnly).expect("ro");
    let s = start(Backend::Writer(writer("memory://").await), |o| o.tokens = tokens).await;
    let addr = s.local_addr().to_string();
    let rw = Client::builder(&addr).token(RW).connect().await.expect("rw");
    let ro = Client::builder(&addr).token(RO).connect().await.expect("ro");
    let none = Client::connect(&addr).await.expect("none");
    let wrong = Client::builder(&addr).token("wrong-token-0123456789").connect().await.expect("x");
    rw.create_table("t").await.expect("create");
    rw.put("t", b"k", b"v").await.expect("put");

    for (who, c) in [("no token", &none), ("a wrong token", &wrong)] {
        for e in [
            c.put("t", b"k", b"stolen").await.expect_err(who),
            c.get("t", b"k").await.map(|_| 0).expect_err(who),
            c.list_tables().await.map(|_| 0).expect_err(who),
            c.begin().await.map(|_| 0).expect_err(who),
        ] {
            assert_eq!(e.code(), Code::Unauthenticated, "{who}: {e}");
        }
    }
    // The read-only token reads, and every way of writing is refused.
    assert_eq!(ro.get("t", b"k").await.expect("ro reads"), Some(b"v".to_vec()));
    let refused = [
        ro.put("t", b"k", b"ro").await.map(|_| ()).expect_err("put"),
        ro.delete("t", b"k").await.map(|_| ()).expect_err("delete"),
        ro.create_table("u").await.expect_err("create"),
        ro.drop_table("t").await.expect_err("drop"),
        ro.begin().await.map(|_| ()).expect_err("a read-write transaction"),
    ];
    for e in refused {
        assert_eq!(e.code(), Code::PermissionDenied, "{e}");
        assert_eq!(e.kind(), "read_only");
    }
    // A read-only transaction refuses writes too.
    let mut t = ro.begin_with(TxnOptions::read_only()).await.expect("ro txn");
    assert_eq!(t.put("t", b"k", b"x").await.expect_err("put").code(), Code::FailedPrecondition);
    t.abort().await.expect("abort");
    // A transaction is its opener's: another token cannot use it.
    let mut mine = rw.begin().await.expect("begin");
    let theirs = ro.begin_with(TxnOptions::read_only()).await.expect("begin");
    drop(theirs);
    mine.put("t", b"k", b"mine").await.expect("put");
    // Nothing was written but by the read-write token.
    assert_eq!(rw.get("t", b"k").await.expect("get"), Some(b"v".to_vec()));
    assert_eq!(rw.list_tables().await.expect("list"), vec!["t".to_string()]);
    mine.abort().await.expect("abort");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_idle_expiry_and_size_limits_answer_with_clear_statuses() {
    let s = start(Backend::Writer(writer("memory://").await), |o| {
        o.max_open_txns_per_conn = 3;
        o.max_open_txns = 5;
        o.idle_timeout = Duration::from_millis(300);
    })
    .await;
    let c = client(&s).await;
    c.create_table("t").await.expect("create");
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(c.begin().await.expect("under the cap"));
    }
    let e = c.begin().await.expect_err("over the connection's cap");
    assert_eq!((e.code(), e.kind()), (Code::ResourceExhausted, "limit"));
    let c2 = client(&s).await; // a second connection
    open.push(c2.begin().await.expect("another connection"));
    open.push(c2.begin().await.expect("another connection"));
    let e = c2.begin().await.expect_err("over the total cap");
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert!(e.message().contains("--max-open-txns"), "{e}");

    // Idle past the timeout: aborted, and told so.
    let mut idle = open.pop().expect("one");
    idle.put("t", b"k", b"never").await.expect("put");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let e = idle.commit().await.expect_err("expired");
    assert_eq!((e.code(), e.kind(), e.is_retryable()), (Code::Aborted, "expired", true));
    assert_eq!(c.get("t", b"k").await.expect("get"), None);
    assert_eq!(s.open_transactions(), 0, "the reaper aborted every idle transaction");
    open.clear();

    // A value over the engine's limit, a key over it, and a message over
    // the server's limit: refused, and the server goes on.
    let big = vec![1u8; milliscale::limits::VALUE_BYTES_MAX + 1];
    assert_eq!(c.put("t", b"k", &big).await.expect_err("value").code(), Code::InvalidArgument);
    let long_key = vec![1u8; milliscale::limits::KEY_BYTES_MAX + 1];
    assert_eq!(c.put("t", &long_key, b"v").await.expect_err("key").code(), Code::InvalidArgument);
    let mut huge = Batch::new();
    for i in 0..70u32 {
        huge.put("t", &i.to_be_bytes(), &vec![0u8; 256 * 1024]);
    }
    // The client refuses what is over its limit (16 MiB, as the server's)
    // before sending it, and says the limit and where it is set.
    let e = c.execute(huge.clone()).await.expect_err("over 16 MiB");
    assert_eq!((e.code(), e.kind()), (Code::OutOfRange, "limit"), "{e}");
    assert!(e.message().contains("limit of 16777216 bytes (16.0 MiB)"), "{e}");
    // A value over the engine's limit is refused before it is sent, naming
    // the limit, and not retried.
    let e = c.put("t", b"k", &vec![7u8; 40 << 20]).await.expect_err("40 MiB");
    assert_eq!((e.code(), e.is_retryable()), (Code::InvalidArgument, false), "{e}");
    assert!(e.message().contains("41943040") && e.message().contains("262144"), "{e}");
    // A client with a larger limit sends it, and the server refuses it.
    let big_client = Client::builder(s.local_addr().to_string())
        .max_message_bytes(64 << 20)
        .connect()
        .await
        .expect("connect");
    let e = big_client.execute(huge).await.expect_err("over the server's 16 MiB");
    assert_eq!(e.code(), Code::OutOfRange, "{e}");
    assert!(e.message().contains("16777216"), "the server's message names its limit: {e}");
    let mut tx = big_client.begin().await.expect("begin");
    let e = tx.put("t", b"k", &vec![7u8; 40 << 20]).await.expect_err("40 MiB");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let e = tx.patch("t", b"k", 256 * 1024, b"x").await.expect_err("past a value's limit");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert_eq!(c.get("t", &0u32.to_be_bytes()).await.expect("get"), None);
    c.put("t", b"after", b"ok").await.expect("the server still serves");
    s.shutdown().await;
    // Refused before anything is sent: with the server gone, the answer is
    // still the limit, not a broken connection.
    for e in [
        c.put("t", b"k", &vec![7u8; 40 << 20]).await.expect_err("40 MiB"),
        c.put("t", &long_key, b"v").await.expect_err("a long key"),
        c.execute(Batch::new().get("t", b"a").put("t", b"b", &big).clone())
            .await
            .expect_err("a batch with a value over the limit"),
    ] {
        assert_eq!((e.code(), e.is_retryable()), (Code::InvalidArgument, false), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_server_reads_your_writes_with_the_writers_token() {
    let dir = tempfile::tempdir().expect("dir");
    let url = format!("file://{}", dir.path().display());
    let w = start(Backend::Writer(writer(&url).await), |_| {}).await;
    let wc = client(&w).await;
    wc.create_table("t").await.expect("create");
    let replica = AsyncReplica::open(Options::new().store(&url)).await.expect("replica");
    let r = start(Backend::Replica(replica), |_| {}).await;
    let rc = client(&r).await;
    assert_eq!(rc.status().await.expect("status").role, "replica");
    for i in 0..20u32 {
        let token = wc.put("t", b"k", &i.to_be_bytes()).await.expect("put");
        let mut tx = rc
            .begin_with(TxnOptions { wait: Duration::from_secs(10), ..TxnOptions::at_token(token) })
            .await
            .expect("begin at the token");
        assert_eq!(
            tx.get("t", b"k").await.expect("get"),
            Some(i.to_be_bytes().to_vec()),
            "write {i}"
        );
        tx.commit().await.expect("commit");
    }
    // The replica refuses writes; a token far ahead times out as stale.
    let e = rc.put("t", b"k", b"x").await.expect_err("a replica write");
    assert_eq!((e.code(), e.kind()), (Code::FailedPrecondition, "read_only"));
    let far = TxnOptions { wait: Duration::from_millis(200), ..TxnOptions::at_token(1 << 40) };
    let e = rc.begin_with(far).await.expect_err("stale");
    assert_eq!((e.code(), e.kind()), (Code::Unavailable, "stale"));
    r.shutdown().await;
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_on_one_stream_get_their_own_answers_and_shutdown_ends_the_stream() {
    let db = writer("memory://").await;
    let s = start(Backend::Writer(db.clone()), |o| o.grace = Duration::from_secs(5)).await;
    let streamed = client(&s).await;
    let unary = Client::builder(s.local_addr().to_string())
        .streamed_batches(false)
        .connect()
        .await
        .expect("connect");
    streamed.create_table("t").await.expect("create");
    // 64 tasks share the client's one stream, 20 batches each. Every batch
    // writes its own key, reads it back and writes a hot key without
    // server retries: each answer must be its own batch's (the value read
    // back), and the hot key's conflicts come back as retryable failures
    // of their batch, not of the stream.
    let mut tasks = Vec::new();
    for t in 0..64u32 {
        let c = streamed.clone();
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut conflicts) = (Vec::new(), 0);
            for i in 0..20u32 {
                let key = format!("k{t:02}-{i:02}");
                let mut b = Batch::new();
                b.put("t", key.as_bytes(), key.as_bytes()).get("t", key.as_bytes()).put(
                    "t",
                    b"hot",
                    key.as_bytes(),
                );
                match c.execute(b.retries(0)).await {
                    Ok(r) => {
                        assert_eq!(r.value(1), Some(key.as_bytes()), "the answer is this batch's");
                        ok.push((key, r.token.expect("a token")));
                    }
                    Err(e) => {
                        assert_eq!(
                            (e.code(), e.kind(), e.is_retryable()),
                            (Code::Aborted, "conflict", true)
                        );
                        conflicts += 1;
                    }
                }
            }
            (ok, conflicts)
        }));
    }
    let (mut committed, mut conflicts) = (Vec::new(), 0);
    for t in tasks {
        let (ok, c) = t.await.expect("task");
        committed.extend(ok);
        conflicts += c;
    }
    assert_eq!(committed.len() + conflicts, 64 * 20);
    let mut tokens: Vec<u64> = committed.iter().map(|(_, t)| *t).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), committed.len(), "each commit has its own token");
    // The same rows read back by unary calls: what the stream committed,
    // and nothing it did not.
    for (key, _) in &committed {
        assert_eq!(
            unary.get("t", key.as_bytes()).await.expect("get"),
            Some(key.clone().into_bytes())
        );
    }
    let mut all = Batch::new();
    all.scan("t", KeyRange::prefix(b"k").limit(10_000));
    assert_eq!(unary.execute(all).await.expect("scan").rows(0).len(), committed.len());

    // The stream is open and idle: shutdown ends it instead of waiting
    // out the grace period for the connection to close.
    let report = s.shutdown().await;
    assert!(report.took < Duration::from_secs(2), "shutdown took {:?}", report.took);
    // The server is gone: the call is refused (UNAVAILABLE), or cut under
    // way (CANCELLED) when the connection's close races it.
    let e = streamed.get("t", b"k00-00").await.expect_err("the server is gone");
    assert!(matches!(e.code(), Code::Unavailable | Code::Cancelled), "{e}");
    db.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_batches_hear_of_their_durability_on_the_stream() {
    // On the simulated S3 Express store a flush takes milliseconds, so the
    // pre-commit answers come well before durability.
    let db = writer("sim://s3x?seed=1").await;
    let s = start(Backend::Writer(db.clone()), |_| {}).await;
    let c = client(&s).await;
    c.create_table("t").await.expect("create");
    // One task sends 300 batches without waiting for durability (more
    // than fit in one flush), then awaits their acks.
    let mut acks = Vec::new();
    let mut answered_before_durable = 0;
    for i in 0..300u32 {
        let mut b = Batch::new();
        b.put("t", &i.to_be_bytes(), b"v");
        let (r, ack) = c.execute_pipelined(b).await.expect("pre-commit");
        let token = r.token.expect("a write has a token");
        if db.durable_csn() <= token {
            answered_before_durable += 1;
        }
        acks.push((token, ack));
    }
    assert!(answered_before_durable > 0, "every answer waited for durability");
    for (token, ack) in acks {
        ack.durable().await.expect("durable");
        // Told durable only once the engine says so.
        assert!(db.durable_csn() > token, "token {token} told durable too early");
    }
    // A batch sent as a call (streamed batches off) is durable when it
    // answers, and its ack resolves at once.
    let unary = Client::builder(s.local_addr().to_string())
        .streamed_batches(false)
        .connect()
        .await
        .expect("connect");
    let mut b = Batch::new();
    b.put("t", b"unary", b"v");
    let (r, ack) = unary.execute_pipelined(b).await.expect("call");
    assert!(r.durable && db.durable_csn() > r.token.expect("token"));
    ack.durable().await.expect("durable");
    // Acks still waiting when the server shuts down resolve: durable (the
    // shutdown flushes) or an error that says durability is unknown;
    // none hangs.
    let mut pending = Vec::new();
    for i in 0..50u32 {
        let mut b = Batch::new();
        b.put("t", format!("late{i}").as_bytes(), b"v");
        pending.push(c.execute_pipelined(b).await.expect("pre-commit"));
    }
    let stopped = tokio::spawn(async move { s.shutdown().await });
    for (r, ack) in pending {
        match tokio::time::timeout(Duration::from_secs(10), ack.durable()).await {
            Ok(Ok(())) => assert!(db.durable_csn() > r.token.expect("token")),
            Ok(Err(e)) => assert_eq!((e.code(), e.kind()), (Code::Unavailable, "transport")),
            Err(_) => panic!("an ack hung through shutdown"),
        }
    }
    stopped.await.expect("shutdown");
    db.close().await.expect("close");
}

/// `--max-txn-bytes`: a write that would take an interactive transaction
/// past it is refused before it runs (RESOURCE_EXHAUSTED, kind `limit`,
/// not retryable, naming the flag), unary and on the stream; the writes
/// before it stay, and a new transaction starts from zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_writes_at_most_the_servers_limit() {
    const VALUE: usize = milliscale::limits::VALUE_BYTES_MAX;
    // The least the server takes: one largest row and some room.
    let max = (VALUE + milliscale::limits::KEY_BYTES_MAX + 4096) as u64;
    let s = start(Backend::Writer(writer("memory://").await), |o| o.max_txn_bytes = max).await;
    let streamed = client(&s).await;
    streamed.create_table("t").await.expect("create");
    let unary = milliscale_client::Client::builder(s.local_addr().to_string())
        .streamed_calls(false)
        .connect()
        .await
        .expect("connect");
    let over = |e: milliscale_client::Error| {
        assert_eq!(
            (e.code(), e.kind(), e.is_retryable()),
            (Code::ResourceExhausted, "limit", false)
        );
        assert!(e.message().contains("--max-txn-bytes"), "{e}");
    };
    // Unary: the second value is refused; the first commits.
    let mut t = unary.begin().await.expect("begin");
    t.put("t", b"a", &vec![1u8; VALUE]).await.expect("under the limit");
    over(t.put("t", b"b", &vec![2u8; VALUE]).await.expect_err("over the limit"));
    over(t.patch("t", b"a", 0, &[9u8; 8 << 10]).await.expect_err("a patch counts"));
    t.patch("t", b"a", 0, &[3u8; 8]).await.expect("room for 8 bytes");
    t.commit().await.expect("commit");
    assert_eq!(
        unary.get("t", b"a").await.expect("get").expect("a")[..9],
        [3, 3, 3, 3, 3, 3, 3, 3, 1]
    );
    assert_eq!(unary.get("t", b"b").await.expect("get"), None);
    // On the stream the writes are held and sent with the next call: the
    // one past the limit fails that call, and a commit it comes with is
    // not run (its transaction ends).
    let mut t = streamed.begin().await.expect("begin");
    t.put("t", b"c", &vec![4u8; VALUE]).await.expect("held");
    t.flush().await.expect("under the limit");
    t.put("t", b"d", &[5u8; 8 << 10]).await.expect("held");
    over(t.commit().await.expect_err("over the limit"));
    assert_eq!(streamed.get("t", b"c").await.expect("get"), None);
    // A new transaction: its own count.
    let mut t = streamed.begin().await.expect("begin");
    t.put("t", b"d", &vec![5u8; VALUE]).await.expect("held");
    t.commit().await.expect("commit");
    assert!(streamed.get("t", b"d").await.expect("get").is_some());
    s.shutdown().await;
}
