//! Moves in the simulation (design record 0009): the mover, one change
//! of the map at a time (a split, which moves nothing, or a range's move),
//! and the shards' side of a move: the copy while the range is served,
//! the freeze, the copy again of what changed since, and the settling of
//! a freeze, or of a copy at the new owner, by the map alone.
//!
//! The copy's changed keys are found by version here (the keys whose
//! newest version is not the one copied); the server records the keys
//! its commits write instead. Either way they are the keys written since
//! the copy began.

use rand::Rng;

use crate::log::{MovedRow, Record};
use crate::tables::{Frozen, overlap};
use crate::types::{Key, ShardId};
use crate::versions::{Versions, in_range};

use super::map::Map;
use super::mover::{Job, Step};
use super::world::{Action, Event, MoveStat, Msg, Node, World};

/// What the mover does next.
enum Change {
    Split(Key),
    Move(usize, ShardId),
}

impl World {
    /// Whether shard `s` serves `keys` and `ranges` (`[start, end)`): its
    /// map gives them to it, and none is frozen here. A shard asked about
    /// what its map does not give it reads the map again first.
    pub(super) fn serves(&mut self, s: ShardId, keys: &[&[u8]], ranges: &[(&[u8], &[u8])]) -> bool {
        let check = |w: &World| {
            let shard = &w.shards[s as usize];
            let map = &w.maps[shard.map - 1];
            let frozen = |a: &[u8], b: &[u8]| {
                shard.frozen.iter().any(|(f, _)| overlap(&f.start, &f.end, a, b))
            };
            keys.iter().all(|k| {
                map.owner(k) == s
                    && !shard.frozen.iter().any(|(f, _)| in_range(k, &f.start, &f.end))
            }) && ranges.iter().all(|(a, b)| map.owns_range(s, a, b) && !frozen(a, b))
        };
        if check(self) {
            return true;
        }
        if self.shards[s as usize].map < self.maps.len() {
            self.shards[s as usize].map = self.maps.len();
            return check(self);
        }
        false
    }

    /// The newest version of each key of `[start, end)` held by shard `s`.
    fn rows_in(&self, s: ShardId, start: &[u8], end: &[u8]) -> Vec<MovedRow> {
        let all = self.shards[s as usize].p.committed();
        all.range(start.to_vec()..)
            .take_while(|(k, _)| in_range(k, start, end))
            .filter_map(|(k, v)| v.last().map(|(c, value)| (k.clone(), *c, value.clone())))
            .collect()
    }

    /// A move's calls at shard `s`.
    pub(super) fn on_shard_move(&mut self, s: ShardId, msg: Msg) {
        let now = self.now;
        match msg {
            Msg::Export { job, start, end } => {
                let rows = self.serves(s, &[], &[(&start, &end)]).then(|| {
                    let rows = self.rows_in(s, &start, &end);
                    let versions = rows.iter().map(|(k, c, _)| (k.clone(), *c)).collect();
                    self.shards[s as usize].copies.insert((start, end), (versions, now));
                    rows
                });
                self.send(Node::Shard(s), Node::Mover, Msg::Exported { job, rows });
            }
            Msg::Import { job, adopt } => self.on_import(s, job, adopt),
            Msg::Freeze { job, f } => self.on_freeze(s, job, f),
            Msg::GiveUp { f } => self.settle(s, &f, true),
            Msg::Release { job, f } => {
                self.settle(s, &f, false);
                self.send(Node::Shard(s), Node::Mover, Msg::Released { job });
            }
            _ => {}
        }
    }

