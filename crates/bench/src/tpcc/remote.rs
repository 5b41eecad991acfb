//! TPC-C through a `milliscale serve` server (`bench tpcc --server ADDR`):
//! the same population, inputs and transaction bodies as in process
//! ([`super::txns::body`]), each transaction an interactive one on the
//! server (`Begin`, a call per read or write, `Commit`), from `sessions`
//! terminals.
//!
//! Each terminal is a thread with its own connection and a current-thread
//! runtime it drives inside each call (the bodies are synchronous, as the
//! engine's are), closed loop, without keying or think time. A
//! transaction's latency runs from its `Begin` to the answer of its
//! `Commit`, which comes once the commit is durable; or, `pipelined`, the
//! commit is answered at pre-commit and the terminal goes on, as the
//! engine's workers do, its latency running to the word that it is
//! durable (told on the stream, seen by a task on the terminal's runtime).
//! With `get_many` a body's reads of several keys are one call (the
//! bodies ask for them together: [`Txn::get_many`], [`Txn::get_across`]).
//! A conflict aborts the
//! transaction on the server and runs it again with the same input,
//! counted as an abort. The population is loaded through the server as
//! one-shot batches of [`load::BATCH`] rows, and consistency conditions
//! 1-4 are checked after the run in one read-only transaction through the
//! server. The server's CPU per transaction comes from its `Status`
//! before and after the measured phase.

use std::ops::Bound;
use std::time::{Duration, Instant};

use milliscale::{ConflictKind, Direction, Error};
use milliscale_client as client;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::runtime::Runtime;

use super::load::{self, Population, Sink};
use super::txns::{self, Done, Rows, Terminal, Txn};
use super::{Tables, TpccConfig, WorkerStats, check, pick_kind, random};
use crate::harness::Pacing;
use crate::report::Report;

/// Where the server is, and how many terminals drive it.
#[derive(Debug, Clone)]
pub struct ServerTpcc {
    pub addr: String,
    pub token: Option<String>,
    /// Concurrent terminals, each a thread and a connection (1..=1024).
    pub sessions: usize,
    /// Commit pipelined (see the module's comment).
    pub pipelined: bool,
    /// The bodies' reads of several keys (NewOrder's warehouse, district
    /// and customer, its items, its stock rows; Payment's warehouse and
    /// district; StockLevel's stock rows) in one `GetMany` call each, not
    /// a call a key.
    pub get_many: bool,
}

/// The engine's error for a client's: a conflict stays a conflict (the
/// caller runs the transaction again); the rest say where they came from.
fn engine_error(e: &client::Error) -> Error {
    match e.kind() {
        "conflict" => Error::Conflict(ConflictKind::WriteWrite),
        _ if e.code() == client::Code::Unavailable => {
            Error::StoreUnavailable(format!("the server: {e}"))
        }
        _ => Error::InvalidArgument(format!("the server: {e}")),
    }
}

/// A terminal's connection: a client on a runtime of the terminal's own.
struct Connection {
    rt: Runtime,
    client: client::Client,
    get_many: bool,
}

impl Connection {
    fn open(srv: &ServerTpcc) -> Result<Connection, Error> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::InvalidArgument(format!("a client runtime: {e}")))?;
        let mut b = client::Client::builder(srv.addr.clone());
        if let Some(t) = &srv.token {
            b = b.token(t.clone());
        }
        let client = rt.block_on(b.connect()).map_err(|e| engine_error(&e))?;
        Ok(Connection { rt, client, get_many: srv.get_many })
    }

    fn begin(&self, read_only: bool, isolation: client::Isolation) -> Result<Remote<'_>, Error> {
        let opts = client::TxnOptions { read_only, isolation, ..Default::default() };
        let tx = self.rt.block_on(self.client.begin_with(opts)).map_err(|e| engine_error(&e))?;
        Ok(Remote { rt: &self.rt, tx, get_many: self.get_many })
    }
}

/// An interactive transaction on the server, as a body sees it.
struct Remote<'a> {
    rt: &'a Runtime,
    tx: client::Transaction,
    /// [`Txn::get_many`] as one call.
    get_many: bool,
}

impl Remote<'_> {
    /// Commit; returns once durable.
    fn commit(self) -> Result<(), Error> {
        self.rt.block_on(self.tx.commit()).map(|_| ()).map_err(|e| engine_error(&e))
    }

    /// Commit pipelined: once pre-committed, with the ack of its
    /// durability.
    fn commit_pipelined(self) -> Result<client::CommitAck, Error> {
        let (_, ack) =
            self.rt.block_on(self.tx.commit_pipelined()).map_err(|e| engine_error(&e))?;
        Ok(ack)
    }

    /// Abort, on the server at once (an error means it ended already).
    fn abort(self) {
        let _ = self.rt.block_on(self.tx.abort());
    }
}

