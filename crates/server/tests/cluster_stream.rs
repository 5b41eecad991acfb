//! A cluster client's calls to a shard on one stream (`ShardStream`): each
//! answered under its own id, as its unary call is answered, a failure
//! with what the call's status would carry; and the cluster client gives
//! the same answers with its calls streamed or not.

use futures_util::StreamExt;
use milliscale_client::Cluster;
use milliscale_proto::v1 as proto;
use proto::{shard_stream_request::Call, shard_stream_response::Outcome};

use crate::cluster::{TABLE, account, three_shards};

type Raw = proto::milliscale_client::MilliscaleClient<tonic::transport::Channel>;

fn read(i: u32, at: u64) -> proto::ShardReadRequest {
    proto::ShardReadRequest {
        keys: vec![proto::TableKey { table: TABLE.into(), key: account(i).into() }],
        at,
        ..Default::default()
    }
}

/// Send `requests` on one stream of `s` and read every answer until the
/// stream ends: each answer's outcome by its request's id.
async fn answers_by_id(
    s: &mut Raw,
    requests: Vec<proto::ShardStreamRequest>,
) -> std::collections::HashMap<u64, Outcome> {
    let answers = s.shard_stream(tokio_stream::iter(requests)).await.expect("open the stream");
    let answers: Vec<proto::ShardStreamResponse> =
        answers.into_inner().map(|a| a.expect("an answer, not the stream's end")).collect().await;
    answers.into_iter().map(|a| (a.id, a.outcome.expect("an outcome"))).collect()
}

/// Calls sent together on shard 0's stream: a read of its own key, a read
/// of shard 1's key, a read of an unknown table, a request naming no call,
/// and a decision of a transaction it never saw. Each answer comes back
/// under its request's id, equal to the unary call's answer (or its
/// status, as a `Failure` with the map's version for a wrong shard), and
/// the stream ends cleanly once the client closes its side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_a_shard_stream_are_answered_by_id_as_the_calls_are() {
    let f = three_shards().await;
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    let ts = c.put(TABLE, &account(0), b"55").await.expect("a write");
    let mut s0 = Raw::connect(format!("http://{}", f.addrs[0])).await.expect("connect");
    let at = ts + 1;

    let mut unknown = read(0, at);
    unknown.keys[0].table = "no_such_table".into();
    let decide = proto::ShardDecideRequest {
        txn: Some(proto::ClusterTxnId { client: 7, seq: 1 }),
        commit: false,
        ts: at,
    };
    let requests = vec![
        proto::ShardStreamRequest { id: 10, call: Some(Call::Read(read(0, at))) },
        proto::ShardStreamRequest { id: 11, call: Some(Call::Read(read(5, at))) },
        proto::ShardStreamRequest { id: 12, call: Some(Call::Read(unknown.clone())) },
        proto::ShardStreamRequest { id: 13, call: None },
        proto::ShardStreamRequest { id: 14, call: Some(Call::Decide(decide)) },
    ];
    let mut by_id = answers_by_id(&mut s0, requests).await;
    assert_eq!(by_id.len(), 5, "one answer per request: {by_id:?}");

    let unary = s0.shard_read(read(0, at)).await.expect("the call").into_inner();
    match by_id.remove(&10) {
        Some(Outcome::Read(r)) => {
            assert_eq!(r, unary);
            assert_eq!(r.results[0].value.as_deref(), Some(&b"55"[..]));
        }
        other => panic!("a read's answer: {other:?}"),
    }
    let failure = |o: Option<Outcome>| match o {
        Some(Outcome::Failure(f)) => f,
        other => panic!("a failure: {other:?}"),
    };
    let wrong = failure(by_id.remove(&11));
    let unary = s0.shard_read(read(5, at)).await.expect_err("not shard 0's key");
    assert_eq!(wrong.code, unary.code() as i32);
    assert_eq!(wrong.kind, "wrong_shard");
    assert_eq!(wrong.message, unary.message());
    assert_eq!(wrong.map_version, 1, "the map's version, as the status's metadata says");
    assert_eq!(
        unary.metadata().get("milliscale-map-version").and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let missing = failure(by_id.remove(&12));
    let unary = s0.shard_read(unknown).await.expect_err("an unknown table");
    assert_eq!((missing.code, missing.message.as_str()), (unary.code() as i32, unary.message()));
    let empty = failure(by_id.remove(&13));
    assert_eq!(empty.code, tonic::Code::InvalidArgument as i32, "{empty:?}");
    assert!(matches!(by_id.remove(&14), Some(Outcome::Decide(_))));
    // The same decision again as a call: answered the same.
    s0.shard_decide(decide).await.expect("a decision again");
}