    /// Rows of a range moving here: held unserved until the map gives the
    /// range here; refused for a range this shard serves already.
    fn on_import(&mut self, s: ShardId, job: u64, adopt: Record) {
        let Record::Adopt { start, end, rows, clear, floor, version } = &adopt else { return };
        let shard = &mut self.shards[s as usize];
        shard.map = self.maps.len();
        let newest = &self.maps[shard.map - 1];
        let frozen = shard.frozen.iter().any(|(f, _)| overlap(&f.start, &f.end, start, end));
        if newest.owns_range(s, start, end) || frozen {
            return self.send(Node::Shard(s), Node::Mover, Msg::Imported { job, ok: false });
        }
        if *clear {
            shard.p.versions_mut().drop_range(start, end);
        }
        for (k, c, v) in rows {
            shard.p.versions_mut().adopt(k, *c, v.clone());
        }
        if let Some(floor) = floor
            && !self.cfg.mutations.new_owner_forgets_read_floor
        {
            shard.p.raise_read_floor(start, end, *floor);
        }
        shard.incoming.retain(|(a, b, _)| !overlap(a, b, start, end));
        shard.incoming.push((start.clone(), end.clone(), *version));
        let idx = self.append(s, adopt);
        let answer = Action::Send(Node::Mover, Msg::Imported { job, ok: true });
        self.when_durable(s, idx, answer, true);
    }

    /// Freeze a range here for its move (the same freeze asked again is
    /// answered again); refused unless the map's next version is the one
    /// it names and the range is all served here.
    fn on_freeze(&mut self, s: ShardId, job: u64, f: Frozen) {
        let now = self.now;
        let shard = &mut self.shards[s as usize];
        if let Some(known) = shard.frozen.iter_mut().find(|(g, _)| *g == f) {
            known.1 = now;
        } else {
            shard.map = self.maps.len();
            let newest = &self.maps[shard.map - 1];
            let other =
                shard.frozen.iter().any(|(g, _)| overlap(&g.start, &g.end, &f.start, &f.end));
            if self.maps.len() as u64 + 1 != f.version
                || !newest.owns_range(s, &f.start, &f.end)
                || other
            {
                return self.send(Node::Shard(s), Node::Mover, Msg::FrozenAt { job, answer: None });
            }
            shard.frozen.push((f.clone(), now));
            let (start, end, to, version) = (f.start.clone(), f.end.clone(), f.to, f.version);
            self.append(s, Record::Freeze { start, end, to, version });
        }
        let shard = &mut self.shards[s as usize];
        if !shard.freezing.iter().any(|(j, g)| *j == job && *g == f) {
            shard.freezing.push((job, f));
        }
        self.answer_freezes(s);
    }

    /// Answer each freeze of a range where nothing prepared here writes
    /// any more, once what the shard wrote is durable: the latest read
    /// served there, and the rows to copy again (those changed since the
    /// copy began, or all of them if this shard no longer knows the copy).
    pub(super) fn answer_freezes(&mut self, s: ShardId) {
        let shard = &self.shards[s as usize];
        if shard.freezing.is_empty() {
            return;
        }
        let (ready, waiting): (Vec<_>, Vec<_>) =
            shard.freezing.iter().cloned().partition(|(_, f)| {
                !shard.p.prepared_in(&f.start, &f.end) || !shard.frozen.iter().any(|(g, _)| g == f)
            });
        self.shards[s as usize].freezing = waiting;
        for (job, f) in ready {
            if !self.shards[s as usize].frozen.iter().any(|(g, _)| *g == f) {
                continue;
            }
            let rows = self.rows_in(s, &f.start, &f.end);
            let shard = &mut self.shards[s as usize];
            let floor = shard.p.latest_read_in(&f.start, &f.end);
            let answer = match shard.copies.remove(&(f.start.clone(), f.end.clone())) {
                Some((copied, _)) => {
                    let changed = rows.into_iter().filter(|(k, c, _)| copied.get(k) != Some(c));
                    (floor, changed.collect(), false)
                }
                None => (floor, rows, true),
            };
            let last = shard.log.len().saturating_sub(1);
            let msg = Msg::FrozenAt { job, answer: Some(answer) };
            self.when_durable(s, last, Action::Send(Node::Mover, msg), true);
        }
    }

