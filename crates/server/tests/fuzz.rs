//! Bad input: seeded random sequences of requests, well-formed and not,
//! against a running server. Wrong message types on a method, random
//! bytes, unknown enum values, unknown and odd table names, huge and
//! empty keys and values, transaction ids that were never issued, calls
//! after a commit or an abort, sessions that expired, batches with missing
//! operations, scans with contradictory bounds, streams of batches with
//! missing batches and with undecodable messages among them.
//!
//! The oracle: no panic anywhere in the process; every answer is OK or a
//! status code from the documented set (never UNKNOWN or INTERNAL); the
//! server still answers afterwards; and a ledger table that only a
//! well-behaved client writes, checked after every sequence and after a
//! reopen of the database (recovery), holds exactly what was committed.
//!
//! `MILLISCALE_FUZZ_SEQUENCES` (default 60) sets how many sequences of 40
//! calls run; `MILLISCALE_FUZZ_SEED` the first seed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use milliscale::{AsyncDatabase, Options};
use milliscale_client::{Client, KeyRange, TxnOptions};
use milliscale_proto::v1::{self as proto, milliscale_client::MilliscaleClient, operation};
use milliscale_server::{Backend, Server, ServerOptions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tonic::Code;
use tonic::transport::Channel;

/// Any bytes, sent as a message body: the server must refuse what does
/// not decode.
#[derive(Clone, PartialEq, Default, Debug)]
struct Raw(Vec<u8>);

impl prost::Message for Raw {
    fn encode_raw(&self, buf: &mut impl prost::bytes::BufMut) {
        buf.put_slice(&self.0);
    }
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl prost::bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }
    fn encoded_len(&self) -> usize {
        self.0.len()
    }
    fn clear(&mut self) {
        self.0.clear();
    }
}

const METHODS: [&str; 15] = [
    "CreateTable",
    "DropTable",
    "ListTables",
    "Begin",
    "Get",
    "Put",
    "Delete",
    "Patch",
    "Commit",
    "Abort",
    "Execute",
    "ExecuteStream",
    "CallStream",
    "WaitFor",
    "Status",
];

/// The codes a server may answer bad input with.
fn allowed(code: Code) -> bool {
    !matches!(code, Code::Unknown | Code::Internal | Code::DataLoss | Code::Unimplemented)
}

struct Fuzzer {
    stub: MilliscaleClient<Channel>,
    channel: Channel,
    rng: SmallRng,
    /// Ids the server issued (some finished since).
    ids: Vec<u64>,
}

impl Fuzzer {
    fn table(&mut self) -> String {
        match self.rng.random_range(0..6) {
            0..=2 => "t".into(),
            3 => "nope".into(),
            4 => String::new(),
            _ => "x".repeat(self.rng.random_range(200..400)),
        }
    }

    fn bytes(&mut self) -> Vec<u8> {
        let n = match self.rng.random_range(0..10) {
            0 => 0,
            1 => self.rng.random_range(1000..1100),
            2 => self.rng.random_range(256 * 1024..256 * 1024 + 10),
            _ => self.rng.random_range(1..16),
        };
        (0..n).map(|_| self.rng.random()).collect()
    }

    fn id(&mut self) -> u64 {
        if self.ids.is_empty() || self.rng.random_bool(0.2) {
            self.rng.random()
        } else {
            self.ids[self.rng.random_range(0..self.ids.len())]
        }
    }

    fn range(&mut self) -> proto::KeyRange {
        let mut b = || self.rng.random_bool(0.5);
        let (s, e, p, r) = (b(), b(), b(), b());
        proto::KeyRange {
            start: s.then(|| vec![1].into()),
            end: e.then(|| vec![0].into()),
            prefix: p.then(Default::default),
            reverse: r,
            limit: self.rng.random_range(0..3) * 7,
        }
    }