impl Txn for Remote<'_> {
    type Table = String;

    fn get(&mut self, t: &String, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.rt.block_on(self.tx.get(t, key)).map_err(|e| engine_error(&e))
    }

    fn get_many(&mut self, t: &String, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, Error> {
        if !self.get_many {
            return keys.iter().map(|k| self.get(t, k)).collect();
        }
        self.rt.block_on(self.tx.get_many(t, keys)).map_err(|e| engine_error(&e))
    }

    fn get_across(&mut self, keys: &[(&String, &[u8])]) -> Result<Vec<Option<Vec<u8>>>, Error> {
        if !self.get_many {
            return keys.iter().map(|(t, k)| self.get(t, k)).collect();
        }
        let keys: Vec<(&str, &[u8])> = keys.iter().map(|(t, k)| (t.as_str(), *k)).collect();
        self.rt.block_on(self.tx.get_many_across(&keys)).map_err(|e| engine_error(&e))
    }

    fn put(&mut self, t: &String, key: &[u8], value: &[u8]) -> Result<(), Error> {
        self.rt.block_on(self.tx.put(t, key, value)).map_err(|e| engine_error(&e))
    }

    fn update_range(
        &mut self,
        t: &String,
        key: &[u8],
        offset: usize,
        patch: &[u8],
    ) -> Result<(), Error> {
        let offset = u32::try_from(offset)
            .map_err(|_| Error::InvalidArgument(format!("offset {offset} over 32 bits")))?;
        self.rt.block_on(self.tx.patch(t, key, offset, patch)).map_err(|e| engine_error(&e))
    }

    fn delete(&mut self, t: &String, key: &[u8]) -> Result<bool, Error> {
        self.rt.block_on(self.tx.delete(t, key)).map_err(|e| engine_error(&e))
    }

    fn scan(
        &mut self,
        t: &String,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        direction: Direction,
        limit: usize,
    ) -> Result<Rows, Error> {
        // The wire's ranges are start-inclusive, end-exclusive: what the
        // bodies ask for.
        let start = match lower {
            Bound::Included(k) => Some(k.to_vec()),
            Bound::Unbounded => None,
            Bound::Excluded(_) => {
                return Err(Error::InvalidArgument("an exclusive lower bound".into()));
            }
        };
        let end = match upper {
            Bound::Excluded(k) => Some(k.to_vec()),
            Bound::Unbounded => None,
            Bound::Included(_) => {
                return Err(Error::InvalidArgument("an inclusive upper bound".into()));
            }
        };
        let range = client::KeyRange {
            start,
            end,
            prefix: None,
            reverse: direction == Direction::Backward,
            limit: if limit == usize::MAX { 0 } else { limit as u64 },
        };
        self.rt.block_on(self.tx.scan(t, range)).map_err(|e| engine_error(&e))
    }
}

/// A loader's rows, sent as one-shot batches answered at pre-commit; its
/// last commit's token is waited for at the end (a later commit of the
/// same connection has a larger token, and a token is durable only once
/// every smaller one is).
struct RemoteSink {
    conn: Connection,
    batch: client::Batch,
    rows: usize,
    last: Option<u64>,
}

impl RemoteSink {
    fn flush(&mut self) -> Result<(), Error> {
        if self.rows == 0 {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch).durability(client::Durability::Precommit);
        let r = self.conn.rt.block_on(self.conn.client.execute(batch));
        self.last = r.map_err(|e| engine_error(&e))?.token.or(self.last);
        self.rows = 0;
        Ok(())
    }
}

impl Sink for RemoteSink {
    type Table = String;

