//! Page-at-commit: the fourth paper's commit protocols without a log
//! (Brantner et al., "Building a Database on S3", §4-§6).
//!
//! These are **baselines** to measure the log against, not a
//! way to run the engine. A [`PageStore`] keeps a table's records in
//! page objects `pages/p<n>` on an object store; a record lives on page
//! `crc32c(key) % pages`. The engine still runs the transactions in memory
//! (concurrency control, versions); at commit the caller hands the
//! transaction's writes to [`PageStore::commit`], with the commit order
//! (the engine's CSN) as `seq`. Two protocols:
//!
//! - [`PageProtocol::Naive`] (the paper's "Naïve"): the commit writes every
//!   page the transaction dirtied back to the store, one PUT after the
//!   other, from the client's page cache. It is **not atomic** (a crash
//!   between two PUTs leaves half a transaction) and it **loses updates**:
//!   two clients that cached the same page each put back their own copy,
//!   and the last PUT wins (`tests/pages.rs` shows both). Within one
//!   process the cache serializes the copies, but the PUTs still race, and
//!   an older copy that lands last undoes a newer one.
//! - [`PageProtocol::Atomic`] (the paper's "Atomicity", §5.1, on S3 alone):
//!   the commit writes the transaction's records and its commit record
//!   `commit(id, count)` to the client's ATOMIC queue, here one object
//!   `atomic/<client>/t<seq>` written by one PUT (a PUT is atomic, so the
//!   records and their commit record arrive together or not at all). The
//!   transaction is durable then. [`PageStore::checkpoint`] (the paper's
//!   checkpoint, run in the background every checkpoint interval) lists
//!   the queue, reads each entry, applies the records to the pages with
//!   conditional PUTs (`If-Match`: the paper's LOCK queue, which S3 now
//!   offers as a precondition), and only then deletes the entries. Records
//!   carry `seq`, and a page keeps each record's `seq`: applying an entry
//!   twice changes nothing (the paper's idempotent log records), so a
//!   checkpoint that crashes half way is simply run again
//!   ([`PageStore::recover`] does).
//!
//! Page format (little endian), also the queue entry's:
//!
//! ```text
//!  0  4  magic "MSPG" (page) or "MSAQ" (ATOMIC queue entry)
//!  4  4  records
//!  8  8  page number (page) or the commit id = seq (entry)
//! 16     records: key length (u16), seq (u64), value length (u32), key, value
//!  end 4 CRC32C of everything before it
//! ```
//!
//! An entry's trailer (its count and CRC) is the commit record: an entry
//! whose count or CRC does not match is a loser, skipped and deleted.
//!
//! Costs are counted by the store wrapper as usual, and split here into
//! the foreground (commits) and the background (checkpoints), as the paper
//! splits them in its Table 4 ([`PageStore::stats`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use objstore::sim::accounting::{Accounting, AccountingReport, Kind, LatencySummary};
use objstore::sim::model::Prices;
use objstore::{ObjectStore, StoreError};
use parking_lot::Mutex;

use milliscale::{Error, Result};

pub const PAGE_MAGIC: [u8; 4] = *b"MSPG";
pub const ENTRY_MAGIC: [u8; 4] = *b"MSAQ";
const HEADER_BYTES: usize = 16;
/// Threads a checkpoint writes pages and deletes entries on.
pub const CHECKPOINT_THREADS: usize = 16;
/// Attempts at a conditional page write before a checkpoint gives up.
const CAS_ATTEMPTS: usize = 32;

/// Which of the paper's commit protocols a [`PageStore`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageProtocol {
    /// Write the dirty pages at commit (not atomic, loses updates).
    Naive,
    /// Write the records and a commit record to the ATOMIC queue at commit;
    /// apply them to the pages in checkpoints.
    Atomic,
}

impl std::fmt::Display for PageProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PageProtocol::Naive => "naive",
            PageProtocol::Atomic => "atomic",
        })
    }
}

/// One record on a page: its value and the commit that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub seq: u64,
    pub value: Vec<u8>,
}

/// A record a transaction wrote: key and value.
type Record = (Vec<u8>, Vec<u8>);

/// A page's records.
pub type Page = BTreeMap<Vec<u8>, Slot>;

/// A page the client holds, with the ETag of the copy it read or wrote.
#[derive(Debug, Default)]
struct Cached {
    page: Page,
    etag: Option<String>,
}

