//! Fencing: how a new writer makes the old one's next write fail.
//!
//! Every store holds a chain's parts (one lane of a log group) in the same
//! consecutive segments (the group chooses them, `log::group`), and a
//! writer writes each store's parts of a chain in order. So the old writer's next part on a store goes either to
//! the last segment there (an append at its current end) or to the next
//! segment number (append mode: created by an append at offset 0; put
//! mode: the next part object, or part 0 of the next segment).
//!
//! The new writer closes both doors, per chain and per store: it appends a
//! **fence part** (`record::fence_part`, carrying its epoch) to the end of
//! the last segment, and creates the next segment (or part object) holding
//! a fence part. The old writer's append then meets bytes that are not its
//! part: `InvalidWriteOffset`, reconciliation finds a foreign part, and the
//! group fails with `Fenced` (`log::segment`); a put meets an existing
//! object with other bytes, the same. It acknowledges nothing more, since
//! nothing more can reach a quorum of fenced stores.
//!
//! Races are settled by the store: if the old writer appends or rolls
//! over first, the fence's own append or create is refused and the new
//! writer lists again. Whatever the old writer landed before the fence
//! is before the fence in the segment, so recovery, which reads after
//! fencing, sees it; recovery stops reading a chain at its first fence
//! part. Every lane of every group is fenced: a lane left open would let
//! the old writer land (and acknowledge) parts recovery never read.

use milliscale_seam::Elapsed as _;
use std::sync::Arc;
use std::time::Duration;

use objstore::{ObjectStore, StoreError};

use crate::error::{Error, Result};
use crate::keys::{Chain, put_part_key, segment_key};
use crate::keys::{LogObject, parse_log_key};
use crate::log::record::fence_part;
use crate::log::segment::WriteMode;
use crate::manifest::LogRef;

/// Fence every chain (group and lane) of `log` on one store for a writer
/// of `epoch`. `mode` is how this store would be written when a chain has
/// nothing yet.
pub(crate) fn fence_store(
    store: &Arc<dyn ObjectStore>,
    mode: WriteMode,
    log: &LogRef,
    epoch: u64,
    deadline: Duration,
) -> Result<()> {
    // Chains are independent, and each costs a few round trips: all at
    // once, so fencing takes the time of one chain.
    let chains: Vec<Chain> = log.chains().collect();
    let done = crate::parallel::parallel_map(&chains, chains.len(), |&chain| {
        let start = log.start(chain).expect("a chain of the log");
        fence_chain(store.as_ref(), mode, chain, start, epoch, deadline)
    });
    done.into_iter().collect()
}

fn fence_chain(
    store: &dyn ObjectStore,
    mode: WriteMode,
    chain: Chain,
    start: u64,
    epoch: u64,
    deadline: Duration,
) -> Result<()> {
    let fence = fence_part(chain.group, epoch);
    let started = milliscale_seam::now();
    let err = |e: StoreError| Error::Store(format!("fencing log {chain}: {e}"));
    loop {
        if started.elapsed_now() > deadline {
            return Err(Error::StoreUnavailable(format!(
                "fencing log {chain}: the old writer kept moving or the store kept \
                 failing for {deadline:?}"
            )));
        }
        let listed = match store.list(&chain.prefix()) {
            Ok(l) => l,
            Err(e) if e.is_retryable() => continue,
            Err(e) => return Err(err(e)),
        };
        let objects: Vec<LogObject> = listed
            .iter()
            .filter_map(|o| parse_log_key(&o.key))
            .filter(|o| o.chain() == chain && o.segment() >= start)
            .collect();
        let put_mode = match objects.iter().max() {
            Some(LogObject::Part { .. }) => true,
            Some(LogObject::Segment { .. }) => false,
            None => mode == WriteMode::PutPerFlush,
        };
        let last = objects.iter().max().copied();
        let done = if put_mode {
            let (next_here, next_segment) = match last {
                Some(LogObject::Part { segment, part, .. }) => {
                    (Some(put_part_key(chain, segment, part + 1)), segment + 1)
                }
                _ => (None, start),
            };
            let mut ok = true;
            for key in next_here.into_iter().chain([put_part_key(chain, next_segment, 0)]) {
                match store.put_if_absent(&key, fence.clone()) {
                    Ok(_) => {}
                    Err(StoreError::AlreadyExists(_)) => {
                        // Ours from an earlier attempt, or the old writer's.
                        ok &= store.get(&key).is_ok_and(|b| b == fence);
                    }
                    Err(e) if e.is_retryable() => ok = false,
                    Err(e) => return Err(err(e)),
                }
                if !ok {
                    break;
                }
            }
            ok
        } else {
            let next_segment = match last {
                Some(LogObject::Segment { segment, .. }) => {
                    let key = segment_key(chain, segment);
                    match append_at_end(store, &key, &fence) {
                        Ok(true) => {}
                        Ok(false) => continue,
                        Err(e) => return Err(err(e)),
                    }
                    segment + 1
                }
                _ => start,
            };
            match store.append(&segment_key(chain, next_segment), 0, fence.clone()) {
                Ok(_) => true,
                // Someone created it first: list again and fence that.
                Err(StoreError::InvalidWriteOffset { .. }) => false,
                // Unknown outcome: listing again settles it (an extra fence
                // part is harmless).
                Err(e) if e.is_retryable() => false,
                Err(e) => return Err(err(e)),
            }
        };
        if done {
            return Ok(());
        }
    }
}

/// Append `fence` at the current end of `key`. `Ok(false)`: the object
/// changed under us; list again.
fn append_at_end(
    store: &dyn ObjectStore,
    key: &str,
    fence: &objstore::Bytes,
) -> objstore::Result<bool> {
    let size = match store.head(key) {
        Ok(m) => m.size,
        Err(e) if e.is_retryable() => return Ok(false),
        Err(StoreError::NotFound(_)) => return Ok(false),
        Err(e) => return Err(e),
    };
    match store.append(key, size, fence.clone()) {
        Ok(_) => Ok(true),
        // A full segment: the old writer cannot append here either.
        Err(StoreError::TooManyParts { .. }) => Ok(true),
        Err(StoreError::InvalidWriteOffset { .. }) => Ok(false),
        Err(e) if e.is_retryable() => Ok(false),
        Err(e) => Err(e),
    }
}