    /// Settle the freeze `f` here by the map alone: its move happened if
    /// and only if map version `f.version` gives the range to `f.to`
    /// (then the range's rows here go with the freeze); published
    /// otherwise, the freeze is lifted. Not published yet, it stays,
    /// unless `abort`: then this shard publishes that version as a copy
    /// of the one before, and a late mover's publish loses.
    fn settle(&mut self, s: ShardId, f: &Frozen, abort: bool) {
        if !self.shards[s as usize].frozen.iter().any(|(g, _)| g == f) {
            return;
        }
        if (self.maps.len() as u64) < f.version {
            if !abort {
                return;
            }
            if self.maps.len() as u64 + 1 == f.version {
                let same = self.maps.last().expect("a map").clone();
                self.maps.push(same);
            }
        }
        let moved = self.maps[f.version as usize - 1].owns_range(f.to, &f.start, &f.end);
        let shard = &mut self.shards[s as usize];
        shard.frozen.retain(|(g, _)| g != f);
        shard.freezing.retain(|(_, g)| g != f);
        if moved {
            shard.p.versions_mut().drop_range(&f.start, &f.end);
            shard.map = self.maps.len();
        }
        let (start, end) = (f.start.clone(), f.end.clone());
        self.append(s, Record::Release { start, end, drop: moved });
    }

    /// Each round at shard `s`: read the map, settle each freeze (given up
    /// after the move timeout), keep or drop each copy made here whose
    /// move is decided, and forget copies made from here long ago.
    pub(super) fn settle_moves(&mut self, s: ShardId) {
        let now = self.now;
        self.shards[s as usize].map = self.maps.len();
        let frozen = self.shards[s as usize].frozen.clone();
        for (f, heard) in frozen {
            self.settle(s, &f, now >= heard + self.cfg.move_timeout);
        }
        let incoming = self.shards[s as usize].incoming.clone();
        for (start, end, version) in incoming {
            if (self.maps.len() as u64) < version {
                continue;
            }
            let kept = self.maps[version as usize - 1].owns_range(s, &start, &end);
            let shard = &mut self.shards[s as usize];
            shard.incoming.retain(|(a, b, _)| !overlap(a, b, &start, &end));
            if !kept {
                shard.p.versions_mut().drop_range(&start, &end);
                self.append(s, Record::Release { start, end, drop: true });
            }
        }
        let timeout = self.cfg.move_timeout;
        self.shards[s as usize].copies.retain(|_, (_, since)| *since + timeout > now);
    }

    /// The mover's next change of the map, if it is idle (a dead mover
    /// comes back here).
    pub(super) fn mover_next(&mut self) {
        if self.calm {
            return;
        }
        self.mover.up = true;
        // As the rebalancer: no change while a shard does not answer or
        // reports a move in flight (a freeze not settled yet).
        let waiting = self.cfg.balance && self.shards.iter().any(|s| !s.up || !s.frozen.is_empty());
        if self.mover.work.is_none() && !waiting {
            let map = self.maps.last().expect("a map").clone();
            let change = if self.cfg.balance { self.balance(&map) } else { self.random(&map) };
            match change {
                Some(Change::Split(key)) => self.split(&map, key),
                Some(Change::Move(i, to)) => self.start_move(&map, i, to),
                None => {}
            }
        }
        let d = self.exponential(self.cfg.move_every).max(1);
        self.after(d, Event::MoverNext);
    }

    fn random(&mut self, map: &Map) -> Option<Change> {
        let i = self.rng.random_range(0..map.ranges.len());
        let keys = map.keys_in(i, &self.keys);
        if keys.len() >= 2 && self.rng.random_bool(0.3) {
            return Some(Change::Split(keys[keys.len() / 2].clone()));
        }
        let to = self.rng.random_range(0..self.cfg.shards);
        (to != map.ranges[i].1).then_some(Change::Move(i, to))
    }