/// Calls that arrive together run in one task (as `ExecuteStream`'s
/// batches do), but a call that waits does not hold the others back: a
/// read that meets an undecided prepared write, sent first, waits for its
/// decision while a read of another key sent with it is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_waits_does_not_hold_back_the_calls_sent_with_it() {
    let f = three_shards().await;
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    let mut s0 = Raw::connect(format!("http://{}", f.addrs[0])).await.expect("connect");
    // Prepared on shard 0 and never decided by its coordinator.
    let p = crate::cluster::prepare(61, 1, account(1), vec![0, 1]);
    let at = p.version.as_ref().expect("a version").ts + 1;
    assert!(s0.shard_prepare(p).await.expect("the vote").into_inner().yes);
    let requests = vec![
        proto::ShardStreamRequest { id: 1, call: Some(Call::Read(read(1, at))) },
        proto::ShardStreamRequest { id: 2, call: Some(Call::Read(read(2, at))) },
    ];
    let mut answers =
        s0.shard_stream(tokio_stream::iter(requests)).await.expect("open the stream").into_inner();
    let first = answers.next().await.expect("an answer").expect("not the stream's end");
    assert_eq!(first.id, 2, "the read of a key with no prepared write answers first");
    assert!(matches!(first.outcome, Some(Outcome::Read(_))), "{first:?}");
    // The waiting read is answered too, once its wait ends (a decision
    // by termination, or the termination timeout), and the stream ends.
    let second = answers.next().await.expect("an answer").expect("not the stream's end");
    assert_eq!(second.id, 1);
    assert!(answers.next().await.is_none(), "the stream ends after its calls' answers");
}

/// How many `ShardStream`s each shard has seen opened.
async fn streams_opened(f: &crate::cluster::Fixture) -> Vec<u64> {
    let mut opened = Vec::new();
    for a in &f.addrs {
        let mut s = Raw::connect(format!("http://{a}")).await.expect("connect");
        let i = s.shard_info(proto::ShardInfoRequest::default()).await.expect("info");
        opened.push(i.into_inner().streams_opened);
    }
    opened
}

/// The cluster client with its calls streamed (the default: one stream per
/// shard) and as unary calls (no stream): the same values, scans and
/// conflicts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_client_answers_the_same_with_calls_streamed_or_not() {
    let f = three_shards().await;
    let unary = Cluster::builder(f.addrs[1].to_string())
        .streamed_calls(false)
        .connect()
        .await
        .expect("connect");
    unary.create_table(TABLE).await.expect("create");
    unary.put(TABLE, &account(0), b"first").await.expect("a write");
    unary.put(TABLE, &account(11), b"first").await.expect("a write");
    assert_eq!(streams_opened(&f).await, [0, 0, 0], "calls only");
    let streamed = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    assert_eq!(streamed.get(TABLE, &account(0)).await.expect("read"), Some(b"first".to_vec()));
    assert_eq!(streamed.get(TABLE, &account(11)).await.expect("read"), Some(b"first".to_vec()));
    assert_eq!(streams_opened(&f).await, [1, 0, 1], "one stream to each shard it called");
    for i in 0..12u32 {
        let (writer, reader) = if i % 2 == 0 { (&streamed, &unary) } else { (&unary, &streamed) };
        writer.put(TABLE, &account(i), i.to_string().as_bytes()).await.expect("a write");
        let got = reader.get(TABLE, &account(i)).await.expect("a read");
        assert_eq!(got, Some(i.to_string().into_bytes()));
    }
    let all = milliscale_client::KeyRange::all();
    let a = streamed.scan(TABLE, all.clone()).await.expect("scan");
    let b = unary.scan(TABLE, all).await.expect("scan");
    assert_eq!(a, b);
    assert_eq!(a.len(), 12);
    // A transaction across shards whose read the other client overwrites
    // before it commits is refused, streamed or not.
    for (first, second) in [(&streamed, &unary), (&unary, &streamed)] {
        let mut tx = first.begin();
        tx.get(TABLE, &account(0)).await.expect("a read");
        tx.put(TABLE, &account(9), b"x").expect("a write");
        second.put(TABLE, &account(0), b"moved").await.expect("the other client's write");
        let e = tx.commit().await.expect_err("its read was overwritten");
        assert!(e.is_retryable(), "{e}");
    }
}