    fn put(&mut self, t: &String, key: &[u8], value: &[u8]) -> Result<(), Error> {
        self.batch.put(t, key, value);
        self.rows += 1;
        if self.rows >= load::BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<(), Error> {
        self.flush()?;
        if let Some(token) = self.last {
            let waited = self.conn.client.wait_for(token, Duration::from_secs(60));
            let durable = self.conn.rt.block_on(waited).map_err(|e| engine_error(&e))?;
            if durable <= token {
                return Err(Error::StoreUnavailable(format!(
                    "the load's last commit (token {token}) is not durable after 60 s"
                )));
            }
        }
        Ok(())
    }
}

fn isolation(i: milliscale::Isolation) -> client::Isolation {
    match i {
        milliscale::Isolation::ReadCommitted => client::Isolation::ReadCommitted,
        milliscale::Isolation::Snapshot => client::Isolation::Snapshot,
        milliscale::Isolation::Serializable => client::Isolation::Serializable,
    }
}

/// Load TPC-C into the server's (empty) database, run it from
/// `srv.sessions` terminals, check conditions 1-4, and report.
pub fn run(cfg: &TpccConfig, srv: &ServerTpcc) -> Result<Report, String> {
    cfg.validate()?;
    if !(1..=1024).contains(&srv.sessions) {
        return Err(format!("--sessions must be in 1..=1024, got {}", srv.sessions));
    }
    if let Pacing::Open { .. } = cfg.pacing {
        return Err("--server runs TPC-C closed loop: leave out --rate".into());
    }
    fn failed(what: &'static str) -> impl Fn(Error) -> String {
        move |e| format!("{what}: {e}")
    }
    let admin = Connection::open(srv).map_err(failed("connecting to the server"))?;
    let existing = admin.rt.block_on(admin.client.list_tables()).map_err(|e| e.to_string())?;
    if let Some(t) = super::schema::TABLES.iter().find(|t| existing.iter().any(|e| e == *t)) {
        return Err(format!(
            "the server's database already has table {t:?}; TPC-C loads fresh data, so \
             serve an empty database"
        ));
    }
    for t in super::schema::TABLES {
        admin.rt.block_on(admin.client.create_table(t)).map_err(|e| e.to_string())?;
    }
    let tables = Tables::names();
    let nu = random::NuConstants::new(&mut SmallRng::seed_from_u64(cfg.seed));
    let population =
        Population { scale: cfg.scale, warehouses: cfg.warehouses, nu, seed: cfg.seed };
    let t0 = Instant::now();
    load::load_into(&tables, population, cfg.threads, |_| {
        Ok(RemoteSink {
            conn: Connection::open(srv)?,
            batch: client::Batch::new(),
            rows: 0,
            last: None,
        })
    })
    .map_err(failed("load failed"))?;
    let load_s = t0.elapsed().as_secs_f64();
    let mut notes =
        vec![format!("loaded {} warehouses through the server in {load_s:.2} s", cfg.warehouses)];

    let start = Instant::now();
    let measure_from = start + cfg.warmup;
    let end = measure_from + cfg.duration;
    let status = |conn: &Connection| conn.rt.block_on(conn.client.status());
    let (stats, cpu) = std::thread::scope(|s| {
        let terminals: Vec<_> = (0..srv.sessions)
            .map(|i| {
                let tables = &tables;
                s.spawn(move || terminal(cfg, srv, tables, nu, i, measure_from, end))
            })
            .collect();
        // The server's CPU over the measured phase.
        std::thread::sleep(measure_from.saturating_duration_since(Instant::now()));
        let before = status(&admin);
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        let after = status(&admin);
        let stats: Result<Vec<WorkerStats>, String> =
            terminals.into_iter().map(|t| t.join().expect("a terminal panicked")).collect();
        let cpu = match (before, after) {
            (Ok(b), Ok(a)) => Some(a.cpu_seconds - b.cpu_seconds),
            _ => None,
        };
        (stats, cpu)
    });
    let all = WorkerStats::merge(&stats?);
    let secs = cfg.duration.as_secs_f64();

    let t1 = Instant::now();
    let mut tx = admin.begin(true, isolation(cfg.isolation)).map_err(failed("the check"))?;
    let violations =
        check::check_in(&mut tx, &tables, cfg.warehouses).map_err(failed("the check"))?;
    tx.abort();
    let check_s = t1.elapsed().as_secs_f64();
    notes.push(check::verdict(&violations, check_s)?);
    notes.push(
        "through the server: interactive transactions, latency from Begin to the durable \
         Commit's answer; NewOrder rollbacks count as committed NewOrders"
            .into(),
    );
    let mut report = all.report(cfg, secs, notes);
    report.threads = srv.sessions;
    report.config.insert("server".into(), srv.addr.clone());
    report.config.insert("sessions".into(), srv.sessions.to_string());
    report.extra.insert("load_s".into(), load_s);
    report.extra.insert("check_s".into(), check_s);
    if let Some(cpu) = cpu.filter(|_| report.committed > 0) {
        report.extra.insert("server_cpu_us_per_txn".into(), cpu * 1e6 / report.committed as f64);
        report.extra.insert("server_cpu_cores".into(), cpu / secs);
    }
    Ok(report)
}

/// A pipelined commit's wait for its durability: when it was durable.
type Ack = tokio::task::JoinHandle<Result<Instant, client::Error>>;

/// When the commit `task` waits for was durable (waiting for it), or why
/// it may be lost.
fn durable_at(conn: &Connection, task: Ack) -> Result<Instant, String> {
    match conn.rt.block_on(task) {
        Ok(Ok(at)) => Ok(at),
        Ok(Err(e)) => Err(format!("a pipelined commit may be lost: {e}")),
        Err(e) => Err(format!("a pipelined commit's wait: {e}")),
    }
}

/// One terminal: closed loop until `end`, counting what ran between
/// `measure_from` and `end`.
fn terminal(
    cfg: &TpccConfig,
    srv: &ServerTpcc,
    tables: &Tables<String>,
    nu: random::NuConstants,
    i: usize,
    measure_from: Instant,
    end: Instant,
) -> Result<WorkerStats, String> {
    let conn = Connection::open(srv).map_err(|e| format!("terminal {i}: {e}"))?;
    let mut rng = crate::harness::worker_rng(cfg.seed, i as u64);
    let mut stats = WorkerStats::new();
    let mut term = Terminal { delta: cfg.delta, writer: i as u32 + 1, history_seq: 0 };
    let ctx = txns::InputCtx { scale: cfg.scale, warehouses: cfg.warehouses, nu };
    let home = (i as u64 % u64::from(cfg.warehouses)) as u32 + 1;
    let iso = isolation(cfg.isolation);
    // Pipelined commits not yet seen durable: each a task on the
    // terminal's runtime (run while the terminal waits for its calls),
    // answering when it was durable.
    let mut acks: std::collections::VecDeque<(usize, Instant, Ack)> = Default::default();
    // A transaction done (committed durably, or rolled back) at `done`.
    let counted = |stats: &mut WorkerStats, kind: usize, begun: Instant, done: Instant| {
        if begun >= measure_from && done <= end {
            stats.committed[kind] += 1;
            let ns = done.duration_since(begun).as_nanos().max(1) as u64;
            let _ = stats.latency_ns[kind].record(ns);
        }
    };
    while Instant::now() < end {
        let kind = pick_kind(&mut rng, &cfg.mix);
        let wh = if cfg.home_warehouse { home } else { rng.random_range(1..=cfg.warehouses) };
        let input = txns::input(&mut rng, &ctx, kind, wh);
        let begun = Instant::now();
        let mut retries = 0u32;
        let (rolled_back, ack) = loop {
            let mut tx = conn.begin(input.read_only(), iso).map_err(|e| e.to_string())?;
            let outcome = match txns::body(&mut tx, tables, &mut term, &input) {
                Ok(Done::Commit) if srv.pipelined => {
                    tx.commit_pipelined().map(|ack| (false, Some(ack)))
                }
                Ok(Done::Commit) => tx.commit().map(|()| (false, None)),
                Ok(Done::RollBack) => {
                    tx.abort();
                    Ok((true, None))
                }
                Err(e) => {
                    tx.abort();
                    Err(e)
                }
            };
            match outcome {
                Ok(done) => break done,
                Err(Error::Conflict(_)) => {
                    if begun >= measure_from && Instant::now() < end {
                        stats.aborted[kind.index()] += 1;
                    }
                    retries += 1;
                    std::thread::sleep(Duration::from_micros(50 << retries.min(8)));
                }
                Err(e) => return Err(format!("{} failed: {e}", kind.name())),
            }
        };
        match ack {
            None => {
                let done = Instant::now();
                if begun >= measure_from && done <= end {
                    stats.rolled_back += u64::from(rolled_back);
                }
                counted(&mut stats, kind.index(), begun, done);
            }
            Some(ack) => {
                let task =
                    conn.rt.spawn(async move { ack.durable().await.map(|()| Instant::now()) });
                acks.push_back((kind.index(), begun, task));
            }
        }
        // The acks told by now, in order.
        while acks.front().is_some_and(|(_, _, t)| t.is_finished()) {
            let (kind, begun, task) = acks.pop_front().expect("a front");
            counted(&mut stats, kind, begun, durable_at(&conn, task)?);
        }
    }
    for (kind, begun, task) in acks {
        counted(&mut stats, kind, begun, durable_at(&conn, task)?);
    }
    Ok(stats)
}
