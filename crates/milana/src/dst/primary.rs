//! The simulated shard primaries: their logs, crashes and recoveries,
//! and how they answer reads, prepares, decisions and termination
//! queries.

use rand::Rng;

use crate::coordinator::terminate;
use crate::fresh::Fresh;
use crate::log::{Prepare, Record};
use crate::participant::{Participant, Vote};
use crate::tables::{ShardTables, overlap};
use crate::types::{ClientId, CommitTs, ShardId, Timestamp, TxnId, TxnStatus};
use crate::versions::{MapVersions, in_range};

use super::world::{Action, Event, Msg, Node, World};

/// How often a read waiting for a prepared write's decision is served
/// again (simulated µs).
const READ_AGAIN_EVERY: Timestamp = 500;

impl World {
    pub(super) fn append(&mut self, s: ShardId, rec: Record) -> usize {
        self.append_all(s, vec![rec])
    }

    /// Append `recs` to shard `s`'s log as one write: they become durable
    /// together (as a lone participant's prepare and commit do, in one
    /// engine transaction). Returns the index of the last.
    pub(super) fn append_all(&mut self, s: ShardId, recs: Vec<Record>) -> usize {
        let lat = self.between(self.cfg.log_latency);
        let shard = &mut self.shards[s as usize];
        shard.log.extend(recs);
        let idx = shard.log.len() - 1;
        let at = shard.last_durable_at.max(self.now + lat);
        shard.last_durable_at = at;
        let epoch = shard.epoch;
        self.at(at, Event::Durable { shard: s, epoch, upto: idx + 1 });
        idx
    }

    /// Run `action` once the log is durable through `idx`, or now if the
    /// mutation says not to wait.
    pub(super) fn when_durable(&mut self, s: ShardId, idx: usize, action: Action, wait: bool) {
        if !wait || idx < self.shards[s as usize].durable {
            self.act(s, action);
        } else {
            self.shards[s as usize].waiting.push((idx, action));
        }
    }

    pub(super) fn on_durable(&mut self, s: ShardId, epoch: u64, upto: usize) {
        let shard = &mut self.shards[s as usize];
        if shard.epoch != epoch || !shard.up {
            return;
        }
        for r in &shard.log[shard.durable.min(upto)..upto] {
            if let Record::Commit(t) | Record::Abort(t, _) = r {
                shard.p.decision_durable(*t);
            }
        }
        shard.durable = shard.durable.max(upto);
        let durable = shard.durable;
        shard.fresh.durable_below(durable as u64);
        let (ready, rest): (Vec<_>, Vec<_>) =
            std::mem::take(&mut shard.waiting).into_iter().partition(|(i, _)| *i < durable);
        shard.waiting = rest;
        for (_, a) in ready {
            self.act(s, a);
        }
    }

    pub(super) fn act(&mut self, s: ShardId, action: Action) {
        match action {
            Action::Send(to, msg) => self.send(Node::Shard(s), to, msg),
            Action::Lease(until) => self.shards[s as usize].p.lease_durable(until),
            // A read that waited for its lease is checked again: its range
            // may have been frozen meanwhile, and its floor taken (the
            // server checks under its lock at each point, as here).
            Action::Read { client, txn, .. } | Action::Scan { client, txn, .. }
                if !self.serves_action(s, &action) =>
            {
                self.send(Node::Shard(s), Node::Client(client), Msg::Refused { txn });
            }
            Action::Read { client, txn, keys, at, until } => {
                let p = &mut self.shards[s as usize].p;
                let replies: Vec<_> = keys.iter().map(|k| p.read(k, at)).collect();
                let pending = replies.iter().any(|r| r.as_ref().is_ok_and(|r| r.prepared_below));
                if pending && self.now < until {
                    return self.read_again(s, Action::Read { client, txn, keys, at, until });
                }
                for (key, reply) in keys.into_iter().zip(replies) {
                    let read = reply.as_ref().ok().map(|r| r.version);
                    let msg = Msg::ReadReply { txn, key, reply };
                    self.answer_read(s, client, msg, read);
                }
            }
            Action::Scan { client, txn, start, end, at, until } => {
                let reply = self.shards[s as usize].p.scan(&start, &end, at, 0);
                if reply.as_ref().is_ok_and(|r| r.prepared_below) && self.now < until {
                    let scan = Action::Scan { client, txn, start, end, at, until };
                    return self.read_again(s, scan);
                }
                let read: Vec<_> =
                    reply.iter().flat_map(|r| r.rows.iter().map(|(_, v, _)| *v)).collect();
                let msg = Msg::ScanReply { txn, shard: s, start, end, reply };
                self.answer_read(s, client, msg, read);
            }
        }
    }

