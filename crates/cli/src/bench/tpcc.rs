//! `milliscale bench tpcc`: TPC-C in process, or through a server.

use clap::Args;

use super::RunArgs;
use crate::args::{Failure, log_settings, seconds};

#[derive(Args)]
pub(crate) struct TpccArgs {
    /// Warehouses (each about 135 MiB of memory).
    #[arg(long, default_value_t = 10)]
    pub(crate) warehouses: u32,
    /// Percent NewOrder,Payment,OrderStatus,Delivery,StockLevel (sum 100).
    #[arg(long, value_delimiter = ',', default_value = "45,43,4,4,4")]
    pub(crate) mix: Vec<u32>,
    /// Each worker uses one home warehouse (worker mod warehouses), instead
    /// of a random warehouse per transaction (the paper's choice).
    #[arg(long)]
    pub(crate) home_warehouse: bool,
    /// Log whole rows on update instead of deltas of the changed fields.
    #[arg(long)]
    pub(crate) full_record_logging: bool,
    /// Drive a `milliscale serve` server at this address instead of an
    /// embedded engine. Its database must be empty: the population is
    /// loaded through it (--threads loaders) and each transaction runs as
    /// an interactive one, a round trip per read or write. The log's flags
    /// are the server's business and are ignored; closed loop only.
    #[arg(long, value_name = "ADDR")]
    pub(crate) server: Option<String>,
    /// With --server: terminals, each a thread with its own connection.
    #[arg(long, default_value_t = 16, requires = "server")]
    pub(crate) sessions: usize,
    /// With --server: commit pipelined, as the embedded engine's workers
    /// do: a terminal goes on once its commit is pre-committed and hears
    /// of its durability later on the stream (the latency still runs to
    /// the durable answer).
    #[arg(long, requires = "server")]
    pub(crate) pipelined: bool,
    /// With --server: a body's reads of several keys (NewOrder's
    /// warehouse, district and customer, its items, its stock rows;
    /// Payment's warehouse and district; StockLevel's stock rows) in one
    /// `GetMany` call each, not a call a key.
    #[arg(long, requires = "server")]
    pub(crate) get_many: bool,
    /// With --server: the bearer token (or MILLISCALE_TOKEN).
    #[arg(long, env = "MILLISCALE_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    #[command(flatten)]
    pub(crate) run: RunArgs,
}

pub(crate) fn bench_tpcc(a: TpccArgs) -> Result<(), Failure> {
    let r = &a.run;
    let (variant, log) = log_settings(&r.log)?;
    if log.pages.is_some() {
        return Err("the page variants (naive-pages, atomic-pages) run `bench ycsb` only".into());
    }
    let mix: [u32; 5] = a.mix.as_slice().try_into().map_err(|_| {
        format!("--mix takes five percentages (NewOrder,Payment,OrderStatus,Delivery,StockLevel), got {:?}", a.mix)
    })?;
    let cfg = milliscale_bench::tpcc::TpccConfig {
        warehouses: a.warehouses,
        scale: milliscale_bench::tpcc::Scale::SPEC,
        threads: r.threads(),
        duration: seconds("duration-s", r.duration)?,
        warmup: seconds("warmup-s", r.warmup)?,
        mix,
        home_warehouse: a.home_warehouse,
        delta: !a.full_record_logging,
        pacing: r.pacing(),
        log,
        variant: variant.name().to_owned(),
        isolation: r.isolation(),
        seed: r.seed,
        progress: r.progress(),
    };
    let report = match &a.server {
        Some(addr) => {
            let srv = milliscale_bench::tpcc::remote::ServerTpcc {
                addr: addr.clone(),
                token: a.token.clone(),
                sessions: a.sessions,
                pipelined: a.pipelined,
                get_many: a.get_many,
            };
            milliscale_bench::tpcc::remote::run(&cfg, &srv)?
        }
        None => milliscale_bench::tpcc::run(&cfg)?,
    };
    r.print(&report);
    Ok(())
}
