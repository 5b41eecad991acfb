//! The shard map's lease (design record 0009): which node runs the
//! rebalancer. Like the map, it is a sequence of versions on the store,
//! `PREFIX/map-lease/NNNNNNNNNNNNNNNNNNNN`, each created once with a
//! conditional write, naming its holder and when it expires (wall-clock
//! milliseconds). A node takes the lease by creating the version after
//! one that has expired, and renews it by creating the next while it
//! holds it; two nodes that race for a version cannot both win.
//!
//! A holder counts itself the holder only until a quarter of the lease
//! before its expiry, so clocks that differ by less than that quarter
//! never give two nodes the lease at once. Even then the lease is only
//! for efficiency: every change the rebalancer makes is a conditional
//! write of the map.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use milliscale::store::{Bytes, ObjectStore, StoreError};
use serde::{Deserialize, Serialize};

/// One version of the lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseVersion {
    pub version: u64,
    /// Who holds it (a node's name and address).
    pub holder: String,
    /// When it expires, in milliseconds since the Unix epoch.
    pub expires_ms: u64,
}

/// The lease on a map's store.
pub struct MapLease {
    store: Arc<dyn ObjectStore>,
    dir: String,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl MapLease {
    /// The lease beside the map under `prefix` of `store`.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> MapLease {
        MapLease { store, dir: crate::shard_map::dir_under(prefix, "map-lease") }
    }

    fn key(&self, version: u64) -> String {
        format!("{}{version:020}", self.dir)
    }

    /// The newest version, if any.
    pub fn newest(&self) -> Result<Option<LeaseVersion>, StoreError> {
        let Some(key) = self.store.list(&self.dir)?.into_iter().map(|m| m.key).max() else {
            return Ok(None);
        };
        let bytes = self.store.get(&key)?;
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Fatal(format!("a damaged lease, {key}: {e}")))
    }

    /// Hold the lease as `holder` for `span` more: taken if it is free
    /// (none, or expired), renewed if `holder` has it and half of it is
    /// gone. Whether `holder` holds it now (counting a quarter of `span`
    /// before the expiry as gone).
    pub fn hold(&self, holder: &str, span: Duration) -> Result<bool, StoreError> {
        let now = now_ms();
        let span_ms = span.as_millis() as u64;
        let newest = self.newest()?;
        let next = match &newest {
            None => 1,
            Some(l) if l.holder == holder && now + span_ms / 2 < l.expires_ms => {
                return Ok(true); // fresh enough
            }
            // Held by another, or by `holder` too near its expiry to count
            // (until it lapses: a renewal then would overlap another's
            // clock's view of the lapse).
            Some(l) if now + span_ms / 4 >= l.expires_ms && now < l.expires_ms => {
                return Ok(false);
            }
            Some(l) if l.holder != holder && now < l.expires_ms => return Ok(false),
            Some(l) => l.version + 1,
        };
        let lease =
            LeaseVersion { version: next, holder: holder.into(), expires_ms: now + span_ms };
        let body = serde_json::to_vec(&lease).expect("a lease serializes");
        match self.store.put_if_absent(&self.key(next), Bytes::from(body)) {
            Ok(_) => {
                // Keep the last few versions only.
                if next > 4 {
                    let _ = self.store.delete(&self.key(next - 4));
                }
                Ok(true)
            }
            Err(StoreError::AlreadyExists(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_a_lapsed_lease_is_taken() {
        let store: Arc<dyn ObjectStore> = Arc::new(milliscale::store::MemoryStore::new());
        let lease = MapLease::new(Arc::clone(&store), "c/");
        let span = Duration::from_millis(400);
        assert!(lease.hold("a", span).expect("take"));
        assert!(!lease.hold("b", span).expect("held by a"));
        assert!(lease.hold("a", span).expect("a still"));
        // Half gone: a renews it, as the next version.
        std::thread::sleep(Duration::from_millis(220));
        assert!(lease.hold("a", span).expect("renew"));
        assert_eq!(lease.newest().expect("read").expect("a lease").version, 2);
        assert!(!lease.hold("b", span).expect("renewed by a"));
        // Lapsed: b takes it, and a no longer holds it.
        std::thread::sleep(Duration::from_millis(450));
        assert!(lease.hold("b", span).expect("take"));
        assert!(!lease.hold("a", span).expect("b holds it"));
        // Two racing for the same next version: one wins.
        std::thread::sleep(Duration::from_millis(450));
        let wins: Vec<bool> = std::thread::scope(|s| {
            let hs: Vec<_> = ["c", "d", "e"]
                .map(|who| {
                    let lease = &lease;
                    s.spawn(move || lease.hold(who, span).expect("hold"))
                })
                .into_iter()
                .collect();
            hs.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        assert_eq!(wins.iter().filter(|w| **w).count(), 1, "{wins:?}");
    }
}
