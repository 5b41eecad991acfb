//! TPC-C (`milliscale bench tpcc`): the nine tables, the five transactions
//! in the standard 45/43/4/4/4 mix, and consistency conditions 1-4 checked
//! after every run.
//!
//! - [`schema`]: tables, keys and fixed-layout rows (delta-friendly).
//! - [`load`]: the initial population.
//! - [`txns`]: inputs and bodies of NewOrder, Payment, OrderStatus,
//!   Delivery and StockLevel.
//! - [`check`]: the consistency conditions.
//!
//! Each worker is a terminal without keying or think time (as in the
//! paper): it draws a transaction type from the mix and a warehouse
//! (random, as the paper does, or its home warehouse), runs it, retries it
//! on a conflict, pre-commits it and goes on; its commit is acknowledged
//! by the commit pipeline. A transaction's latency runs from its arrival
//! (open loop) or its start (closed loop) to the acknowledgment, observed
//! by the worker after each of its transactions.

pub mod check;
pub mod load;
pub mod random;
pub mod remote;
pub mod schema;
pub mod txns;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use milliscale::{Database, Error, Isolation, Table};
use rand::Rng;
use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::harness::{LogWindow, PHASE_MEASURE, PHASE_STOP, Pacer, Pacing, Pending, Shape, drive};
use crate::report::{Environment, KindStats, Percentiles, Report};
use crate::variant::LogSettings;
use txns::{Ctx, Kind, Outcome};

/// Population size per warehouse. [`Scale::SPEC`] is the specification's;
/// smaller scales exist for tests and keep every relationship of the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    /// Rows in ITEM, and STOCK rows per warehouse.
    pub items: u32,
    /// Customers per district.
    pub customers: u32,
    /// Initial orders per district.
    pub orders: u32,
    /// Of those, the last ones that are not delivered (NEW-ORDER rows).
    pub new_orders: u32,
}

impl Scale {
    pub const SPEC: Scale =
        Scale { items: 100_000, customers: 3_000, orders: 3_000, new_orders: 900 };

    /// How many distinct last names exist (C_LAST is drawn from 0..this).
    pub fn name_numbers(self) -> u32 {
        self.customers.min(1000)
    }

    fn validate(self) -> Result<(), String> {
        if self.items < 1 || self.customers < 1 || self.orders < 1 || self.new_orders > self.orders
        {
            return Err(format!("invalid TPC-C scale {self:?}"));
        }
        Ok(())
    }
}

/// The mix in percent: NewOrder, Payment, OrderStatus, Delivery, StockLevel.
pub const STANDARD_MIX: [u32; 5] = [45, 43, 4, 4, 4];

#[derive(Debug, Clone)]
pub struct TpccConfig {
    pub warehouses: u32,
    pub scale: Scale,
    pub threads: usize,
    pub duration: Duration,
    pub warmup: Duration,
    /// Percentages per transaction type (sum 100), in [`Kind::ALL`] order.
    pub mix: [u32; 5],
    /// Each worker uses warehouse `worker % warehouses + 1`; otherwise a
    /// random warehouse per transaction (the paper's choice).
    pub home_warehouse: bool,
    /// Log updates as deltas of the changed fields (off: whole rows).
    pub delta: bool,
    pub pacing: Pacing,
    pub log: LogSettings,
    pub variant: String,
    pub isolation: Isolation,
    pub seed: u64,
    pub progress: bool,
}