    fn op(&mut self) -> proto::Operation {
        let op = match self.rng.random_range(0..7) {
            0 => None,
            1 => Some(operation::Op::Get(self.bytes().into())),
            2 => Some(operation::Op::Put(proto::Row {
                key: self.bytes().into(),
                value: self.bytes().into(),
            })),
            3 => Some(operation::Op::Delete(self.bytes().into())),
            4 => Some(operation::Op::Scan(self.range())),
            _ => Some(operation::Op::Patch(proto::PatchRequest {
                key: self.bytes().into(),
                offset: self.rng.random(),
                bytes: self.bytes().into(),
                ..Default::default()
            })),
        };
        proto::Operation { table: self.table(), op }
    }

    /// A scan in a transaction, read to its end.
    async fn scan(&mut self) -> (Code, String) {
        let req = proto::ScanRequest {
            txn_id: self.id(),
            table: self.table(),
            range: Some(self.range()),
        };
        drain(self.stub.clone().scan(req).await).await
    }

    /// Random bytes, or another method's message, to a method.
    async fn raw(&mut self) -> (Code, String) {
        let method = METHODS[self.rng.random_range(0..METHODS.len())];
        let body = if self.rng.random_bool(0.5) {
            self.bytes()
        } else {
            prost::Message::encode_to_vec(&proto::ScanRequest {
                txn_id: self.id(),
                table: self.table(),
                range: Some(self.range()),
            })
        };
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        if grpc.ready().await.is_err() {
            return (Code::Unavailable, "not ready".into());
        }
        let path = format!("/milliscale.v1.Milliscale/{method}");
        let codec = tonic_prost::ProstCodec::<Raw, Raw>::default();
        let path = tonic::codegen::http::uri::PathAndQuery::try_from(path).expect("a path");
        match grpc.unary(tonic::Request::new(Raw(body)), path, codec).await {
            Ok(_) => (Code::Ok, String::new()),
            Err(s) => (s.code(), s.message().to_owned()),
        }
    }

    /// A random batch (well-formed protobuf, anything inside).
    fn batch(&mut self) -> proto::ExecuteRequest {
        let ops = (0..self.rng.random_range(0..6)).map(|_| self.op()).collect();
        proto::ExecuteRequest {
            operations: ops,
            isolation: self.rng.random_range(-1..6),
            durability: self.rng.random_range(-1..3),
            read_at: self.rng.random_range(-1..3),
            at_token: self.rng.random_bool(0.1).then(|| self.rng.random()),
            wait_ms: self.rng.random_range(0..20),
            max_retries: self.rng.random(),
            // Its operations with no table (see `table`) are on this one.
            table: self.table(),
        }
    }

