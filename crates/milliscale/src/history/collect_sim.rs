//! A simulation of collection by reachability (design record 0012,
//! `leases`): a writer that checkpoints and collects, and readers that
//! register what they read, take their steps in an order a seed draws,
//! with simulated time; any of them may stop (crash) at any step, and the
//! store may refuse a listing. The oracle: a reader that passed its check
//! (the newest manifest still kept what it chose) finds every object it
//! reads while its lease lasts. With collection by age (registrations
//! ignored, a deliberate bug) the oracle fails.
//!
//! `MILLISCALE_COLLECT_SEEDS` seeds (default 1,000; 20,000 by hand) from
//! `MILLISCALE_COLLECT_FIRST_SEED` (default 0).

use milliscale_seam::Elapsed as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use objstore::{MemoryStore, ObjectMeta, ObjectStore, StoreError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::collect::{collection_needs, delete_unneeded};
use super::leases::{self, READERS_PREFIX, Registration};
use super::{Needed, on_publish, put_chunk_lists, times};
use crate::keys::{Chain, checkpoint_prefix, segment_key};
use crate::manifest::{CheckpointRef, ChunkRef, Manifest, ManifestStore};

const RETENTION_MS: u64 = 10_000;
const LEASE_MS: u64 = 5_000;

/// A store whose listings of registrations fail when a seed says.
#[derive(Debug)]
struct Flaky {
    inner: MemoryStore,
    fail_lists: AtomicBool,
}

impl ObjectStore for Flaky {
    fn put(&self, key: &str, body: Bytes) -> objstore::Result<ObjectMeta> {
        self.inner.put(key, body)
    }
    fn put_if_absent(&self, key: &str, body: Bytes) -> objstore::Result<ObjectMeta> {
        self.inner.put_if_absent(key, body)
    }
    fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> objstore::Result<ObjectMeta> {
        self.inner.put_if_match(key, body, etag)
    }
    fn append(&self, key: &str, offset: u64, body: Bytes) -> objstore::Result<ObjectMeta> {
        self.inner.append(key, offset, body)
    }
    fn get(&self, key: &str) -> objstore::Result<Bytes> {
        self.inner.get(key)
    }
    fn get_range(&self, key: &str, range: std::ops::Range<u64>) -> objstore::Result<Bytes> {
        self.inner.get_range(key, range)
    }
    fn head(&self, key: &str) -> objstore::Result<ObjectMeta> {
        self.inner.head(key)
    }
    fn list(&self, prefix: &str) -> objstore::Result<Vec<ObjectMeta>> {
        if prefix == READERS_PREFIX && self.fail_lists.load(Ordering::SeqCst) {
            return Err(StoreError::Fatal("the listing failed (simulated)".into()));
        }
        self.inner.list(prefix)
    }
    fn delete(&self, key: &str) -> objstore::Result<()> {
        self.inner.delete(key)
    }
}

/// The writer: each round checkpoints (new chunk and segment objects, then
/// a manifest), then collects in two steps; it may stop after any step.
struct Writer {
    m: Manifest,
    csn: u64,
    segment: u64,
    step: u8,
    needs: Option<Needed>,
}

/// A reader: reads the manifest and chooses a base, registers, checks,
/// reads each object it needs (a few steps), withdraws.
struct Reader {
    key: String,
    reg: Option<Registration>,
    objects: Vec<String>,
    checked: bool,
    expires: u64,
    step: u8,
}

fn chunk_key(csn: u64) -> String {
    format!("{}0000/000000", checkpoint_prefix(csn))
}

/// One seed; `by_age` collects without the registrations. Returns the
/// first violation.
fn run(seed: u64, by_age: bool) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let flaky = Arc::new(Flaky { inner: MemoryStore::new(), fail_lists: AtomicBool::new(false) });
    let store: Arc<dyn ObjectStore> = flaky.clone();
    let stores = vec![("sim".to_owned(), Arc::clone(&store))];
    let ms = ManifestStore::new(stores.clone(), 1, std::time::Duration::from_secs(1));
    let now = AtomicU64::new(1_000_000);
    let tick = |rng: &mut StdRng| now.fetch_add(rng.random_range(0..400), Ordering::SeqCst);
    let mut m = Manifest::initial(1, 1, 1, 1, 100);
    ms.create(&m).map_err(|e| e.to_string())?;
    store
        .put(&segment_key(Chain::new(0, 0), 0), Bytes::from_static(b"seg"))
        .map_err(|e| e.to_string())?;
    m.tables = vec!["t".into()];
    let mut w = Writer { m, csn: 1, segment: 0, step: 0, needs: None };
    let mut readers: Vec<Reader> = Vec::new();
    let steps = rng.random_range(200..600);
    for _ in 0..steps {
        let t = tick(&mut rng);
        flaky.fail_lists.store(rng.random_bool(0.05), Ordering::SeqCst);
        if rng.random_bool(0.15) {
            readers.push(Reader {
                key: format!("{READERS_PREFIX}{:08x}", rng.random::<u32>()),
                reg: None,
                objects: Vec::new(),
                checked: false,
                expires: 0,
                step: 0,
            });
        }
        let pick = rng.random_range(0..=readers.len());
        if pick == readers.len() {
            writer_step(&mut w, &mut rng, &stores, &ms, t, by_age)?;
            continue;
        }
        let r = &mut readers[pick];
        // A reader may die at any step: it just stops (its registration
        // stays until it expires).
        if rng.random_bool(0.05) {
            r.step = u8::MAX;
            continue;
        }
        reader_step(r, &mut rng, &stores, &ms, t)?;
        readers.retain(|r| r.step != u8::MAX);
    }
    Ok(())
}