/// Requests and bytes of one side of the bill, priced.
#[derive(Debug, Clone, PartialEq)]
pub struct PageStats {
    /// Commits (the paper's "Transaction" column).
    pub foreground: AccountingReport,
    /// Checkpoints (the paper's "Chckp. + Atomic Q." column).
    pub background: AccountingReport,
    /// Checkpoints run.
    pub checkpoints: u64,
    /// Queue entries applied to pages so far.
    pub applied: u64,
    /// How long each write a commit sent took on its own (a page PUT, or
    /// the queue entry's PUT): the store's floor under commit latency.
    pub commit_writes: Option<LatencySummary>,
}

/// What one checkpoint did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointReport {
    /// Queue entries applied (and deleted).
    pub entries: u64,
    /// Entries skipped as losers (bad commit record).
    pub losers: u64,
    /// Pages written.
    pub pages: u64,
    /// Conditional writes that found the page changed and read it again.
    pub retries: u64,
}

/// See the module docs.
#[derive(Debug)]
pub struct PageStore {
    store: Arc<dyn ObjectStore>,
    protocol: PageProtocol,
    pages: u32,
    client: String,
    /// The client's page cache (naive commits and checkpoints write from
    /// it); one lock per page.
    cache: Vec<Mutex<Option<Cached>>>,
    /// One checkpoint at a time per client.
    checkpointing: Mutex<()>,
    /// Committed entries not yet applied to the pages, by seq.
    pending: Mutex<BTreeMap<u64, (String, Page)>>,
    prices: Prices,
    fg: Accounting,
    bg: Accounting,
    checkpoints: std::sync::atomic::AtomicU64,
    applied: std::sync::atomic::AtomicU64,
}

