//! The simulated clients: each runs one transaction at a time (a transfer
//! between two accounts or a read-only audit of all of them; or, with
//! `DstConfig::retwis`, Retwis's mix) and coordinates its commit.

use std::collections::{BTreeMap, BTreeSet};

use rand::Rng;

use crate::coordinator::ClientTxn;
use crate::log::Prepare;
use crate::participant::ReadReply;
use crate::types::{ClientId, CommitTs, Key, ShardId, Timestamp, TxnId};
use crate::versions::Gone;

use super::world::{
    ACCOUNTS_RANGE, Active, Event, Msg, Node, Outcome, Plan, Reported, Stage, World, account_key,
    balance,
};

impl World {
    pub(super) fn next_txn(&mut self, c: ClientId) {
        let (cfg, now) = (&self.cfg, self.now);
        let client = &mut self.clients[c as usize];
        if !client.up || client.active.is_some() || client.done >= cfg.txns_per_client {
            return;
        }
        client.seq += 1;
        let id = TxnId { client: c, seq: client.seq };
        let begin = client.clock.now(now);
        let seq = client.seq;
        let (plan, reads) = match self.zipf {
            Some(z) => self.retwis_plan(z),
            None => {
                let n = self.cfg.accounts;
                let auditor = c >= self.cfg.clients.saturating_sub(self.cfg.auditors);
                if auditor || self.rng.random_bool(self.cfg.audit_fraction) {
                    (Plan::ReadOnly, (0..n).collect())
                } else {
                    let from = self.rng.random_range(0..n);
                    let step = match self.rng.random_bool(self.cfg.local_transfers) {
                        true => 1,
                        false => self.rng.random_range(1..n),
                    };
                    let to = (from + step) % n;
                    (Plan::Transfer(from, to), vec![from, to])
                }
            }
        };
        let audit = matches!(plan, Plan::ReadOnly);
        // Without Retwis, a third of the bank's transactions read the
        // accounts with a scan of every shard instead of key by key: the
        // range reads and their validation (no phantom) under test.
        let scan =
            self.zipf.is_none() && self.rng.random_bool(self.cfg.scan_fraction.clamp(0.0, 1.0));
        // Routed by the map this client last read, which may be stale: a
        // shard that does not serve a key refuses it.
        let map = &self.maps[self.clients[c as usize].map - 1];
        let (keys, scans): (BTreeSet<Key>, Vec<(Key, Key, ShardId)>) = if scan {
            let (start, end) = ACCOUNTS_RANGE;
            (BTreeSet::new(), map.pieces(start, end))
        } else {
            (reads.into_iter().map(account_key).collect(), Vec::new())
        };
        // A shard's keys in one read, as the server's client sends them.
        let mut by_shard: BTreeMap<ShardId, Vec<Key>> = BTreeMap::new();
        for key in &keys {
            by_shard.entry(map.owner(key)).or_default().push(key.clone());
        }
        let sends: Vec<(ShardId, Msg)> = by_shard
            .into_iter()
            .map(|(shard, keys)| (shard, Msg::Read { txn: id, keys, at: begin }))
            .chain(scans.iter().map(|(start, end, owner)| {
                let (start, end) = (start.clone(), end.clone());
                (*owner, Msg::Scan { txn: id, start, end, at: begin })
            }))
            .collect();
        for (shard, msg) in sends {
            self.send(Node::Client(c), Node::Shard(shard), msg);
        }
        let scans = scans.into_iter().map(|(start, _, _)| start).collect();
        self.clients[c as usize].active = Some(Active {
            txn: ClientTxn::new(id, begin),
            audit,
            plan,
            stage: Stage::Reading(keys, scans),
            version: None,
            prepares: BTreeMap::new(),
            scanned: BTreeMap::new(),
        });
        let timeout = self.cfg.client_timeout;
        self.after(timeout, Event::ClientTimeout { client: c, seq, stage: 0 });
    }

    /// One Retwis transaction (MILANA's Table 2): add user (1 get, 2
    /// puts, 5%), follow (2 gets, 2 puts, 10%), post tweet (3 gets, 5
    /// puts, 35%), get timeline (1-10 gets, 50%). Keys are zipfian; a
    /// put goes to the keys read first, then to fresh ones.
    fn retwis_plan(&mut self, zipf: rand_distr::Zipf<f64>) -> (Plan, Vec<u32>) {
        let n = self.cfg.accounts;
        let key = |rng: &mut rand::rngs::SmallRng| {
            let rank = (rand_distr::Distribution::sample(&zipf, rng) as u32).clamp(1, n) - 1;
            // Spread the hot ranks over the shards (a bijection: the
            // multiplier is a prime that does not divide n).
            (u64::from(rank) * 2_654_435_761 % u64::from(n)) as u32
        };
        let roll = self.rng.random_range(0..100);
        let (gets, puts) = match roll {
            0..5 => (1, 2),
            5..15 => (2, 2),
            15..50 => (3, 5),
            _ => (self.rng.random_range(1..=10), 0),
        };
        let mut reads = Vec::new();
        while reads.len() < gets {
            let k = key(&mut self.rng);
            if !reads.contains(&k) {
                reads.push(k);
            }
        }
        if puts == 0 {
            return (Plan::ReadOnly, reads);
        }
        let mut writes = reads.clone();
        while writes.len() < puts {
            let k = key(&mut self.rng);
            if !writes.contains(&k) {
                writes.push(k);
            }
        }
        (Plan::Write(writes), reads)
    }

