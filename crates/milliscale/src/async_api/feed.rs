//! A change feed for async code ([`AsyncFeed`]): the events of a
//! [`Feed`] as a [`Stream`], read by a thread of its own (the follower and
//! its waits never run on the caller's runtime).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use tokio::sync::mpsc;

use super::{AsyncDatabase, AsyncReplica, off_thread};
use crate::error::{Error, Result};
use crate::feed::{Feed, FeedEvent, FeedFilter};
use crate::mvcc::Csn;

/// Events the reading thread holds for a task that does not take them:
/// beyond them the feed waits (and its follower with it).
const HELD: usize = 64;

/// How often the reading thread looks at whether the stream was dropped
/// while nothing happens.
const CHECK: Duration = Duration::from_millis(100);

/// A change feed for async code: a [`Stream`] of [`FeedEvent`]s (or
/// [`AsyncFeed::next`]), with the semantics of [`Feed`]. An error ends it.
/// Dropping it stops the thread that reads it and detaches the feed.
#[derive(Debug)]
pub struct AsyncFeed {
    events: mpsc::Receiver<Result<FeedEvent>>,
    stop: Arc<AtomicBool>,
}

impl AsyncFeed {
    /// Read `feed` on a thread of its own.
    pub fn new(feed: Feed) -> AsyncFeed {
        let (tx, events) = mpsc::channel(HELD);
        let stop = Arc::new(AtomicBool::new(false));
        let halt = Arc::clone(&stop);
        let spawned =
            milliscale_seam::spawn("milliscale-feed".into(), move || read(feed, &tx, &halt));
        if let Err(e) = spawned {
            let (tx, events) = mpsc::channel(1);
            let _ = tx
                .try_send(Err(Error::InvalidArgument(format!("starting the feed's thread: {e}"))));
            return AsyncFeed { events, stop };
        }
        AsyncFeed { events, stop }
    }

    /// The next event; `None` once the feed ended (after an error).
    pub async fn next(&mut self) -> Option<Result<FeedEvent>> {
        self.events.recv().await
    }
}

/// Send `feed`'s events to `tx` until it ends, `tx`'s receiver is
/// dropped, or `stop`.
fn read(mut feed: Feed, tx: &mpsc::Sender<Result<FeedEvent>>, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) && !tx.is_closed() {
        match feed.next_timeout(CHECK) {
            Ok(None) => {}
            Ok(Some(e)) => {
                if tx.blocking_send(Ok(e)).is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        }
    }
}

impl Stream for AsyncFeed {
    type Item = Result<FeedEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events.poll_recv(cx)
    }
}

impl Drop for AsyncFeed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl AsyncDatabase {
    /// A change feed of this database ([`crate::Database::changes`]: the
    /// feeds of one database share a follower), as a [`Stream`].
    pub async fn changes(&self, cursor: Option<Csn>, filter: FeedFilter) -> Result<AsyncFeed> {
        let db = Arc::clone(&self.db);
        let feed = off_thread("milliscale-feed-open", move || db.changes(cursor, filter)).await??;
        Ok(AsyncFeed::new(feed))
    }
}

impl AsyncReplica {
    /// A change feed of the database this replica follows
    /// ([`crate::Replica::changes`]), as a [`Stream`].
    pub async fn changes(&self, cursor: Option<Csn>, filter: FeedFilter) -> Result<AsyncFeed> {
        let r = Arc::clone(&self.replica);
        let feed = off_thread("milliscale-feed-open", move || r.changes(cursor, filter)).await??;
        Ok(AsyncFeed::new(feed))
    }
}
