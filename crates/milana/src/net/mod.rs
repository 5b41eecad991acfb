//! Shards over the network: each shard primary a gRPC server over its
//! [`crate::shard_log::ShardLog`] ([`server`]), and a client that
//! coordinates its own transactions across them ([`client`]). The
//! protocol is `proto/milliscale/v1/milana.proto`.

pub mod client;
mod convert;
pub mod server;
pub mod standby;

/// The newest shard map, read on a blocking thread (the store's calls
/// block); an error if none was published.
pub(crate) async fn latest_map(
    maps: &std::sync::Arc<crate::shard_map::MapStore>,
) -> Result<crate::shard_map::ShardMap, String> {
    let maps = std::sync::Arc::clone(maps);
    match tokio::task::spawn_blocking(move || maps.latest()).await {
        Ok(Ok(Some(m))) => Ok(m),
        Ok(Ok(None)) => Err("no version published".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// The wire protocol, generated from `proto/milliscale/v1/milana.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("milliscale.milana.v1");
}
