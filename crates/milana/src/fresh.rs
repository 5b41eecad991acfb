//! Versions committed but not yet durable: a read must not be answered
//! with one.
//!
//! The single-shard fast path ([`crate::participant::Participant::commit_alone`])
//! installs a transaction's writes at once, before the write that holds its
//! prepare and commit is durable: no one else voted, so nothing else holds
//! it. Until that write is durable a crash takes the versions back. A read
//! served meanwhile may return one, but its answer has to wait for the
//! write: a reader told of a version that a crash then takes back would
//! have seen a write that never happened (the engine's own rule, a
//! transaction acknowledged only once its DSN is durable, here for
//! MILANA's reads).
//!
//! A multi-shard commit needs no such wait: it is installed once every
//! participant's prepare is durable, and a recovery commits it again.
//!
//! The caller names places in its log by number (the server: CSNs; the
//! simulation: record indexes), in the order it writes them.

use std::collections::VecDeque;

use foldhash::HashMap;

use crate::log::Record;
use crate::types::CommitTs;

/// The fresh versions, each with the place in the log that makes it
/// durable.
#[derive(Debug, Clone, Default)]
pub struct Fresh {
    at: HashMap<CommitTs, u64>,
    /// The same, in the order written (places rising).
    order: VecDeque<(u64, CommitTs)>,
}

impl Fresh {
    /// `version` was installed before place `at` of the log was written.
    pub fn written(&mut self, version: CommitTs, at: u64) {
        debug_assert!(self.order.back().is_none_or(|(p, _)| *p <= at), "places rise");
        self.at.insert(version, at);
        self.order.push_back((at, version));
    }

    /// A write of `records` was placed at `at`: if it is a lone
    /// participant's prepare and commit (installed before it is durable),
    /// its version is fresh until then.
    pub fn wrote(&mut self, records: &[Record], at: u64) {
        if let [Record::Prepare(p), Record::Commit(_)] = records {
            self.written(p.version, at);
        }
    }

    /// Every place below `upto` is durable: forget the versions there.
    pub fn durable_below(&mut self, upto: u64) {
        while let Some(&(at, version)) = self.order.front()
            && at < upto
        {
            self.order.pop_front();
            self.at.remove(&version);
        }
    }

    /// The place a read that returned `version` waits for, if it is fresh.
    pub fn wait_for(&self, version: CommitTs) -> Option<u64> {
        self.at.get(&version).copied()
    }

    /// The place a read of all of `versions` waits for: the highest.
    pub fn wait_for_all(&self, versions: impl IntoIterator<Item = CommitTs>) -> Option<u64> {
        if self.at.is_empty() {
            return None;
        }
        versions.into_iter().filter_map(|v| self.wait_for(v)).max()
    }

    /// How many versions are fresh.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// No version is fresh.
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_fresh_until_its_place_is_durable() {
        let v = |ts| CommitTs { ts, client: 1 };
        let mut f = Fresh::default();
        f.written(v(10), 5);
        f.written(v(7), 6);
        assert_eq!(f.wait_for_all([v(10), v(7), v(3)]), Some(6));
        f.durable_below(6);
        assert_eq!(f.wait_for(v(10)), None);
        assert_eq!(f.wait_for_all([v(10), v(7)]), Some(6));
        f.durable_below(7);
        assert!(f.is_empty());
    }
}
