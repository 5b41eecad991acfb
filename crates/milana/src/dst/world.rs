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
use crate::log::{MovedRow, Prepare, Record};
use crate::participant::{Mutations, Participant, ReadReply, ScanReply};
use crate::tables::Frozen;
use crate::types::{ClientId, CommitTs, Key, ShardId, Timestamp, TxnId, TxnStatus, Value};

use super::map::Map;
use super::mover::Mover;
use crate::versions::Gone;

/// What one simulation runs: sizes, the workload, and the faults. Times
/// are in microseconds of simulated time.
#[derive(Debug, Clone)]
pub struct DstConfig {
    /// Drives every random choice.
    pub seed: u64,
    /// Shard primaries.
    pub shards: u32,
    /// The shards the first map gives ranges to (the first ones); the
    /// others join empty, for the mover to fill (at most `shards`).
    pub initial_shards: u32,
    /// Clients (coordinators), one transaction at a time each.
    pub clients: u32,
    /// Bank accounts, spread over the shards in ranges of as many keys
    /// each (map version 1).
    pub accounts: u32,
    /// Each account's starting balance.
    pub initial_balance: u64,
    /// Transactions each client runs (it may die first).
    pub txns_per_client: u32,
    /// The share of read-only audits (they read every account).
    pub audit_fraction: f64,
    /// The share of transfers between neighbouring accounts (the next
    /// key), which usually share a range: one shard commits them alone.
    pub local_transfers: f64,
    /// Clients (the last ones) that run only audits, with clocks as far
    /// ahead as ε allows: readers no writer observes, so their reads stay
    /// ahead of the writers (the reads a range's new owner must not let
    /// a write slip under).
    pub auditors: u32,
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
    /// Mean time between the mover's changes of the map (0: none): a
    /// split, or a range's move (design record 0009), one at a time.
    pub move_every: Timestamp,
    /// When the mover starts.
    pub moves_from: Timestamp,
    /// How the mover picks: at random (a split or a move of a random
    /// range to a random shard), or, with `balance`, as the rebalancer
    /// does (from the fullest shard to the emptiest, until within a tenth
    /// of the mean).
    pub balance: bool,
    /// Chance that the mover dies in the middle of a move (it comes back
    /// later, and its move is settled by the map).
    pub mover_crash_chance: f64,
    /// A range frozen for a move whose mover is silent this long is
    /// given up by its old owner (it publishes the map unchanged).
    pub move_timeout: Timestamp,
    /// The most a client waits between transactions.
    pub think: Timestamp,
    /// The share of the bank's transactions that read by scans (of every
    /// range) instead of key by key.
    pub scan_fraction: f64,
    /// Instead of the bank: Retwis's mix (MILANA's Table 2: add user,
    /// follow, post, timeline) over the accounts as keys, chosen
    /// zipfian with this α (contention). The bank's checks are skipped;
    /// the others hold as they are.
    pub retwis: Option<f64>,
}