    /// A stream of random batches (some without their batch, some asking
    /// to hear of their durability): every request gets exactly one answer
    /// with its id, every failure has a documented code, and a `durable`
    /// answer names, once and after its answer, exactly each request that
    /// asked and was answered not yet durable.
    async fn stream(&mut self) -> (Code, String) {
        let n = self.rng.random_range(0..12);
        let reqs: Vec<_> = (0..n)
            .map(|i| proto::ExecuteStreamRequest {
                id: i,
                request: self.rng.random_bool(0.9).then(|| self.batch()),
                notify_durable: self.rng.random_bool(0.5),
            })
            .collect();
        let notify: Vec<bool> = reqs.iter().map(|r| r.notify_durable).collect();
        let (mut owed, mut told) = (Vec::new(), Vec::new());
        let answers = match self.stub.clone().execute_stream(tokio_stream::iter(reqs)).await {
            Err(s) => return (s.code(), s.message().to_owned()),
            Ok(r) => r.into_inner(),
        };
        let mut answers = answers;
        let mut seen = Vec::new();
        // A code the harness must accept: the first not allowed, else the
        // first failure's, else OK.
        let mut worst = (Code::Ok, String::new());
        loop {
            match answers.message().await {
                Ok(Some(a)) => match a.outcome {
                    Some(proto::execute_stream_response::Outcome::Failure(f)) => {
                        seen.push(a.id);
                        let code = Code::from_i32(f.code);
                        let bad = !allowed(code) || f.kind.is_empty();
                        if bad || worst.0 == Code::Ok {
                            let why = format!("{} (kind {:?})", f.message, f.kind);
                            worst = (if f.kind.is_empty() { Code::Unknown } else { code }, why);
                        }
                    }
                    Some(proto::execute_stream_response::Outcome::Done(d)) => {
                        seen.push(a.id);
                        if notify[a.id as usize] && !d.durable {
                            owed.push(a.id);
                        }
                    }
                    Some(proto::execute_stream_response::Outcome::Durable(d)) => {
                        for id in d.ids {
                            assert!(owed.contains(&id), "durability of {id} told unasked");
                            told.push(id);
                        }
                    }
                    None => panic!("an answer without an outcome"),
                },
                Ok(None) => break,
                Err(s) => return (s.code(), s.message().to_owned()),
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..n).collect::<Vec<_>>(), "each request answered once");
        owed.sort_unstable();
        told.sort_unstable();
        assert_eq!(owed, told, "each pipelined pre-commit's durability told once");
        worst
    }

