//! The HTTP endpoints beside the gRPC service, for orchestrators and
//! scrapers:
//! - `GET /healthz`: 200 while the database can commit (writer) or the
//!   replica follows its log; 503 with the reason once the stores failed
//!   it, another writer fenced it, or the replica's follower stopped;
//! - `GET /readyz`: 200 while the server takes new transactions; 503 once
//!   it is shutting down (and while unhealthy);
//! - `GET /metrics`: the Prometheus text format.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::extract::State as Extract;
use axum::http::StatusCode;
use axum::routing::get;

use crate::service::Backend;

#[derive(Clone)]
pub struct State {
    pub backend: Backend,
    pub shutting_down: Arc<AtomicBool>,
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
}

/// Whether the database can serve: `Err` with the reason once the stores
/// failed it, another writer fenced it, or the replica's follower stopped.
pub fn health(backend: &Backend) -> Result<(), String> {
    match backend {
        Backend::Writer(db) => match db.blocking().poisoned() {
            Some(e) => Err(e.to_string()),
            None => Ok(()),
        },
        Backend::Replica(r) => match r.blocking().error() {
            Some(e) => Err(e.to_string()),
            None => Ok(()),
        },
    }
}

async fn healthz(Extract(state): Extract<State>) -> (StatusCode, String) {
    match health(&state.backend) {
        Ok(()) => (StatusCode::OK, "ok\n".into()),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("unhealthy: {e}\n")),
    }
}

async fn readyz(Extract(state): Extract<State>) -> (StatusCode, String) {
    if state.shutting_down.load(Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n".into());
    }
    match health(&state.backend) {
        Ok(()) => (StatusCode::OK, "ready\n".into()),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("unhealthy: {e}\n")),
    }
}

async fn metrics(Extract(state): Extract<State>) -> (StatusCode, String) {
    match &state.metrics {
        Some(handle) => {
            match &state.backend {
                Backend::Writer(db) => db.blocking().publish_metrics(),
                Backend::Replica(r) => r.blocking().publish_metrics(),
            }
            (StatusCode::OK, handle.render())
        }
        None => (StatusCode::NOT_FOUND, "this server records no metrics\n".into()),
    }
}

/// Serve the endpoints on `listener` until `stop` turns true.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: State,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let app = axum::Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state);
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
        tracing::warn!("the HTTP endpoints stopped: {e}");
    }
}
