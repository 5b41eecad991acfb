//! What the server's tests share: a loopback address, a writer, a
//! server started with tweaked options, a client of it, and tokens.
#![allow(dead_code)] // each test file uses some of these

use std::net::SocketAddr;

use milliscale::{AsyncDatabase, Options};
use milliscale_client::Client;
use milliscale_server::{Backend, Server, ServerOptions};

pub const RW: &str = "rw-token-0123456789";
pub const RO: &str = "ro-token-0123456789";

pub fn local() -> SocketAddr {
    "127.0.0.1:0".parse().expect("an address")
}

pub async fn writer(store: &str) -> AsyncDatabase {
    AsyncDatabase::open(Options::new().store(store)).await.expect("open")
}

pub async fn start(backend: Backend, tweak: impl FnOnce(&mut ServerOptions)) -> Server {
    let mut o = ServerOptions::new(local());
    tweak(&mut o);
    Server::start(backend, o, None).await.expect("start")
}

pub async fn client(s: &Server) -> Client {
    Client::connect(s.local_addr().to_string()).await.expect("connect")
}