impl DstConfig {
    /// The defaults for `seed`: 3 shards, 4 clients, 12 accounts, 25
    /// transactions each, ε = 1.5 ms, every fault on, and the map changed
    /// (a split or a move) every 40 ms on average.
    pub fn new(seed: u64) -> DstConfig {
        DstConfig {
            seed,
            shards: 3,
            initial_shards: 3,
            clients: 4,
            accounts: 12,
            initial_balance: 100,
            txns_per_client: 25,
            audit_fraction: 0.25,
            auditors: 0,
            local_transfers: 0.25,
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
            move_every: 40_000,
            moves_from: 0,
            balance: false,
            mover_crash_chance: 0.2,
            move_timeout: 30_000,
            think: 1_000,
            scan_fraction: 1.0 / 3.0,
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
    /// When, in simulated time.
    pub ended: Timestamp,
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
    /// The mover's work: each move and split.
    pub moves: Vec<MoveStat>,
    /// Each transaction's end and what its client reported, in order.
    pub timeline: Vec<(Timestamp, Reported)>,
    /// With `balance`: when the shards' keys were first within a tenth of
    /// the mean after the mover started.
    pub balanced_at: Option<Timestamp>,
    /// What the oracle found wrong (empty: nothing).
    pub violations: Vec<String>,
}

/// One change the mover made or tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveStat {
    /// A split (a map change that moves nothing) or a move.
    pub split: bool,
    /// When it began (a move: its copy).
    pub began: Timestamp,
    /// A move: from its freeze until the map was published.
    pub frozen: Option<Timestamp>,
    /// When it ended (published, given up, or its mover died).
    pub ended: Timestamp,
    /// Whether the map gives the range to its new owner (a split: whether
    /// it was published).
    pub done: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Node {
    Shard(ShardId),
    Client(ClientId),
    Mover,
}

#[derive(Debug, Clone, Hash)]
pub(super) enum Msg {
    /// A shard's keys read at `at`, in one call (as the server's
    /// `ShardRead`); answered with a `ReadReply` per key.
    Read {
        txn: TxnId,
        keys: Vec<Key>,
        at: Timestamp,
    },
    ReadReply {
        txn: TxnId,
        key: Key,
        reply: Result<ReadReply, Gone>,
    },
    Scan {
        txn: TxnId,
        start: Key,
        end: Key,
        at: Timestamp,
    },
    ScanReply {
        txn: TxnId,
        shard: ShardId,
        start: Key,
        end: Key,
        reply: Result<ScanReply, Gone>,
    },
    /// Not served here: not this shard's under its map, or frozen.
    Refused {
        txn: TxnId,
    },
    /// A move's calls (design record 0009): `job` names the move.
    Export {
        job: u64,
        start: Key,
        end: Key,
    },
    Exported {
        job: u64,
        rows: Option<Vec<MovedRow>>,
    },
    Import {
        job: u64,
        adopt: Record,
    },
    Imported {
        job: u64,
        ok: bool,
    },
    Freeze {
        job: u64,
        f: Frozen,
    },
    /// The freeze's answer: the read floor and the rows to copy again
    /// (every row of the range if `whole`); `None`: refused.
    FrozenAt {
        job: u64,
        answer: Option<(Timestamp, Vec<MovedRow>, bool)>,
    },
    GiveUp {
        f: Frozen,
    },
    Release {
        job: u64,
        f: Frozen,
    },
    Released {
        job: u64,
    },
    Prepare(Prepare),
    Vote {
        txn: TxnId,
        shard: ShardId,
        yes: bool,
    },
    Decide {
        txn: TxnId,
        commit: bool,
        ts: Timestamp,
    },
    Query {
        txn: TxnId,
        from: ShardId,
        ts: Timestamp,
    },
    Answer {
        txn: TxnId,
        from: ShardId,
        status: TxnStatus,
    },
}

/// What happens next. `ReadAgain`: a read or scan that met a prepared
/// write below it, served again.
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
    MoverNext,
    MoverTimeout { job: u64, step: u8 },
    MoverCrash { job: u64 },
    ReadAgain { shard: ShardId, epoch: u64, action: Action },
}

/// What a primary does once a log record is durable. A read's or scan's
/// `until`: how long it waits for a prepared write below it to be decided
/// (as the server's does, up to the termination timeout).
#[derive(Debug, Clone, Hash)]
pub(super) enum Action {
    Send(Node, Msg),
    Lease(Timestamp),
    Read { client: ClientId, txn: TxnId, keys: Vec<Key>, at: Timestamp, until: Timestamp },
    Scan { client: ClientId, txn: TxnId, start: Key, end: Key, at: Timestamp, until: Timestamp },
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
    /// The map version this shard serves under.
    pub(super) map: usize,
    /// Ranges frozen here for a move, with when their mover was last
    /// heard from.
    pub(super) frozen: Vec<(Frozen, Timestamp)>,
    /// Ranges copied here for moves not known to have happened:
    /// `(start, end, map version)`.
    pub(super) incoming: Vec<(Key, Key, u64)>,
    /// Ranges being copied away while served: each key's version in the
    /// copy, and when it began (in memory only).
    pub(super) copies: BTreeMap<(Key, Key), (BTreeMap<Key, CommitTs>, Timestamp)>,
    /// Freezes to answer once nothing prepared here writes in their range.
    pub(super) freezing: Vec<(u64, Frozen)>,
}

pub(super) enum Stage {
    /// The keys whose reads are awaited, and the scans (by their first
    /// key).
    Reading(BTreeSet<Key>, BTreeSet<Key>),
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
    /// The map version it routes by.
    pub(super) map: usize,
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
    /// The map's versions on the store (version `i + 1` at `i`).
    pub(super) maps: Vec<Map>,
    /// The accounts' keys, sorted.
    pub(super) keys: Vec<Key>,
    pub(super) mover: Mover,
    pub(super) moves: Vec<MoveStat>,
    pub(super) balanced_at: Option<Timestamp>,
    /// Clients done or dead (the faults stop when all are).
    pub(super) finished: u32,
    /// The watermark, computed once per simulated instant.
    pub(super) watermark_at: Option<(Timestamp, Timestamp)>,
    /// The forget bound, likewise.
    pub(super) forget_at: Option<(Timestamp, Option<Timestamp>)>,
}

/// The range every account's key is in (`a` and four digits).
pub(crate) const ACCOUNTS_RANGE: (&[u8], &[u8]) = (b"a", b"b");

/// Account `i`'s key.
pub(crate) fn account_key(i: u32) -> Key {
    format!("a{i:04}").into_bytes()
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
                map: 1,
                frozen: Vec::new(),
                incoming: Vec::new(),
                copies: BTreeMap::new(),
                freezing: Vec::new(),
            })
            .collect();
        let auditors = cfg.clients.saturating_sub(cfg.auditors);
        let clients = (0..cfg.clients)
            .map(|c| Client {
                map: 1,
                clock: HybridClock::new(match c >= auditors {
                    // An auditor's clock is as far ahead as ε allows.
                    true => (cfg.epsilon / 2) as i64,
                    false => draw_skew(cfg.epsilon, &mut rng),
                }),
                seq: 0,
                up: true,
                done: 0,
                active: None,
            })
            .collect();
        let mut keys: Vec<Key> = (0..cfg.accounts).map(account_key).collect();
        keys.sort();
        let first = Map::even(&keys, cfg.initial_shards.clamp(1, cfg.shards));
        World {
            maps: vec![first],
            keys,
            mover: Mover::new(),
            moves: Vec::new(),
            balanced_at: None,
            finished: 0,
            watermark_at: None,
            forget_at: None,
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
    pub(super) fn watermark(&mut self) -> Timestamp {
        if let Some((at, w)) = self.watermark_at
            && at == self.now
        {
            return w;
        }
        let w = self
            .clients
            .iter()
            .map(|c| c.active.as_ref().map_or(c.clock.last(), |a| a.txn.begin))
            .min()
            .unwrap_or(0);
        self.watermark_at = Some((self.now, w));
        w
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
        if self.cfg.move_every > 0 {
            let d = self.cfg.moves_from + self.exponential(self.cfg.move_every);
            self.after(d, Event::MoverNext);
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
                Node::Mover if self.mover.up => self.on_mover(msg),
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
            Event::MoverNext => self.mover_next(),
            Event::MoverTimeout { job, step } => self.mover_timeout(job, step),
            Event::MoverCrash { job } => self.mover_crash(job),
            Event::ReadAgain { shard, epoch, action } => self.read_again_due(shard, epoch, action),
        }
    }
}
