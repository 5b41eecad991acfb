//! The simulation's oracle: what the shards hold at the end, against what
//! the clients were told.
//!
//! - **Atomicity**: a read-write transaction is committed at every one of
//!   its participants or at none.
//! - **Durability of acknowledgments**: one a client reported committed
//!   is committed everywhere, with its writes in place; one it reported
//!   aborted is committed nowhere.
//! - **Serializability**, in MILANA's order: the committed read-write
//!   transactions run serially in the order of their versions, and each
//!   committed read-only transaction at its begin timestamp. So a
//!   read-write transaction's every read is the newest committed version
//!   below its own, and a read-only one's the newest at or below its
//!   begin timestamp. (This implies an acyclic dependency graph, and is
//!   stronger: it fixes the serial order.)
//! - **The bank**: every committed audit sums to the total, and so do the
//!   final balances.
//! - **Termination**: nothing is left prepared once the faults stop.

use std::collections::BTreeMap;

use super::world::{Outcome, Reported, SimConfig, account_key, balance, shard_of};
use crate::participant::Participant;
use crate::types::{Key, TxnStatus, Value, Version};

type Versions = BTreeMap<Key, Vec<(Version, Option<Value>)>>;

/// Check the end state of a run; what is wrong, one line each.
pub fn check(cfg: &SimConfig, shards: &[&Participant], history: &[Outcome]) -> Vec<String> {
    let mut bad = Vec::new();
    let mut truth: Versions = BTreeMap::new();
    for s in shards {
        for (key, versions) in s.committed() {
            truth.insert(key, versions);
        }
    }
    // The newest committed version of `key` that `visible` accepts.
    let newest = |key: &Key, visible: &dyn Fn(Version) -> bool| -> (Version, Option<Value>) {
        truth
            .get(key)
            .and_then(|vs| vs.iter().rev().find(|(v, _)| visible(*v)).cloned())
            .unwrap_or((Version::INITIAL, None))
    };
    let total = u64::from(cfg.accounts) * cfg.initial_balance;
    for o in history {
        let t = o.txn;
        if o.audit {
            if o.reported != Reported::Committed {
                continue;
            }
            let mut sum = 0u64;
            for (key, version, value) in &o.reads {
                let (want, _) = newest(key, &|v| v.ts <= o.begin);
                if want != *version {
                    bad.push(format!(
                        "{t:?} (read-only at {}) read {key:?} at {version:?}; the newest at or \
                         below its begin is {want:?}",
                        o.begin
                    ));
                }
                sum += balance(value, cfg.initial_balance);
            }
            if sum != total {
                bad.push(format!("{t:?}: a committed audit summed to {sum}, not {total}"));
            }
            continue;
        }
        let Some(version) = o.version else { continue };
        let status: Vec<Option<TxnStatus>> =
            o.participants.iter().map(|s| shards[*s as usize].known(t)).collect();
        let committed_here = status.iter().filter(|s| **s == Some(TxnStatus::Committed)).count();
        let all = committed_here == status.len();
        if committed_here > 0 && !all {
            bad.push(format!("{t:?} committed at some participants only: {status:?}"));
        }
        match o.reported {
            Reported::Committed if !all => {
                bad.push(format!("{t:?} was acknowledged but is not committed: {status:?}"));
            }
            Reported::Aborted if committed_here > 0 => {
                bad.push(format!("{t:?} was reported aborted but committed: {status:?}"));
            }
            _ => {}
        }
        if !all {
            continue;
        }
        for (key, value) in &o.writes {
            let there = truth
                .get(key)
                .is_some_and(|vs| vs.iter().any(|(v, x)| *v == version && x == value));
            if !there {
                bad.push(format!("{t:?}'s write of {key:?} at {version:?} is missing"));
            }
        }
        for (key, read, _) in &o.reads {
            let (want, _) = newest(key, &|v| v < version);
            if want != *read {
                bad.push(format!(
                    "{t:?} (at {version:?}) read {key:?} at {read:?}; serially it reads {want:?}"
                ));
            }
        }
    }
    let sum: u64 = (0..cfg.accounts)
        .map(|i| {
            let key = account_key(i);
            let shard = shard_of(&key, cfg.shards) as usize;
            let value = shards[shard].committed().get(&key).and_then(|vs| vs.last().cloned());
            balance(&value.and_then(|(_, v)| v), cfg.initial_balance)
        })
        .sum();
    if sum != total {
        bad.push(format!("the final balances sum to {sum}, not {total}"));
    }
    for s in shards {
        for (t, parts) in s.prepared() {
            bad.push(format!("shard {} still has {t:?} prepared (participants {parts:?})", s.id()));
        }
    }
    bad
}
