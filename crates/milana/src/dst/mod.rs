//! A deterministic simulation of MILANA (`dst`: deterministic simulation
//! testing; "sim" is the simulated object store alone): shard primaries with logs that
//! become durable after a delay and lose their tail in a crash, clients
//! with skewed hybrid clocks running a bank across the shards, a network
//! that delays, drops and partitions, and coordinators that die
//! mid-commit. A shard's restart reads only its durable tables
//! ([`crate::tables`]), and the shards forget decided transactions below
//! the watermark and every shard's oldest undecided prepare. One seed drives everything; the same seed replays the same
//! history (its hash is in the report).
//!
//! One event queue, ordered by (time, sequence number), and only ordered
//! maps: nothing depends on a hash seed or a thread. The oracle
//! ([`oracle`]) runs at the end, after a quiet period in which every shard
//! is up and nothing is dropped.

mod client;
mod map;
mod mover;
mod moves;
pub mod oracle;
mod primary;
mod world;

use std::cmp::Reverse;
use std::hash::{Hash, Hasher};

use crate::log::Record;
use crate::participant::Participant;
use world::World;
pub use world::{DstConfig, DstReport, MoveStat, Outcome, Reported};

/// Run one simulation.
pub fn run(cfg: &DstConfig) -> DstReport {
    let mut w = World::new(cfg.clone());
    w.start();
    // A bound far past any sane run: a livelock is a finding too.
    let limit = 60_000_000;
    while let Some(Reverse((at, _, idx))) = w.queue.pop() {
        if at > limit {
            break;
        }
        w.now = at;
        let event = w.events[idx].take().expect("each event runs once");
        event.hash(&mut w.hasher);
        at.hash(&mut w.hasher);
        w.processed += 1;
        w.handle(event);
    }
    let participants: Vec<&Participant> = w.shards.iter().map(|s| &s.p).collect();
    let logs: Vec<&[Record]> = w.shards.iter().map(|s| &s.log[..]).collect();
    let last = w.maps.last().expect("a map");
    let mut violations =
        oracle::check(&w.cfg, &participants, &logs, &w.history, &|k| last.owner(k));
    if w.shards.iter().any(|s| !s.up) {
        violations.push("a primary was still down at the end".into());
    }
    for (i, s) in w.shards.iter().enumerate() {
        for (f, _) in &s.frozen {
            violations.push(format!("shard {i}: a range frozen at the end ({f:?})"));
        }
    }
    let count = |r: Reported| w.history.iter().filter(|o| o.reported == r).count() as u32;
    let audits = |r: Reported| w.history.iter().filter(|o| o.audit && o.reported == r).count();
    let (audits_committed, audits_aborted) =
        (audits(Reported::Committed) as u32, audits(Reported::Aborted) as u32);
    DstReport {
        hash: w.hasher.finish(),
        events: w.processed,
        end: w.now,
        committed: count(Reported::Committed),
        aborted: count(Reported::Aborted),
        unknown: count(Reported::Unknown),
        audits_committed,
        audits_aborted,
        crashes: w.crashes,
        collected: w.collected,
        forgotten: w.forgotten,
        gone: w.gone,
        moves: w.moves.clone(),
        timeline: w.history.iter().map(|o| (o.ended, o.reported)).collect(),
        balanced_at: w.balanced_at,
        violations,
    }
}
