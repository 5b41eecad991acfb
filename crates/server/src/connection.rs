//! Client connections: each accepted TCP stream gets a number, which the
//! calls on it carry (`ConnectionInfo` in their extensions), and when the
//! connection closes, the interactive transactions begun on it are
//! aborted, as a database server does when its client goes away. Without
//! this, a client that closed its connection, crashed or lost the network
//! left its transactions holding their keys until the idle timeout.
//!
//! Invariant: a connection's number is never reused while the server
//! runs, so a transaction is charged to, and ended with, exactly the
//! connection that began it (an address could be reused by a later
//! connection).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::{Connected, TlsConnectInfo};

use crate::sessions::Sessions;

/// What a call knows of its connection.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    /// The connection's number.
    pub id: u64,
    /// The client's address.
    pub remote: Option<SocketAddr>,
}

impl ConnectionInfo {
    /// The connection of a call, over TLS or not.
    pub fn of<T>(req: &tonic::Request<T>) -> Option<&ConnectionInfo> {
        let e = req.extensions();
        e.get::<ConnectionInfo>()
            .or_else(|| e.get::<TlsConnectInfo<ConnectionInfo>>().map(|t| t.get_ref()))
    }
}

/// Numbers connections as they are accepted.
pub struct Connections {
    sessions: Arc<Sessions>,
    next: AtomicU64,
}

impl Connections {
    pub fn new(sessions: Arc<Sessions>) -> Connections {
        Connections { sessions, next: AtomicU64::new(1) }
    }

    /// The accepted stream `io`, numbered.
    pub fn accept(&self, io: TcpStream) -> Connection {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let remote = io.peer_addr().ok();
        Connection { io, info: ConnectionInfo { id, remote }, sessions: Arc::clone(&self.sessions) }
    }
}

/// An accepted TCP stream; dropped when the connection has closed.
pub struct Connection {
    io: TcpStream,
    info: ConnectionInfo,
    sessions: Arc<Sessions>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        let n = self.sessions.connection_closed(self.info.id);
        if n > 0 {
            tracing::info!(connection = self.info.id, remote = ?self.info.remote, aborted = n,
                "a connection closed with open transactions; aborted them");
            metrics::counter!("milliscale_server_disconnected_transactions_total")
                .increment(n as u64);
        }
    }
}

impl Connected for Connection {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        self.info.clone()
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
