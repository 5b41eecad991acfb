//! Readers' registrations, and collection by reachability (design record
//! 0012, "Collection").
//!
//! A reader of a database's objects that is not its writer (a past read,
//! a restore, a backup pass, a clone not yet opened) **registers** what it
//! reads: an object `readers/<id>` naming the checkpoint and the logs (each
//! from its first segment) it needs, with a lease's expiry (or none, for a
//! clone). The writer's truncation keeps the union of what its manifest
//! needs and what every live registration names (`Needed::of` plus
//! `live`); an expired registration is deleted instead.
//!
//! The fence is the manifest chain. A reader:
//! 1. reads the manifest and chooses what it needs;
//! 2. writes its registration;
//! 3. reads the manifest again: if the newest version still needs
//!    everything it chose (`Needed::covers`), it is safe; else it
//!    withdraws and chooses again.
//!
//! The collector publishes a manifest version, *then* lists the
//! registrations, then deletes. If its publication came before the
//! reader's step 3, the reader sees it and withdraws; if after, the
//! reader's registration (step 2, before step 3) is listed. So no reader
//! that passed step 3 loses an object while its lease lasts.

use milliscale_seam::Elapsed as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use objstore::{ObjectStore, StoreError};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::manifest::LogRef;
use crate::mvcc::Csn;
use crate::retry::retry;

/// Where registrations live.
pub const READERS_PREFIX: &str = "readers/";
/// How long a registration lasts unless renewed.
pub const LEASE: Duration = Duration::from_secs(600);
/// How often a held lease is renewed.
const RENEW_EVERY: Duration = Duration::from_secs(60);

/// What a reader reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// Who reads: `past`, `restore`, `backup`, `clone`.
    pub kind: String,
    /// When the lease ends (ms since the Unix epoch); `None`: until it is
    /// withdrawn (a clone that has not written its own checkpoint yet).
    pub expires_ms: Option<u64>,
    /// The checkpoints whose chunks it reads.
    pub checkpoints: Vec<Csn>,
    /// The logs it reads, each from its `group_start` on.
    pub logs: Vec<LogRef>,
}

impl Registration {
    fn is_live(&self, now_ms: u64) -> bool {
        self.expires_ms.is_none_or(|e| e > now_ms)
    }
}

/// A held registration: renewed while held, withdrawn when dropped.
pub struct Lease {
    key: String,
    stores: Vec<(String, Arc<dyn ObjectStore>)>,
    stop: Arc<AtomicBool>,
    renewer: Option<milliscale_seam::JoinHandle<()>>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("key", &self.key).finish()
    }
}

impl Lease {
    /// Keep the registration after this handle is gone (a clone's, until
    /// the clone withdraws it): its key, for [`withdraw`].
    pub fn keep(mut self) -> String {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.renewer.take() {
            let _ = t.join();
        }
        let key = std::mem::take(&mut self.key);
        std::mem::forget(self);
        key
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.renewer.take() {
            let _ = t.join();
        }
        withdraw(&self.stores, &self.key);
    }
}

/// Withdraw the registration `key` (best effort: an expired one is
/// ignored, and the collector deletes it).
pub fn withdraw(stores: &[(String, Arc<dyn ObjectStore>)], key: &str) {
    for (_, s) in stores {
        let _ = s.delete(key);
    }
}

fn encode(r: &Registration) -> bytes::Bytes {
    serde_json::to_vec(r).expect("a registration serializes").into()
}

/// Register `r` on every store that answers (a quorum needed), renewed
/// every minute while the lease is held if it expires.
pub(crate) fn register(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    deadline: Duration,
    mut r: Registration,
) -> Result<Lease> {
    let key = format!("{READERS_PREFIX}{:016x}", rand::random::<u64>());
    let expiring = r.expires_ms.is_some();
    if expiring {
        r.expires_ms = Some(super::times::now_ms() + LEASE.as_millis() as u64);
    }
    put(stores, needed, deadline, &key, &r)?;
    Ok(renewed(stores, needed, deadline, key, r, expiring))
}