    /// As the rebalancer: the fullest shard's range nearest half the gap
    /// to the emptiest (and within it) moves there, or its biggest range
    /// is split; nothing once they are within a tenth of the mean.
    fn balance(&mut self, map: &Map) -> Option<Change> {
        let counts = map.counts(&self.keys);
        let mut per = vec![0usize; self.cfg.shards as usize];
        for (i, (_, owner)) in map.ranges.iter().enumerate() {
            per[*owner as usize] += counts[i];
        }
        let full = (0..per.len()).max_by_key(|&s| (per[s], std::cmp::Reverse(s)))?;
        let empty = (0..per.len()).min_by_key(|&s| (per[s], s))?;
        let gap = per[full] - per[empty];
        if gap * 10 <= self.keys.len() / per.len() {
            self.balanced_at.get_or_insert(self.now);
            return None;
        }
        let ranges: Vec<usize> =
            (0..map.ranges.len()).filter(|&i| map.ranges[i].1 as usize == full).collect();
        // Under the gap: a range as big only swaps the two.
        let fits = ranges.iter().filter(|&&i| counts[i] > 0 && counts[i] < gap);
        if let Some(&i) = fits.min_by_key(|&&i| (counts[i] as i64 - gap as i64 / 2).abs()) {
            return Some(Change::Move(i, empty as ShardId));
        }
        let &i = ranges.iter().max_by_key(|&&i| counts[i])?;
        let keys = map.keys_in(i, &self.keys);
        (keys.len() >= 2).then(|| Change::Split(keys[keys.len() / 2].clone()))
    }

    /// A split: the next map version with the range cut at `key`, both
    /// halves with the same owner (a change that moves nothing).
    fn split(&mut self, map: &Map, key: Key) {
        let i = map.index(&key);
        if map.ranges[i].0 == key {
            return;
        }
        let mut next = map.clone();
        next.ranges.insert(i + 1, (key, map.ranges[i].1));
        self.maps.push(next);
        let now = self.now;
        self.moves.push(MoveStat { split: true, began: now, frozen: None, ended: now, done: true });
    }

    fn start_move(&mut self, map: &Map, i: usize, to: ShardId) {
        self.mover.last += 1;
        let id = self.mover.last;
        let (start, end) = map.bounds(i);
        let f = Frozen { start, end, to, version: self.maps.len() as u64 + 1 };
        let now = self.now;
        self.moves.push(MoveStat {
            split: false,
            began: now,
            frozen: None,
            ended: now,
            done: false,
        });
        let stat = self.moves.len() - 1;
        let from = map.ranges[i].1;
        let job =
            Job { id, f, from, step: Step::Export, tries: 0, stat, adopt: None, frozen_at: 0 };
        self.mover.work = Some(job);
        if self.rng.random_bool(self.cfg.mover_crash_chance.clamp(0.0, 1.0)) {
            let d = self.rng.random_range(0..10_000);
            self.after(d, Event::MoverCrash { job: id });
        }
        self.mover_send();
    }

    /// Send the current step's call, and wait for its answer.
    fn mover_send(&mut self) {
        let Some(job) = &self.mover.work else { return };
        let f = job.f.clone();
        let (to, msg) = match job.step {
            Step::Export => {
                (job.from, Msg::Export { job: job.id, start: f.start.clone(), end: f.end.clone() })
            }
            Step::Import | Step::Reimport => {
                let adopt = job.adopt.clone().expect("an import to send");
                (f.to, Msg::Import { job: job.id, adopt })
            }
            Step::Freeze => (job.from, Msg::Freeze { job: job.id, f }),
            Step::Release => (job.from, Msg::Release { job: job.id, f }),
        };
        let code = (job.step as u8) << 4 | job.tries as u8;
        let id = job.id;
        self.send(Node::Mover, Node::Shard(to), msg);
        let timeout = self.cfg.client_timeout;
        self.after(timeout, Event::MoverTimeout { job: id, step: code });
    }