    pub(super) fn on_client(&mut self, c: ClientId, msg: Msg) {
        let accounts = self.cfg.accounts;
        let client = &mut self.clients[c as usize];
        let Some(a) = client.active.as_mut() else { return };
        match msg {
            Msg::ReadReply { txn, key, reply } if txn == a.txn.id => {
                let Stage::Reading(waiting, scans) = &mut a.stage else { return };
                if !waiting.remove(&key) {
                    return;
                }
                let reply = match reply {
                    Ok(r) => r,
                    Err(gone) => return self.gone(c, gone),
                };
                client.clock.observe(reply.version.ts);
                a.txn.reads.insert(key, reply);
                if waiting.is_empty() && scans.is_empty() {
                    self.reads_done(c);
                }
            }
            Msg::ScanReply { txn, shard, start, end, reply } if txn == a.txn.id => {
                let Stage::Reading(waiting, scans) = &mut a.stage else { return };
                if !scans.remove(&start) {
                    return;
                }
                let reply = match reply {
                    Ok(r) => r,
                    Err(gone) => return self.gone(c, gone),
                };
                a.txn.ranges.entry(shard).or_default().push((start, end));
                a.txn.scanned_prepared |= reply.prepared_below;
                for (key, version, value) in reply.rows {
                    client.clock.observe(version.ts);
                    let row = ReadReply { version, value: Some(value), prepared_below: false };
                    a.scanned.insert(key, row);
                }
                if waiting.is_empty() && scans.is_empty() {
                    // An account the scans did not return had no value at
                    // the begin timestamp: a read of it, for the transfer
                    // and for the oracle (which checks it, so a phantom
                    // is caught).
                    for i in 0..accounts {
                        let none = ReadReply {
                            version: CommitTs::INITIAL,
                            value: None,
                            prepared_below: false,
                        };
                        a.scanned.entry(account_key(i)).or_insert(none);
                    }
                    self.reads_done(c);
                }
            }
            // Not served where this client's map sent it: read the map
            // again, and begin again (nothing was prepared).
            Msg::Refused { txn } if txn == a.txn.id && matches!(a.stage, Stage::Reading(..)) => {
                client.map = self.maps.len();
                self.finish(c, Reported::Aborted);
            }
            Msg::Vote { txn, shard, yes } if txn == a.txn.id => {
                let Stage::Voting(votes, _) = &mut a.stage else { return };
                if !yes {
                    // A no is durable at its voter: the transaction can
                    // only abort. (It may have been refused for its
                    // range: the map is read again.)
                    client.map = self.maps.len();
                    self.decide_all(c, false);
                    self.finish(c, Reported::Aborted);
                    return;
                }
                votes.insert(shard, true);
                if votes.len() == a.prepares.len() {
                    // Every prepare is durable: committed, whatever
                    // happens to the decision messages (a participant
                    // that misses one asks the others).
                    if a.prepares.len() > 1 {
                        self.decide_all(c, true);
                    }
                    self.finish(c, Reported::Committed);
                }
            }
            _ => {}
        }
    }

    /// A read needed a version the shard no longer holds (it restarted
    /// since the begin timestamp): abort, nothing prepared yet, and begin
    /// the next one past the versions it holds, as the server's client
    /// does with the floor of its refusal.
    fn gone(&mut self, c: ClientId, gone: Gone) {
        self.gone += 1;
        self.clients[c as usize].clock.observe(gone.oldest);
        self.finish(c, Reported::Aborted);
    }

