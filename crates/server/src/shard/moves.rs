//! Which keys this shard serves: those the map gives it, less the ranges
//! frozen here for a move to another shard (design record 0009).
//!
//! A freeze (`ShardFreeze`) is the old owner's side of a move's handover.
//! It takes effect under the shard's lock, so every read, scan, prepare
//! and batch that touches the range either ran wholly before it (its
//! reads are at or below the floor the freeze answers with, and its
//! writes are in the rows the new owner copies) or is refused after it,
//! retryably, as a wrong shard naming the map version the move
//! publishes. The check is made under the lock at each of those points
//! ([`Shard::refuse_moved`]), not only where a call's keys are first
//! checked, since a call may wait between the two; and it checks the
//! current map there too, since a call may wait through a whole move,
//! past its release, which lifts the freeze (a release adopts the map
//! that gives the range away first). Its record is written
//! to `_milana.meta` (`frozen/START`) and read again at a restart, so a
//! shard that crashes frozen stays frozen until the freeze is lifted.
//! Decisions of transactions prepared before the freeze still commit:
//! the freeze answers once none is left that writes in the range, and
//! what the shard wrote before is durable. Its rows then move
//! ([`super::handover`]).
//!
//! A freeze ends by the map alone ([`Shard::settle`]): the move happened
//! if and only if the map version the freeze names is on the store and
//! gives the range to the shard it moves to. Then the range's rows here
//! are deleted with the freeze; if that version gives it elsewhere, the
//! freeze is lifted. A mover that gives up, or that is silent past the
//! move timeout (it is heard from at each page of the copy), has this
//! shard publish that version itself, unchanged, so that a late mover's
//! publish loses. The background settles every freeze each round, so a
//! restart, a mover killed after publishing, or one killed before, all
//! end the same way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use milliscale_milana::shard_map::{MapError, ShardMap};
use milliscale_milana::types::{Key, ShardId};
use milliscale_milana::versions::in_range;
use milliscale_proto::v1 as proto;
use tonic::Status;

use super::tables::Tables;
use super::{Shard, State};
use crate::errors::{engine, refuse};

/// A range frozen here for its move to shard `to`.
#[derive(Debug, Clone)]
pub struct Frozen {
    /// `[start, end)` in the cluster's key space; an empty `end`: no end.
    pub start: Key,
    pub end: Key,
    pub to: ShardId,
    /// The map version that gives it to `to` once published.
    pub map_version: u64,
    /// When its mover was last heard from (a freeze or an export of it;
    /// a restart counts as one): silent past the move timeout, the move
    /// is aborted here ([`Shard::settle_frozen`]).
    pub heard: Instant,
}

/// What [`Shard::settle`] did with a freeze.
enum Settled {
    /// Its move is not published (nor aborted): it stays.
    Pending,
    /// Its move happened: the range's rows here, and the freeze, are gone.
    Released(u64),
    /// Its move did not happen: the range is served here again.
    Lifted,
    /// It is not frozen here (any longer, or for another move).
    NotFrozen,
}

impl Frozen {
    /// As `ShardInfo` shows it.
    pub(super) fn in_flight(&self) -> proto::MoveInFlight {
        proto::MoveInFlight {
            start: self.start.clone().into(),
            end: self.end.clone().into(),
            to: self.to,
            map_version: self.map_version,
            silent_ms: self.heard.elapsed().as_millis() as u64,
        }
    }

    /// The same freeze: the same range, for the same move.
    fn same(&self, o: &Frozen) -> bool {
        (&self.start, &self.end, self.to, self.map_version)
            == (&o.start, &o.end, o.to, o.map_version)
    }
}

/// The prefix of a frozen range's row in `_milana.meta`.
const FROZEN_PREFIX: &[u8] = b"frozen/";

pub(super) fn row_key(start: &[u8]) -> Vec<u8> {
    [FROZEN_PREFIX, start].concat()
}

fn row_value(f: &Frozen) -> Vec<u8> {
    [&f.to.to_be_bytes()[..], &f.map_version.to_be_bytes(), &f.end].concat()
}

/// The ranges frozen here, from `_milana.meta` (at a restart).
pub(super) fn load(tables: &Tables) -> milliscale::Result<Vec<Frozen>> {
    let mut out = Vec::new();
    for (start, v) in tables.meta_rows(FROZEN_PREFIX)? {
        if v.len() < 12 {
            return Err(milliscale::Error::Corrupt(format!("a frozen range's row of {v:?}")));
        }
        out.push(Frozen {
            start,
            end: v[12..].to_vec(),
            to: u32::from_be_bytes(v[..4].try_into().expect("4 bytes")),
            map_version: u64::from_be_bytes(v[4..12].try_into().expect("8 bytes")),
            heard: Instant::now(),
        });
    }
    Ok(out)
}

