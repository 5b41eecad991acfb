use std::time::Duration;

use milliscale::{Database, Isolation};
use milliscale_bench::harness::Pacing;
use milliscale_bench::tpcc::schema::*;
use milliscale_bench::tpcc::txns::{Ctx, Kind, Outcome};
use milliscale_bench::tpcc::*;
use milliscale_bench::variant::LogSettings;
use rand::SeedableRng;
use rand::rngs::SmallRng;

/// A small population: every relationship of the spec, fewer rows.
const SMALL: Scale = Scale { items: 2_000, customers: 60, orders: 60, new_orders: 18 };

fn cfg(warehouses: u32) -> TpccConfig {
    TpccConfig {
        warehouses,
        scale: SMALL,
        threads: 2,
        duration: Duration::from_millis(700),
        warmup: Duration::from_millis(100),
        mix: STANDARD_MIX,
        home_warehouse: false,
        delta: true,
        pacing: Pacing::Closed,
        log: LogSettings { stores: vec!["memory://".into()], ..LogSettings::default() },
        variant: "milliscale".into(),
        isolation: Isolation::Snapshot,
        seed: 5,
        progress: false,
    }
}

#[test]
fn a_short_run_reports_every_type_and_stays_consistent() {
    for delta in [true, false] {
        let mut c = cfg(2);
        c.delta = delta;
        let r = run(&c).expect("run (it checks conditions 1-4)");
        for k in Kind::ALL {
            assert!(r.by_kind[k.name()].committed > 0, "{} never committed", k.name());
            assert!(r.latency_by_kind[k.name()].count > 0, "{} has no latency", k.name());
        }
        assert!(r.extra["tpmC"] > 0.0);
        assert!(r.log.as_ref().expect("logged").bytes_per_logged_txn > 0.0);
        assert!(r.notes.iter().any(|n| n.contains("conditions 1-4 hold")));
    }
}

#[test]
fn open_loop_runs_at_about_the_given_rate() {
    let mut c = cfg(1);
    c.pacing = Pacing::Open { rate: 400.0 };
    c.duration = Duration::from_secs(1);
    let r = run(&c).expect("run");
    // Poisson arrivals over one second: 400 ± a few standard deviations.
    assert!((250.0..550.0).contains(&r.txn_per_s), "{} txn/s", r.txn_per_s);
}

/// Load, run a little, then break each condition by hand: the check
/// must name it.
#[test]
fn the_check_catches_each_broken_condition() {
    let c = cfg(1);
    let db = Database::open(milliscale::Options::new()).expect("open");
    let (t, nu) = setup(&db, &c).expect("load");
    let mut ctx = Ctx {
        db: &db,
        t: &t,
        scale: c.scale,
        warehouses: 1,
        nu,
        delta: true,
        writer: 1,
        history_seq: 0,
    };
    let mut rng = SmallRng::seed_from_u64(9);
    for i in 0..300 {
        // Few deliveries, so every district keeps some new orders.
        let kind = if i % 50 == 7 {
            Kind::Delivery
        } else {
            [Kind::NewOrder, Kind::Payment, Kind::OrderStatus, Kind::StockLevel][i % 4]
        };
        let input = txns::input(&mut rng, &ctx.inputs(), kind, 1);
        if let Outcome::Committed(ack) = txns::execute(&mut ctx, &input).expect("txn") {
            ack.wait().expect("ack");
        }
    }
    assert_eq!(check::check(&db, &t, 1).expect("check"), Vec::<String>::new());

    let broken = |f: &dyn Fn(&mut milliscale::Transaction<'_>), condition: &str| {
        let mut tx = db.begin().expect("begin");
        f(&mut tx);
        tx.commit().expect("commit").wait().expect("ack");
        let bad = check::check(&db, &t, 1).expect("check");
        assert!(bad.iter().any(|v| v.starts_with(condition)), "{condition} not reported: {bad:?}");
    };
    // 1: a district's YTD no longer adds up to the warehouse's.
    broken(
        &|tx| {
            let k = district::key(1, 3);
            tx.update_range(&t.district, &k, district::YTD.off, &1i64.to_le_bytes()).expect("w")
        },
        "condition 1",
    );
    // 4: an order line vanishes.
    broken(
        &|tx| {
            assert!(tx.delete(&t.order_line, &order_line::key(1, 2, 5, 1)).expect("delete"));
        },
        "condition 4",
    );
    // 3: a new order in the middle of the district's range vanishes.
    broken(
        &|tx| {
            let no = txns::scan_prefix(
                tx,
                &t.new_order,
                &district::key(1, 4),
                milliscale::Direction::Forward,
                usize::MAX,
            )
            .expect("scan");
            assert!(no.len() > 2);
            assert!(tx.delete(&t.new_order, &no[no.len() / 2].0).expect("delete"));
        },
        "condition 3",
    );
    // 2: the district's newest order vanishes.
    broken(
        &|tx| {
            let d = tx.get(&t.district, &district::key(1, 5)).expect("get").expect("district");
            let o = get_u32(&d, district::NEXT_O_ID) - 1;
            assert!(tx.delete(&t.order, &order::key(1, 5, o)).expect("delete"));
        },
        "condition 2",
    );
}

#[test]
fn delta_logging_writes_fewer_log_bytes() {
    // NewOrder and Payment only, same seed: delta against full rows.
    let mut bytes = Vec::new();
    for delta in [true, false] {
        let mut c = cfg(1);
        c.mix = [50, 50, 0, 0, 0];
        c.threads = 1;
        c.delta = delta;
        let r = run(&c).expect("run");
        bytes.push(r.log.expect("logged").bytes_per_logged_txn);
    }
    assert!(bytes[0] < bytes[1] / 2.0, "delta {} B/txn, full {} B/txn", bytes[0], bytes[1]);
}

#[test]
fn bad_configs_are_refused() {
    let mut c = cfg(1);
    c.mix = [50, 50, 1, 0, 0];
    assert!(run(&c).is_err());
    let mut c = cfg(0);
    c.warehouses = 0;
    assert!(run(&c).is_err());
    let mut c = cfg(1);
    c.pacing = Pacing::Open { rate: -1.0 };
    assert!(run(&c).is_err());
}
