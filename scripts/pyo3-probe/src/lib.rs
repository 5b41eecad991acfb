//! The smallest PyO3 module over the Rust client (see Cargo.toml): a
//! `Client` with `status`, `get` and `put`, each one call that blocks the
//! calling Python thread (with the GIL released) on a tokio runtime.
//!
//! `threads = 0` runs the client on a current-thread runtime driven by
//! the caller inside each call (no hand-off between threads); `threads >
//! 0` on a multi-thread runtime of that many threads, which keeps the
//! connection served between calls and hands each answer to the caller.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::runtime::{Builder, Runtime};

fn err(e: impl std::fmt::Display) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
}

#[pyclass]
struct Client {
    rt: Runtime,
    inner: milliscale_client::Client,
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (address, threads = 0))]
    fn new(address: String, threads: usize) -> PyResult<Client> {
        let mut b =
            if threads == 0 { Builder::new_current_thread() } else { Builder::new_multi_thread() };
        if threads > 0 {
            b.worker_threads(threads);
        }
        let rt = b.enable_all().build().map_err(err)?;
        let inner = rt.block_on(milliscale_client::Client::connect(address)).map_err(err)?;
        Ok(Client { rt, inner })
    }

    /// The server's durable token (a `Status` call).
    fn status(&self, py: Python<'_>) -> PyResult<u64> {
        let s = py.allow_threads(|| self.rt.block_on(self.inner.status())).map_err(err)?;
        Ok(s.durable_token)
    }

    /// Read `key` (a one-shot read-only transaction).
    fn get(&self, py: Python<'_>, table: &str, key: &[u8]) -> PyResult<Option<Py<PyBytes>>> {
        let v = py.allow_threads(|| self.rt.block_on(self.inner.get(table, key))).map_err(err)?;
        Ok(v.map(|v| PyBytes::new(py, &v).unbind()))
    }

    /// Write `key` in a transaction of its own; its token once durable.
    fn put(&self, py: Python<'_>, table: &str, key: &[u8], value: &[u8]) -> PyResult<u64> {
        py.allow_threads(|| self.rt.block_on(self.inner.put(table, key, value))).map_err(err)
    }
}

#[pymodule]
fn milliscale_pyo3_probe(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()
}