/// Whether `[start, end)` and `[a, b)` share a key (empty ends: no end).
fn overlap(start: &[u8], end: &[u8], a: &[u8], b: &[u8]) -> bool {
    (b.is_empty() || start < b) && (end.is_empty() || a < end)
}

impl State {
    /// Refuse, as a wrong shard, a call that touches a frozen range:
    /// any of `keys`, or any of `ranges` (`[start, end)`).
    pub(super) fn refuse_frozen<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
        ranges: impl IntoIterator<Item = (&'k [u8], &'k [u8])>,
    ) -> Result<(), Status> {
        if self.frozen.is_empty() {
            return Ok(());
        }
        let hit = keys
            .into_iter()
            .find_map(|k| self.frozen.iter().find(|f| in_range(k, &f.start, &f.end)))
            .or_else(|| {
                ranges
                    .into_iter()
                    .find_map(|(a, b)| self.frozen.iter().find(|f| overlap(&f.start, &f.end, a, b)))
            });
        match hit {
            None => Ok(()),
            Some(f) => Err(refuse::wrong_shard(
                format!(
                    "range from {:?} is moving to shard {}: map version {} gives it there",
                    String::from_utf8_lossy(&f.start),
                    f.to,
                    f.map_version
                ),
                f.map_version,
            )),
        }
    }
}