impl TpccConfig {
    fn describe(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert("warehouses".into(), self.warehouses.to_string());
        if self.scale != Scale::SPEC {
            m.insert("scale".into(), format!("{:?}", self.scale));
        }
        m.insert("mix".into(), self.mix.map(|p| p.to_string()).join("/"));
        m.insert(
            "warehouse_choice".into(),
            if self.home_warehouse { "home" } else { "random" }.into(),
        );
        m.insert("logging".into(), if self.delta { "delta" } else { "full-record" }.into());
        m.insert(
            "pacing".into(),
            match self.pacing {
                Pacing::Closed => "closed".into(),
                Pacing::Open { rate } => format!("open({rate}/s)"),
            },
        );
        m.insert("variant".into(), self.variant.clone());
        self.log.describe_into(&mut m);
        m.insert("isolation".into(), format!("{:?}", self.isolation).to_lowercase());
        m.insert("warmup_s".into(), self.warmup.as_secs_f64().to_string());
        m.insert("seed".into(), self.seed.to_string());
        m
    }

    fn validate(&self) -> Result<(), String> {
        if self.warehouses == 0 || self.warehouses > 10_000 {
            return Err(format!("warehouses must be in 1..=10000, got {}", self.warehouses));
        }
        if self.threads == 0 || self.threads > 1024 {
            return Err(format!("threads must be in 1..=1024, got {}", self.threads));
        }
        if self.duration.is_zero() {
            return Err("duration must be positive".into());
        }
        if self.mix.iter().sum::<u32>() != 100 {
            return Err(format!("the mix must add up to 100, got {:?}", self.mix));
        }
        self.scale.validate()
    }
}

/// The TPC-C tables: handles to them in process (`Table`), their names
/// through a server (`String`).
#[derive(Clone)]
pub struct Tables<T = Table> {
    pub warehouse: T,
    pub district: T,
    pub customer: T,
    pub customer_by_name: T,
    pub history: T,
    pub new_order: T,
    pub order: T,
    pub order_by_customer: T,
    pub order_line: T,
    pub item: T,
    pub stock: T,
}

impl Tables {
    /// Create the tables (`open`: open existing ones).
    pub fn get(db: &Database, create: bool) -> Result<Tables, Error> {
        let mut v = Vec::with_capacity(schema::TABLES.len());
        for name in schema::TABLES {
            v.push(if create { db.create_table(name)? } else { db.open_table(name)? });
        }
        Ok(Tables::of(v))
    }
}

impl Tables<String> {
    /// The tables' names.
    pub fn names() -> Tables<String> {
        Tables::of(schema::TABLES.iter().map(|n| (*n).to_owned()).collect())
    }
}

impl<T> Tables<T> {
    /// The tables in [`schema::TABLES`]' order.
    fn of(v: Vec<T>) -> Tables<T> {
        let mut it = v.into_iter();
        let mut next = || it.next().expect("eleven tables");
        Tables {
            warehouse: next(),
            district: next(),
            customer: next(),
            customer_by_name: next(),
            history: next(),
            new_order: next(),
            order: next(),
            order_by_customer: next(),
            order_line: next(),
            item: next(),
            stock: next(),
        }
    }
}

/// What one worker (or, merged, all of them) measured.
struct WorkerStats {
    committed: [u64; 5],
    aborted: [u64; 5],
    rolled_back: u64,
    latency_ns: Vec<Histogram<u64>>,
}

impl WorkerStats {
    fn new() -> WorkerStats {
        let h = || Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds");
        WorkerStats {
            committed: [0; 5],
            aborted: [0; 5],
            rolled_back: 0,
            latency_ns: (0..5).map(|_| h()).collect(),
        }
    }

    fn merge(stats: &[WorkerStats]) -> WorkerStats {
        let mut all = WorkerStats::new();
        for s in stats {
            for k in 0..5 {
                all.committed[k] += s.committed[k];
                all.aborted[k] += s.aborted[k];
                all.latency_ns[k].add(&s.latency_ns[k]).expect("same bounds");
            }
            all.rolled_back += s.rolled_back;
        }
        all
    }

