use std::time::Duration;

use milliscale_bench::harness::Pacing;
use milliscale_bench::tpcc::Scale;
use milliscale_bench::tpcc::TpccConfig;
use milliscale_bench::tpcc::remote::*;
use milliscale_bench::variant::LogSettings;
use milliscale_server::{Backend, Server, ServerOptions};

fn cfg() -> TpccConfig {
    TpccConfig {
        warehouses: 2,
        // A small population: every relationship of the spec.
        scale: Scale { items: 2_000, customers: 60, orders: 60, new_orders: 18 },
        threads: 2,
        duration: Duration::from_millis(1500),
        warmup: Duration::from_millis(200),
        // Every type equally often: a run that a busy machine slows to a
        // few hundred transactions still commits each of them (with the
        // standard mix's 4%, a slow run could miss delivery).
        mix: [20; 5],
        home_warehouse: false,
        delta: true,
        pacing: Pacing::Closed,
        log: LogSettings::default(),
        variant: "milliscale".into(),
        isolation: milliscale::Isolation::Snapshot,
        seed: 5,
        progress: false,
    }
}

/// A server on an in-memory database, on a runtime of its own.
fn serve() -> (tokio::runtime::Runtime, Server) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let server = rt.block_on(async {
        let db = milliscale::AsyncDatabase::open(milliscale::Options::new().store("memory://"))
            .await
            .expect("open");
        let o = ServerOptions::new("127.0.0.1:0".parse().expect("addr"));
        Server::start(Backend::Writer(db), o, None).await.expect("start")
    });
    (rt, server)
}

#[test]
fn tpcc_through_the_server_runs_every_type_and_stays_consistent() {
    let (rt, server) = serve();
    let srv = ServerTpcc {
        addr: server.local_addr().to_string(),
        token: None,
        sessions: 4,
        pipelined: false,
        get_many: false,
    };
    // `run` loads through the server and checks conditions 1-4 through
    // it after the run: an inconsistent database is an `Err`.
    let r = run(&cfg(), &srv).expect("run");
    for k in milliscale_bench::tpcc::txns::Kind::ALL {
        assert!(r.by_kind[k.name()].committed > 0, "{} never committed", k.name());
        assert!(r.latency_by_kind[k.name()].count > 0, "{} has no latency", k.name());
    }
    assert!(r.extra["server_cpu_us_per_txn"] > 0.0, "{:?}", r.extra);
    assert!(r.notes.iter().any(|n| n.contains("conditions 1-4 hold")), "{:?}", r.notes);
    assert_eq!(r.threads, 4);

    // A second run would load over the first one's rows: refused.
    let e = run(&cfg(), &srv).expect_err("tables exist");
    assert!(e.contains("already has table"), "{e}");
    let e = run(&cfg(), &ServerTpcc { sessions: 0, ..srv.clone() }).expect_err("no sessions");
    assert!(e.contains("--sessions"), "{e}");
    let mut open = cfg();
    open.pacing = Pacing::Open { rate: 10.0 };
    assert!(run(&open, &srv).expect_err("open loop").contains("closed loop"));
    rt.block_on(server.shutdown());
}

/// Pipelined commits and reads of many keys in one call (`bench tpcc
/// --server --pipelined --get-many`): every type
/// commits, each counted once its durability is told, and the database
/// the server holds after the run meets conditions 1-4.
#[test]
fn tpcc_through_the_server_pipelined_stays_consistent() {
    let (rt, server) = serve();
    let srv = ServerTpcc {
        addr: server.local_addr().to_string(),
        token: None,
        sessions: 4,
        pipelined: true,
        get_many: true,
    };
    let r = run(&cfg(), &srv).expect("run");
    for k in milliscale_bench::tpcc::txns::Kind::ALL {
        assert!(r.by_kind[k.name()].committed > 0, "{} never committed", k.name());
        assert!(r.latency_by_kind[k.name()].count > 0, "{} has no latency", k.name());
    }
    assert!(r.notes.iter().any(|n| n.contains("conditions 1-4 hold")), "{:?}", r.notes);
    rt.block_on(server.shutdown());
}
