//! The simulated world: its configuration, its event loop, the shards'
//! and the clients' handlers.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::hash::Hash;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::clock::{HybridClock, draw_skew};
use crate::coordinator::ClientTxn;
use crate::fresh::Fresh;
use crate::log::{Prepare, Record};
use crate::participant::{Mutations, Participant, ReadReply, ScanReply};
use crate::types::{ClientId, CommitTs, Key, ShardId, Timestamp, TxnId, TxnStatus, Value};
use crate::versions::Gone;

/// What one simulation runs: sizes, the workload, and the faults. Times
/// are in microseconds of simulated time.
#[derive(Debug, Clone)]
pub struct DstConfig {
    /// Drives every random choice.
    pub seed: u64,
    /// Shard primaries.
    pub shards: u32,
    /// Clients (coordinators), one transaction at a time each.
    pub clients: u32,
    /// Bank accounts, spread over the shards (account `i` on shard
    /// `i % shards`).
    pub accounts: u32,
    /// Each account's starting balance.
    pub initial_balance: u64,
    /// Transactions each client runs (it may die first).
    pub txns_per_client: u32,
    /// The share of read-only audits (they read every account).
    pub audit_fraction: f64,
    /// The clock uncertainty ε: each client's skew is in [-ε/2, ε/2].
    pub epsilon: Timestamp,
    /// One-way message delay, uniform in this range.
    pub net_delay: (Timestamp, Timestamp),
    /// Chance that a message is lost.
    pub drop_rate: f64,
    /// From a log append to its durability, uniform in this range.
    pub log_latency: (Timestamp, Timestamp),
    /// Mean time between crashes of each primary (0: no crashes).
    pub shard_crash_every: Timestamp,
    /// How long a crashed primary stays down before its standby takes
    /// over (recovery from its log).
    pub shard_down: (Timestamp, Timestamp),
    /// Chance that one client (a coordinator) dies at a random moment.
    pub client_crash_chance: f64,
    /// Mean time between partitions (0: none); each cuts one pair of
    /// nodes apart for a while.
    pub partition_every: Timestamp,
    /// How long a partition lasts.
    pub partition_length: (Timestamp, Timestamp),
    /// A client's wait for reads, for votes, and for an abort's answer.
    pub client_timeout: Timestamp,
    /// A participant's wait for a decision before it asks the others.
    pub termination_timeout: Timestamp,
    /// How far a primary's read lease reaches past a read.
    pub lease_span: Timestamp,
    /// Deliberate protocol bugs (all off normally).
    pub mutations: Mutations,
    /// Instead of the bank: Retwis's mix (MILANA's Table 2: add user,
    /// follow, post, timeline) over the accounts as keys, chosen
    /// zipfian with this α (contention). The bank's checks are skipped;
    /// the others hold as they are.
    pub retwis: Option<f64>,
}

impl DstConfig {
    /// The defaults for `seed`: 3 shards, 4 clients, 12 accounts, 25
    /// transactions each, ε = 1.5 ms, every fault on.
    pub fn new(seed: u64) -> DstConfig {
        DstConfig {
            seed,
            shards: 3,
            clients: 4,
            accounts: 12,
            initial_balance: 100,
            txns_per_client: 25,
            audit_fraction: 0.25,
            epsilon: 1_500,
            net_delay: (50, 500),
            drop_rate: 0.01,
            log_latency: (500, 3_000),
            shard_crash_every: 60_000,
            shard_down: (1_000, 8_000),
            client_crash_chance: 0.3,
            partition_every: 80_000,
            partition_length: (2_000, 15_000),
            client_timeout: 15_000,
            termination_timeout: 20_000,
            lease_span: 5_000,
            mutations: Mutations::default(),
            retwis: None,
        }
    }
}

/// What a client told its application.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reported {
    /// Committed.
    Committed,
    /// Aborted: nothing of it happened.
    Aborted,
    /// Unknown: the client lost touch (or died) after it asked to commit.
    Unknown,
}