    /// Serve a read or scan again a little later: it met a prepared write
    /// below its timestamp, and waits for the decision (the server's
    /// `Shard::settled`), checked again each time as after any wait.
    fn read_again(&mut self, s: ShardId, action: Action) {
        let epoch = self.shards[s as usize].epoch;
        self.at(self.now + READ_AGAIN_EVERY, Event::ReadAgain { shard: s, epoch, action });
    }

    /// A read or scan to serve again is due: served if its shard has not
    /// crashed since (else its client times out).
    pub(super) fn read_again_due(&mut self, s: ShardId, epoch: u64, action: Action) {
        let shard = &self.shards[s as usize];
        if shard.up && shard.epoch == epoch {
            self.act(s, action);
        }
    }

    /// Whether shard `s` still serves what a read or scan asks.
    fn serves_action(&mut self, s: ShardId, action: &Action) -> bool {
        if self.cfg.mutations.waited_reads_skip_the_map {
            let frozen = &self.shards[s as usize].frozen;
            let hit = |a: &[u8], b: &[u8]| {
                frozen.iter().any(|(f, _)| match b.is_empty() && !a.is_empty() {
                    true => in_range(a, &f.start, &f.end),
                    false => overlap(&f.start, &f.end, a, b),
                })
            };
            return match action {
                Action::Read { keys, .. } => !keys.iter().any(|k| hit(k, &[])),
                Action::Scan { start, end, .. } => !hit(start, end),
                _ => true,
            };
        }
        match action {
            Action::Read { keys, .. } => {
                let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                self.serves(s, &keys, &[])
            }
            Action::Scan { start, end, .. } => self.serves(s, &[], &[(start, end)]),
            _ => true,
        }
    }

    /// Send a read's answer once the versions it read are durable (see
    /// [`crate::fresh`]).
    fn answer_read(
        &mut self,
        s: ShardId,
        client: ClientId,
        msg: Msg,
        read: impl IntoIterator<Item = CommitTs>,
    ) {
        let answer = Action::Send(Node::Client(client), msg);
        match self.shards[s as usize].fresh.wait_for_all(read) {
            Some(idx) => {
                let wait = !self.cfg.mutations.read_fresh_versions;
                self.when_durable(s, idx as usize, answer, wait);
            }
            None => self.act(s, answer),
        }
    }

    pub(super) fn on_shard(&mut self, s: ShardId, from: Node, msg: Msg) {
        match msg {
            Msg::Read { txn, keys, at } => {
                let Node::Client(client) = from else { return };
                let slices: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                if !self.serves(s, &slices, &[]) {
                    return self.send(Node::Shard(s), from, Msg::Refused { txn });
                }
                let until = self.now + self.cfg.termination_timeout;
                let read = Action::Read { client, txn, keys, at, until };
                match self.shards[s as usize].p.lease_needed(at) {
                    Some(Record::ReadLease(until)) => {
                        let idx = self.append(s, Record::ReadLease(until));
                        self.when_durable(s, idx, Action::Lease(until), true);
                        self.when_durable(s, idx, read, true);
                    }
                    _ => self.act(s, read),
                }
            }
            Msg::Scan { txn, start, end, at } => {
                let Node::Client(client) = from else { return };
                if !self.serves(s, &[], &[(&start, &end)]) {
                    return self.send(Node::Shard(s), from, Msg::Refused { txn });
                }
                let until = self.now + self.cfg.termination_timeout;
                let scan = Action::Scan { client, txn, start, end, at, until };
                match self.shards[s as usize].p.lease_needed(at) {
                    Some(Record::ReadLease(until)) => {
                        let idx = self.append(s, Record::ReadLease(until));
                        self.when_durable(s, idx, Action::Lease(until), true);
                        self.when_durable(s, idx, scan, true);
                    }
                    _ => self.act(s, scan),
                }
            }
            Msg::Prepare(p) => self.on_prepare(s, from, p),
            Msg::Decide { txn, commit, ts } => {
                let shard = &mut self.shards[s as usize];
                shard.prepared_at.remove(&txn);
                shard.answers.remove(&txn);
                if let Some(r) = shard.p.decide(txn, commit, ts) {
                    self.append(s, r);
                }
                self.answer_freezes(s);
            }
            Msg::Query { txn, from: asker, ts } => {
                let (status, rec) = self.shards[s as usize].p.status(txn, ts);
                if let Some(r) = rec {
                    self.append(s, r);
                }
                // The answer must not outlive a crash: what it reports
                // (a prepare, a no, this abort) is in the log so far, so
                // it waits for all of that to be durable.
                let last = self.shards[s as usize].log.len().saturating_sub(1);
                let answer = Action::Send(Node::Shard(asker), Msg::Answer { txn, from: s, status });
                self.when_durable(s, last, answer, true);
            }
            Msg::Answer { txn, from: other, status } => self.on_answer(s, txn, other, status),
            msg => self.on_shard_move(s, msg),
        }
    }

