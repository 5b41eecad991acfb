//! A server's change feed (`Client::changes`) for Python: the package's
//! `Client.changes` iterates it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use milliscale_client as client;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::runtime::Runtime;

use crate::call_error;

/// One event as Python gets it: `(csn, [(table, key, value or None)])`
/// for a transaction, `(csn, None)` for a resolved point.
type Event<'py> = (u64, Option<Vec<(String, Bound<'py, PyBytes>, Option<Bound<'py, PyBytes>>)>>);

/// An open feed; its events come from `next`.
#[pyclass(frozen, module = "milliscale._native")]
pub(crate) struct NativeChanges {
    pub(crate) rt: Arc<Runtime>,
    pub(crate) feed: Mutex<Option<client::Changes>>,
}

#[pymethods]
impl NativeChanges {
    /// The next event, waiting at most `wait` seconds: `None` if none
    /// came, `(0, None)` once the server ended the feed; a failure of the
    /// feed raises `CallError` (and ends it).
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
            Some(None) => Ok(Some((0, None))),
            Some(Some(client::ChangeEvent::Resolved(n))) => Ok(Some((n, None))),
            Some(Some(client::ChangeEvent::Commit { csn, changes })) => {
                let writes = changes
                    .into_iter()
                    .map(|c| {
                        let value = c.value.map(|v| PyBytes::new(py, &v));
                        (c.table, PyBytes::new(py, &c.key), value)
                    })
                    .collect();
                Ok(Some((csn, Some(writes))))
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