    /// The report of a run that measured these over `secs` seconds (its
    /// log and commit latency are the caller's to add).
    fn report(&self, cfg: &TpccConfig, secs: f64, notes: Vec<String>) -> Report {
        let committed: u64 = self.committed.iter().sum();
        let aborted: u64 = self.aborted.iter().sum();
        let mut latency = self.latency_ns[0].clone();
        let mut by_kind = BTreeMap::new();
        let mut latency_by_kind = BTreeMap::new();
        let mut extra = BTreeMap::new();
        for k in Kind::ALL {
            let i = k.index();
            if i > 0 {
                latency.add(&self.latency_ns[i]).expect("same bounds");
            }
            by_kind.insert(
                k.name().to_owned(),
                KindStats { committed: self.committed[i], aborted: self.aborted[i] },
            );
            latency_by_kind
                .insert(k.name().to_owned(), Percentiles::from_nanos(&self.latency_ns[i]));
            extra.insert(format!("{}_per_s", k.name()), self.committed[i] as f64 / secs);
        }
        extra.insert("tpmC".into(), self.committed[0] as f64 / secs * 60.0);
        extra.insert("new_order_rollbacks".into(), self.rolled_back as f64);
        Report {
            benchmark: "tpcc".into(),
            engine: "milliscale".into(),
            config: cfg.describe(),
            env: Environment::detect(),
            threads: cfg.threads,
            duration_s: secs,
            committed,
            aborted,
            operations: committed,
            txn_per_s: committed as f64 / secs,
            ops_per_s: committed as f64 / secs,
            abort_rate: crate::report::abort_rate(committed, aborted),
            txn_latency: Percentiles::from_nanos(&latency),
            commit_latency: Percentiles::default(),
            by_kind,
            latency_by_kind,
            extra,
            memory: Default::default(),
            log: None,
            notes,
            timeline: Vec::new(),
        }
    }
}

fn pick_kind(rng: &mut SmallRng, mix: &[u32; 5]) -> Kind {
    let mut x = rng.random_range(0..100);
    for (k, &p) in Kind::ALL.iter().zip(mix) {
        if x < p {
            return *k;
        }
        x -= p;
    }
    Kind::NewOrder
}

/// Create the schema, load it and return the NURand constants used.
pub fn setup(db: &Database, cfg: &TpccConfig) -> Result<(Tables, random::NuConstants), Error> {
    let tables = Tables::get(db, true)?;
    let nu = random::NuConstants::new(&mut SmallRng::seed_from_u64(cfg.seed));
    load::load(db, &tables, cfg.scale, cfg.warehouses, nu, cfg.threads, cfg.seed)?;
    Ok((tables, nu))
}

/// Run TPC-C on a fresh database, check consistency, and report.
pub fn run(cfg: &TpccConfig) -> Result<Report, String> {
    cfg.validate()?;
    let mut log = cfg.log.clone();
    log.seed_sims(cfg.seed);
    let db = Database::open(log.options(cfg.threads).isolation(cfg.isolation))
        .map_err(|e| e.to_string())?;
    if let Some(r) = db.recovery_report() {
        return Err(format!(
            "the store already holds a database (epoch {}, tables {:?}); TPC-C loads fresh \
             data, so give it an empty bucket, prefix or directory",
            r.old_epoch,
            db.table_names()
        ));
    }
    let mut notes = Vec::new();
    if !cfg.log.is_logged() {
        notes.push("store none: no log; a commit is acknowledged at pre-commit".into());
    }
    let t0 = Instant::now();
    let (tables, nu) = setup(&db, cfg).map_err(|e| format!("load failed: {e}"))?;
    let load_s = t0.elapsed().as_secs_f64();
    notes.push(format!("loaded {} warehouses in {load_s:.2} s", cfg.warehouses));

    let phase = AtomicU8::new(crate::harness::PHASE_WARMUP);
    let window = LogWindow::new(&db);
    let shape = Shape {
        threads: cfg.threads,
        warmup: cfg.warmup,
        duration: cfg.duration,
        progress: cfg.progress,
    };
    let (stats, (measured, memory)) =
        drive(&shape, &phase, |w| worker(&db, &tables, cfg, nu, &phase, w), |p| window.at(p))?;

    let all = WorkerStats::merge(&stats);
    let secs = measured.as_secs_f64();

    let t1 = Instant::now();
    let violations = check::check(&db, &tables, cfg.warehouses).map_err(|e| e.to_string())?;
    let check_s = t1.elapsed().as_secs_f64();
    notes.push(check::verdict(&violations, check_s)?);

    let mut report = all.report(cfg, secs, notes);
    report.memory = memory;
    report.extra.insert("load_s".into(), load_s);
    report.extra.insert("check_s".into(), check_s);
    let committed = report.committed;
    if let Some((l, commit)) = window.report(measured, committed) {
        report.commit_latency = commit;
        report.log = Some(l);
    }
    report.notes.push(
        "latency per type: arrival (open loop) or start (closed loop) to acknowledgment; \
         NewOrder rollbacks count as committed NewOrders, as the spec counts them"
            .into(),
    );
    Ok(report)
}