    pub(super) fn on_prepare(&mut self, s: ShardId, from: Node, p: Prepare) {
        if !matches!(from, Node::Client(_)) {
            return;
        }
        let (txn, single) = (p.txn, p.participants.len() <= 1);
        let wait = !self.cfg.mutations.vote_before_durable;
        // A prepare asked again is answered as the first time, by its
        // name, even if its range moved since. A new one that touches a
        // key or range not served here is refused with a durable no: its
        // coordinator aborts on it, so a late copy must be refused too.
        let known = self.shards[s as usize].p.known(txn).is_some();
        let keys: Vec<&[u8]> = p
            .reads
            .iter()
            .map(|(k, _)| &k[..])
            .chain(p.writes.iter().map(|(k, _)| &k[..]))
            .collect();
        let ranges: Vec<(&[u8], &[u8])> =
            p.ranges.iter().map(|(a, b, _)| (&a[..], &b[..])).collect();
        let bug = self.cfg.mutations.old_owner_prepares_moved;
        if !known && !bug && !self.serves(s, &keys, &ranges) {
            let no = self.shards[s as usize].p.decide(txn, false, p.version.ts);
            let idx = match no {
                Some(r) => self.append(s, r),
                None => self.shards[s as usize].log.len().saturating_sub(1),
            };
            let answer = Action::Send(from, Msg::Vote { txn, shard: s, yes: false });
            return self.when_durable(s, idx, answer, wait);
        }
        let shard = &mut self.shards[s as usize];
        let (vote, records) = if single {
            shard.p.commit_alone(p)
        } else {
            let (vote, rec) = shard.p.prepare(p);
            (vote, rec.into_iter().collect())
        };
        let yes = matches!(vote, Vote::Yes);
        let answer = Action::Send(from, Msg::Vote { txn, shard: s, yes });
        if let [Record::Prepare(_)] = &records[..] {
            let now = self.now;
            self.shards[s as usize].prepared_at.insert(txn, now);
        }
        let idx = if records.is_empty() {
            // Asked again: answer as the first time, once what is logged
            // so far is durable (the first vote's records are among it).
            self.shards[s as usize].log.len().saturating_sub(1)
        } else {
            // The index its last record will have.
            let last = self.shards[s as usize].log.len() + records.len() - 1;
            self.shards[s as usize].fresh.wrote(&records, last as u64);
            self.append_all(s, records)
        };
        self.when_durable(s, idx, answer, wait);
    }

    pub(super) fn on_answer(&mut self, s: ShardId, txn: TxnId, other: ShardId, status: TxnStatus) {
        let shard = &mut self.shards[s as usize];
        let Some(got) = shard.answers.get_mut(&txn) else { return };
        got.insert(other, status);
        let Some((_, participants)) = shard.p.prepared().into_iter().find(|(t, _)| *t == txn)
        else {
            shard.answers.remove(&txn);
            return;
        };
        let answers: Vec<Option<TxnStatus>> = participants
            .iter()
            .map(|p| if *p == s { Some(TxnStatus::Prepared) } else { got.get(p).copied() })
            .collect();
        if let Some(commit) = terminate(&answers) {
            shard.answers.remove(&txn);
            shard.prepared_at.remove(&txn);
            if let Some(r) = shard.p.decide(txn, commit, 0) {
                self.append(s, r);
            }
            self.answer_freezes(s);
        }
    }

