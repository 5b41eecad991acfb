//! Retwis across shard servers (MILANA §6, its Table 2): clients on this
//! process, each its own coordinator with a clock skewed by up to ε/2
//! either way, against the shards of a cluster (`milliscale serve
//! --cluster`), through the cluster client ([`milliscale_client::Cluster`]).
//! The keys live in the table [`TABLE`].
//!
//! The mix: add user (1 get, 2 puts, 5%), follow (2 gets, 2 puts, 10%),
//! post tweet (3 gets, 5 puts, 35%), get timeline (1-10 gets, read-only,
//! 50%). Keys are Zipf(α) over `keys` ranks, each rank scrambled to
//! `r` + 16 hex digits, so hot keys spread over the shards' ranges. A
//! put goes to the keys read first, then to fresh ones. An aborted
//! transaction is counted, not run again (the abort rate is the figure).
//! With [`Mix::YcsbT`] the transactions are YCSB-T's instead: `ops`
//! distinct Zipf keys, each read and, half of the time, written back
//! (read-modify-write); a transaction that writes none is read-only.
//!
//! Latency is from begin to the commit's answer, committed transactions
//! only; the read-write ones are also split by single-shard (the fast
//! path: one prepare, one log write) and cross-shard (two-phase commit).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use milliscale_client::{Cluster, ClusterTransaction};
use milliscale_milana::clock::draw_skew;
use milliscale_milana::types::cluster_key;
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde::Serialize;

use crate::harness::{PHASE_MEASURE, PHASE_STOP, PHASE_WARMUP};

/// Which transactions the clients run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// Retwis (MILANA's Table 2).
    Retwis,
    /// YCSB-T: `ops` read-modify-writes (each written back half of the
    /// time) per transaction.
    YcsbT { ops: usize },
}

/// A Retwis run.
#[derive(Debug, Clone)]
pub struct RetwisConfig {
    pub mix: Mix,
    /// Any shard's address, and the bearer token.
    pub server: String,
    pub token: Option<String>,
    /// Concurrent clients (each one transaction at a time).
    pub clients: u32,
    pub keys: u64,
    /// Zipf exponent of the key choice.
    pub alpha: f64,
    /// Clock uncertainty: each client's skew is drawn from [-ε/2, ε/2] (µs).
    pub epsilon_us: u64,
    pub local_validation: bool,
    pub warmup: Duration,
    pub duration: Duration,
    pub seed: u64,
}

/// Latency percentiles, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RetwisReport {
    pub benchmark: String,
    pub clients: u32,
    pub keys: u64,
    pub alpha: f64,
    pub epsilon_us: u64,
    pub local_validation: bool,
    pub seed: u64,
    pub duration_s: f64,
    pub committed: u64,
    pub aborted: u64,
    /// Read-write transactions whose votes did not all come back.
    pub unknown: u64,
    pub txn_per_s: f64,
    pub abort_rate: f64,
    pub latency: Latency,
    /// Read-write transactions on one shard.
    pub single_shard: Latency,
    /// Read-write transactions on more than one.
    pub cross_shard: Latency,
    /// Read-only transactions (get timeline) alone.
    pub read_only: Latency,
    pub read_only_abort_rate: f64,
}

struct Stats {
    committed: u64,
    aborted: u64,
    unknown: u64,
    ro_committed: u64,
    ro_aborted: u64,
    all: Histogram<u64>,
    single: Histogram<u64>,
    cross: Histogram<u64>,
    ro: Histogram<u64>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000_000, 3).expect("valid bounds")
}

impl Stats {
    fn new() -> Stats {
        Stats {
            committed: 0,
            aborted: 0,
            unknown: 0,
            ro_committed: 0,
            ro_aborted: 0,
            all: histogram(),
            single: histogram(),
            cross: histogram(),
            ro: histogram(),
        }
    }

    fn add(&mut self, o: &Stats) {
        self.committed += o.committed;
        self.aborted += o.aborted;
        self.unknown += o.unknown;
        self.ro_committed += o.ro_committed;
        self.ro_aborted += o.ro_aborted;
        for (a, b) in [
            (&mut self.all, &o.all),
            (&mut self.single, &o.single),
            (&mut self.cross, &o.cross),
            (&mut self.ro, &o.ro),
        ] {
            a.add(b).expect("same bounds");
        }
    }
}

