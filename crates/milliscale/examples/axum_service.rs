//! A tokio web service (axum) with one transaction per request, logging
//! to `s3://` on the emulator. `PUT /kv/{key}` writes the body and answers
//! once the commit is durable, with its CSN; `GET /kv/{key}` reads.
//! The example sends 200 requests at once through its own HTTP client,
//! stops the service, opens the database again (recovery) and finds every
//! acknowledged write.
//!
//! `cargo run --release -p milliscale --example axum_service`
//!
//! Runs on a multi-threaded runtime of 2 threads: the requests' tasks run
//! there, the engine's log on its own threads, and nothing blocks the
//! runtime (see `milliscale::AsyncDatabase`).

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use emulator::{Emulator, EmulatorOptions};
use milliscale::store::S3Credentials;
use milliscale::{AsyncDatabase, Error, Options, Table};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type App = State<(AsyncDatabase, Table)>;

/// The HTTP status for an engine error: a conflict is the client's to
/// retry, an unavailable log is the service's.
fn status(e: Error) -> (StatusCode, String) {
    let code = match e {
        Error::Conflict(_) | Error::TooManyTransactions(_) => StatusCode::CONFLICT,
        Error::StoreUnavailable(_) | Error::Fenced(_) | Error::Closed => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (code, e.to_string())
}

async fn write(
    State((db, t)): App,
    Path(key): Path<String>,
    body: Bytes,
) -> Result<String, (StatusCode, String)> {
    let mut tx = db.begin().map_err(status)?;
    tx.put(&t, key.as_bytes(), &body).map_err(status)?;
    let info = tx.commit().await.map_err(status)?; // awaits durability
    Ok(info.csn.unwrap_or_default().to_string())
}

async fn read(State((db, t)): App, Path(key): Path<String>) -> Result<Vec<u8>, StatusCode> {
    db.get(&t, key.as_bytes())
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?
        .ok_or(StatusCode::NOT_FOUND)
}

/// One HTTP/1.1 request; returns the status code and the body.
async fn request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).await?;
    let code = answer.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    Ok((code, body))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let emu = Emulator::start(EmulatorOptions { preset: "s3x".into(), ..Default::default() })?;
    emu.bucket("service")?;
    let creds = S3Credentials::new(emulator::DEFAULT_ACCESS_KEY, emulator::DEFAULT_SECRET_KEY);
    let options = Options::new().add_s3_store(emu.bucket_url("service"), creds);

    let db = AsyncDatabase::open(options.clone()).await?;
    let table = db.create_table("kv").await?;
    let app =
        Router::new().route("/kv/{key}", get(read).put(write)).with_state((db.clone(), table));
    // A backlog for the 200 connections that arrive at once (a listener
    // bound the short way queues 128; the rest would wait a second for
    // their SYN to be sent again).
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind("127.0.0.1:0".parse()?)?;
    let listener = socket.listen(1024)?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });

    // 200 concurrent writes; each answer comes once its commit is durable.
    let started = std::time::Instant::now();
    let writes: Vec<_> = (0..200)
        .map(|i| {
            tokio::spawn(async move {
                request(addr, "PUT", &format!("/kv/key-{i:03}"), &format!("value {i}")).await
            })
        })
        .collect();
    for w in writes {
        let (code, body) = w.await??;
        if code != 200 {
            return Err(format!("a write answered {code}: {body}").into());
        }
    }
    println!("200 concurrent writes acknowledged in {:.1?}", started.elapsed());
    let (code, body) = request(addr, "GET", "/kv/key-007", "").await?;
    assert_eq!((code, body.as_str()), (200, "value 7"));

    let _ = stop.send(());
    server.await??;
    db.close().await?;

    // A restart: every acknowledged write is there.
    let db = AsyncDatabase::open(options).await?;
    let table = db.open_table("kv")?;
    for i in 0..200 {
        let v = db.get(&table, format!("key-{i:03}").as_bytes())?;
        assert_eq!(v, Some(format!("value {i}").into_bytes()), "key-{i:03} after the restart");
    }
    println!("after a restart: all 200 writes present");
    db.close().await?;
    Ok(())
}
