//! `CallStream`: the calls of interactive transactions on one stream, each
//! answered by its id as its unary call would answer it (the same
//! results, the same errors, the connection's limits), many transactions
//! at once, and the stream ended by the server's shutdown.

use std::time::Duration;

use milliscale_proto::v1::milliscale_client::MilliscaleClient;
use milliscale_proto::v1::{
    self as proto, call_stream_request::Call, call_stream_response::Outcome,
};
use milliscale_server::Backend;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

use crate::common::*;

/// One open stream, raw.
struct Stream {
    send: mpsc::Sender<proto::CallStreamRequest>,
    answers: tonic::Streaming<proto::CallStreamResponse>,
    next: u64,
}

impl Stream {
    async fn open(stub: &mut MilliscaleClient<tonic::transport::Channel>) -> Stream {
        Stream::open_with(stub, 1024).await
    }

    /// A stream whose client side holds at most `queue` requests unsent.
    async fn open_with(
        stub: &mut MilliscaleClient<tonic::transport::Channel>,
        queue: usize,
    ) -> Stream {
        let (send, rx) = mpsc::channel(queue);
        let answers = stub.call_stream(ReceiverStream::new(rx)).await.expect("open").into_inner();
        Stream { send, answers, next: 0 }
    }

    /// Send `calls` at once; their answers, in the order sent.
    async fn calls(&mut self, calls: Vec<Call>) -> Vec<Outcome> {
        let first = self.next;
        for call in calls.iter().cloned() {
            self.next += 1;
            let r =
                proto::CallStreamRequest { id: self.next, call: Some(call), ..Default::default() };
            self.send.send(r).await.expect("send");
        }
        let mut out = vec![None; calls.len()];
        for _ in 0..calls.len() {
            let a = self.answers.message().await.expect("an answer").expect("the stream");
            let i = (a.id - first - 1) as usize;
            assert!(out[i].is_none(), "one answer per id");
            out[i] = a.outcome;
        }
        out.into_iter().map(|o| o.expect("an outcome")).collect()
    }

    async fn call(&mut self, call: Call) -> Outcome {
        self.calls(vec![call]).await.remove(0)
    }

    /// Send `call` with `writes` before it; its answer.
    async fn with_writes(&mut self, call: Call, writes: Vec<proto::Operation>) -> Outcome {
        self.next += 1;
        let writes = Some(proto::WriteRequest { txn_id: 0, table: "t".into(), writes });
        let r = proto::CallStreamRequest {
            id: self.next,
            call: Some(call),
            writes,
            notify_durable: false,
            begin_first: None,
        };
        self.send.send(r).await.expect("send");
        let a = self.answers.message().await.expect("an answer").expect("the stream");
        assert_eq!(a.id, self.next);
        a.outcome.expect("an outcome")
    }
}

fn put_op(key: &[u8], value: &[u8]) -> proto::Operation {
    let row = proto::Row { key: key.to_vec().into(), value: value.to_vec().into() };
    proto::Operation { table: String::new(), op: Some(proto::operation::Op::Put(row)) }
}

fn code_of(o: &Outcome) -> Code {
    match o {
        Outcome::Failure(f) => Code::from(f.code),
        _ => Code::Ok,
    }
}

/// A server on `store` with a table `t`, a client of it, and a raw stub.
async fn serving(store: &str) -> (milliscale_server::Server, milliscale_client::Client, Stub) {
    let s = start(Backend::Writer(writer(store).await), |_| {}).await;
    let c = client(&s).await;
    c.create_table("t").await.expect("create");
    let stub =
        MilliscaleClient::connect(format!("http://{}", s.local_addr())).await.expect("connect");
    (s, c, stub)
}

type Stub = MilliscaleClient<tonic::transport::Channel>;

fn begin() -> Call {
    Call::Begin(proto::BeginRequest::default())
}

fn txn_of(o: Outcome) -> u64 {
    match o {
        Outcome::Begin(b) => b.txn_id,
        o => panic!("not a begin's answer: {o:?}"),
    }
}

fn put(txn_id: u64, key: &[u8], value: &[u8]) -> Call {
    let (table, key, value) = ("t".into(), key.to_vec().into(), value.to_vec().into());
    Call::Put(proto::PutRequest { txn_id, table, key, value })
}

