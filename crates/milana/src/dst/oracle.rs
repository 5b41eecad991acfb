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
//! - **Collection and moves** lose no newest version: each key's newest
//!   committed version (from every shard's log) is the newest its owner
//!   under the last map holds, whichever shards the key passed through.
//!
//! The committed versions and each transaction's status come from the
//! shards' logs, not their memory, which collection thins out and which
//! forgets decided transactions.

use std::collections::BTreeMap;

use super::world::{DstConfig, Outcome, Reported, account_key, balance};
use crate::log::{Prepare, Record};
use crate::participant::Participant;
use crate::types::{CommitTs, Key, ShardId, TxnId, TxnStatus, Value};

type Versions = BTreeMap<Key, Vec<(CommitTs, Option<Value>)>>;

/// Every version committed, from the shards' logs (their prepares and
/// commits): the primaries' memory has dropped the old ones.
fn committed_versions(logs: &[&[Record]]) -> Versions {
    let mut truth: Versions = BTreeMap::new();
    for log in logs {
        let prepares: BTreeMap<TxnId, &Prepare> = log
            .iter()
            .filter_map(|r| match r {
                Record::Prepare(p) => Some((p.txn, p)),
                _ => None,
            })
            .collect();
        for r in log.iter() {
            if let Record::Commit(t) = r
                && let Some(p) = prepares.get(t)
            {
                for (key, value) in &p.writes {
                    truth.entry(key.clone()).or_default().push((p.version, value.clone()));
                }
            }
        }
    }
    for versions in truth.values_mut() {
        versions.sort_by_key(|(v, _)| *v);
    }
    truth
}

/// What `log` last says of each transaction: a shard forgets decided
/// transactions, its log keeps every decision it made.
fn logged_statuses(log: &[Record]) -> BTreeMap<TxnId, TxnStatus> {
    let mut out = BTreeMap::new();
    for r in log {
        let (t, status) = match r {
            Record::Prepare(p) => (p.txn, TxnStatus::Prepared),
            Record::Commit(t) => (*t, TxnStatus::Committed),
            Record::Abort(t, _) => (*t, TxnStatus::Aborted),
            _ => continue,
        };
        out.insert(t, status);
    }
    out
}

/// Check the end state of a run; what is wrong, one line each.
pub fn check(
    cfg: &DstConfig,
    shards: &[&Participant],
    logs: &[&[Record]],
    history: &[Outcome],
    owner: &dyn Fn(&[u8]) -> ShardId,
) -> Vec<String> {
    let mut bad = Vec::new();
    let truth = committed_versions(logs);
    let statuses: Vec<BTreeMap<TxnId, TxnStatus>> =
        logs.iter().map(|l| logged_statuses(l)).collect();
    // Collection drops old versions and never the newest, and a move
    // carries the newest to the key's new owner.
    let held: Vec<Versions> = shards.iter().map(|s| s.committed()).collect();
    for (key, versions) in &truth {
        let s = owner(key);
        let there = held[s as usize].get(key).and_then(|v| v.last());
        if there != versions.last() {
            bad.push(format!(
                "{key:?}'s newest version at its owner, shard {s}, is {there:?}, not the newest \
                 committed ({:?})",
                versions.last()
            ));
        }
    }
    // The newest committed version of `key` that `visible` accepts.
    let newest = |key: &Key, visible: &dyn Fn(CommitTs) -> bool| -> (CommitTs, Option<Value>) {
        truth
            .get(key)
            .and_then(|vs| vs.iter().rev().find(|(v, _)| visible(*v)).cloned())
            .unwrap_or((CommitTs::INITIAL, None))
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
                sum = sum.saturating_add(balance(value, cfg.initial_balance));
            }
            if cfg.retwis.is_none() && sum != total {
                bad.push(format!("{t:?}: a committed audit summed to {sum}, not {total}"));
            }
            continue;
        }
        let Some(version) = o.version else { continue };
        let status: Vec<Option<TxnStatus>> =
            o.participants.iter().map(|s| statuses[*s as usize].get(&t).copied()).collect();
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
            let value = truth.get(&account_key(i)).and_then(|vs| vs.last().cloned());
            balance(&value.and_then(|(_, v)| v), cfg.initial_balance)
        })
        .sum();
    if cfg.retwis.is_none() && sum != total {
        bad.push(format!("the final balances sum to {sum}, not {total}"));
    }
    for s in shards {
        for (t, parts) in s.prepared() {
            bad.push(format!("shard {} still has {t:?} prepared (participants {parts:?})", s.id()));
        }
    }
    bad
}
