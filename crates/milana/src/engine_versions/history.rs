//! The versions that installs replaced, held in memory for reads below
//! the versions that replaced them ([`super::EngineVersions`]).

use std::collections::VecDeque;
use std::sync::Arc;

use foldhash::HashMap;
use smallvec::{SmallVec, smallvec};

use super::parse;
use crate::types::{CommitTs, HeldKey, Timestamp, Value};
use crate::versions::Gone;

/// The versions that rows replaced, in memory until the watermark passes
/// the versions that replaced them.
#[derive(Debug, Default)]
pub(super) struct History {
    /// Per key, its replaced versions, oldest first (most keys have one
    /// at a time: held inline). A key first written since the shard
    /// started holds its absence before that write ([`CommitTs::INITIAL`]),
    /// so that a read below it finds "none".
    pub(super) keys: HashMap<HeldKey, Olders>,
    /// When each replaced version may go: the replacing version's
    /// timestamp and the key, in the order they were replaced. Commits
    /// arrive in nearly timestamp order, so a collection pops from the
    /// front while the front may go: one that came early with a late
    /// timestamp holds the ones behind it a little longer, and none goes
    /// early.
    pub(super) due: VecDeque<(Timestamp, HeldKey)>,
    /// How many versions (not absences) are held.
    pub(super) count: usize,
}

/// One key's replaced versions, oldest first.
pub(super) type Olders = SmallVec<[Older; 1]>;

#[derive(Debug)]
pub(super) struct Older {
    pub(super) version: CommitTs,
    /// The row that held it (`None`: the key had none, at
    /// [`CommitTs::INITIAL`]), shared with the install that replaced it.
    row: Option<Arc<[u8]>>,
    /// The timestamp of the version that replaced it.
    by: Timestamp,
}

impl Older {
    pub(super) fn value(&self) -> Option<Value> {
        self.row.as_deref().and_then(|r| parse(r).1.map(<[u8]>::to_vec))
    }
}

impl History {
    pub(super) fn push(
        &mut self,
        key: &[u8],
        version: CommitTs,
        row: Option<Arc<[u8]>>,
        by: Timestamp,
    ) {
        self.count += usize::from(version != CommitTs::INITIAL);
        let older = Older { version, row, by };
        // `get_mut` first: a hot key has replaced versions already, and
        // `entry` copies the key.
        match self.keys.get_mut(key) {
            Some(q) => q.push(older),
            None => {
                self.keys.insert(HeldKey::from_slice(key), smallvec![older]);
            }
        }
        self.due.push_back((by, HeldKey::from_slice(key)));
    }

    /// The newest replaced version of `key` at or below `at`; [`Gone`] if
    /// there is none (`row`: the key's row's version, the oldest held when
    /// nothing of it is in memory).
    pub(super) fn at(
        &self,
        key: &[u8],
        at: Timestamp,
        row: CommitTs,
    ) -> Result<(CommitTs, Option<Value>), Gone> {
        let older = self.keys.get(key);
        if let Some(o) = older.and_then(|o| o.iter().rev().find(|o| o.version.ts <= at)) {
            return Ok((o.version, o.value()));
        }
        let oldest = older.and_then(|o| o.first()).map_or(row, |o| o.version);
        Err(Gone { oldest: oldest.ts })
    }

    /// The value of `key` at exactly `version`, if held.
    pub(super) fn exact(&self, key: &[u8], version: CommitTs) -> Option<Option<Value>> {
        let o = self.keys.get(key)?.iter().find(|o| o.version == version)?;
        Some(o.value())
    }

    /// Drop the versions replaced at or below `watermark` in one pass;
    /// how many (the reference for [`History::collect_some`]'s parts).
    #[cfg(test)]
    pub(super) fn collect(&mut self, watermark: Timestamp) -> usize {
        self.collect_some(watermark, usize::MAX).0
    }

    /// [`History::collect`], looking at `budget` replacements at most:
    /// how many versions it dropped, and if it stopped on the budget.
    pub(super) fn collect_some(&mut self, watermark: Timestamp, budget: usize) -> (usize, bool) {
        let mut dropped = 0;
        let mut left = budget;
        while let Some((by, _)) = self.due.front()
            && *by <= watermark
        {
            if left == 0 {
                self.count -= dropped;
                return (dropped, true);
            }
            left -= 1;
            let (_, key) = self.due.pop_front().expect("a front");
            let Some(older) = self.keys.get_mut(key.as_slice()) else { continue };
            let due = older.iter().take_while(|o| o.by <= watermark).count();
            dropped += older.drain(..due).filter(|o| o.version != CommitTs::INITIAL).count();
            if older.is_empty() {
                self.keys.remove(key.as_slice());
            }
        }
        self.count -= dropped;
        (dropped, false)
    }

    pub(super) fn forget_range(&mut self, start: &[u8], end: &[u8]) -> usize {
        self.forget_where(|k| crate::versions::in_range(k, start, end))
    }

    pub(super) fn forget_prefix(&mut self, prefix: &[u8]) -> usize {
        self.forget_where(|k| k.starts_with(prefix))
    }

    fn forget_where(&mut self, gone: impl Fn(&[u8]) -> bool) -> usize {
        let mut dropped = 0;
        self.keys.retain(|k, older| {
            let keep = !gone(k);
            if !keep {
                dropped += older.iter().filter(|o| o.version != CommitTs::INITIAL).count();
            }
            keep
        });
        self.count -= dropped;
        dropped
    }
}