fn writer_step(
    w: &mut Writer,
    rng: &mut StdRng,
    stores: &[(String, Arc<dyn ObjectStore>)],
    ms: &ManifestStore,
    t: u64,
    by_age: bool,
) -> Result<(), String> {
    let store = &stores[0].1;
    // A writer that crashes loses the step it was on; the next round
    // starts from the manifest on the store.
    if rng.random_bool(0.05) {
        w.step = 0;
        w.needs = None;
        w.m = ms.read_latest().map_err(|e| e.to_string())?.expect("a manifest");
        return Ok(());
    }
    match w.step {
        0 => {
            // A checkpoint: its chunk, a fresh segment, then the manifest.
            w.csn += rng.random_range(1..50);
            w.segment += 1;
            let c = CheckpointRef {
                csn: w.csn,
                chunks: vec![ChunkRef { key: chunk_key(w.csn), bytes: 1, crc: 0 }],
                rows: 1,
                bytes: 1,
            };
            store.put(&chunk_key(w.csn), Bytes::from_static(b"c")).map_err(|e| e.to_string())?;
            store
                .put(&segment_key(Chain::new(0, 0), w.segment), Bytes::from_static(b"seg"))
                .map_err(|e| e.to_string())?;
            let cur = w.m.clone();
            let mut next = cur.clone();
            next.checkpoint = Some(c);
            next.log.group_start = vec![w.segment];
            next.version += 1;
            let lists = on_publish(
                &cur,
                &mut next,
                Some(RETENTION_MS),
                times::Sample { ms: t, csn: w.csn - 1 },
                None,
            );
            put_chunk_lists(stores, 1, std::time::Duration::from_secs(1), &lists)
                .map_err(|e| e.to_string())?;
            ms.create(&next).map_err(|e| e.to_string())?;
            w.m = next;
            w.step = 1;
        }
        1 => {
            w.needs = if by_age {
                Some(Needed::of(&w.m))
            } else {
                collection_needs(stores, 1, &w.m, t).0
            };
            w.step = if w.needs.is_some() { 2 } else { 0 };
        }
        _ => {
            if let Some(n) = w.needs.take() {
                delete_unneeded(stores, &n, &w.m);
            }
            w.step = 0;
        }
    }
    Ok(())
}

