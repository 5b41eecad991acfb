//! The sizes a server or a cluster takes, checked before anything is sent:
//! a key or a value over its limit is refused here, with INVALID_ARGUMENT
//! naming the limit (not retryable), instead of being sent whole and
//! refused by the server, or cut off by its message limit as UNAVAILABLE.
//! The limits are the engine's (`milliscale::limits`), which the server
//! and a cluster's shards both keep.

use crate::error::{Error, Result};
use crate::proto::{self, operation::Op};

/// The longest key, in bytes (the engine's `KEY_BYTES_MAX`).
pub const KEY_BYTES_MAX: usize = 1024;
/// The longest value, in bytes (the engine's `VALUE_BYTES_MAX`).
pub const VALUE_BYTES_MAX: usize = milliscale_milana::types::VALUE_BYTES_MAX;

const _: () = assert!(KEY_BYTES_MAX == milliscale_milana::versions::ENGINE_KEY_BYTES_MAX);

/// `key` is not over its limit.
pub(crate) fn key(key: &[u8]) -> Result<()> {
    if key.len() > KEY_BYTES_MAX {
        return Err(Error::invalid(format!(
            "a key of {} bytes: the most a key holds is {KEY_BYTES_MAX} bytes",
            key.len()
        )));
    }
    Ok(())
}

/// `key` and a value of `len` bytes are not over their limits.
pub(crate) fn write(k: &[u8], len: usize) -> Result<()> {
    key(k)?;
    if len > VALUE_BYTES_MAX {
        return Err(Error::invalid(format!(
            "a value of {len} bytes: the most a value holds is {VALUE_BYTES_MAX} bytes (256 KiB)"
        )));
    }
    Ok(())
}

/// A patch of `bytes` at `offset` of `k`'s value stays inside a value's
/// limit.
pub(crate) fn patch(k: &[u8], offset: u32, bytes: &[u8]) -> Result<()> {
    write(k, (offset as usize).saturating_add(bytes.len()))
}

/// Every operation of a batch: its keys and values within their limits.
pub(crate) fn operations(ops: &[proto::Operation]) -> Result<()> {
    for (i, op) in ops.iter().enumerate() {
        let checked = match &op.op {
            Some(Op::Get(k) | Op::Delete(k)) => key(k),
            Some(Op::Put(row)) => write(&row.key, row.value.len()),
            Some(Op::Patch(p)) => patch(&p.key, p.offset, &p.bytes),
            Some(Op::Scan(_)) | None => Ok(()),
        };
        checked.map_err(|e| Error::invalid(format!("operation {i}: {}", e.message())))?;
    }
    Ok(())
}
