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
        let (send, rx) = mpsc::channel(1024);
        let answers = stub.call_stream(ReceiverStream::new(rx)).await.expect("open").into_inner();
        Stream { send, answers, next: 0 }
    }

    /// Send `calls` at once; their answers, in the order sent.
    async fn calls(&mut self, calls: Vec<Call>) -> Vec<Outcome> {
        let first = self.next;
        for call in calls.iter().cloned() {
            self.next += 1;
            let r = proto::CallStreamRequest { id: self.next, call: Some(call) };
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
}

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