/// One-shot batches sent together on a shard's stream run as a group
/// (their marks under one taking of the shard's lock, their commits under
/// another) and answer as they would one after the other. Each burst: 16
/// batches that each read one of shard 0's four keys at one timestamp
/// and write their own name there, a read-only batch, a batch of another
/// shard's key and a batch whose patch does not fit. Checked: one answer
/// per request; at most one batch per key commits (they all read the same
/// snapshot, so a second would have read a version no longer the newest),
/// what it read is the key's value before the burst and its write is the
/// value after (a key none committed keeps its value); the wrong shard's
/// batch and the bad patch are refused as alone, the read-only batch
/// answered. Bursts repeat until the shard reports batches committed in a
/// group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_sent_together_commit_as_one_after_the_other() {
    use crate::cluster::{now_us, raw, txn};
    let f = three_shards().await;
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    for k in 0..4 {
        c.put(TABLE, &account(k), b"start").await.expect("a write");
    }
    let mut s0 = raw(f.addrs[0]).await;
    let op = |op| proto::Operation { table: String::new(), op: Some(op) };
    let get = |k: u32| op(proto::operation::Op::Get(account(k).into()));
    let put = |k: u32, v: &[u8]| {
        let row = proto::Row { key: account(k).into(), value: v.to_vec().into() };
        op(proto::operation::Op::Put(row))
    };
    let patch = op(proto::operation::Op::Patch(proto::PatchRequest {
        key: account(0).into(),
        offset: 1_000,
        bytes: b"x".to_vec().into(),
        ..Default::default()
    }));
    let grouped = || async {
        let mut s = raw(f.addrs[0]).await;
        s.shard_info(proto::ShardInfoRequest::default()).await.expect("info").into_inner()
    };
    let mut seq = 0;
    for burst in 0..8u32 {
        let together = grouped().await.batches_together;
        let mut before = Vec::new();
        for k in 0..4 {
            before.push(c.get(TABLE, &account(k)).await.expect("read").expect("a value"));
        }
        let at = now_us();
        let mut batch = |ops: Vec<proto::Operation>| {
            seq += 1;
            proto::ShardExecuteRequest {
                txn: txn(90, seq),
                at,
                version: Some(proto::CommitTs { ts: at + seq, client: 90 }),
                operations: ops,
                table: TABLE.into(),
                client: 90,
                low_water: 0,
            }
        };
        let name = |i: u32| format!("b{burst}-{i}").into_bytes();
        let mut requests: Vec<(u64, Vec<proto::Operation>)> =
            (0..16u32).map(|i| (u64::from(i), vec![get(i % 4), put(i % 4, &name(i))])).collect();
        requests.push((20, vec![get(1), get(2)]));
        requests.push((21, vec![get(5), put(5, b"x")]));
        requests.push((22, vec![patch.clone()]));
        let requests: Vec<proto::ShardStreamRequest> = requests
            .into_iter()
            .map(|(id, ops)| proto::ShardStreamRequest {
                id,
                call: Some(Call::Execute(batch(ops))),
            })
            .collect();
        let mut by_id = answers_by_id(&mut s0, requests).await;
        assert_eq!(by_id.len(), 19, "one answer per request");
        let failure = |o: Option<Outcome>| match o {
            Some(Outcome::Failure(f)) => f,
            other => panic!("a failure: {other:?}"),
        };
        assert_eq!(failure(by_id.remove(&21)).kind, "wrong_shard");
        assert_eq!(failure(by_id.remove(&22)).code, tonic::Code::InvalidArgument as i32);
        match by_id.remove(&20) {
            Some(Outcome::Execute(r)) => assert!(r.yes, "a read-only batch at a snapshot: {r:?}"),
            other => panic!("a read-only batch's answer: {other:?}"),
        }
        let mut committed: Vec<Vec<(u32, Vec<u8>)>> = vec![Vec::new(); 4];
        for i in 0..16u32 {
            let Some(Outcome::Execute(r)) = by_id.remove(&u64::from(i)) else {
                panic!("batch {i}: not an execute answer");
            };
            if !r.yes {
                continue;
            }
            let read = match &r.results[0].result {
                Some(proto::operation_result::Result::Get(g)) => g.value.clone(),
                other => panic!("a get's result: {other:?}"),
            };
            committed[(i % 4) as usize].push((i, read.expect("a value").to_vec()));
        }
        for (k, won) in committed.iter().enumerate() {
            assert!(won.len() <= 1, "key {k}: two batches that read one snapshot: {won:?}");
            let now = c.get(TABLE, &account(k as u32)).await.expect("read").expect("a value");
            match won.first() {
                Some((i, read)) => {
                    assert_eq!(read, &before[k], "key {k}: batch {i} read the value before");
                    assert_eq!(now, name(*i), "key {k}: batch {i}'s write is there");
                }
                None => assert_eq!(now, before[k], "key {k}: no batch committed"),
            }
        }
        if grouped().await.batches_together > together {
            return;
        }
    }
    panic!("no burst of batches ran as a group");
}
