//! A transaction begun by its first call (`Client::transaction`, the
//! stream's `begin_first`): no round trip of its own, its snapshot taken
//! at that call, on the stream and over unary calls alike; a failed begin
//! tried again by the next call; a failed call that began its transaction
//! still names it; bad requests refused.

use milliscale_client::{Client, Isolation, TxnOptions};
use milliscale_proto::v1::milliscale_client::MilliscaleClient;
use milliscale_proto::v1::{
    self as proto, call_stream_request::Call, call_stream_response::Outcome,
};
use milliscale_server::Backend;
use tonic::Code;

use crate::common::*;

async fn unary(s: &milliscale_server::Server) -> Client {
    Client::builder(s.local_addr().to_string())
        .streamed_calls(false)
        .connect()
        .await
        .expect("connect")
}

async fn open_txns(c: &Client) -> u32 {
    c.status().await.expect("status").open_transactions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_begins_and_takes_its_snapshot_at_its_first_call() {
    let s = start(Backend::Writer(writer("memory://").await), |_| {}).await;
    let streamed = client(&s).await;
    streamed.create_table("t").await.expect("create");
    let unary = unary(&s).await;
    for (who, c) in [("streamed", &streamed), ("unary", &unary)] {
        c.put("t", b"x", b"old").await.expect("put");
        let si = || TxnOptions::isolation(Isolation::Snapshot);
        let mut late = c.transaction(si());
        assert_eq!((late.id(), late.snapshot(), late.isolation()), (None, None, None), "{who}");
        assert_eq!(open_txns(c).await, 0, "{who}: nothing on the server yet");
        let mut pinned = c.transaction(si());
        pinned.begin_now().await.expect("begin now");
        let at = pinned.snapshot().expect("begun");
        assert_eq!(pinned.isolation(), Some(Isolation::Snapshot));
        assert_eq!(open_txns(c).await, 1, "{who}");
        c.put("t", b"x", b"new").await.expect("put");
        assert_eq!(pinned.get("t", b"x").await.expect("get"), Some(b"old".to_vec()), "{who}");
        // Its snapshot is taken by this call: the put before it is seen.
        assert_eq!(late.get("t", b"x").await.expect("get"), Some(b"new".to_vec()), "{who}");
        assert!(late.snapshot().expect("begun") > at, "{who}");
        assert_eq!(late.isolation(), Some(Isolation::Snapshot));
        late.commit().await.expect("commit");
        pinned.commit().await.expect("commit");

        // Writes and a commit alone: begun, written and committed by one
        // message on the stream.
        let mut w = c.transaction(TxnOptions::default());
        w.put("t", b"w", who.as_bytes()).await.expect("held");
        let token = w.commit().await.expect("commit").token;
        assert!(token.is_some(), "{who}");
        assert_eq!(c.get("t", b"w").await.expect("get"), Some(who.as_bytes().to_vec()));

        // One that makes no call never reaches the server: its commit
        // wrote nothing, and dropping or aborting one leaves nothing open.
        let nothing = c.transaction(TxnOptions::default()).commit().await.expect("commit");
        assert_eq!((nothing.token, nothing.durable), (None, true));
        c.transaction(TxnOptions::default()).abort().await.expect("abort");
        drop(c.transaction(TxnOptions::default()));
        assert_eq!(open_txns(c).await, 0, "{who}");
    }
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_begin_is_tried_again_and_a_failed_first_call_keeps_its_transaction() {
    let s = start(Backend::Writer(writer("memory://").await), |o| {
        o.max_open_txns_per_conn = 1;
    })
    .await;
    let streamed = client(&s).await;
    streamed.create_table("t").await.expect("create");
    let unary = unary(&s).await;
    for (who, c) in [("streamed", &streamed), ("unary", &unary)] {
        let k = who.as_bytes(); // a key of its own
        // The begin fails (the connection's cap): the call's error, and
        // the transaction has not begun; the next call begins it.
        let holder = c.begin().await.expect("the one allowed");
        let mut t = c.transaction(TxnOptions::default());
        let e = t.get("t", k).await.expect_err("over the cap");
        assert_eq!((e.code(), e.kind()), (Code::ResourceExhausted, "limit"), "{who}");
        assert_eq!(t.id(), None, "{who}");
        holder.abort().await.expect("abort");
        assert_eq!(t.get("t", k).await.expect("begun now"), None, "{who}");
        assert!(t.id().is_some(), "{who}");
        t.put("t", k, b"1").await.expect("put");
        t.commit().await.expect("commit");

        // The begin succeeds and the call fails (no such table): the
        // transaction is open, named, and goes on.
        let mut t = c.transaction(TxnOptions::default());
        let e = t.get("nope", k).await.expect_err("no table");
        assert_eq!(e.code(), Code::NotFound, "{who}");
        assert!(t.id().is_some(), "{who}: begun, and named though its call failed");
        assert_eq!(open_txns(c).await, 1, "{who}");
        assert_eq!(t.get("t", k).await.expect("get"), Some(b"1".to_vec()));
        t.abort().await.expect("abort");
        assert_eq!(open_txns(c).await, 0, "{who}");
    }
    s.shutdown().await;
}

/// Raw requests: `began` names the transaction when the call fails; a
/// `begin_first` with a Begin, or with a call that names a transaction,
/// is refused (INVALID_ARGUMENT) and begins nothing; a failed begin runs
/// nothing after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn begin_first_on_the_wire() {
    let s = start(Backend::Writer(writer("memory://").await), |o| {
        o.max_open_txns_per_conn = 2;
    })
    .await;
    let c = client(&s).await;
    c.create_table("t").await.expect("create");
    let mut stub =
        MilliscaleClient::connect(format!("http://{}", s.local_addr())).await.expect("connect");
    let get = |txn_id: u64, table: &str| {
        Call::Get(proto::GetRequest { txn_id, table: table.into(), key: b"k".to_vec().into() })
    };
    let put = proto::Operation {
        table: String::new(),
        op: Some(proto::operation::Op::Put(proto::Row {
            key: b"w".to_vec().into(),
            value: b"1".to_vec().into(),
        })),
    };
    let writes = Some(proto::WriteRequest { txn_id: 0, table: "t".into(), writes: vec![put] });
    let first = |id, call, writes| proto::CallStreamRequest {
        id,
        call: Some(call),
        writes,
        begin_first: Some(proto::BeginRequest::default()),
        ..proto::CallStreamRequest::default()
    };
    // One request at a time: each waits for the one before it.
    let (send, outgoing) = tokio::sync::mpsc::channel(4);
    let mut answers = stub
        .call_stream(tokio_stream::wrappers::ReceiverStream::new(outgoing))
        .await
        .expect("stream")
        .into_inner();
    let mut by_id = std::collections::BTreeMap::new();
    let requests = [
        first(1, get(0, "nope"), None),
        first(2, Call::Begin(proto::BeginRequest::default()), None),
        first(3, get(7, "t"), None),
        first(4, get(0, "t"), writes.clone()),
        // The connection's cap (2) is reached by 1 and 4: this begin fails
        // and its writes do not run.
        first(5, get(0, "t"), writes),
    ];
    for r in requests {
        send.send(r).await.expect("send");
        let a = answers.message().await.expect("answer").expect("the stream");
        by_id.insert(a.id, a);
    }
    drop(send);
    let code = |a: &proto::CallStreamResponse| match &a.outcome {
        Some(Outcome::Failure(f)) => Code::from_i32(f.code),
        _ => Code::Ok,
    };
    assert_eq!(code(&by_id[&1]), Code::NotFound);
    assert!(by_id[&1].began.as_ref().is_some_and(|b| b.txn_id != 0), "{:?}", by_id[&1]);
    for id in [2, 3] {
        assert_eq!(code(&by_id[&id]), Code::InvalidArgument, "{:?}", by_id[&id]);
        assert!(by_id[&id].began.is_none());
    }
    assert_eq!(code(&by_id[&4]), Code::Ok);
    assert!(matches!(by_id[&4].outcome, Some(Outcome::Get(_))) && by_id[&4].began.is_some());
    assert_eq!(code(&by_id[&5]), Code::ResourceExhausted, "{:?}", by_id[&5]);
    assert!(by_id[&5].began.is_none());
    // Nothing committed; the stream's end ended its transactions.
    assert_eq!(c.get("t", b"w").await.expect("get"), None);
    s.shutdown().await;
}
