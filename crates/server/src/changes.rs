//! `Changes`: the database's change feed as a server stream (design
//! record 0014). Each call runs a feed (`milliscale::feed::Feed`) in the
//! server process, on the follower the server's feeds share: it reads the
//! log from the server's own stores, as a replica does, so the writer's
//! commit path is not touched, and holds one replica's copy of the
//! database for all of them (a feed whose cursor that follower has passed
//! starts one of its own). A server runs at most [`FEEDS_MAX`] at once.
//!
//! On a cluster's shard, the call runs the cluster's feed
//! (`shard::feed::ClusterFeed`): every shard's log, read from the stores
//! the map names, merged by commit timestamp, each feed by followers of
//! its own (a copy of every shard's data): a shard runs at most
//! [`CLUSTER_FEEDS_MAX`].
//!
//! Invariants:
//! - events go out in the feed's order: each transaction whole, then the
//!   resolved points; a client that does not read holds the feed back
//!   (a bounded channel, then the feed's own bounded tap), not memory;
//! - the feed stops when the client goes away, when the server stops, or
//!   on its first error, which is the stream's last message.

use std::pin::Pin;
use std::time::Duration;

use std::sync::Arc;

use milliscale::feed::{Feed, FeedEvent, FeedFilter};
use milliscale_milana::shard_map::MapStore;
use milliscale_proto::v1 as proto;
use proto::changes_response::Event;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::Status;

use crate::errors::{engine, refuse};
use crate::service::{Backend, Service};
use crate::shard::feed::{ClusterEvent, ClusterFeed};

/// The feeds a server runs at once (they share one follower).
pub const FEEDS_MAX: usize = 16;

/// The cluster feeds a shard runs at once (each with a follower of every
/// shard).
pub const CLUSTER_FEEDS_MAX: usize = 4;

/// The stream of a `Changes` call.
pub type ChangesStream = Pin<Box<dyn Stream<Item = Result<proto::ChangesResponse, Status>> + Send>>;

/// Events a stream holds for a client that does not read them.
const HELD: usize = 16;

/// How often the feed's thread looks at whether the client or the server
/// went away while nothing happens.
const CHECK: Duration = Duration::from_millis(100);

impl Service {
    /// Start a feed for `r` and stream it.
    pub(crate) async fn open_changes(
        &self,
        r: proto::ChangesRequest,
    ) -> Result<ChangesStream, Status> {
        self.new_work()?;
        let permit = std::sync::Arc::clone(&self.feeds).try_acquire_owned().map_err(|_| {
            let (max, what) = match self.shard {
                Some(_) => (CLUSTER_FEEDS_MAX, "cluster change feeds (each reads every shard)"),
                None => (FEEDS_MAX, "change feeds"),
            };
            refuse::limit(format!(
                "this server already runs {max} {what}; read the feed from the store with \
                 `milliscale changes`, or from a replica server"
            ))
        })?;
        let filter = FeedFilter { tables: r.tables, prefix: r.prefix.map(Vec::from) };
        if let Some(shard) = &self.shard {
            return self.open_cluster_changes(shard.map_store(), r.after, filter, permit).await;
        }
        let backend = self.backend.clone();
        let feed = tokio::task::spawn_blocking(move || match backend {
            Backend::Writer(db) => db.blocking().changes(r.after, filter),
            Backend::Replica(rep) => rep.blocking().changes(r.after, filter),
        })
        .await
        .map_err(|e| Status::internal(format!("opening the feed: {e}")))?
        .map_err(|e| engine(&e))?;
        let (tx, rx) = mpsc::channel(HELD);
        let stop = self.stop.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut feed = feed;
            run(|| feed_event(&mut feed), &tx, &stop);
        });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}

impl Service {
    /// A cluster's feed (`ClusterFeed`), read by this shard's process from
    /// every shard's log in the stores the map names.
    async fn open_cluster_changes(
        &self,
        maps: Arc<MapStore>,
        after: Option<u64>,
        filter: FeedFilter,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) -> Result<ChangesStream, Status> {
        let options_of = Box::new(|_, url: &str| Ok(milliscale::Options::new().store(url)));
        let replica = milliscale::ReplicaOptions::default();
        let feed = tokio::task::spawn_blocking(move || {
            ClusterFeed::open(maps, options_of, replica, after, filter)
        })
        .await
        .map_err(|e| Status::internal(format!("opening the feed: {e}")))?
        .map_err(Status::unavailable)?;
        let (tx, rx) = mpsc::channel(HELD);
        let stop = self.stop.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut feed = feed;
            run(|| cluster_event(&mut feed), &tx, &stop);
        });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}

type Sender = mpsc::Sender<Result<proto::ChangesResponse, Status>>;

/// A change as sent.
fn change(table: String, key: Vec<u8>, value: Option<Vec<u8>>) -> proto::Change {
    proto::Change { table, key: key.into(), value: value.map(Into::into) }
}

/// A cluster's feed's next event, as sent.
fn cluster_event(feed: &mut ClusterFeed) -> Result<Option<Event>, Status> {
    Ok(match feed.next_timeout(CHECK).map_err(Status::unavailable)? {
        None => None,
        Some(ClusterEvent::Resolved(t)) => Some(Event::Resolved(t)),
        Some(ClusterEvent::Commit(t)) => Some(Event::Commit(proto::ChangedTransaction {
            csn: 0,
            ts: t.version.ts,
            client: t.version.client,
            changes: t.changes.into_iter().map(|c| change(c.table, c.key, c.value)).collect(),
        })),
    })
}

/// A database's feed's next event, as sent.
fn feed_event(feed: &mut Feed) -> Result<Option<Event>, Status> {
    Ok(match feed.next_timeout(CHECK).map_err(|e| engine(&e))? {
        None => None,
        Some(FeedEvent::Resolved(n)) => Some(Event::Resolved(n)),
        Some(FeedEvent::Commit(t)) => Some(Event::Commit(proto::ChangedTransaction {
            csn: t.csn,
            ts: 0,
            client: 0,
            changes: t.changes.into_iter().map(|c| change(c.table, c.key, c.value)).collect(),
        })),
    })
}

/// Send the events `next` gives on `tx` until the client goes away, the
/// server stops, or the feed fails (its error the last message).
fn run(
    mut next: impl FnMut() -> Result<Option<Event>, Status>,
    tx: &Sender,
    stop: &tokio::sync::watch::Receiver<bool>,
) {
    while !tx.is_closed() && !*stop.borrow() {
        let event = match next() {
            Ok(None) => continue,
            Ok(Some(e)) => e,
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        };
        let msg = proto::ChangesResponse { event: Some(event) };
        if tx.blocking_send(Ok(msg)).is_err() {
            return;
        }
    }
}