/// One transaction as its client saw it.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The transaction.
    pub txn: TxnId,
    /// True for a read-only audit.
    pub audit: bool,
    /// Its begin timestamp.
    pub begin: Timestamp,
    /// Its commit version (read-write transactions that asked to commit).
    pub version: Option<CommitTs>,
    /// The shards it asked to commit.
    pub participants: Vec<ShardId>,
    /// What it read: key, version, value.
    pub reads: Vec<(Key, CommitTs, Option<Value>)>,
    /// What it wrote.
    pub writes: Vec<(Key, Option<Value>)>,
    /// What the client said.
    pub reported: Reported,
}

/// What a simulation did and found.
#[derive(Debug, Clone)]
pub struct DstReport {
    /// A hash of every event in order: equal for equal seeds.
    pub hash: u64,
    /// Events processed.
    pub events: u64,
    /// Simulated time at the end, µs.
    pub end: Timestamp,
    /// Outcomes by what the clients reported.
    pub committed: u32,
    /// Aborted, as reported.
    pub aborted: u32,
    /// Unknown, as reported.
    pub unknown: u32,
    /// Read-only transactions (audits, timelines) that committed by local
    /// validation.
    pub audits_committed: u32,
    /// Read-only transactions that failed local validation (or timed out).
    pub audits_aborted: u32,
    /// Crashes of primaries.
    pub crashes: u32,
    /// Versions dropped by watermark collection.
    pub collected: u64,
    /// Decided transactions forgotten (their outcome rows deleted).
    pub forgotten: u64,
    /// Reads told their version is gone (it was replaced before the
    /// shard's last restart).
    pub gone: u64,
    /// What the oracle found wrong (empty: nothing).
    pub violations: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Node {
    Shard(ShardId),
    Client(ClientId),
}

#[derive(Debug, Clone, Hash)]
pub(super) enum Msg {
    Read { txn: TxnId, key: Key, at: Timestamp },
    ReadReply { txn: TxnId, key: Key, reply: Result<ReadReply, Gone> },
    Scan { txn: TxnId, start: Key, end: Key, at: Timestamp },
    ScanReply { txn: TxnId, shard: ShardId, reply: Result<ScanReply, Gone> },
    Prepare(Prepare),
    Vote { txn: TxnId, shard: ShardId, yes: bool },
    Decide { txn: TxnId, commit: bool, ts: Timestamp },
    Query { txn: TxnId, from: ShardId, ts: Timestamp },
    Answer { txn: TxnId, from: ShardId, status: TxnStatus },
}

#[derive(Debug, Clone, Hash)]
pub(super) enum Event {
    Deliver { from: Node, to: Node, msg: Msg },
    Durable { shard: ShardId, epoch: u64, upto: usize },
    ClientNext { client: ClientId },
    ClientTimeout { client: ClientId, seq: u64, stage: u8 },
    Tick { shard: ShardId },
    Crash { shard: ShardId },
    Restart { shard: ShardId },
    ClientCrash { client: ClientId },
    Partition,
}

/// What a primary does once a log record is durable.
#[derive(Debug, Clone)]
pub(super) enum Action {
    Send(Node, Msg),
    Lease(Timestamp),
    Read { client: ClientId, txn: TxnId, key: Key, at: Timestamp },
    Scan { client: ClientId, txn: TxnId, start: Key, end: Key, at: Timestamp },
}

pub(super) struct Shard {
    pub(super) p: Participant,
    pub(super) up: bool,
    pub(super) epoch: u64,
    pub(super) log: Vec<Record>,
    pub(super) durable: usize,
    pub(super) last_durable_at: Timestamp,
    pub(super) waiting: Vec<(usize, Action)>,
    /// Versions the fast path installed, by the index of the record that
    /// makes each durable.
    pub(super) fresh: Fresh,
    pub(super) prepared_at: BTreeMap<TxnId, Timestamp>,
    pub(super) answers: BTreeMap<TxnId, BTreeMap<ShardId, TxnStatus>>,
}

pub(super) enum Stage {
    /// The keys whose reads are awaited, and the shards whose scans are.
    Reading(BTreeSet<Key>, BTreeSet<ShardId>),
    /// Prepares sent; the yes votes so far, and how many times the
    /// missing ones were asked again.
    Voting(BTreeMap<ShardId, bool>, u32),
}

pub(super) struct Active {
    pub(super) txn: ClientTxn,
    pub(super) audit: bool,
    pub(super) plan: Plan,
    pub(super) stage: Stage,
    pub(super) version: Option<CommitTs>,
    pub(super) prepares: BTreeMap<ShardId, Prepare>,
    /// The rows its scans returned (its reads too, for the oracle; the
    /// prepares carry the ranges instead).
    pub(super) scanned: BTreeMap<Key, ReadReply>,
}

/// What a transaction will write once its reads are back.
pub(super) enum Plan {
    /// Move money from one account to another.
    Transfer(u32, u32),
    /// Read only.
    ReadOnly,
    /// Write these keys (Retwis: the first ones were read too).
    Write(Vec<u32>),
}

pub(super) struct Client {
    pub(super) clock: HybridClock,
    pub(super) seq: u64,
    pub(super) up: bool,
    pub(super) done: u32,
    pub(super) active: Option<Active>,
}

pub(super) struct World {
    pub(super) cfg: DstConfig,
    pub(super) now: Timestamp,
    pub(super) seq: u64,
    pub(super) queue: BinaryHeap<Reverse<(Timestamp, u64, usize)>>,
    pub(super) events: Vec<Option<Event>>,
    pub(super) rng: SmallRng,
    pub(super) hasher: std::hash::DefaultHasher,
    pub(super) processed: u64,
    pub(super) shards: Vec<Shard>,
    pub(super) clients: Vec<Client>,
    pub(super) partitions: Vec<(Node, Node, Timestamp)>,
    /// Faults stop once every client is done or dead.
    pub(super) calm: bool,
    pub(super) history: Vec<Outcome>,
    pub(super) crashes: u32,
    pub(super) collected: u64,
    pub(super) forgotten: u64,
    pub(super) gone: u64,
    pub(super) zipf: Option<rand_distr::Zipf<f64>>,
}

/// The range every account's key is in (`a` and four digits).
pub(crate) const ACCOUNTS_RANGE: (&[u8], &[u8]) = (b"a", b"b");

/// Account `i`'s key.
pub(crate) fn account_key(i: u32) -> Key {
    format!("a{i:04}").into_bytes()
}

/// The shard of a key (accounts: `i % shards`).
pub(crate) fn shard_of(key: &[u8], shards: u32) -> ShardId {
    let i: u32 = std::str::from_utf8(&key[1..]).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    i % shards
}

/// A balance as stored (`None`: the starting balance).
pub(crate) fn balance(value: &Option<Value>, initial: u64) -> u64 {
    match value {
        Some(v) => std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()).unwrap_or(u64::MAX),
        None => initial,
    }
}