fn get(txn_id: u64, key: &[u8]) -> Call {
    Call::Get(proto::GetRequest { txn_id, table: "t".into(), key: key.to_vec().into() })
}

fn commit(txn_id: u64) -> Call {
    Call::Commit(proto::CommitRequest { txn_id, ..proto::CommitRequest::default() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_of_a_transaction_on_one_stream_answers_as_its_unary_call() {
    let s = start(Backend::Writer(writer("memory://").await), |o| {
        o.max_open_txns_per_conn = 40;
        o.grace = Duration::from_secs(1);
    })
    .await;
    let c = client(&s).await;
    c.create_table("t").await.expect("create");
    let mut stub =
        MilliscaleClient::connect(format!("http://{}", s.local_addr())).await.expect("connect");
    let mut st = Stream::open(&mut stub).await;
    // One transaction, call by call.
    let tx = txn_of(st.call(begin()).await);
    assert!(matches!(st.call(put(tx, b"a", b"1")).await, Outcome::Put(_)));
    match st.call(get(tx, b"a")).await {
        Outcome::Get(g) => assert_eq!(g.value.as_deref(), Some(&b"1"[..])),
        o => panic!("{o:?}"),
    }
    let patch = proto::PatchRequest {
        txn_id: tx,
        table: "t".into(),
        key: b"a".to_vec().into(),
        offset: 0,
        bytes: b"2".to_vec().into(),
    };
    assert!(matches!(st.call(Call::Patch(patch)).await, Outcome::Patch(_)));
    let delete = proto::DeleteRequest { txn_id: tx, table: "t".into(), key: b"b".to_vec().into() };
    match st.call(Call::Delete(delete)).await {
        Outcome::Delete(d) => assert!(!d.existed),
        o => panic!("{o:?}"),
    }
    match st.call(commit(tx)).await {
        Outcome::Commit(c) => assert!(c.token.is_some() && c.durable),
        o => panic!("{o:?}"),
    }
    assert_eq!(c.get("t", b"a").await.expect("read"), Some(b"2".to_vec()));
    // An error is its call's answer, with the unary call's code and kind,
    // and the stream goes on.
    let unary = stub.get(get(tx, b"a").into_get()).await.expect_err("a finished transaction");
    match st.call(get(tx, b"a")).await {
        Outcome::Failure(f) => {
            assert_eq!(Code::from(f.code), unary.code(), "{f:?}");
            let kind = unary.metadata().get("milliscale-error").map(|v| v.to_str().unwrap_or(""));
            assert_eq!(Some(f.kind.as_str()), kind, "{f:?}");
        }
        o => panic!("{o:?}"),
    }
    match st.call(Call::Put(proto::PutRequest::default())).await {
        Outcome::Failure(f) => assert_eq!(Code::from(f.code), Code::NotFound, "{f:?}"),
        o => panic!("{o:?}"),
    }
    // 32 transactions at once on the stream: each answer is its own.
    let txns: Vec<u64> = st.calls(vec![begin(); 32]).await.into_iter().map(txn_of).collect();
    let puts = txns.iter().map(|t| put(*t, &t.to_be_bytes(), &t.to_be_bytes())).collect();
    assert!(st.calls(puts).await.iter().all(|o| matches!(o, Outcome::Put(_))));
    let gets = txns.iter().map(|t| get(*t, &t.to_be_bytes())).collect();
    for (t, o) in txns.iter().zip(st.calls(gets).await) {
        match o {
            Outcome::Get(g) => assert_eq!(g.value.as_deref(), Some(&t.to_be_bytes()[..])),
            o => panic!("{o:?}"),
        }
    }
    // The connection's cap counts the stream's transactions: 32 open and
    // 40 allowed, so 8 more begin and the 9th is refused as unary is.
    let more = st.calls(vec![begin(); 9]).await;
    let refused: Vec<_> = more.iter().filter(|o| matches!(o, Outcome::Failure(_))).collect();
    assert_eq!(refused.len(), 1, "{more:?}");
    if let Outcome::Failure(f) = refused[0] {
        assert_eq!((Code::from(f.code), f.kind.as_str()), (Code::ResourceExhausted, "limit"));
    }
    let commits = txns.iter().map(|t| commit(*t)).collect();
    assert!(st.calls(commits).await.iter().all(|o| matches!(o, Outcome::Commit(_))));
    let mut read = c.begin().await.expect("begin");
    let rows = read.scan("t", milliscale_client::KeyRange::all()).await.expect("scan");
    assert_eq!(rows.len(), 33);
    read.commit().await.expect("commit");
    // Shutdown ends the stream once what it read is answered.
    drop(c);
    let (send, mut answers) = (st.send.clone(), st.answers);
    drop(st.send);
    s.shutdown().await;
    drop(send);
    while let Ok(Some(_)) = answers.message().await {}
}

trait IntoGet {
    fn into_get(self) -> proto::GetRequest;
}

impl IntoGet for Call {
    fn into_get(self) -> proto::GetRequest {
        match self {
            Call::Get(g) => g,
            _ => panic!("not a get"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_sent_with_the_next_call_run_first_in_order_and_their_failure_is_its_answer() {
    let (_s, c, mut stub) = serving("memory://").await;
    let mut st = Stream::open(&mut stub).await;
    let tx = txn_of(st.call(begin()).await);
    // Three writes with a read: they run first, in order.
    let patch = proto::PatchRequest {
        key: b"a".to_vec().into(),
        bytes: b"9".to_vec().into(),
        ..Default::default()
    };
    let writes = vec![
        put_op(b"a", b"12"),
        put_op(b"b", b"2"),
        proto::Operation { table: String::new(), op: Some(proto::operation::Op::Patch(patch)) },
    ];
    match st.with_writes(get(tx, b"a"), writes).await {
        Outcome::Get(g) => assert_eq!(g.value.as_deref(), Some(&b"92"[..])),
        o => panic!("{o:?}"),
    }
    let many = |keys: &[&[u8]]| {
        let keys = keys.iter().map(|k| k.to_vec().into()).collect();
        Call::GetMany(proto::GetManyRequest { txn_id: tx, table: "t".into(), keys, tables: vec![] })
    };
    match st.call(many(&[b"a", b"b", b"c"])).await {
        Outcome::GetMany(m) => {
            let v: Vec<_> = m.values.iter().map(|g| g.value.as_deref()).collect();
            assert_eq!(v, [Some(&b"92"[..]), Some(&b"2"[..]), None]);
        }
        o => panic!("{o:?}"),
    }
    // A write that fails is the call's answer (naming the write), and the
    // call does not run; the transaction goes on.
    let mut bad = put_op(b"x", b"1");
    bad.table = "nope".into();
    let o = st.with_writes(get(tx, b"a"), vec![put_op(b"c", b"3"), bad]).await;
    assert_eq!(code_of(&o), Code::NotFound, "{o:?}");
    assert!(matches!(&o, Outcome::Failure(f) if f.message.contains("operation 1")), "{o:?}");
    // Only writes: a read is refused, and so are writes with a Begin or
    // for another transaction.
    let read = proto::Operation {
        table: String::new(),
        op: Some(proto::operation::Op::Get(b"a".to_vec().into())),
    };
    assert_eq!(code_of(&st.with_writes(get(tx, b"a"), vec![read]).await), Code::InvalidArgument);
    assert_eq!(
        code_of(&st.with_writes(begin(), vec![put_op(b"d", b"4")]).await),
        Code::InvalidArgument
    );
    let other = Call::Write(proto::WriteRequest { txn_id: tx + 1000, ..Default::default() });
    let mut st2 = Stream::open(&mut stub).await;
    st2.next = 100;
    st2.send
        .send(proto::CallStreamRequest {
            id: 101,
            call: Some(get(tx, b"a")),
            writes: Some(proto::WriteRequest {
                txn_id: tx + 1,
                table: "t".into(),
                writes: vec![put_op(b"e", b"5")],
            }),
            notify_durable: false,
            begin_first: None,
        })
        .await
        .expect("send");
    let a = st2.answers.message().await.expect("answer").expect("stream");
    assert_eq!(code_of(&a.outcome.expect("outcome")), Code::InvalidArgument);
    // A Write call alone, on the stream and as a unary call.
    match st.call(other).await {
        Outcome::Failure(f) => assert_eq!(Code::from(f.code), Code::NotFound, "{f:?}"),
        o => panic!("{o:?}"),
    }
    let w = proto::WriteRequest { txn_id: tx, table: "t".into(), writes: vec![put_op(b"f", b"6")] };
    assert!(matches!(st.call(Call::Write(w)).await, Outcome::Write(_)));
    let w = proto::WriteRequest { txn_id: tx, table: "t".into(), writes: vec![put_op(b"g", b"7")] };
    stub.write(w).await.expect("unary write");
    let keys = vec![b"c".to_vec().into(), b"f".to_vec().into(), b"g".to_vec().into()];
    let m = stub
        .get_many(proto::GetManyRequest { txn_id: tx, table: "t".into(), keys, tables: vec![] })
        .await
        .expect("unary get_many")
        .into_inner();
    let v: Vec<_> = m.values.iter().map(|g| g.value.as_deref()).collect();
    // c=3 ran before the failing write, as in a batch: the engine keeps a
    // transaction's writes that succeeded.
    assert_eq!(v, [Some(&b"3"[..]), Some(&b"6"[..]), Some(&b"7"[..])]);
    // A commit whose writes fail does not commit, and ends the
    // transaction: none of its writes is visible.
    let mut bad = put_op(b"y", b"1");
    bad.table = "nope".into();
    assert_eq!(code_of(&st.with_writes(commit(tx), vec![bad]).await), Code::NotFound);
    assert_ne!(code_of(&st.call(get(tx, b"a")).await), Code::Ok, "the transaction is gone");
    assert_eq!(c.get("t", b"a").await.expect("read"), None);
    // A commit with its writes commits them.
    let tx = txn_of(st.call(begin()).await);
    match st.with_writes(commit(tx), vec![put_op(b"h", b"8"), put_op(b"i", b"9")]).await {
        Outcome::Commit(c) => assert!(c.token.is_some() && c.durable),
        o => panic!("{o:?}"),
    }
    assert_eq!(c.get("t", b"h").await.expect("read"), Some(b"8".to_vec()));
    assert_eq!(c.get("t", b"i").await.expect("read"), Some(b"9".to_vec()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_on_the_stream_comes_a_batch_a_call_and_a_pipelined_commit_hears_of_durability() {
    let (_s, c, mut stub) = serving("sim://s3x?seed=3").await;
    let key = |i: u32| format!("k{i:05}").into_bytes();
    for chunk in (0..2500u32).collect::<Vec<_>>().chunks(500) {
        let mut b = milliscale_client::Batch::new();
        for &i in chunk {
            b.put("t", &key(i), &i.to_be_bytes());
        }
        c.execute(b).await.expect("load");
    }
    let mut st = Stream::open(&mut stub).await;
    let tx = txn_of(st.call(begin()).await);
    let scan = Call::Scan(proto::ScanRequest { txn_id: tx, table: "t".into(), range: None });
    match st.call(scan).await {
        Outcome::Scan(r) => assert!(r.more && r.rows.len() == 1024, "{} rows", r.rows.len()),
        o => panic!("{o:?}"),
    }
    // The client asks again from after the last row: every range kind
    // comes whole, its writes held back included.
    let mut t = c.begin().await.expect("begin");
    t.put("t", b"k00007x", b"new").await.expect("held");
    let all = t.scan("t", milliscale_client::KeyRange::all()).await.expect("scan");
    assert_eq!(all.len(), 2501);
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
    let back = t
        .scan("t", milliscale_client::KeyRange::prefix(b"k01").reversed().limit(1500))
        .await
        .expect("scan");
    let want: Vec<_> = (1000..2000u32).rev().map(key).collect();
    assert_eq!(back.iter().map(|r| r.0.clone()).collect::<Vec<_>>(), want);
    let some = t
        .scan("t", milliscale_client::KeyRange::between(b"k00100", b"k02400").limit(1300))
        .await
        .expect("scan");
    assert_eq!(some.len(), 1300);
    assert_eq!((some[0].0.clone(), some[1299].0.clone()), (key(100), key(1399)));
    t.abort().await.expect("abort");
    // A pipelined commit on the stream: answered at pre-commit, then told.
    let tx = txn_of(st.call(begin()).await);
    st.next += 1;
    let id = st.next;
    let r = proto::CallStreamRequest {
        id,
        call: Some(Call::Commit(proto::CommitRequest {
            txn_id: tx,
            durability: proto::Durability::Precommit as i32,
        })),
        writes: Some(proto::WriteRequest {
            txn_id: 0,
            table: "t".into(),
            writes: vec![put_op(b"p", b"1")],
        }),
        notify_durable: true,
        begin_first: None,
    };
    st.send.send(r).await.expect("send");
    let a = st.answers.message().await.expect("answer").expect("stream");
    assert_eq!(a.id, id);
    let Some(Outcome::Commit(done)) = a.outcome else { panic!("{a:?}") };
    // The store's append takes milliseconds: not durable at pre-commit.
    assert!(done.token.is_some() && !done.durable, "{done:?}");
    let a = st.answers.message().await.expect("answer").expect("stream");
    match a.outcome {
        Some(Outcome::Durable(d)) => assert_eq!((a.id, d.ids, d.failure), (0, vec![id], None)),
        o => panic!("{o:?}"),
    }
    assert_eq!(c.get("t", b"p").await.expect("read"), Some(b"1".to_vec()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_holds_writes_back_and_reports_their_error_at_the_next_call() {
    let (s, c, _) = serving("memory://").await;
    let not_found = |r: milliscale_client::Result<()>| {
        let e = r.expect_err("a write to a missing table");
        assert_eq!(e.code(), Code::NotFound, "{e}");
    };
    // Held: the put answers at once; the next read reports its failure.
    let mut t = c.begin().await.expect("begin");
    t.put("t", b"a", b"1").await.expect("held");
    t.put("nope", b"a", b"1").await.expect("held");
    not_found(t.get("t", b"a").await.map(drop));
    assert_eq!(t.get("t", b"a").await.expect("read"), Some(b"1".to_vec()), "the first ran");
    // Flushed: the error at once.
    t.patch("nope", b"a", 0, b"2").await.expect("held");
    not_found(t.flush().await);
    // With the commit: not committed, the transaction ended.
    t.put("t", b"b", b"2").await.expect("held");
    t.put("nope", b"b", b"2").await.expect("held");
    not_found(t.commit().await.map(drop));
    assert_eq!(c.get("t", b"a").await.expect("read"), None);
    assert_eq!(c.get("t", b"b").await.expect("read"), None);
    // Many writes: sent alone past WRITE_BEHIND_BYTES, all in order.
    let mut t = c.begin().await.expect("begin");
    let value = vec![7u8; 100 << 10];
    for i in 0..8u8 {
        t.put("t", &[i], &value).await.expect("put");
        t.patch("t", &[i], 0, &[i]).await.expect("patch");
    }
    let keys: Vec<&[u8]> =
        (0..8u8).map(|i| std::slice::from_ref(&[0u8, 1, 2, 3, 4, 5, 6, 7][i as usize])).collect();
    let got = t.get_many("t", &keys).await.expect("get_many");
    for (i, v) in got.iter().enumerate() {
        let v = v.as_deref().expect("written");
        assert_eq!((v[0], v.len()), (i as u8, 100 << 10));
    }
    t.commit().await.expect("commit");
    // Unary calls: each put is its own call, its error its own.
    let u = milliscale_client::Client::builder(s.local_addr().to_string())
        .streamed_calls(false)
        .connect()
        .await
        .expect("connect");
    let mut t = u.begin().await.expect("begin");
    not_found(t.put("nope", b"a", b"1").await);
    t.put("t", b"c", b"3").await.expect("put");
    assert_eq!(
        t.get_many("t", &[b"c", b"d"]).await.expect("get_many"),
        [Some(b"3".to_vec()), None]
    );
    t.commit().await.expect("commit");
}

/// The process's resident memory, in bytes.
fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).expect("rss");
    pages * 4096
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_no_answers_holds_no_memory_of_the_server() {
    const VALUE: usize = 256 << 10;
    const PUTS: u64 = 4096; // 1 GiB of values
    const GETS: u64 = 2_000;
    let (_s, _c, mut stub) = serving("memory://").await;
    let mut st = Stream::open_with(&mut stub, 4).await;
    let tx = txn_of(st.call(begin()).await);
    assert!(matches!(st.call(put(tx, b"k", &vec![7u8; VALUE])).await, Outcome::Put(_)));
    // The puts go to a read-only transaction, which refuses each once it
    // has read it: a transaction keeps what it writes (1 GiB of puts in
    // one would be 1 GiB of the server's memory, whatever the stream does).
    let read_only = proto::BeginRequest { read_only: true, ..Default::default() };
    let ro = txn_of(st.call(Call::Begin(read_only)).await);
    let value = bytes::Bytes::from(vec![7u8; VALUE]);
    let key = || b"k".to_vec().into();
    let put = move |id: u64| proto::CallStreamRequest {
        id,
        call: Some(Call::Put(proto::PutRequest {
            txn_id: ro,
            table: "t".into(),
            key: key(),
            value: value.clone(),
        })),
        ..Default::default()
    };
    let get = move |id: u64| proto::CallStreamRequest {
        id,
        call: Some(Call::Get(proto::GetRequest { txn_id: tx, table: "t".into(), key: key() })),
        ..Default::default()
    };
    // Send without reading an answer until sending stalls (2 s without
    // progress) or all is sent; the most memory the process held more.
    async fn send_unread(
        st: &mut Stream,
        ids: std::ops::Range<u64>,
        make: impl Fn(u64) -> proto::CallStreamRequest,
    ) -> (u64, u64) {
        let before = resident();
        let mut most = 0;
        for id in ids.clone() {
            let send = st.send.send(make(id));
            match tokio::time::timeout(Duration::from_secs(2), send).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    let why = loop {
                        match st.answers.message().await {
                            Ok(Some(_)) => {}
                            other => break other,
                        }
                    };
                    panic!("the stream ended at request {id}: {why:?}");
                }
                Err(_) => return (id - ids.start, most),
            }
            most = most.max(resident().saturating_sub(before));
        }
        (ids.end - ids.start, most)
    }
    // 1 GiB of puts: their answers are small, the client takes them in
    // (HTTP/2 windows) without reading; what the server read it ran and
    // let go.
    let (sent, held) = send_unread(&mut st, 1..PUTS + 1, &put).await;
    assert!(held < 256 << 20, "{} MiB held while sending {sent} puts", held >> 20);
    // Gets of a 256 KiB value, unread (500 MiB of answers): the stream's
    // queue of answers fills (64), and the client's window; the reader
    // stops, and the requests wait in the server's window.
    let (got, held_gets) = send_unread(&mut st, PUTS + 1..PUTS + GETS + 1, &get).await;
    assert!(held_gets < 128 << 20, "{} MiB held for {got} unread gets", held_gets >> 20);
    // Reading the answers lets everything through, each answered once.
    let (send, mut answers) = (st.send.clone(), st.answers);
    let rest = tokio::spawn(async move {
        for id in PUTS + 1 + got..PUTS + GETS + 1 {
            send.send(get(id)).await.expect("send");
        }
    });
    let mut seen = vec![false; (PUTS + GETS + 1) as usize];
    for _ in 0..PUTS + GETS {
        let a = answers.message().await.expect("answer").expect("stream");
        match a.outcome {
            Some(Outcome::Failure(f)) => {
                assert!(a.id <= PUTS && f.kind == "read_only", "{f:?}");
            }
            Some(Outcome::Get(g)) => assert_eq!(g.value.map(|v| v.len()), Some(VALUE)),
            o => panic!("{o:?}"),
        }
        assert!(!std::mem::replace(&mut seen[a.id as usize], true), "{} answered twice", a.id);
    }
    rest.await.expect("sender");
    eprintln!(
        "unread: {sent} puts of 256 KiB sent, {} MiB more resident; {got} gets of 256 KiB \
         sent, {} MiB more resident",
        held >> 20,
        held_gets >> 20
    );
}

/// 40,000 one-shot batches at once on one connection, each waiting for
/// its commit: the server reads 1,024 at a time, the rest wait in HTTP/2's
/// windows, and every one is answered. (A client that sends each small
/// message in a DATA frame of its own and reads no answer is disconnected
/// by h2 instead, after about 3,900 frames: see the server's README,
/// "Limits". The Rust client coalesces what it has to send.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forty_thousand_waiting_calls_on_one_connection_are_all_answered() {
    let (_s, c, _) = serving("sim://s3x?seed=5").await;
    let mut tasks = Vec::new();
    for i in 0..40000u32 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let mut b = milliscale_client::Batch::new();
            b.put("t", &i.to_be_bytes(), b"v");
            c.execute(b).await.map(drop)
        }));
    }
    let mut failed = Vec::new();
    for t in tasks {
        if let Err(e) = t.await.expect("task") {
            failed.push(e.to_string());
        }
    }
    assert!(failed.is_empty(), "{} of 40000 failed, e.g. {}", failed.len(), failed[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_commit_answers_visible_and_is_told_durable() {
    let (s, c, _) = serving("sim://s3x?seed=7").await;
    let unary = milliscale_client::Client::builder(s.local_addr().to_string())
        .streamed_calls(false)
        .connect()
        .await
        .expect("connect");
    // On the stream (told there) and as unary calls (WaitFor behind it).
    for (i, client) in [&c, &unary].into_iter().enumerate() {
        let key = [b'p', i as u8];
        let mut t = client.begin().await.expect("begin");
        t.put("t", &key, b"v").await.expect("put");
        let (commit, ack) = t.commit_pipelined().await.expect("pre-commit");
        let token = commit.token.expect("it wrote");
        assert!(!commit.durable, "the store's append takes milliseconds");
        // Visible at once to a read that may see what is not yet durable.
        assert_eq!(c.get("t", &key).await.expect("read"), Some(b"v".to_vec()));
        ack.durable().await.expect("durable");
        assert!(c.wait_for(token, Duration::from_secs(1)).await.expect("wait") >= token);
    }
    // A failed pipelined commit is an error, with no ack to wait for.
    let mut t = c.begin().await.expect("begin");
    t.put("nope", b"k", b"v").await.expect("held");
    let e = t.commit_pipelined().await.expect_err("a write to a missing table");
    assert_eq!(e.code(), Code::NotFound, "{e}");
}

/// `GetMany` of keys in several tables (`Transaction::get_many_across`):
/// each key read in its own table, in order, on the stream and as a
/// unary call; a missing table is NOT_FOUND; a count of tables that is
/// not the keys' is refused as invalid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_many_reads_keys_across_tables() {
    let (s, c, mut stub) = serving("memory://").await;
    for t in ["a", "b"] {
        c.create_table(t).await.expect("create");
    }
    c.put("a", b"k", b"in a").await.expect("put");
    c.put("b", b"k", b"in b").await.expect("put");
    let unary = milliscale_client::Client::builder(s.local_addr().to_string())
        .streamed_calls(false)
        .connect()
        .await
        .expect("connect");
    for client in [&c, &unary] {
        let mut t = client.begin().await.expect("begin");
        t.put("b", b"new", b"held").await.expect("held");
        let keys: [(&str, &[u8]); 4] = [("a", b"k"), ("b", b"k"), ("a", b"none"), ("b", b"new")];
        let got = t.get_many_across(&keys).await.expect("get_many_across");
        let want = [Some(&b"in a"[..]), Some(&b"in b"[..]), None, Some(&b"held"[..])];
        assert_eq!(got.iter().map(|v| v.as_deref()).collect::<Vec<_>>(), want);
        let e = t.get_many_across(&[("a", b"k"), ("nope", b"k")]).await.expect_err("missing");
        assert_eq!(e.code(), Code::NotFound, "{e}");
        t.commit().await.expect("commit");
    }
    let tx = c.begin().await.expect("begin").id().expect("begun");
    let keys = vec![b"k".to_vec().into(), b"k".to_vec().into()];
    let wrong =
        proto::GetManyRequest { txn_id: tx, table: "a".into(), keys, tables: vec!["b".into()] };
    let e = stub.get_many(wrong).await.expect_err("one table for two keys");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
}