impl PageStore {
    /// A client of the pages on `store`: `pages` page objects (at least 1),
    /// `client` names its ATOMIC queue (letters, digits, `-`, `_`). Costs
    /// are priced with the store's price table, or at zero when the store
    /// has none.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        protocol: PageProtocol,
        pages: u32,
        client: &str,
    ) -> Result<PageStore> {
        if pages == 0 {
            return Err(Error::InvalidArgument("a page store needs at least one page".into()));
        }
        if client.is_empty()
            || client.len() > 64
            || !client.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(Error::InvalidArgument(format!(
                "client name {client:?}: 1-64 letters, digits, '-' or '_'"
            )));
        }
        let prices = store.accounting().map_or(
            Prices {
                put_per_million: 0.0,
                get_per_million: 0.0,
                upload_per_gb: 0.0,
                download_per_gb: 0.0,
            },
            |a| a.prices,
        );
        Ok(PageStore {
            store,
            protocol,
            pages,
            client: client.to_owned(),
            cache: (0..pages).map(|_| Mutex::new(None)).collect(),
            checkpointing: Mutex::new(()),
            pending: Mutex::new(BTreeMap::new()),
            prices,
            fg: Accounting::default(),
            bg: Accounting::default(),
            checkpoints: Default::default(),
            applied: Default::default(),
        })
    }

    /// The protocol.
    pub fn protocol(&self) -> PageProtocol {
        self.protocol
    }

    /// The page `key` lives on.
    pub fn page_of(&self, key: &[u8]) -> u32 {
        crc32c::crc32c(key) % self.pages
    }

    /// Write the initial records (`seq` 0) to every page, on `threads`
    /// threads, and keep them in the cache. Not counted in the stats: it
    /// is the load, before the measured work.
    pub fn load(
        &self,
        records: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
        threads: usize,
    ) -> Result<()> {
        let mut pages: Vec<Page> = vec![Page::new(); self.pages as usize];
        for (k, v) in records {
            check_keys([&k])?;
            pages[self.page_of(&k) as usize].insert(k, Slot { seq: 0, value: v });
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let pages = &pages;
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads.max(1))
                .map(|_| {
                    s.spawn(|| -> Result<()> {
                        loop {
                            let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(page) = pages.get(n) else { return Ok(()) };
                            let body = encode(PAGE_MAGIC, n as u64, page);
                            let meta = self.store.put(&page_key(n as u32), body).map_err(st)?;
                            *self.cache[n].lock() =
                                Some(Cached { page: page.clone(), etag: Some(meta.etag) });
                        }
                    })
                })
                .collect();
            workers.into_iter().try_for_each(|w| w.join().expect("page loader panicked"))
        })
    }

    /// Make one transaction's writes durable, in commit order `seq` (the
    /// engine's CSN: larger for a later commit of the same record). The
    /// transaction is acknowledged when this returns `Ok`.
    pub fn commit(&self, seq: u64, writes: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        check_keys(writes.iter().map(|w| &w.0))?;
        match self.protocol {
            PageProtocol::Naive => self.commit_naive(seq, writes),
            PageProtocol::Atomic => {
                let records: Page = writes
                    .iter()
                    .map(|(k, v)| (k.clone(), Slot { seq, value: v.clone() }))
                    .collect();
                let body = encode(ENTRY_MAGIC, seq, &records);
                self.fg.request(Kind::Put, body.len() as u64);
                let t = std::time::Instant::now();
                let key = self.entry_key(seq);
                self.store.put(&key, body).map_err(st)?;
                self.fg.append_latency(t.elapsed());
                // The client sends the records on from memory (the paper's
                // step 2); the queue on the store is read only at restart.
                self.pending.lock().insert(seq, (key, records));
                Ok(())
            }
        }
    }

    /// The naive commit: for each page the transaction dirtied, in page
    /// order, apply its records to the cached copy and PUT the copy.
    fn commit_naive(&self, seq: u64, writes: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        let mut by_page: BTreeMap<u32, Vec<&Record>> = BTreeMap::new();
        for w in writes {
            by_page.entry(self.page_of(&w.0)).or_default().push(w);
        }
        for (page, ws) in by_page {
            let body = {
                let mut slot = self.cache[page as usize].lock();
                if slot.is_none() {
                    *slot = Some(self.read_page(page, &self.fg)?);
                }
                let cached = slot.as_mut().expect("filled above");
                for (k, v) in ws {
                    cached.page.insert(k.clone(), Slot { seq, value: v.clone() });
                }
                encode(PAGE_MAGIC, u64::from(page), &cached.page)
            };
            // The PUT goes out after the lock: commits do not wait for each
            // other's PUTs, so they race (the naive protocol's flaw).
            self.fg.request(Kind::Put, body.len() as u64);
            let t = std::time::Instant::now();
            self.store.put(&page_key(page), body).map_err(st)?;
            self.fg.append_latency(t.elapsed());
        }
        Ok(())
    }

    /// A record's value as this client sees it: from its page cache, read
    /// from the store on a miss (counted in the foreground). Under the
    /// atomic protocol the pages lag the queue until a checkpoint applies
    /// it, as in the paper.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let page = self.page_of(key);
        let mut slot = self.cache[page as usize].lock();
        if slot.is_none() {
            *slot = Some(self.read_page(page, &self.fg)?);
        }
        Ok(slot.as_ref().and_then(|c| c.page.get(key)).map(|s| s.value.clone()))
    }

    /// Apply every entry of this client's ATOMIC queue to the pages, then
    /// delete the entries (the paper's checkpoint). Does nothing under the
    /// naive protocol.
    pub fn checkpoint(&self) -> Result<CheckpointReport> {
        if self.protocol == PageProtocol::Naive {
            return Ok(CheckpointReport::default());
        }
        let _one = self.checkpointing.lock();
        let taken = std::mem::take(&mut *self.pending.lock());
        let r = self.apply_entries(taken.values().cloned().collect(), &self.bg);
        if r.is_err() {
            // Put them back: the next checkpoint applies them again
            // (harmless: records carry their seq).
            self.pending.lock().extend(taken);
        }
        let r = r?;
        self.checkpoints.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.applied.fetch_add(r.entries, std::sync::atomic::Ordering::Relaxed);
        Ok(r)
    }

    /// Read a queue from the store (LIST, then GET each entry, in commit
    /// order) and apply it: what a restarted client does with the queues.
    fn apply_queue(&self, prefix: &str, acct: &Accounting) -> Result<CheckpointReport> {
        acct.request(Kind::List, 0);
        let mut listed = self.store.list(prefix).map_err(st)?;
        listed.sort_by(|a, b| a.key.cmp(&b.key)); // t<seq:020>: commit order
        let mut entries = Vec::with_capacity(listed.len());
        let mut losers = Vec::new();
        for e in &listed {
            acct.request(Kind::Get, 0);
            let body = match self.store.get(&e.key) {
                Ok(b) => b,
                Err(StoreError::NotFound(_)) => continue, // applied by another checkpoint
                Err(err) => return Err(st(err)),
            };
            acct.download(body.len() as u64);
            match decode(ENTRY_MAGIC, &body) {
                Ok((_, records)) => entries.push((e.key.clone(), records)),
                Err(_) => losers.push(e.key.clone()), // no valid commit record
            }
        }
        let mut report = self.apply_entries(entries, acct)?;
        report.losers = losers.len() as u64;
        self.delete_all(&losers, acct)?;
        Ok(report)
    }

    /// Apply queue entries to the pages (a conditional PUT per page, on
    /// [`CHECKPOINT_THREADS`] threads), then delete the entries.
    fn apply_entries(
        &self,
        entries: Vec<(String, Page)>,
        acct: &Accounting,
    ) -> Result<CheckpointReport> {
        let mut report = CheckpointReport::default();
        let mut by_page: BTreeMap<u32, Page> = BTreeMap::new();
        let mut done = Vec::with_capacity(entries.len());
        for (key, records) in entries {
            for (k, slot) in records {
                let page = by_page.entry(self.page_of(&k)).or_default();
                if page.get(&k).is_none_or(|s| s.seq <= slot.seq) {
                    page.insert(k, slot);
                }
            }
            report.entries += 1;
            done.push(key);
        }
        let by_page: Vec<(u32, Page)> = by_page.into_iter().collect();
        let retries = std::sync::atomic::AtomicU64::new(0);
        par_each(&by_page, |(page, records)| {
            let n = self.apply_to_page(*page, records, acct)?;
            retries.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        })?;
        report.pages = by_page.len() as u64;
        report.retries = retries.into_inner();
        // Only now that every page holds them may the entries go.
        self.delete_all(&done, acct)?;
        Ok(report)
    }

    fn delete_all(&self, keys: &[String], acct: &Accounting) -> Result<()> {
        par_each(keys, |key| {
            acct.request(Kind::Delete, 0);
            match self.store.delete(key) {
                Ok(()) | Err(StoreError::NotFound(_)) => Ok(()),
                Err(e) => Err(st(e)),
            }
        })
    }

    /// Apply `records` to `page` with a conditional PUT; on a changed page,
    /// read it again and retry. Returns the retries.
    fn apply_to_page(&self, page: u32, records: &Page, acct: &Accounting) -> Result<u64> {
        let mut slot = self.cache[page as usize].lock();
        for attempt in 0..CAS_ATTEMPTS as u64 {
            if slot.as_ref().is_none_or(|c| c.etag.is_none()) {
                *slot = Some(self.read_page(page, acct)?);
            }
            let cached = slot.as_mut().expect("filled above");
            let mut next = cached.page.clone();
            for (k, s) in records {
                if next.get(k).is_none_or(|old| old.seq <= s.seq) {
                    next.insert(k.clone(), s.clone());
                }
            }
            let body = encode(PAGE_MAGIC, u64::from(page), &next);
            let kind = if cached.etag.as_deref() == Some("") {
                Kind::PutIfAbsent
            } else {
                Kind::PutIfMatch
            };
            acct.request(kind, body.len() as u64);
            let put = match cached.etag.as_deref() {
                Some("") => self.store.put_if_absent(&page_key(page), body),
                Some(etag) => self.store.put_if_match(&page_key(page), body, etag),
                None => unreachable!("read_page sets the etag"),
            };
            match put {
                Ok(meta) => {
                    *cached = Cached { page: next, etag: Some(meta.etag) };
                    return Ok(attempt);
                }
                Err(StoreError::PreconditionFailed(_) | StoreError::NotFound(_)) => {
                    *slot = None; // someone else wrote it: read it again
                }
                Err(e) => {
                    *slot = None; // the write may have applied: read it again next time
                    return Err(st(e));
                }
            }
        }
        Err(Error::Store(format!(
            "page {page}: still changing after {CAS_ATTEMPTS} conditional writes"
        )))
    }

    /// Read a page from the store (an absent page is empty; its ETag is
    /// then "" and the next write is a create-if-absent).
    fn read_page(&self, page: u32, acct: &Accounting) -> Result<Cached> {
        let key = page_key(page);
        acct.request(Kind::Head, 0);
        let etag = match self.store.head(&key) {
            Ok(m) => m.etag,
            Err(StoreError::NotFound(_)) => {
                return Ok(Cached { page: Page::new(), etag: Some(String::new()) });
            }
            Err(e) => return Err(st(e)),
        };
        acct.request(Kind::Get, 0);
        let body = self.store.get(&key).map_err(st)?;
        acct.download(body.len() as u64);
        let (_, page) = decode(PAGE_MAGIC, &body)?;
        // If the page changed between HEAD and GET, the ETag is older than
        // the copy and the next conditional write fails and reads again.
        Ok(Cached { page, etag: Some(etag) })
    }

    /// Requests, bytes and dollars so far, split into commits and
    /// checkpoints.
    pub fn stats(&self) -> PageStats {
        let foreground = self.fg.report(self.prices);
        PageStats {
            commit_writes: foreground.append_latency,
            foreground,
            background: self.bg.report(self.prices),
            checkpoints: self.checkpoints.load(std::sync::atomic::Ordering::Relaxed),
            applied: self.applied.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Forget the commit writes' latencies (`PageStats::commit_writes`),
    /// say at the start of a measured window.
    pub fn reset_latency(&self) {
        self.fg.reset_latency();
    }

    /// What a restarted client finds: first every client's ATOMIC queue is
    /// applied to the pages (winners: entries with a valid commit record;
    /// losers are deleted), then every page is read. Returns each record's
    /// newest value.
    pub fn recover(&self) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
        for c in &self.cache {
            *c.lock() = None;
        }
        if self.protocol == PageProtocol::Atomic {
            let _one = self.checkpointing.lock();
            self.apply_queue("atomic/", &self.bg)?;
        }
        let mut out = BTreeMap::new();
        for page in 0..self.pages {
            let c = self.read_page(page, &self.bg)?;
            for (k, s) in &c.page {
                out.insert(k.clone(), s.value.clone());
            }
            *self.cache[page as usize].lock() = Some(c);
        }
        Ok(out)
    }

    fn entry_key(&self, seq: u64) -> String {
        format!("atomic/{}/t{seq:020}", self.client)
    }
}

