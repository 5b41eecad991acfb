//! A server's change feed (`Client::changes`) and a cluster's
//! (`Cluster::changes`) for Python: the package's `Client.changes` and
//! `Cluster.changes` iterate them.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use milliscale_client as client;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::runtime::Runtime;

use crate::call_error;

/// One event as Python gets it: `(csn or ts, client, [(table, key, value
/// or None)])` for a transaction (client 0 on one database), `(csn or ts,
/// 0, None)` for a resolved point.
type Event<'py> =
    (u64, u32, Option<Vec<(String, Bound<'py, PyBytes>, Option<Bound<'py, PyBytes>>)>>);

/// A server's feed or a cluster's.
pub(crate) enum Feed {
    One(client::Changes),
    Cluster(client::ClusterChanges),
}

/// An event of either, as (position, client, writes or a resolved point).
type Got = (u64, u32, Option<Vec<client::Change>>);

impl Feed {
    async fn next(&mut self) -> client::Result<Option<Got>> {
        Ok(match self {
            Feed::One(f) => f.next().await?.map(|e| match e {
                client::ChangeEvent::Commit { csn, changes } => (csn, 0, Some(changes)),
                client::ChangeEvent::Resolved(n) => (n, 0, None),
            }),
            Feed::Cluster(f) => f.next().await?.map(|e| match e {
                client::ClusterChangeEvent::Commit { ts, client, changes } => {
                    (ts, client, Some(changes))
                }
                client::ClusterChangeEvent::Resolved(t) => (t, 0, None),
            }),
        })
    }
}

/// An open feed; its events come from `next`.
#[pyclass(frozen, module = "milliscale._native")]
pub(crate) struct NativeChanges {
    pub(crate) rt: Arc<Runtime>,
    pub(crate) feed: Mutex<Option<Feed>>,
}

#[pymethods]
impl NativeChanges {
    /// The next event, waiting at most `wait` seconds: `None` if none
    /// came, `(0, 0, None)` once the server ended the feed; a failure of
    /// the feed raises `CallError` (and ends it).
    fn next<'py>(&self, py: Python<'py>, wait: f64) -> PyResult<Option<Event<'py>>> {
        let wait = Duration::try_from_secs_f64(wait)
            .map_err(|_| pyo3::exceptions::PyValueError::new_err("wait must be >= 0"))?;
        let got = py.allow_threads(|| {
            let mut g = self.feed.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(feed) = g.as_mut() else { return Ok(Some(None)) };
            let r = self.rt.block_on(async { tokio::time::timeout(wait, feed.next()).await });
            match r {
                Err(_) => Ok(None),
                Ok(Ok(Some(e))) => Ok(Some(Some(e))),
                Ok(Ok(None)) => {
                    g.take();
                    Ok(Some(None))
                }
                Ok(Err(e)) => {
                    g.take();
                    Err(e)
                }
            }
        });
        match got.map_err(|e| call_error(&e))? {
            None => Ok(None),
            Some(None) => Ok(Some((0, 0, None))),
            Some(Some((at, client, changes))) => {
                let writes = changes.map(|changes| {
                    changes
                        .into_iter()
                        .map(|c| {
                            let value = c.value.map(|v| PyBytes::new(py, &v));
                            (c.table, PyBytes::new(py, &c.key), value)
                        })
                        .collect()
                });
                Ok(Some((at, client, writes)))
            }
        }
    }

    /// Stop the feed (the server stops its follower).
    fn close(&self) {
        let _in = self.rt.enter();
        self.feed.lock().unwrap_or_else(PoisonError::into_inner).take();
    }
}

impl Drop for NativeChanges {
    fn drop(&mut self) {
        let _in = self.rt.enter();
        self.feed.get_mut().unwrap_or_else(PoisonError::into_inner).take();
    }
}