    /// Random calls of interactive transactions on one `CallStream`
    /// (transactions begun on it, made up, or finished; tables, keys and
    /// values random): each request answered once with its id, every
    /// failure with a documented code and a kind.
    async fn call_stream(&mut self) -> (Code, String) {
        use proto::call_stream_request::Call;
        let n = self.rng.random_range(0..16);
        let mut reqs = vec![proto::CallStreamRequest {
            id: 1,
            call: Some(Call::Begin(proto::BeginRequest {
                isolation: self.rng.random_range(-1..6),
                read_only: self.rng.random_bool(0.3),
                ..proto::BeginRequest::default()
            })),
            ..proto::CallStreamRequest::default()
        }];
        for id in 2..=n {
            let txn_id = self.id();
            let (table, key) = (self.table(), self.bytes().into());
            let call = match self.rng.random_range(0..11) {
                0 => None,
                1 => Some(Call::Get(proto::GetRequest { txn_id, table, key })),
                2 => Some(Call::Put(proto::PutRequest {
                    txn_id,
                    table,
                    key,
                    value: self.bytes().into(),
                })),
                3 => Some(Call::Delete(proto::DeleteRequest { txn_id, table, key })),
                4 => Some(Call::Patch(proto::PatchRequest {
                    txn_id,
                    table,
                    key,
                    offset: self.rng.random_range(0..300_000),
                    bytes: self.bytes().into(),
                })),
                5 => Some(Call::Commit(proto::CommitRequest {
                    txn_id,
                    durability: self.rng.random_range(-1..4),
                })),
                6 => Some(Call::Abort(proto::AbortRequest { txn_id })),
                7 => Some(Call::GetMany(proto::GetManyRequest {
                    txn_id,
                    table,
                    keys: (0..self.rng.random_range(0..5)).map(|_| self.bytes().into()).collect(),
                    // Often none; else a table a key, of any count (one
                    // that is not the keys' is refused).
                    tables: (0..self.rng.random_range(0..6u32).saturating_sub(2))
                        .map(|_| self.table())
                        .collect(),
                })),
                8 => Some(Call::Write(self.writes(txn_id))),
                9 => Some(Call::Scan(proto::ScanRequest {
                    txn_id,
                    table,
                    range: Some(self.range()),
                })),
                _ => Some(Call::Begin(proto::BeginRequest::default())),
            };
            let writes = self.rng.random_bool(0.3).then(|| self.writes(0));
            let notify_durable = self.rng.random_bool(0.3);
            // A call that begins its transaction: mostly one that names
            // none, as a client sends it.
            let begin_first = self.rng.random_bool(0.2).then(|| proto::BeginRequest {
                isolation: self.rng.random_range(-1..6),
                read_only: self.rng.random_bool(0.3),
                ..proto::BeginRequest::default()
            });
            let mut call = call;
            if begin_first.is_some() && self.rng.random_bool(0.8) {
                call.iter_mut().for_each(|c| c.set_txn_id(0));
            }
            reqs.push(proto::CallStreamRequest { id, call, writes, notify_durable, begin_first });
        }
        let answers = match self.stub.clone().call_stream(tokio_stream::iter(reqs)).await {
            Err(s) => return (s.code(), s.message().to_owned()),
            Ok(r) => r.into_inner(),
        };
        let mut answers = answers;
        let (mut seen, mut worst) = (Vec::new(), (Code::Ok, String::new()));
        let mut told = Vec::new();
        loop {
            match answers.message().await {
                Ok(Some(a)) => {
                    seen.push(a.id);
                    match a.outcome {
                        Some(proto::call_stream_response::Outcome::Failure(f)) => {
                            let code = Code::from_i32(f.code);
                            let bad = !allowed(code) || f.kind.is_empty();
                            if bad || worst.0 == Code::Ok {
                                let why = format!("{} (kind {:?})", f.message, f.kind);
                                worst = (if f.kind.is_empty() { Code::Unknown } else { code }, why);
                            }
                        }
                        Some(proto::call_stream_response::Outcome::Begin(b)) => {
                            self.ids.push(b.txn_id)
                        }
                        // A pipelined commit's durability (id 0): each
                        // told id is one of the requests'.
                        Some(proto::call_stream_response::Outcome::Durable(d)) => {
                            seen.pop_if(|id| *id == 0);
                            told.extend(d.ids);
                        }
                        Some(_) => {}
                        None => panic!("an answer without an outcome"),
                    }
                }
                Ok(None) => break,
                Err(s) => return (s.code(), s.message().to_owned()),
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, (1..=n.max(1)).collect::<Vec<_>>(), "each request answered once");
        told.sort_unstable();
        told.dedup();
        assert!(told.iter().all(|id| (1..=n).contains(id)), "durability told of a request");
        worst
    }

    /// A random `WriteRequest`: mostly writes, sometimes a read among them.
    fn writes(&mut self, txn_id: u64) -> proto::WriteRequest {
        let writes = (0..self.rng.random_range(0..4)).map(|_| self.op()).collect();
        proto::WriteRequest { txn_id, table: self.table(), writes }
    }

    /// Random bytes among well-formed requests on a stream: the stream
    /// ends with a documented code.
    async fn raw_stream(&mut self) -> (Code, String) {
        let mut msgs = Vec::new();
        for i in 0..self.rng.random_range(1..5) {
            let req = proto::ExecuteStreamRequest {
                id: i,
                request: Some(self.batch()),
                notify_durable: self.rng.random_bool(0.5),
            };
            msgs.push(Raw(prost::Message::encode_to_vec(&req)));
        }
        let at = self.rng.random_range(0..=msgs.len());
        msgs.insert(at, Raw(self.bytes()));
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        if grpc.ready().await.is_err() {
            return (Code::Unavailable, "not ready".into());
        }
        let path = "/milliscale.v1.Milliscale/ExecuteStream";
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
        let codec = tonic_prost::ProstCodec::<Raw, Raw>::default();
        let req = tonic::Request::new(tokio_stream::iter(msgs));
        drain(grpc.streaming(req, path, codec).await).await
    }

    /// One call; its status code (OK included) and message.
    async fn call(&mut self) -> (Code, String) {
        let isolation = self.rng.random_range(-1..6);
        let code_of = |r: Result<(), tonic::Status>| {
            r.map_or_else(|s| (s.code(), s.message().to_owned()), |()| (Code::Ok, String::new()))
        };
        let mut stub = self.stub.clone();
        match self.rng.random_range(0..18) {
            0 => {
                let r = stub
                    .begin(proto::BeginRequest {
                        isolation,
                        read_only: self.rng.random(),
                        read_at: self.rng.random_range(-1..3),
                        at_token: self.rng.random_bool(0.2).then(|| self.rng.random()),
                        wait_ms: self.rng.random_range(0..30),
                    })
                    .await;
                if let Ok(b) = &r {
                    self.ids.push(b.get_ref().txn_id);
                }
                code_of(r.map(drop))
            }
            1 => {
                let req = proto::GetRequest {
                    txn_id: self.id(),
                    table: self.table(),
                    key: self.bytes().into(),
                };
                code_of(stub.get(req).await.map(drop))
            }
            2 => {
                let req = proto::PutRequest {
                    txn_id: self.id(),
                    table: self.table(),
                    key: self.bytes().into(),
                    value: self.bytes().into(),
                };
                code_of(stub.put(req).await.map(drop))
            }
            3 => {
                let req = proto::DeleteRequest {
                    txn_id: self.id(),
                    table: self.table(),
                    key: self.bytes().into(),
                };
                code_of(stub.delete(req).await.map(drop))
            }
            4 => {
                let req = proto::PatchRequest {
                    txn_id: self.id(),
                    table: self.table(),
                    key: self.bytes().into(),
                    offset: self.rng.random_range(0..2000),
                    bytes: self.bytes().into(),
                };
                code_of(stub.patch(req).await.map(drop))
            }
            5 => self.scan().await,
            6 | 7 => {
                let req = proto::CommitRequest {
                    txn_id: self.id(),
                    durability: self.rng.random_range(-1..3),
                };
                code_of(stub.commit(req).await.map(drop))
            }
            8 => code_of(stub.abort(proto::AbortRequest { txn_id: self.id() }).await.map(drop)),
            9 => {
                let req = self.batch();
                code_of(stub.execute(req).await.map(drop))
            }
            10 => {
                let req = proto::WaitForRequest {
                    token: self.rng.random(),
                    wait_ms: self.rng.random_range(0..20),
                };
                code_of(stub.wait_for(req).await.map(drop))
            }
            11 => {
                let name = self.table();
                if self.rng.random_bool(0.5) {
                    code_of(stub.create_table(proto::CreateTableRequest { name }).await.map(drop))
                } else if name != "t" {
                    code_of(stub.drop_table(proto::DropTableRequest { name }).await.map(drop))
                } else {
                    (Code::Ok, String::new())
                }
            }
            12 => {
                // Now and then a session left idle past the timeout (150
                // ms; the reaper looks every 37 ms): its next call is told
                // it expired.
                if !self.rng.random_bool(0.15) {
                    return (Code::Ok, String::new());
                }
                let txn_id = match stub.begin(proto::BeginRequest::default()).await {
                    Ok(b) => b.into_inner().txn_id,
                    Err(s) => return (s.code(), s.message().to_owned()),
                };
                self.ids.push(txn_id);
                tokio::time::sleep(Duration::from_millis(self.rng.random_range(200..300))).await;
                let req = proto::GetRequest { txn_id, table: "t".into(), key: vec![1].into() };
                code_of(stub.get(req).await.map(drop))
            }
            13 => self.stream().await,
            14 => self.raw_stream().await,
            15 => self.call_stream().await,
            _ => self.raw().await,
        }
    }
}

/// A streamed answer read to its end: OK, or the status it ended with.
async fn drain<T>(
    answer: Result<tonic::Response<tonic::Streaming<T>>, tonic::Status>,
) -> (Code, String) {
    let mut stream = match answer {
        Err(s) => return (s.code(), s.message().to_owned()),
        Ok(r) => r.into_inner(),
    };
    loop {
        match stream.message().await {
            Ok(Some(_)) => {}
            Ok(None) => return (Code::Ok, String::new()),
            Err(s) => return (s.code(), s.message().to_owned()),
        }
    }
}

/// The ledger: what a well-behaved client committed.
async fn check_ledger(c: &Client, rows: u32) {
    let mut tx = c.begin_with(TxnOptions::read_only()).await.expect("begin");
    let got = tx.scan("ledger", KeyRange::all()).await.expect("scan the ledger");
    let want: Vec<(Vec<u8>, Vec<u8>)> =
        (0..rows).map(|i| (i.to_be_bytes().to_vec(), format!("entry {i}").into_bytes())).collect();
    assert_eq!(got, want, "the ledger changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_and_malformed_requests_get_clear_statuses_and_leave_the_data_intact() {
    let panics = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&panics);
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        seen.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let sequences = env("MILLISCALE_FUZZ_SEQUENCES", 60);
    let first = env("MILLISCALE_FUZZ_SEED", 1);
    let dir = tempfile::tempdir().expect("dir");
    let url = format!("file://{}", dir.path().display());
    let mut ledger_rows = 0u32;
    let mut codes = std::collections::BTreeMap::new();
    for round in 0..2 {
        let db = AsyncDatabase::open(Options::new().store(&url)).await.expect("open");
        let mut o = ServerOptions::new("127.0.0.1:0".parse().expect("addr"));
        o.idle_timeout = Duration::from_millis(150);
        o.default_wait = Duration::from_millis(50);
        o.max_open_txns_per_conn = 64;
        let server = Server::start(Backend::Writer(db.clone()), o, None).await.expect("start");
        let addr = format!("http://{}", server.local_addr());
        let good = Client::connect(addr.clone()).await.expect("connect");
        if round == 0 {
            good.create_table("t").await.expect("t");
            good.create_table("ledger").await.expect("ledger");
        }
        let half = sequences / 2;
        let seeds = if round == 0 { first..first + half } else { first + half..first + sequences };
        for seed in seeds {
            let channel = tonic::transport::Endpoint::from_shared(addr.clone())
                .expect("endpoint")
                .connect()
                .await
                .expect("connect");
            let stub = MilliscaleClient::new(channel.clone()).max_decoding_message_size(64 << 20);
            let mut f =
                Fuzzer { stub, channel, rng: SmallRng::seed_from_u64(seed), ids: Vec::new() };
            for _ in 0..40 {
                let (code, message) = f.call().await;
                assert!(allowed(code), "seed {seed}: the server answered {code:?}: {message}");
                *codes.entry(format!("{code:?}")).or_insert(0u64) += 1;
            }
            // The well-behaved client's write, then the ledger check.
            let key = ledger_rows.to_be_bytes();
            good.put("ledger", &key, format!("entry {ledger_rows}").as_bytes())
                .await
                .expect("ledger");
            ledger_rows += 1;
            check_ledger(&good, ledger_rows).await;
            assert_eq!(good.status().await.expect("still serving").role, "writer");
        }
        server.shutdown().await;
        db.close().await.expect("close");
    }
    // Reopened: recovery finds the same ledger.
    let db = AsyncDatabase::open(Options::new().store(&url)).await.expect("reopen");
    let server = Server::start(
        Backend::Writer(db.clone()),
        ServerOptions::new("127.0.0.1:0".parse().expect("addr")),
        None,
    )
    .await
    .expect("start");
    let good = Client::connect(server.local_addr().to_string()).await.expect("connect");
    check_ledger(&good, ledger_rows).await;
    server.shutdown().await;
    db.close().await.expect("close");
    assert_eq!(panics.load(Ordering::SeqCst), 0, "something panicked");
    eprintln!("{sequences} sequences; answers by code: {codes:?}");
    for must in ["Ok", "InvalidArgument", "NotFound", "Aborted"] {
        assert!(codes.contains_key(must), "no call was answered {must}: {codes:?}");
    }
}