    /// The job ends (`done`: the map gives the range to its new owner).
    fn end_move(&mut self, done: bool) {
        if let Some(job) = self.mover.work.take() {
            let stat = &mut self.moves[job.stat];
            stat.ended = self.now;
            stat.done = done;
        }
    }

    /// Give the move up: its old owner settles it by the map.
    fn give_up(&mut self) {
        let Some(job) = &self.mover.work else { return };
        let (from, f) = (job.from, job.f.clone());
        self.send(Node::Mover, Node::Shard(from), Msg::GiveUp { f });
        self.end_move(false);
    }

    pub(super) fn on_mover(&mut self, msg: Msg) {
        let Some(job) = &mut self.mover.work else { return };
        let (id, step) = (job.id, job.step);
        match msg {
            Msg::Exported { job: j, rows } if j == id && step == Step::Export => match rows {
                None => self.end_move(false),
                Some(rows) => {
                    let f = &job.f;
                    job.adopt = Some(Record::Adopt {
                        start: f.start.clone(),
                        end: f.end.clone(),
                        version: f.version,
                        clear: true,
                        rows,
                        floor: None,
                    });
                    job.step = Step::Import;
                    job.tries = 0;
                    self.mover_send();
                }
            },
            Msg::Imported { job: j, ok } if j == id && step == Step::Import => {
                if !ok {
                    return self.end_move(false);
                }
                job.step = Step::Freeze;
                job.tries = 0;
                job.frozen_at = self.now;
                self.mover_send();
            }
            Msg::FrozenAt { job: j, answer } if j == id && step == Step::Freeze => {
                let Some((floor, rows, whole)) = answer else { return self.end_move(false) };
                let f = &job.f;
                job.adopt = Some(Record::Adopt {
                    start: f.start.clone(),
                    end: f.end.clone(),
                    version: f.version,
                    clear: whole,
                    rows,
                    floor: Some(floor),
                });
                job.step = Step::Reimport;
                job.tries = 0;
                self.mover_send();
            }
            Msg::Imported { job: j, ok } if j == id && step == Step::Reimport => {
                if !ok {
                    return self.give_up();
                }
                self.publish_move();
            }
            Msg::Released { job: j } if j == id && step == Step::Release => self.end_move(true),
            _ => {}
        }
    }

    /// The move's commit point: the next map version, giving the range to
    /// its new owner, if no other change took that version first.
    fn publish_move(&mut self) {
        let Some(job) = &mut self.mover.work else { return };
        let v = job.f.version as usize;
        if self.maps.len() + 1 != v {
            return self.give_up();
        }
        let mut next = self.maps[v - 2].clone();
        let i = next.index(&job.f.start);
        next.ranges[i].1 = job.f.to;
        self.maps.push(next);
        self.moves[job.stat].frozen = Some(self.now - job.frozen_at);
        job.step = Step::Release;
        job.tries = 0;
        self.mover_send();
    }

    pub(super) fn mover_timeout(&mut self, id: u64, code: u8) {
        let Some(job) = &mut self.mover.work else { return };
        if job.id != id || (job.step as u8) << 4 | job.tries as u8 != code {
            return;
        }
        job.tries += 1;
        if job.tries <= 3 {
            return self.mover_send();
        }
        match job.step {
            Step::Export | Step::Import => self.end_move(false),
            Step::Freeze | Step::Reimport => self.give_up(),
            // Published: the old owner releases it by the map alone.
            Step::Release => self.end_move(true),
        }
    }

    /// The mover dies in the middle of its move; it comes back at its next
    /// round, and the move is settled by the map.
    pub(super) fn mover_crash(&mut self, id: u64) {
        if self.calm || self.mover.work.as_ref().is_none_or(|j| j.id != id) {
            return;
        }
        self.mover.up = false;
        let done = self.moves[self.mover.work.as_ref().expect("a job").stat].frozen.is_some();
        self.end_move(done);
    }
}