/// Run `f` on every item on up to [`CHECKPOINT_THREADS`] threads; the
/// first error wins (the others finish what they started).
fn par_each<T: Sync>(items: &[T], f: impl Fn(&T) -> Result<()> + Sync) -> Result<()> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = CHECKPOINT_THREADS.min(items.len());
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    while let Some(item) =
                        items.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                    {
                        if let Err(e) = f(item) {
                            next.store(items.len(), std::sync::atomic::Ordering::Relaxed);
                            return Err(e);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| w.join().expect("checkpoint thread panicked"))
    })
}

fn page_key(page: u32) -> String {
    format!("pages/p{page:08}")
}

pub fn encode(magic: [u8; 4], id: u64, records: &Page) -> Bytes {
    let body: usize = records.iter().map(|(k, s)| 14 + k.len() + s.value.len()).sum();
    let mut b = BytesMut::with_capacity(HEADER_BYTES + body + 4);
    b.put_slice(&magic);
    b.put_u32_le(records.len() as u32);
    b.put_u64_le(id);
    for (k, s) in records {
        b.put_u16_le(k.len() as u16);
        b.put_u64_le(s.seq);
        b.put_u32_le(s.value.len() as u32);
        b.put_slice(k);
        b.put_slice(&s.value);
    }
    let crc = crc32c::crc32c(&b);
    b.put_u32_le(crc);
    b.freeze()
}

