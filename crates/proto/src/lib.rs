//! The wire protocols' generated code, from the schemas under `proto/`
//! (`build.rs` compiles each once):
//!
//! - [`v1`]: `milliscale serve`'s protocol (`proto/milliscale/v1/milliscale.proto`),
//!   its messages, the client stub and the server trait; a cluster's
//!   shards serve it too, with MILANA's calls (`Shard*`) among its methods.
//!
//! The server, the Rust client (and through it the Python package's native
//! module) depend on this crate, and on nothing of each other's for the
//! wire format.

#![deny(missing_docs)]

pub mod codec;

/// `milliscale serve`'s protocol, generated from
/// `proto/milliscale/v1/milliscale.proto`: messages, the client stub and
/// the server trait.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("milliscale.v1");

    /// The schema's descriptors, encoded (a `FileDescriptorSet`): what a
    /// server offers through gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/milliscale_v1_descriptors.bin"));

    impl Operation {
        /// Whether the operation writes: a put, a delete or a patch. A
        /// get, a scan and an empty operation do not. A read-only token
        /// may send only batches of operations that do not write.
        pub fn writes(&self) -> bool {
            !matches!(self.op, Some(operation::Op::Get(_) | operation::Op::Scan(_)) | None)
        }
    }

    impl call_stream_request::Call {
        /// The transaction the call is made in; none for a Begin, which
        /// opens one.
        pub fn txn_id(&self) -> Option<u64> {
            use call_stream_request::Call as C;
            match self {
                C::Begin(_) => None,
                C::Get(c) => Some(c.txn_id),
                C::GetMany(c) => Some(c.txn_id),
                C::Put(c) => Some(c.txn_id),
                C::Delete(c) => Some(c.txn_id),
                C::Patch(c) => Some(c.txn_id),
                C::Write(c) => Some(c.txn_id),
                C::Scan(c) => Some(c.txn_id),
                C::Commit(c) => Some(c.txn_id),
                C::Abort(c) => Some(c.txn_id),
            }
        }

        /// Name transaction `id` as the one the call is made in (a Begin
        /// names none: unchanged).
        pub fn set_txn_id(&mut self, id: u64) {
            use call_stream_request::Call as C;
            match self {
                C::Begin(_) => {}
                C::Get(c) => c.txn_id = id,
                C::GetMany(c) => c.txn_id = id,
                C::Put(c) => c.txn_id = id,
                C::Delete(c) => c.txn_id = id,
                C::Patch(c) => c.txn_id = id,
                C::Write(c) => c.txn_id = id,
                C::Scan(c) => c.txn_id = id,
                C::Commit(c) => c.txn_id = id,
                C::Abort(c) => c.txn_id = id,
            }
        }
    }

    impl KeyRange {
        /// The first key after every key that starts with `prefix` (a
        /// range's `prefix` as start and end); none when the prefix is
        /// empty or all 0xff bytes.
        pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
            let mut end = prefix.to_vec();
            while let Some(last) = end.pop() {
                if last < u8::MAX {
                    end.push(last + 1);
                    return Some(end);
                }
            }
            None
        }
    }
}