fn worker(
    db: &Database,
    tables: &Tables,
    cfg: &TpccConfig,
    nu: random::NuConstants,
    phase: &AtomicU8,
    w: u64,
) -> Result<WorkerStats, String> {
    let mut rng = crate::harness::worker_rng(cfg.seed, w);
    let mut stats = WorkerStats::new();
    let mut pacer = Pacer::new(cfg.pacing, cfg.threads)?;
    let mut pending = Pending::default();
    let mut ctx = Ctx {
        db,
        t: tables,
        scale: cfg.scale,
        warehouses: cfg.warehouses,
        nu,
        delta: cfg.delta,
        writer: w as u32 + 1,
        history_seq: 0,
    };
    let home = (w % u64::from(cfg.warehouses)) as u32 + 1;
    loop {
        let p = phase.load(Ordering::Relaxed);
        if p == PHASE_STOP {
            break;
        }
        let kind = pick_kind(&mut rng, &cfg.mix);
        let wh = if cfg.home_warehouse { home } else { rng.random_range(1..=cfg.warehouses) };
        let lat = &mut stats.latency_ns;
        let origin = pacer.next_arrival_tracking(&mut rng, &mut pending, |k, ns| {
            let _ = lat[k].record(ns);
        });
        let input = txns::input(&mut rng, &ctx.inputs(), kind, wh);
        let mut retries = 0u32;
        let outcome = loop {
            match txns::execute(&mut ctx, &input) {
                Ok(o) => break o,
                Err(Error::Conflict(_)) => {
                    if p == PHASE_MEASURE {
                        stats.aborted[kind.index()] += 1;
                    }
                    // The conflicting writer is usually still running:
                    // give it the core, then back off, rather than spin.
                    retries += 1;
                    if retries < 4 {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(Duration::from_micros(20 << retries.min(8)));
                    }
                }
                Err(e) => return Err(format!("{} failed: {e}", kind.name())),
            }
        };
        let measured = p == PHASE_MEASURE && phase.load(Ordering::Relaxed) == PHASE_MEASURE;
        match outcome {
            Outcome::Committed(ack) => {
                if measured {
                    stats.committed[kind.index()] += 1;
                    pending.push(kind.index(), origin, ack);
                }
            }
            Outcome::RolledBack => {
                if measured {
                    stats.committed[kind.index()] += 1;
                    stats.rolled_back += 1;
                    let ns = origin.elapsed().as_nanos().max(1) as u64;
                    let _ = stats.latency_ns[kind.index()].record(ns);
                }
            }
        }
        let lat = &mut stats.latency_ns;
        pending.poll(|k, ns| {
            let _ = lat[k].record(ns);
        });
    }
    let lat = &mut stats.latency_ns;
    pending
        .finish(|k, ns| {
            let _ = lat[k].record(ns);
        })
        .map_err(|e| format!("a commit failed: {e}"))?;
    Ok(stats)
}