pub fn decode(magic: [u8; 4], body: &[u8]) -> Result<(u64, Page)> {
    let bad = |what: &str| Error::Corrupt(format!("page object: {what}"));
    if body.len() < HEADER_BYTES + 4 || body[..4] != magic {
        return Err(bad("bad magic or too short"));
    }
    let (data, trailer) = body.split_at(body.len() - 4);
    if crc32c::crc32c(data) != u32::from_le_bytes(trailer.try_into().expect("4 bytes")) {
        return Err(bad("checksum mismatch"));
    }
    let mut r = &data[4..];
    let n = r.get_u32_le();
    let id = r.get_u64_le();
    let mut page = Page::new();
    for _ in 0..n {
        if r.remaining() < 14 {
            return Err(bad("record header past the end"));
        }
        let kl = r.get_u16_le() as usize;
        let seq = r.get_u64_le();
        let vl = r.get_u32_le() as usize;
        if r.remaining() < kl + vl {
            return Err(bad("record past the end"));
        }
        let k = r[..kl].to_vec();
        let v = r[kl..kl + vl].to_vec();
        r.advance(kl + vl);
        page.insert(k, Slot { seq, value: v });
    }
    if r.has_remaining() {
        return Err(bad("bytes after the last record (count mismatch)"));
    }
    Ok((id, page))
}

/// A store error as the engine's.
fn st(e: StoreError) -> Error {
    Error::Store(e.to_string())
}

/// Keys must fit the format's u16 length field.
fn check_keys<'a>(keys: impl IntoIterator<Item = &'a Vec<u8>>) -> Result<()> {
    for k in keys {
        if k.len() > u16::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "a page store key is at most {} bytes, got {}",
                u16::MAX,
                k.len()
            )));
        }
    }
    Ok(())
}
