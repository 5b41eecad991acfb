//! A server's change feed (`Changes`, design record 0014): every committed
//! transaction after a cursor, whole, in CSN order, each write as the
//! row's whole new value, and resolved points.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio_stream::Stream;

use crate::proto::{self, changes_response::Event};
use crate::{Client, Result};

/// Which changes to send.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeFilter {
    /// Only these tables (empty: every table).
    pub tables: Vec<String>,
    /// Only keys that start with this.
    pub prefix: Option<Vec<u8>>,
}

/// One write of a committed transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The table's name.
    pub table: String,
    /// The row's key.
    pub key: Vec<u8>,
    /// The row's whole value after the transaction; `None`: deleted.
    pub value: Option<Vec<u8>>,
}

/// What a feed sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeEvent {
    /// A committed transaction: its CSN (the cursor to save once it is
    /// handled) and its writes, in order.
    Commit {
        /// Its CSN.
        csn: u64,
        /// Its writes (those the filter keeps).
        changes: Vec<Change>,
    },
    /// Every transaction below this CSN has been sent.
    Resolved(u64),
}

/// A feed's events, as they come: call [`Changes::next`].
#[derive(Debug)]
pub struct Changes {
    stream: tonic::Streaming<proto::ChangesResponse>,
}

impl Changes {
    /// The next event; `None` once the server ended the feed (it stops).
    /// A failure (a cursor the log no longer reaches: OUT_OF_RANGE, kind
    /// `cursor`; a consumer let go for holding other feeds back: ABORTED,
    /// kind `feed_too_slow`, retryable: open it again after the cursor)
    /// ends the feed. Also a [`Stream`] of the same events, and
    /// [`Changes::blocking`] for code on plain threads.
    pub async fn next(&mut self) -> Result<Option<ChangeEvent>> {
        let event = loop {
            let Some(r) = self.stream.message().await? else { return Ok(None) };
            if let Some(e) = r.event {
                break e; // (a message without one is skipped)
            }
        };
        Ok(Some(event_of(event)))
    }

    /// The same events as a blocking iterator, each waited for on `rt`
    /// (the runtime the client was made on). Not from inside an async
    /// task: `Handle::block_on` panics there.
    pub fn blocking(self, rt: tokio::runtime::Handle) -> BlockingChanges {
        BlockingChanges { feed: self, rt }
    }
}

fn event_of(event: Event) -> ChangeEvent {
    match event {
        Event::Resolved(n) => ChangeEvent::Resolved(n),
        Event::Commit(t) => {
            ChangeEvent::Commit { csn: t.csn, changes: t.changes.into_iter().map(change).collect() }
        }
    }
}

/// The next event of `stream` that carries one, polled.
fn poll_event(
    stream: &mut tonic::Streaming<proto::ChangesResponse>,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Event>>> {
    loop {
        match Pin::new(&mut *stream).poll_next(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Ready(Some(Err(s))) => return Poll::Ready(Some(Err(s.into()))),
            Poll::Ready(Some(Ok(r))) => {
                if let Some(e) = r.event {
                    return Poll::Ready(Some(Ok(e)));
                }
            }
        }
    }
}

impl Stream for Changes {
    type Item = Result<ChangeEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        poll_event(&mut self.stream, cx).map(|e| e.map(|e| e.map(event_of)))
    }
}

/// A server's feed as a blocking iterator ([`Changes::blocking`]).
#[derive(Debug)]
pub struct BlockingChanges {
    feed: Changes,
    rt: tokio::runtime::Handle,
}

impl Iterator for BlockingChanges {
    type Item = Result<ChangeEvent>;

    /// The next event, waited for; `None` once the server ended the feed.
    fn next(&mut self) -> Option<Result<ChangeEvent>> {
        self.rt.block_on(self.feed.next()).transpose()
    }
}

/// What a cluster's feed sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterChangeEvent {
    /// A committed transaction, whole (its writes on every shard).
    Commit {
        /// Its commit timestamp.
        ts: u64,
        /// Its client.
        client: u32,
        /// Its writes (those the filter keeps), by table and key.
        changes: Vec<Change>,
    },
    /// Every transaction at or below this commit timestamp has been sent:
    /// the cursor to save once everything before it is handled.
    Resolved(u64),
}

/// A cluster's feed's events, as they come: call [`ClusterChanges::next`].
#[derive(Debug)]
pub struct ClusterChanges(Changes);

impl ClusterChanges {
    /// The next event; `None` once the shard ended the feed. Also a
    /// [`Stream`] of the same events, and [`ClusterChanges::blocking`].
    pub async fn next(&mut self) -> Result<Option<ClusterChangeEvent>> {
        loop {
            let Some(r) = self.0.stream.message().await? else { return Ok(None) };
            if let Some(e) = r.event {
                return Ok(Some(cluster_event_of(e)));
            }
        }
    }

    /// The same events as a blocking iterator, each waited for on `rt`.
    /// Not from inside an async task.
    pub fn blocking(self, rt: tokio::runtime::Handle) -> BlockingClusterChanges {
        BlockingClusterChanges { feed: self, rt }
    }
}

fn cluster_event_of(event: Event) -> ClusterChangeEvent {
    match event {
        Event::Resolved(t) => ClusterChangeEvent::Resolved(t),
        Event::Commit(t) => ClusterChangeEvent::Commit {
            ts: t.ts,
            client: t.client,
            changes: t.changes.into_iter().map(change).collect(),
        },
    }
}

impl Stream for ClusterChanges {
    type Item = Result<ClusterChangeEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        poll_event(&mut self.0.stream, cx).map(|e| e.map(|e| e.map(cluster_event_of)))
    }
}

/// A cluster's feed as a blocking iterator ([`ClusterChanges::blocking`]).
#[derive(Debug)]
pub struct BlockingClusterChanges {
    feed: ClusterChanges,
    rt: tokio::runtime::Handle,
}

impl Iterator for BlockingClusterChanges {
    type Item = Result<ClusterChangeEvent>;

    /// The next event, waited for; `None` once the shard ended the feed.
    fn next(&mut self) -> Option<Result<ClusterChangeEvent>> {
        self.rt.block_on(self.feed.next()).transpose()
    }
}

fn change(c: proto::Change) -> Change {
    Change { table: c.table, key: c.key.into(), value: c.value.map(Vec::from) }
}

impl crate::Cluster {
    /// The cluster's change feed after `cursor` (the last resolved
    /// timestamp handled; `None`: from now), merged by commit timestamp
    /// from every shard's log (decision record 0014, "A cluster"), run by
    /// the shard this cluster was opened through.
    pub async fn changes(
        &self,
        cursor: Option<u64>,
        filter: ChangeFilter,
    ) -> Result<ClusterChanges> {
        Ok(ClusterChanges(self.first_client().changes(cursor, filter).await?))
    }
}

impl Client {
    /// The server's change feed after `cursor` (the CSN of the last
    /// transaction handled; `None`: from where the feed starts).
    pub async fn changes(&self, cursor: Option<u64>, filter: ChangeFilter) -> Result<Changes> {
        let r = proto::ChangesRequest {
            after: cursor,
            tables: filter.tables,
            prefix: filter.prefix.map(Into::into),
        };
        let stream = self.stub().changes(self.req(r)).await?.into_inner();
        Ok(Changes { stream })
    }
}