impl Shard {
    /// `ShardFreeze` (see the module's comment). Refused for a range not
    /// all this shard's under its map, or one that overlaps another
    /// frozen range; the same freeze asked again is answered again.
    pub async fn freeze(
        self: &Arc<Self>,
        r: proto::ShardFreezeRequest,
    ) -> Result<proto::ShardFreezeResponse, Status> {
        if self.opts.read_only {
            return Err(super::read_only_refusal());
        }
        let f = Frozen {
            start: r.start.to_vec(),
            end: r.end.to_vec(),
            to: r.to,
            map_version: r.map_version,
            heard: Instant::now(),
        };
        if !f.end.is_empty() && f.end <= f.start {
            return Err(refuse::invalid("a frozen range's end must be past its start"));
        }
        if r.unfreeze {
            return self.unfreeze(&f).await;
        }
        if f.to == self.opts.shard {
            return Err(refuse::invalid("a range moves to another shard"));
        }
        self.own_range(&f.start, &f.end)?;
        // A move publishes the version after the newest: a freeze naming
        // another could never be settled (nor given up) by the map.
        let known = self.lock().frozen.iter().any(|o| o.same(&f));
        if !known {
            self.refresh_map().await;
            let newest = self.map.read().version;
            if f.map_version != newest + 1 {
                return Err(refuse::invalid(format!(
                    "the freeze names map version {}, but the next is {}: read the map again",
                    f.map_version,
                    newest + 1
                )));
            }
        }
        let ack = {
            let mut st = self.lock();
            let other = st.frozen.iter_mut().find(|o| overlap(&o.start, &o.end, &f.start, &f.end));
            match other {
                Some(o) if o.same(&f) => {
                    o.heard = f.heard;
                    None
                }
                Some(o) => {
                    return Err(refuse::invalid(format!(
                        "the range overlaps one frozen for shard {} (map version {})",
                        o.to, o.map_version
                    )));
                }
                None => {
                    // Frozen here once its record is on its way: a freeze
                    // answered again must be one a restart keeps.
                    let mut tx = self.tables.db.begin().map_err(|e| engine(&e))?;
                    tx.put(&self.tables.meta, &row_key(&f.start), &row_value(&f))
                        .map_err(|e| engine(&e))?;
                    let ack = tx.precommit().map_err(|e| engine(&e))?;
                    if let Some(csn) = ack.csn() {
                        // The answer's barrier covers the record too.
                        st.last_csn = st.last_csn.max(csn);
                    }
                    st.frozen.push(f.clone());
                    Some(ack)
                }
            }
        };
        if let Some(ack) = ack {
            ack.await.map_err(|e| engine(&e))?;
        }
        // Wait out the transactions prepared here that write in the
        // range: their decisions come from their coordinators, or from
        // cooperative termination after the termination timeout.
        let patience = self.opts.termination_timeout * 4 + Duration::from_secs(1);
        let deadline = Instant::now() + patience;
        loop {
            let decided = self.decided.notified();
            tokio::pin!(decided);
            decided.as_mut().enable();
            let done = {
                let mut st = self.lock();
                if st.p.prepared_in(&f.start, &f.end) {
                    None
                } else {
                    // The keys written since a copy before the freeze
                    // began: all that changed in its pages, now that
                    // nothing more is written here.
                    st.copies.remove(&(f.start.clone(), f.end.clone()));
                    let changed = st.p.versions_mut().tracked().stop(&f.start, &f.end);
                    Some((st.p.latest_read_in(&f.start, &f.end), st.last_csn, changed))
                }
            };
            if let Some((floor, csn, changed)) = done {
                // And what was written before it durable: a commit the
                // range's next owner copies is one no crash takes back.
                self.barrier(csn).await?;
                let tracked = changed.is_some();
                let changed = changed.unwrap_or_default().into_iter().map(Into::into).collect();
                return Ok(proto::ShardFreezeResponse { floor, tracked, changed });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Status::unavailable(format!(
                    "frozen, but transactions prepared here still write in the range after \
                     {patience:?}; ask again"
                )));
            }
            let _ = tokio::time::timeout(left.min(Duration::from_millis(100)), decided).await;
        }
    }

    /// Stop recording the keys written in ranges whose copy before the
    /// freeze has been silent past the move timeout (its mover is gone).
    pub(super) fn forget_silent_copies(&self) {
        let mut st = self.lock();
        if st.copies.is_empty() {
            return;
        }
        let timeout = self.opts.move_timeout;
        let silent: Vec<(Key, Key)> = st
            .copies
            .iter()
            .filter(|(_, t)| t.elapsed() >= timeout)
            .map(|(r, _)| r.clone())
            .collect();
        for (start, end) in silent {
            st.copies.remove(&(start.clone(), end.clone()));
            st.p.versions_mut().tracked().stop(&start, &end);
            tracing::info!(start = ?String::from_utf8_lossy(&start), "a range's copy went silent: its writes no longer recorded");
        }
    }

    /// The mover's "lift the freeze": the move is aborted ([`settle`]).
    /// Refused when the move happened after all (the mover's publish
    /// was taken for lost but landed): the range is released here.
    async fn unfreeze(&self, f: &Frozen) -> Result<proto::ShardFreezeResponse, Status> {
        let floor = |me: &Self| proto::ShardFreezeResponse {
            floor: me.lock().p.latest_read_in(&f.start, &f.end),
            ..Default::default()
        };
        match self.settle(f, true).await? {
            Settled::Lifted | Settled::NotFrozen => Ok(floor(self)),
            Settled::Released(rows) => Err(Status::failed_precondition(format!(
                "map version {} gives the range to shard {}: the move happened, and its {rows} \
                 rows here are deleted",
                f.map_version, f.to
            ))),
            Settled::Pending => Err(Status::unavailable("the shard map could not be read")),
        }
    }

    /// Settle each freeze whose move is decided, and abort each whose
    /// mover has been silent past the move timeout (run in the
    /// background while a range is frozen here).
    pub(super) async fn settle_frozen(&self) {
        let frozen = self.lock().frozen.clone();
        for f in frozen {
            let abort = f.heard.elapsed() >= self.opts.move_timeout;
            match self.settle(&f, abort).await {
                Ok(Settled::Released(rows)) => tracing::info!(
                    to = f.to,
                    map_version = f.map_version,
                    rows,
                    "a range moved away: its rows here deleted and its freeze lifted"
                ),
                Ok(Settled::Lifted) => tracing::warn!(
                    to = f.to,
                    map_version = f.map_version,
                    aborted = abort,
                    "a move did not happen: the range is served here again"
                ),
                Ok(Settled::Pending | Settled::NotFrozen) => {}
                Err(e) => tracing::warn!(error = %e, "settling a frozen range"),
            }
        }
    }

    /// Decide the freeze `f` by the shard map (design record 0009): its
    /// move happened if and only if map version `f.map_version` on the
    /// store gives the range to `f.to`. Published so, the range's rows
    /// here are deleted with the freeze; published otherwise (another
    /// change won the version, or the move was aborted), the freeze is
    /// lifted. Not published yet, it stays, unless `abort`: then this
    /// shard publishes that version itself, as a copy of the one before,
    /// and a late mover's publish loses to it.
    async fn settle(&self, f: &Frozen, abort: bool) -> Result<Settled, Status> {
        self.refresh_map().await;
        let newest = self.map.read().clone();
        if newest.version < f.map_version {
            if !abort {
                return Ok(Settled::Pending);
            }
            if !self.lock().frozen.iter().any(|o| o.same(f)) {
                return Ok(Settled::NotFrozen);
            }
            // A mover freezes for the version after the newest it read,
            // and versions only grow: the newest is the one before.
            let mut copy = newest.clone();
            copy.version = f.map_version;
            let maps = Arc::clone(&self.maps);
            let published = tokio::task::spawn_blocking(move || maps.publish(&copy)).await;
            match published {
                Ok(Ok(())) => tracing::warn!(
                    map_version = f.map_version,
                    "a move's mover went silent: published the map unchanged to abort it"
                ),
                Ok(Err(MapError::Lost(_))) => {}
                Ok(Err(e)) => return Err(Status::unavailable(format!("aborting a move: {e}"))),
                Err(e) => return Err(Status::internal(e.to_string())),
            }
            self.refresh_map().await;
        }
        let at = if self.map.read().version == f.map_version {
            Some(self.map.read().clone())
        } else {
            let (maps, v) = (Arc::clone(&self.maps), f.map_version);
            match tokio::task::spawn_blocking(move || maps.get(v)).await {
                Ok(Ok(m)) => m,
                Ok(Err(e)) => return Err(Status::unavailable(format!("the shard map: {e}"))),
                Err(e) => return Err(Status::internal(e.to_string())),
            }
        };
        let Some(at) = at else { return Ok(Settled::Pending) };
        if self.map.read().version < f.map_version {
            return Ok(Settled::Pending);
        }
        let same = |o: &Frozen| {
            if o.same(f) { Ok(()) } else { Err(Status::not_found("frozen again since")) }
        };
        if at.sole_owner(&f.start, &f.end) == Some(f.to) {
            return match self.let_go(&f.start, &f.end, same).await {
                Ok(rows) => Ok(Settled::Released(rows)),
                Err(e) if e.code() == tonic::Code::NotFound => Ok(Settled::NotFrozen),
                Err(e) => Err(e),
            };
        }
        let ack = {
            let mut st = self.lock();
            let Some(i) = st.frozen.iter().position(|o| o.same(f)) else {
                return Ok(Settled::NotFrozen);
            };
            let mut tx = self.tables.db.begin().map_err(|e| engine(&e))?;
            tx.delete(&self.tables.meta, &row_key(&f.start)).map_err(|e| engine(&e))?;
            let ack = tx.precommit().map_err(|e| engine(&e))?;
            st.frozen.remove(i);
            ack
        };
        ack.await.map_err(|e| engine(&e))?;
        Ok(Settled::Lifted)
    }

    /// Under the lock (`st`), where a call is served: refuse, as a wrong
    /// shard, what it touches in a range frozen here or that `map` (the
    /// current map, read by the caller under the lock) gives another
    /// shard. A call's keys are checked against the map when it arrives,
    /// but it may wait before it is served (for the read lease, for a
    /// prepared write's decision, for the lock) while its range is
    /// frozen, moved and released: a release adopts the map that gives
    /// the range away before it lifts the freeze under the lock, so at
    /// every moment under the lock one of the two refuses the range.
    /// Served anyway, a read would find the rows deleted and a write
    /// would land where the new owner never sees it.
    pub(super) fn refuse_moved<'k, K, R>(
        &self,
        st: &State,
        map: &ShardMap,
        keys: K,
        ranges: R,
    ) -> Result<(), Status>
    where
        K: IntoIterator<Item = &'k [u8]> + Clone,
        R: IntoIterator<Item = (&'k [u8], &'k [u8])> + Clone,
    {
        st.refuse_frozen(keys.clone(), ranges.clone())?;
        for k in keys {
            self.own_in(map, k)?;
        }
        for (start, end) in ranges {
            self.own_range_in(map, start, end)?;
        }
        Ok(())
    }

    /// Refuse a key that `map`, the current map read by the caller, does
    /// not give this shard (a batch reads the map once for all its keys).
    pub(super) fn own_in(&self, map: &ShardMap, key: &[u8]) -> Result<(), Status> {
        let owner = map.shard_of(key);
        if owner == self.opts.shard {
            return Ok(());
        }
        Err(refuse::wrong_shard(
            format!(
                "wrong shard: map version {} gives this key to shard {owner}, not {}",
                map.version, self.opts.shard
            ),
            map.version,
        ))
    }

    /// Refuse a range `[start, end)` (an empty `end`: no end) that is not
    /// all this shard's under the current map.
    pub(super) fn own_range(&self, start: &[u8], end: &[u8]) -> Result<(), Status> {
        self.own_range_in(&self.map.read(), start, end)
    }

    /// [`Shard::own_range`] under `map`, the current map read by the caller.
    pub(super) fn own_range_in(
        &self,
        map: &ShardMap,
        start: &[u8],
        end: &[u8],
    ) -> Result<(), Status> {
        self.own_in(map, start)?;
        let other = map.ranges.iter().find(|(first, owner)| {
            first.as_slice() > start
                && (end.is_empty() || first.as_slice() < end)
                && *owner != self.opts.shard
        });
        match other {
            None => Ok(()),
            Some((first, owner)) => Err(refuse::wrong_shard(
                format!(
                    "wrong shard: map version {} gives part of this range (from {:?}) to shard \
                     {owner}, not {}",
                    map.version,
                    String::from_utf8_lossy(first),
                    self.opts.shard
                ),
                map.version,
            )),
        }
    }
}