    pub(super) fn reads_done(&mut self, c: ClientId) {
        let (now, cfg) = (self.now, &self.cfg);
        let client = &mut self.clients[c as usize];
        let Some(a) = client.active.as_mut() else { return };
        match &a.plan {
            Plan::ReadOnly => {
                let ok = a.txn.locally_valid();
                self.finish(c, if ok { Reported::Committed } else { Reported::Aborted });
                return;
            }
            // A scan met a prepared write below the begin timestamp: it
            // may commit below what the scan saw, so nothing can commit.
            _ if a.txn.scanned_prepared => {
                self.finish(c, Reported::Aborted);
                return;
            }
            Plan::Transfer(from, to) => {
                let value = |k: u32| {
                    let key = account_key(k);
                    let r = a.txn.reads.get(&key).or_else(|| a.scanned.get(&key));
                    r.and_then(|r| r.value.clone())
                };
                let initial = cfg.initial_balance;
                let (bf, bt) = (balance(&value(*from), initial), balance(&value(*to), initial));
                let amount = self.rng.random_range(1..=10).min(bf);
                a.txn
                    .writes
                    .insert(account_key(*from), Some((bf - amount).to_string().into_bytes()));
                a.txn.writes.insert(account_key(*to), Some((bt + amount).to_string().into_bytes()));
            }
            Plan::Write(keys) => {
                let value = format!("{c}-{}", a.txn.id.seq).into_bytes();
                for k in keys {
                    a.txn.writes.insert(account_key(*k), Some(value.clone()));
                }
            }
        }
        let version = CommitTs { ts: client.clock.now(now), client: c };
        let map = &self.maps[client.map - 1];
        let prepares = a.txn.prepares(version, |k| map.owner(k));
        a.version = Some(version);
        a.prepares = prepares.clone();
        a.stage = Stage::Voting(BTreeMap::new(), 0);
        let seq = a.txn.id.seq;
        for (s, p) in prepares {
            self.send(Node::Client(c), Node::Shard(s), Msg::Prepare(p));
        }
        let timeout = self.cfg.client_timeout;
        self.after(timeout, Event::ClientTimeout { client: c, seq, stage: 1 });
    }

    pub(super) fn decide_all(&mut self, c: ClientId, commit: bool) {
        let Some(a) = self.clients[c as usize].active.as_ref() else { return };
        let (txn, parts) = (a.txn.id, a.prepares.keys().copied().collect::<Vec<_>>());
        let ts = a.version.map_or(0, |v| v.ts);
        for s in parts {
            self.send(Node::Client(c), Node::Shard(s), Msg::Decide { txn, commit, ts });
        }
    }

    pub(super) fn on_timeout(&mut self, c: ClientId, seq: u64, stage: u8) {
        let client = &mut self.clients[c as usize];
        let Some(a) = client.active.as_mut() else { return };
        if !client.up || a.txn.id.seq != seq {
            return;
        }
        match &mut a.stage {
            // No prepare was sent: nothing can commit.
            Stage::Reading(..) if stage == 0 => self.finish(c, Reported::Aborted),
            // Votes missing: ask again (a prepare is answered as the first
            // time). The coordinator never aborts on a timeout: the
            // participants may all be prepared and commit by termination.
            // After three tries it tells the application it does not know.
            Stage::Voting(votes, tries) if stage == 1 => {
                if *tries >= 3 {
                    self.finish(c, Reported::Unknown);
                    return;
                }
                *tries += 1;
                let missing: Vec<(ShardId, Prepare)> = a
                    .prepares
                    .iter()
                    .filter(|(s, _)| !votes.contains_key(s))
                    .map(|(s, p)| (*s, p.clone()))
                    .collect();
                for (s, p) in missing {
                    self.send(Node::Client(c), Node::Shard(s), Msg::Prepare(p));
                }
                let timeout = self.cfg.client_timeout;
                self.after(timeout, Event::ClientTimeout { client: c, seq, stage: 1 });
            }
            _ => {}
        }
    }

    pub(super) fn finish(&mut self, c: ClientId, reported: Reported) {
        let Some(a) = self.clients[c as usize].active.take() else { return };
        self.history.push(outcome(&a, reported, self.now));
        let client = &mut self.clients[c as usize];
        client.done += 1;
        if client.done == self.cfg.txns_per_client {
            self.one_finished();
        }
        let think = self.rng.random_range(0..self.cfg.think.max(1));
        self.after(think, Event::ClientNext { client: c });
    }

    pub(super) fn client_crash(&mut self, c: ClientId) {
        let client = &mut self.clients[c as usize];
        if !client.up {
            return;
        }
        client.up = false;
        let done = client.done >= self.cfg.txns_per_client;
        if let Some(a) = client.active.take()
            && a.version.is_some()
        {
            self.history.push(outcome(&a, Reported::Unknown, self.now));
        }
        if !done {
            self.one_finished();
        }
    }

    /// A client is done or dead: once all are, the faults stop.
    fn one_finished(&mut self) {
        self.finished += 1;
        if self.finished >= self.cfg.clients {
            self.calm = true;
            self.partitions.clear();
        }
    }
}

fn outcome(a: &Active, reported: Reported, ended: Timestamp) -> Outcome {
    Outcome {
        txn: a.txn.id,
        audit: a.audit,
        begin: a.txn.begin,
        version: a.version,
        participants: a.prepares.keys().copied().collect(),
        reads: a
            .txn
            .reads
            .iter()
            .chain(&a.scanned)
            .map(|(k, r)| (k.clone(), r.version, r.value.clone()))
            .collect(),
        writes: a.txn.writes.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        reported,
        ended,
    }
}