impl World {
    pub(super) fn new(cfg: DstConfig) -> World {
        let mut rng = SmallRng::seed_from_u64(cfg.seed);
        let cfg_zipf = cfg.retwis.map(|alpha| {
            rand_distr::Zipf::new(f64::from(cfg.accounts), alpha).expect("α > 0 and keys > 0")
        });
        let shards = (0..cfg.shards)
            .map(|id| Shard {
                p: Participant::new(id, cfg.lease_span, cfg.mutations),
                up: true,
                epoch: 0,
                log: Vec::new(),
                durable: 0,
                last_durable_at: 0,
                waiting: Vec::new(),
                fresh: Fresh::default(),
                prepared_at: BTreeMap::new(),
                answers: BTreeMap::new(),
            })
            .collect();
        let clients = (0..cfg.clients)
            .map(|_| Client {
                clock: HybridClock::new(draw_skew(cfg.epsilon, &mut rng)),
                seq: 0,
                up: true,
                done: 0,
                active: None,
            })
            .collect();
        World {
            cfg,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: Vec::new(),
            rng,
            hasher: std::hash::DefaultHasher::new(),
            processed: 0,
            shards,
            clients,
            partitions: Vec::new(),
            calm: false,
            history: Vec::new(),
            crashes: 0,
            collected: 0,
            forgotten: 0,
            gone: 0,
            zipf: cfg_zipf,
        }
    }