    pub(super) fn on_tick(&mut self, s: ShardId) {
        let tick = (self.cfg.termination_timeout / 4).max(1);
        let shard = &self.shards[s as usize];
        if shard.up {
            let stale: Vec<(TxnId, Vec<ShardId>)> = shard
                .p
                .prepared()
                .into_iter()
                .filter(|(t, parts)| {
                    parts.len() > 1
                        && shard
                            .prepared_at
                            .get(t)
                            .is_none_or(|at| self.now >= at + self.cfg.termination_timeout)
                })
                .collect();
            for (txn, parts) in stale {
                let shard = &mut self.shards[s as usize];
                shard.answers.entry(txn).or_default();
                let ts = shard.p.prepared_ts(txn).unwrap_or(0);
                for p in parts.into_iter().filter(|p| *p != s) {
                    self.send(Node::Shard(s), Node::Shard(p), Msg::Query { txn, from: s, ts });
                }
            }
            let watermark = self.watermark();
            self.collected += self.shards[s as usize].p.collect(watermark) as u64;
            if let Some(bound) = self.forget_bound(watermark)
                && let Some(r) = self.shards[s as usize].p.forget(bound, false)
            {
                self.forgotten += match &r {
                    Record::Forget { txns, .. } => txns.len() as u64,
                    _ => 0,
                };
                self.append(s, r);
            }
        }
        if self.shards[s as usize].up {
            self.settle_moves(s);
        }
        let shard = &self.shards[s as usize];
        let busy = !shard.p.prepared().is_empty()
            || !shard.frozen.is_empty()
            || !shard.incoming.is_empty();
        if !self.calm || busy || !self.shards[s as usize].up {
            self.after(tick, Event::Tick { shard: s });
        }
    }

    /// The bound below which a shard may forget decided transactions
    /// (design record 0008): the client watermark and every shard's
    /// oldest undecided prepare, as the shards publish them. A shard that
    /// is down publishes nothing, so nothing is forgotten meanwhile (as a
    /// server cannot reach it). Computed once per simulated instant (the
    /// shards tick together): a prepare arriving later in the same
    /// instant carries a version above the watermark, so above the bound.
    fn forget_bound(&mut self, watermark: Timestamp) -> Option<Timestamp> {
        if self.cfg.mutations.forget_below_watermark_only {
            return Some(watermark);
        }
        if let Some((at, bound)) = self.forget_at
            && at == self.now
        {
            return bound;
        }
        let bound = if self.shards.iter().any(|s| !s.up) {
            None
        } else {
            let prepared = self.shards.iter().filter_map(|s| s.p.oldest_undecided()).min();
            Some(prepared.map_or(watermark, |p| p.min(watermark)))
        };
        self.forget_at = Some((self.now, bound));
        bound
    }

    pub(super) fn crash(&mut self, s: ShardId) {
        if self.calm || !self.shards[s as usize].up {
            return;
        }
        self.crashes += 1;
        let shard = &mut self.shards[s as usize];
        shard.up = false;
        shard.epoch += 1;
        // The tail that was not durable is gone.
        shard.log.truncate(shard.durable);
        shard.waiting.clear();
        shard.fresh = Fresh::default();
        shard.answers.clear();
        shard.prepared_at.clear();
        shard.copies.clear();
        shard.freezing.clear();
        let down = self.between(self.cfg.shard_down);
        self.after(down, Event::Restart { shard: s });
    }

    pub(super) fn restart(&mut self, s: ShardId) {
        let cfg = &self.cfg;
        let shard = &mut self.shards[s as usize];
        let tables = ShardTables::from_log(MapVersions::default(), &shard.log[..shard.durable]);
        // A move's state is in the log too: the ranges frozen here, and
        // those copied here for a move not known to have happened.
        let now = self.now;
        shard.frozen = tables.frozen.iter().map(|f| (f.clone(), now)).collect();
        shard.incoming.clone_from(&tables.incoming);
        shard.map = self.maps.len();
        let crate::participant::Recovered { participant, logged, ask } =
            Participant::restart(s, cfg.lease_span, cfg.mutations, tables);
        shard.p = participant;
        shard.up = true;
        shard.last_durable_at = self.now;
        for (txn, _) in &ask {
            // Ask about them at the next tick.
            shard.prepared_at.insert(*txn, 0);
        }
        for r in logged {
            self.append(s, r);
        }
        if !self.calm && self.cfg.shard_crash_every > 0 {
            let d = self.exponential(self.cfg.shard_crash_every);
            self.after(d, Event::Crash { shard: s });
        }
    }

    pub(super) fn partition(&mut self) {
        if self.calm {
            return;
        }
        let a = Node::Shard(self.rng.random_range(0..self.cfg.shards));
        let b = if self.rng.random_bool(0.1) {
            Node::Mover
        } else if self.rng.random_bool(0.5) {
            Node::Client(self.rng.random_range(0..self.cfg.clients))
        } else {
            Node::Shard(self.rng.random_range(0..self.cfg.shards))
        };
        let until = self.now + self.between(self.cfg.partition_length);
        self.partitions.push((a, b, until));
        let d = self.exponential(self.cfg.partition_every);
        self.after(d, Event::Partition);
    }
}