fn latency(h: &Histogram<u64>) -> Latency {
    let ms = |ns: u64| ns as f64 / 1e6;
    Latency {
        count: h.len(),
        p50_ms: ms(h.value_at_quantile(0.5)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        mean_ms: h.mean() / 1e6,
    }
}

/// The key of `rank`: scrambled (splitmix64), so that the hot ranks land
/// all over the key space and so on every shard.
pub fn key_of(rank: u64) -> Vec<u8> {
    let mut z = rank.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    format!("r{:016x}", z ^ (z >> 31)).into_bytes()
}

/// The table the keys are in.
pub const TABLE: &str = "retwis";

/// The split keys (cluster keys: `table`'s name, 0x00, the key) that give
/// `shards` shards equal parts of the keys [`key_of`] makes in `table`
/// (the first range starts at the empty key).
pub fn even_splits(table: &str, shards: u32) -> Vec<Vec<u8>> {
    (1..shards)
        .map(|i| {
            format!("r{:016x}", (u128::from(u64::MAX) * u128::from(i) / u128::from(shards)) as u64)
        })
        .map(|k| cluster_key(table, k.as_bytes()))
        .collect()
}

/// Run Retwis; needs a tokio runtime.
pub async fn run(cfg: &RetwisConfig) -> Result<RetwisReport, String> {
    if cfg.clients == 0 || cfg.keys < 10 || cfg.alpha <= 0.0 {
        return Err("--clients must be at least 1, --keys at least 10 and --alpha above 0".into());
    }
    let zipf = Zipf::new(cfg.keys as f64, cfg.alpha).map_err(|e| format!("--alpha: {e}"))?;
    let phase = Arc::new(AtomicU8::new(PHASE_WARMUP));
    let total = Arc::new(Mutex::new(Stats::new()));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let mut tasks = Vec::new();
    let mix = cfg.mix;
    for id in 1..=cfg.clients {
        let mut b = Cluster::builder(cfg.server.clone())
            .client_id(id)
            .clock_skew_us(draw_skew(cfg.epsilon_us, &mut rng))
            .local_validation(cfg.local_validation);
        if let Some(t) = &cfg.token {
            b = b.token(t.clone());
        }
        let client = b.connect().await.map_err(|e| e.to_string())?;
        if id == 1 {
            match client.create_table(TABLE).await {
                Err(e) if e.code() != milliscale_client::Code::AlreadyExists => {
                    return Err(format!("creating table {TABLE}: {e}"));
                }
                _ => {}
            }
        }
        let rng = SmallRng::seed_from_u64(cfg.seed ^ (u64::from(id) << 32));
        let (phase, total, errors) = (Arc::clone(&phase), Arc::clone(&total), Arc::clone(&errors));
        tasks.push(tokio::spawn(async move {
            match session(&client, zipf, rng, &phase, mix).await {
                Ok(s) => total.lock().add(&s),
                Err(e) => {
                    errors.lock().push(e);
                    phase.store(PHASE_STOP, Ordering::SeqCst);
                }
            }
            // Its low-water mark no longer holds the shards' watermark.
            client.close().await;
        }));
    }
    tokio::time::sleep(cfg.warmup).await;
    phase.store(PHASE_MEASURE, Ordering::SeqCst);
    let started = Instant::now();
    tokio::time::sleep(cfg.duration).await;
    let measured = started.elapsed().as_secs_f64();
    phase.store(PHASE_STOP, Ordering::SeqCst);
    for t in tasks {
        t.await.map_err(|e| e.to_string())?;
    }
    if let Some(e) = errors.lock().first() {
        return Err(format!("a client failed: {e}"));
    }
    let s = total.lock();
    let decided = (s.committed + s.aborted).max(1) as f64;
    let ro = (s.ro_committed + s.ro_aborted).max(1) as f64;
    Ok(RetwisReport {
        benchmark: match cfg.mix {
            Mix::Retwis => "retwis".into(),
            Mix::YcsbT { ops } => format!("ycsb-t ({ops} ops)"),
        },
        clients: cfg.clients,
        keys: cfg.keys,
        alpha: cfg.alpha,
        epsilon_us: cfg.epsilon_us,
        local_validation: cfg.local_validation,
        seed: cfg.seed,
        duration_s: measured,
        committed: s.committed,
        aborted: s.aborted,
        unknown: s.unknown,
        txn_per_s: s.committed as f64 / measured,
        abort_rate: s.aborted as f64 / decided,
        latency: latency(&s.all),
        single_shard: latency(&s.single),
        cross_shard: latency(&s.cross),
        read_only: latency(&s.ro),
        read_only_abort_rate: s.ro_aborted as f64 / ro,
    })
}

/// One client's loop: a Retwis transaction at a time until stopped.
async fn session(
    client: &Cluster,
    zipf: Zipf<f64>,
    mut rng: SmallRng,
    phase: &AtomicU8,
    mix: Mix,
) -> Result<Stats, String> {
    let mut st = Stats::new();
    let keys = zipf_keys(zipf);
    loop {
        let p = phase.load(Ordering::Relaxed);
        if p == PHASE_STOP {
            return Ok(st);
        }
        let (reads, writes) = plan(mix, &keys, &mut rng);
        let puts = writes.len();
        let started = Instant::now();
        let mut tx: ClusterTransaction = client.begin();
        let outcome = async {
            // The reads at once: one call per shard holding any of them.
            let keys: Vec<&[u8]> = reads.iter().map(|k| k.as_slice()).collect();
            tx.get_many(TABLE, &keys).await?;
            let (c, seq) = tx.id();
            let value = format!("{c}-{seq}");
            for k in &writes {
                tx.put(TABLE, k, value.as_bytes())?;
            }
            let shards = tx.shards().len();
            tx.commit().await.map(|_| shards)
        }
        .await;
        let took = started.elapsed().as_nanos().max(1) as u64;
        if p != PHASE_MEASURE || phase.load(Ordering::Relaxed) != PHASE_MEASURE {
            continue;
        }
        let read_only = puts == 0;
        match outcome {
            Ok(shards) => {
                st.committed += 1;
                let _ = st.all.record(took);
                if read_only {
                    st.ro_committed += 1;
                    let _ = st.ro.record(took);
                } else {
                    let _ = if shards > 1 { st.cross.record(took) } else { st.single.record(took) };
                }
            }
            Err(e) if e.is_retryable() => {
                st.aborted += 1;
                st.ro_aborted += u64::from(read_only);
            }
            Err(e) if e.kind() == "unknown" => st.unknown += 1,
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// One transaction's keys: what it reads, and what it writes.
fn plan(
    mix: Mix,
    keys: &impl Fn(&mut SmallRng) -> Vec<u8>,
    rng: &mut SmallRng,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let distinct = |n: usize, rng: &mut SmallRng, mut out: Vec<Vec<u8>>| {
        while out.len() < n {
            let k = keys(rng);
            if !out.contains(&k) {
                out.push(k);
            }
        }
        out
    };
    match mix {
        Mix::Retwis => {
            let (gets, puts) = match rng.random_range(0..100) {
                0..5 => (1, 2),
                5..15 => (2, 2),
                15..50 => (3, 5),
                _ => (rng.random_range(1..=10), 0),
            };
            let reads = distinct(gets, rng, Vec::new());
            let mut first = reads.clone();
            first.truncate(puts);
            let writes = distinct(puts, rng, first);
            (reads, writes)
        }
        Mix::YcsbT { ops } => {
            let reads = distinct(ops.max(1), rng, Vec::new());
            let writes = reads.iter().filter(|_| rng.random_bool(0.5)).cloned().collect();
            (reads, writes)
        }
    }
}

/// A key chooser: a Zipf rank, scrambled.
fn zipf_keys(zipf: Zipf<f64>) -> impl Fn(&mut SmallRng) -> Vec<u8> {
    move |rng| key_of(zipf.sample(rng) as u64)
}
