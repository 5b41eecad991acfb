//! The capability probe: does this store really append?
//!
//! Never trust a URL scheme. MinIO refuses write offsets; moto, s3rver,
//! s3s-fs and versitygw accept them and silently overwrite the object. So
//! before the log appends to a store, it writes a probe object, appends at
//! the right offset, appends at a wrong offset, and checks the size, the
//! content and the error. A store that fails any check is used in
//! put-per-flush mode, and [`AppendSupport::PutPerFlush`] says why.

use bytes::Bytes;

use crate::{ObjectStore, Result, StoreError};

/// How the log may write to a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendSupport {
    /// The store appends with S3 Express semantics.
    Appends,
    /// The store does not append correctly; write one object per flush.
    PutPerFlush {
        /// What the probe saw, for the one message the engine prints.
        reason: String,
    },
}

const FIRST: &[u8] = b"milliscale append probe: part 1;";
const SECOND: &[u8] = b" part 2;";

/// Probe `store` with an object under `key` (deleted afterwards). Transient
/// and throttling errors are returned as errors: they decide nothing.
pub fn probe_appends(store: &dyn ObjectStore, key: &str) -> Result<AppendSupport> {
    let verdict = run(store, key);
    let _ = store.delete(key);
    verdict
}

fn put_per_flush(reason: impl Into<String>) -> Result<AppendSupport> {
    Ok(AppendSupport::PutPerFlush { reason: reason.into() })
}

fn run(store: &dyn ObjectStore, key: &str) -> Result<AppendSupport> {
    store.put(key, Bytes::from_static(FIRST))?;
    let size = FIRST.len() as u64;
    match store.append(key, size, Bytes::from_static(SECOND)) {
        Ok(_) => {}
        Err(e) if e.is_retryable() => return Err(e),
        Err(e) => {
            return put_per_flush(format!("the store refused an append at the right offset: {e}"));
        }
    }
    let want: Vec<u8> = [FIRST, SECOND].concat();
    let got = store.get(key)?;
    if got[..] != want[..] {
        let what =
            if got[..] == *SECOND { "overwrote the object" } else { "returned other content" };
        return put_per_flush(format!(
            "the store {what} instead of appending ({} bytes, expected {})",
            got.len(),
            want.len()
        ));
    }
    let full = want.len() as u64;
    if store.head(key)?.size != full {
        return put_per_flush("the store reports a wrong size after an append");
    }
    match store.append(key, 1, Bytes::from_static(b"X")) {
        Err(StoreError::InvalidWriteOffset { actual_size }) if actual_size == full => {}
        Err(StoreError::InvalidWriteOffset { actual_size }) => {
            return put_per_flush(format!(
                "the store refused a wrong offset but reported size {actual_size}, not {full}"
            ));
        }
        Err(e) if e.is_retryable() => return Err(e),
        Err(e) => {
            return put_per_flush(format!(
                "the store answered a wrong offset with {e}, not InvalidWriteOffset"
            ));
        }
        Ok(_) => return put_per_flush("the store accepted an append at a wrong offset"),
    }
    if store.get(key)?[..] != want[..] {
        return put_per_flush("a refused append changed the object");
    }
    Ok(AppendSupport::Appends)
}
