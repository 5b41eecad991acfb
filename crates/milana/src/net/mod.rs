//! Shards over the network: each shard primary a gRPC server over its
//! [`crate::shard_log::ShardLog`] ([`server`]), and a client that
//! coordinates its own transactions across them ([`client`]). The
//! protocol is `proto/milliscale/v1/milana.proto`.

pub mod client;
mod convert;
pub mod server;
pub mod standby;

/// The wire protocol, generated from `proto/milliscale/v1/milana.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("milliscale.milana.v1");
}
