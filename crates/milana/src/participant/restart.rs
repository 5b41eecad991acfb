//! A primary's restart from its durable tables (MILANA's Algorithm 2,
//! the merge, over one shard's state).

use super::{Entry, Participant, Recovered};
use crate::log::Record;
use crate::participant::Mutations;
use crate::tables::{ShardTables, TxnRow};
use crate::types::{ShardId, Timestamp};
use crate::versions::Versions;

impl<V: Versions> Participant<V> {
    /// Rebuild a primary from its durable log: the tables the log leaves
    /// ([`ShardTables::from_log`]), then [`Participant::restart`].
    pub fn recover_with(
        id: ShardId,
        lease_span: Timestamp,
        mutations: Mutations,
        log: &[Record],
        versions: V,
    ) -> Recovered<V> {
        let tables = ShardTables::from_log(versions, log);
        Participant::restart(id, lease_span, mutations, tables)
    }

    /// Rebuild a primary from its durable tables (MILANA's Algorithm 2,
    /// the merge, over one shard's state): the versions are the tables';
    /// a decided transaction is remembered as decided; a prepared one is
    /// marked on its keys again, without validating again. Then a
    /// prepared transaction with no other participant is committed (its
    /// coordinator decided on this one vote), and the prepared
    /// multi-shard ones are returned, to be decided by asking the other
    /// participants ([`Participant::decide`] each answer). Every key's
    /// latest read starts at the lease, and prepares below the forget
    /// bound stay refused.
    pub fn restart(
        id: ShardId,
        lease_span: Timestamp,
        mutations: Mutations,
        tables: ShardTables<V>,
    ) -> Recovered<V> {
        let ShardTables { mut versions, txns, lease, forgotten, adopted, .. } = tables;
        // The replaced versions are held in memory only: a restart keeps
        // each key's newest (design record 0008).
        versions.drop_history();
        let mut p = Participant::with_versions(id, lease_span, mutations, versions);
        for (txn, row) in txns {
            match row {
                TxnRow::Prepared(prep) => p.mark_prepared(&prep),
                _ if mutations.restart_forgets_decided => {}
                TxnRow::Committed(ts) => {
                    p.txns.insert(txn, Entry::Committed(ts));
                }
                TxnRow::Aborted(ts) => {
                    p.txns.insert(txn, Entry::Aborted(ts));
                }
            }
        }
        p.forgotten = forgotten;
        if !mutations.forget_read_floor {
            p.read_floor = lease;
            p.lease = lease;
        }
        // The read floors of ranges copied here (design record 0009).
        if !mutations.new_owner_forgets_read_floor {
            for (start, end, floor) in &adopted {
                p.raise_read_floor(start, end, *floor);
            }
        }
        let mut logged = Vec::new();
        let mut ask = Vec::new();
        for (txn, participants) in p.prepared() {
            if participants.len() <= 1 || mutations.commit_prepared_without_asking {
                logged.extend(p.decide(txn, true, 0));
            } else {
                ask.push((txn, participants));
            }
        }
        Recovered { participant: p, logged, ask }
    }
}