fn reader_step(
    r: &mut Reader,
    rng: &mut StdRng,
    stores: &[(String, Arc<dyn ObjectStore>)],
    ms: &ManifestStore,
    t: u64,
) -> Result<(), String> {
    let store = &stores[0].1;
    match r.step {
        0 => {
            // Choose any base of the window the manifest shows.
            let m = ms.read_latest().map_err(|e| e.to_string())?.expect("a manifest");
            let Some(h) = &m.history else {
                r.step = u8::MAX;
                return Ok(());
            };
            let b = &h.bases[rng.random_range(0..h.bases.len())];
            let mut log = m.log.clone();
            log.group_start = b.starts.clone();
            r.objects = b.checkpoint.iter().map(|c| chunk_key(c.csn)).collect();
            r.objects.extend(b.checkpoint.iter().map(|c| super::chunk_list_key(c.csn)));
            r.objects.extend(
                (b.starts[0]..=m.log.group_start[0]).map(|s| segment_key(Chain::new(0, 0), s)),
            );
            r.reg = Some(Registration {
                kind: "past".into(),
                expires_ms: None,
                checkpoints: b.checkpoint.iter().map(|c| c.csn).collect(),
                logs: vec![log],
            });
            r.step = 1;
        }
        1 => {
            let mut reg = r.reg.clone().expect("chosen");
            r.expires = t + LEASE_MS;
            reg.expires_ms = Some(r.expires);
            leases::put_as_is(stores, &r.key, &reg).map_err(|e| e.to_string())?;
            r.step = 2;
        }
        2 => {
            let m = ms.read_latest().map_err(|e| e.to_string())?.expect("a manifest");
            if Needed::of(&m).covers(r.reg.as_ref().expect("chosen")) {
                r.checked = true;
                r.step = 3;
            } else {
                leases::withdraw(stores, &r.key);
                r.step = u8::MAX;
            }
        }
        3 => {
            // Read one object a step: the collection may run between them.
            let Some(key) = r.objects.pop() else {
                leases::withdraw(stores, &r.key);
                r.step = u8::MAX;
                return Ok(());
            };
            if r.checked && t < r.expires {
                match store.head(&key) {
                    Ok(_) => {}
                    Err(StoreError::NotFound(_)) => {
                        return Err(format!(
                            "a registered reader (lease to {}, now {t}) found {key} missing",
                            r.expires
                        ));
                    }
                    Err(e) => return Err(e.to_string()),
                }
            } else {
                // Past its lease: it has no claim any more.
                r.step = u8::MAX;
            }
        }
        _ => {}
    }
    Ok(())
}

/// `MILLISCALE_COLLECT_SEEDS` seeds from `MILLISCALE_COLLECT_FIRST_SEED`.
fn seeds() -> std::ops::Range<u64> {
    let var = |name: &str, default: u64| {
        std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let first = var("MILLISCALE_COLLECT_FIRST_SEED", 0);
    first..first + var("MILLISCALE_COLLECT_SEEDS", 1_000)
}

#[test]
fn collection_never_deletes_what_a_registered_reader_reads() {
    let seeds = seeds();
    let n = seeds.end - seeds.start;
    let started = milliscale_seam::now();
    for seed in seeds {
        if let Err(e) = run(seed, false) {
            panic!("seed {seed}: {e}");
        }
    }
    eprintln!("{n} seeds in {:.1?}, no missing object", started.elapsed_now());
}

#[test]
fn collection_by_age_is_caught() {
    let caught: Vec<u64> = (0..200).filter(|&seed| run(seed, true).is_err()).collect();
    eprintln!(
        "collecting by age: caught in {} of 200 seeds, the first {:?}",
        caught.len(),
        caught.first()
    );
    assert!(
        !caught.is_empty(),
        "collecting by age, ignoring registrations, went unseen in 200 seeds"
    );
}