/// The lease on registration `key`, renewed by a thread if `expiring`.
fn renewed(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    deadline: Duration,
    key: String,
    mut r: Registration,
    expiring: bool,
) -> Lease {
    let stop = Arc::new(AtomicBool::new(false));
    let renewer = expiring.then(|| {
        let (stores, key, stop) = (stores.to_vec(), key.clone(), Arc::clone(&stop));
        milliscale_seam::spawn("ms-lease".into(), move || {
            let mut last = milliscale_seam::now();
            while !stop.load(Ordering::SeqCst) {
                milliscale_seam::sleep(Duration::from_millis(100));
                if last.elapsed_now() >= RENEW_EVERY {
                    r.expires_ms = Some(super::times::now_ms() + LEASE.as_millis() as u64);
                    if let Err(e) = put(&stores, needed, deadline, &key, &r) {
                        tracing::warn!("renewing the lease {key}: {e}");
                    }
                    last = milliscale_seam::now();
                }
            }
        })
        .expect("a thread")
    });
    Lease { key, stores: stores.to_vec(), stop, renewer }
}

/// Write registration `r` under `key` as it is (its expiry included),
/// with no renewal: the collection simulation's readers.
#[cfg(test)]
pub(crate) fn put_as_is(
    stores: &[(String, Arc<dyn ObjectStore>)],
    key: &str,
    r: &Registration,
) -> Result<()> {
    put(stores, 1, Duration::from_secs(1), key, r)
}

fn put(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    deadline: Duration,
    key: &str,
    r: &Registration,
) -> Result<()> {
    let body = encode(r);
    let mut ok = 0;
    let mut errors = Vec::new();
    for (name, s) in stores {
        match retry(deadline, || s.put(key, body.clone())) {
            Ok(_) => ok += 1,
            Err(e) => errors.push(format!("{name}: {e}")),
        }
    }
    if ok < needed.max(1) {
        return Err(Error::StoreUnavailable(format!("registering {key}: {}", errors.join("; "))));
    }
    Ok(())
}

/// The live registrations on `stores`, deleting expired ones; and the
/// requests made. `None` if fewer than `needed` stores listed, or one
/// could not be read: then the collector deletes nothing this time (a
/// registration is on a quorum of stores, and one it cannot read may name
/// anything).
pub(crate) fn live(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    now_ms: u64,
) -> (Option<Vec<Registration>>, u64) {
    let mut out = Vec::new();
    let mut requests = 0;
    let mut listed = 0;
    let mut complete = true;
    let mut seen = std::collections::BTreeSet::new();
    for (i, (_, s)) in stores.iter().enumerate() {
        requests += 1;
        let Ok(list) = s.list(READERS_PREFIX) else { continue };
        listed += 1;
        for o in list {
            if !seen.insert(o.key.clone()) {
                continue;
            }
            // From whichever store has it.
            let mut got = None;
            for (_, t) in stores[i..].iter() {
                requests += 1;
                match t.get(&o.key) {
                    Ok(b) => {
                        got = Some(serde_json::from_slice::<Registration>(&b));
                        break;
                    }
                    // Withdrawn meanwhile, or not on this store.
                    Err(StoreError::NotFound(_)) => {
                        got = got.or(Some(Err(serde_json::Error::io(std::io::Error::new(
                            std::io::ErrorKind::NotFound,
                            "withdrawn",
                        )))))
                    }
                    Err(_) => {}
                }
            }
            match got {
                Some(Ok(r)) if r.is_live(now_ms) => out.push(r),
                Some(Ok(_)) => {
                    requests += stores.len() as u64;
                    withdraw(stores, &o.key);
                }
                Some(Err(e)) if e.is_io() => {}
                Some(Err(e)) => {
                    tracing::warn!("an unreadable registration {}: {e}; collecting nothing", o.key);
                    complete = false;
                }
                None => complete = false,
            }
        }
    }
    let ok = complete && listed >= needed.max(1);
    (ok.then_some(out), requests)
}