    pub(super) fn at(&mut self, at: Timestamp, e: Event) {
        self.seq += 1;
        self.events.push(Some(e));
        self.queue.push(Reverse((at, self.seq, self.events.len() - 1)));
    }

    pub(super) fn after(&mut self, delay: Timestamp, e: Event) {
        self.at(self.now + delay, e);
    }

    pub(super) fn between(&mut self, (lo, hi): (Timestamp, Timestamp)) -> Timestamp {
        self.rng.random_range(lo..=hi.max(lo))
    }

    /// An exponential wait with this mean.
    pub(super) fn exponential(&mut self, mean: Timestamp) -> Timestamp {
        let u: f64 = self.rng.random_range(1e-9..1.0);
        (-(u.ln()) * mean as f64) as Timestamp
    }

    /// MILANA §4.4's watermark: the lowest timestamp any client may still
    /// read at, its running transaction's begin or, idle, its clock (its
    /// next begin is above it). The simulation takes it from every
    /// client at once, the most a real broadcast could ever tell.
    pub(super) fn watermark(&self) -> Timestamp {
        self.clients
            .iter()
            .map(|c| c.active.as_ref().map_or(c.clock.last(), |a| a.txn.begin))
            .min()
            .unwrap_or(0)
    }

    pub(super) fn start(&mut self) {
        for c in 0..self.cfg.clients {
            let d = self.rng.random_range(0..1_000);
            self.after(d, Event::ClientNext { client: c });
        }
        for s in 0..self.cfg.shards {
            let tick = self.cfg.termination_timeout / 4;
            self.after(tick, Event::Tick { shard: s });
            if self.cfg.shard_crash_every > 0 {
                let d = self.exponential(self.cfg.shard_crash_every);
                self.after(d, Event::Crash { shard: s });
            }
        }
        if self.cfg.partition_every > 0 {
            let d = self.exponential(self.cfg.partition_every);
            self.after(d, Event::Partition);
        }
        if self.rng.random_bool(self.cfg.client_crash_chance.clamp(0.0, 1.0)) {
            let client = self.rng.random_range(0..self.cfg.clients);
            let d = self.rng.random_range(0..100_000);
            self.after(d, Event::ClientCrash { client });
        }
    }

    pub(super) fn send(&mut self, from: Node, to: Node, msg: Msg) {
        let cut = self.partitions.iter().any(|&(a, b, until)| {
            until > self.now && ((a, b) == (from, to) || (b, a) == (from, to))
        });
        if !self.calm && (cut || self.rng.random_bool(self.cfg.drop_rate)) {
            return;
        }
        let d = self.between(self.cfg.net_delay);
        self.after(d, Event::Deliver { from, to, msg });
    }

    pub(super) fn handle(&mut self, e: Event) {
        match e {
            Event::Deliver { from, to, msg } => match to {
                Node::Shard(s) if self.shards[s as usize].up => self.on_shard(s, from, msg),
                Node::Client(c) if self.clients[c as usize].up => self.on_client(c, msg),
                _ => {}
            },
            Event::Durable { shard, epoch, upto } => self.on_durable(shard, epoch, upto),
            Event::ClientNext { client } => self.next_txn(client),
            Event::ClientTimeout { client, seq, stage } => self.on_timeout(client, seq, stage),
            Event::Tick { shard } => self.on_tick(shard),
            Event::Crash { shard } => self.crash(shard),
            Event::Restart { shard } => self.restart(shard),
            Event::ClientCrash { client } => self.client_crash(client),
            Event::Partition => self.partition(),
        }
    }
}
