//! The object_store adapter keeps the semantics SlateDB relies on, and a
//! short YCSB run through SlateDB commits, reports and costs.

use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use milliscale_bench::keys::KeyDist;
use milliscale_bench::variant::LogSettings;
use milliscale_bench::ycsb::{Engine, Workload, YcsbConfig};
use peer::object_store_adapter::Adapter;
use slatedb::object_store::path::Path;
use slatedb::object_store::{
    ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_keeps_object_store_semantics() {
    let inner = objstore::open("memory://").expect("memory store");
    let s = Adapter::new(inner, "memory://");
    let p = Path::from("db/manifest/00001.manifest");
    let put = |mode| PutOptions { mode, ..Default::default() };
    let first = s
        .put_opts(&p, PutPayload::from_static(b"one"), put(PutMode::Create))
        .await
        .expect("create");
    // A second create of the same key is refused, as S3's If-None-Match.
    let again = s.put_opts(&p, PutPayload::from_static(b"two"), put(PutMode::Create)).await;
    assert!(matches!(again, Err(slatedb::object_store::Error::AlreadyExists { .. })), "{again:?}");
    // An update with a stale ETag is refused; with the current one it lands.
    let stale = UpdateVersion { e_tag: Some("\"stale\"".into()), version: None };
    let r = s.put_opts(&p, PutPayload::from_static(b"two"), put(PutMode::Update(stale))).await;
    assert!(matches!(r, Err(slatedb::object_store::Error::Precondition { .. })), "{r:?}");
    s.put_opts(&p, PutPayload::from_static(b"two"), put(PutMode::Update(first.into())))
        .await
        .expect("update");
    assert_eq!(&s.get(&p).await.expect("get").bytes().await.expect("body")[..], b"two");
    assert_eq!(&s.get_range(&p, 1..3).await.expect("range")[..], b"wo");
    s.put(&Path::from("db/wal/0001.sst"), PutPayload::from_static(b"w")).await.expect("put");
    let listed: Vec<_> = s.list(Some(&Path::from("db"))).try_collect().await.expect("list");
    assert_eq!(listed.len(), 2);
    let dirs = s.list_with_delimiter(Some(&Path::from("db"))).await.expect("list");
    assert_eq!(dirs.common_prefixes, vec![Path::from("db/manifest"), Path::from("db/wal")]);
    assert!(dirs.objects.is_empty());
    s.delete(&p).await.expect("delete");
    assert!(matches!(s.get(&p).await, Err(slatedb::object_store::Error::NotFound { .. })));
    let _ = Arc::new(s); // the adapter is what SlateDB takes, as Arc<dyn ObjectStore>
}

fn small_config() -> YcsbConfig {
    YcsbConfig {
        records: 2_000,
        threads: 2,
        duration: Duration::from_millis(1500),
        warmup: Duration::from_millis(300),
        workload: Workload::A,
        dist: KeyDist::Uniform,
        ops_per_txn: 10,
        log: LogSettings { stores: vec!["sim://s3x".into()], ..LogSettings::default() },
        variant: "slatedb".into(),
        isolation: milliscale::Isolation::Snapshot,
        engine: Engine::Milliscale,
        seed: 3,
        pacing: milliscale_bench::harness::Pacing::Closed,
        progress: false,
        replica: None,
        feeds: 0,
        feeds_pin: false,
        tasks: None,
    }
}

#[test]
fn slatedb_runs_ycsb_on_a_sim_store_with_durable_commits() {
    let cfg = small_config();
    let opts =
        peer::slatedb_ycsb::SlateOptions { clients: 8, flush_interval: Duration::from_millis(10) };
    let r = peer::slatedb_ycsb::run(&cfg, &opts).expect("run");
    assert_eq!(r.engine, "slatedb");
    assert!(r.by_kind["read-modify-write"].committed > 0, "{:?}", r.by_kind);
    // Every writing commit waited for a durable WAL write on the sim store,
    // whose PUTs take milliseconds: a sub-millisecond p50 would mean it did not.
    assert!(r.commit_latency.p50_us > 1_000.0, "{:?}", r.commit_latency);
    let log = r.log.expect("the sim store counts requests");
    assert!(log.requests_per_s.values().sum::<f64>() > 0.0);
    assert!(log.usd_per_1000_txn > 0.0);
    // Bad options are refused before anything runs.
    assert!(
        peer::slatedb_ycsb::run(&cfg, &peer::slatedb_ycsb::SlateOptions { clients: 0, ..opts })
            .is_err()
    );
}

/// Open loop: about the offered rate commits, each transaction's latency
/// runs from its scheduled arrival (so it is at least its commit's), and
/// a rate that is not positive is refused.
#[test]
fn slatedb_runs_open_loop_at_the_offered_rate() {
    let mut cfg = small_config();
    cfg.duration = Duration::from_secs(2);
    cfg.pacing = milliscale_bench::harness::Pacing::Open { rate: 200.0 };
    let opts = peer::slatedb_ycsb::SlateOptions {
        clients: 1_000,
        flush_interval: Duration::from_millis(10),
    };
    let r = peer::slatedb_ycsb::run(&cfg, &opts).expect("run");
    // 200 a second for 2 s: Poisson arrivals, so allow a wide band.
    assert!((250..=550).contains(&r.committed), "committed {}", r.committed);
    assert_eq!(r.config["pacing"], "open(200/s)");
    assert!(r.txn_latency.p50_us > 1_000.0, "{:?}", r.txn_latency);
    assert!(r.txn_latency.p99_us >= r.commit_latency.p50_us, "{:?}", r.txn_latency);
    cfg.pacing = milliscale_bench::harness::Pacing::Open { rate: 0.0 };
    assert!(peer::slatedb_ycsb::run(&cfg, &opts).is_err());
}
