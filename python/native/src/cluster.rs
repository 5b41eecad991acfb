//! A cluster's connection (`milliscale.Cluster` holds one): the Rust
//! cluster client (`milliscale_client::Cluster`), the coordinator of the
//! transactions, exposed to Python.
//!
//! Its runtime has one worker thread of its own, unlike a server's
//! connection (driven by the calling thread only): the client sends a
//! commit's decision to the shards in the background, after the commit's
//! answer, and those sends must go out even if Python makes no next call.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use milliscale_client as client;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::runtime::Runtime;

use crate::{CallError, call_error, deadline, seconds};

/// An open cluster: the client and the runtime its calls run on.
#[derive(Clone)]
struct Open {
    rt: Arc<Runtime>,
    cluster: client::Cluster,
}

/// A connection to a cluster's shards.
#[pyclass(frozen, module = "milliscale._native")]
pub(crate) struct ClusterConnection {
    open: RwLock<Option<Open>>,
    timeout: Option<Duration>,
}

/// A cluster transaction: its reads and buffered writes live here, at the
/// client (`None` once committed or aborted).
#[pyclass(frozen, module = "milliscale._native")]
pub(crate) struct NativeClusterTransaction {
    tx: Mutex<Option<client::ClusterTransaction>>,
    /// Its begin timestamp (µs of the client's hybrid clock).
    #[pyo3(get)]
    begin_ts: u64,
}

fn closed() -> PyErr {
    CallError::new_err((
        client::Code::FailedPrecondition as i32,
        "the cluster client is closed".to_owned(),
        "closed".to_owned(),
        false,
    ))
}

fn ended() -> PyErr {
    CallError::new_err((
        client::Code::FailedPrecondition as i32,
        "the transaction has ended (committed or aborted)".to_owned(),
        "not_found".to_owned(),
        false,
    ))
}

impl ClusterConnection {
    fn open(&self) -> PyResult<Open> {
        self.open.read().unwrap_or_else(PoisonError::into_inner).clone().ok_or_else(closed)
    }

    /// Run `f` on the cluster's runtime with the GIL released, within the
    /// connection's timeout.
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        open: &Open,
        f: impl Future<Output = client::Result<T>> + Send,
    ) -> PyResult<T> {
        let timeout = self.timeout;
        py.allow_threads(|| {
            open.rt.block_on(async {
                match timeout {
                    None => f.await.map_err(|e| call_error(&e)),
                    Some(t) => match tokio::time::timeout(t, f).await {
                        Ok(r) => r.map_err(|e| call_error(&e)),
                        Err(_) => Err(deadline(t)),
                    },
                }
            })
        })
    }

    /// Take the transaction out for a call (it holds its state across the
    /// call's awaits), and put it back after. A call that times out loses
    /// it: the transaction has ended (nothing of it was sent to commit).
    fn with_tx<T: Send, Fut>(
        &self,
        py: Python<'_>,
        tx: &NativeClusterTransaction,
        f: impl FnOnce(client::ClusterTransaction) -> Fut + Send,
    ) -> PyResult<T>
    where
        Fut: Future<Output = (client::ClusterTransaction, client::Result<T>)> + Send,
    {
        let o = self.open()?;
        let t = tx.tx.lock().unwrap_or_else(PoisonError::into_inner).take().ok_or_else(ended)?;
        let timeout = self.timeout;
        let back = py.allow_threads(|| {
            o.rt.block_on(async {
                match timeout {
                    None => Ok(f(t).await),
                    Some(d) => tokio::time::timeout(d, f(t)).await.map_err(|_| deadline(d)),
                }
            })
        })?;
        let (t, r) = back;
        *tx.tx.lock().unwrap_or_else(PoisonError::into_inner) = Some(t);
        r.map_err(|e| call_error(&e))
    }
}

#[pymethods]
impl ClusterConnection {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (address, token=None, tls_ca=None, tls_domain=None, timeout=None, client_id=None))]
    fn new(
        py: Python<'_>,
        address: String,
        token: Option<String>,
        tls_ca: Option<Vec<u8>>,
        tls_domain: Option<String>,
        timeout: Option<f64>,
        client_id: Option<u32>,
    ) -> PyResult<ClusterConnection> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("milliscale-cluster")
            .enable_all()
            .build()
            .map_err(|e| {
                PyValueError::new_err(format!("cannot start the client's runtime: {e}"))
            })?;
        let mut b = client::Cluster::builder(address);
        if let Some(t) = token {
            b = b.token(t);
        }
        if let Some(ca) = tls_ca {
            b = b.tls(ca);
        }
        if let Some(d) = tls_domain {
            b = b.tls_domain(d);
        }
        if let Some(id) = client_id {
            b = b.client_id(id);
        }
        let cluster = py.allow_threads(|| rt.block_on(b.connect())).map_err(|e| call_error(&e))?;
        let open = Open { rt: Arc::new(rt), cluster };
        Ok(ClusterConnection { open: RwLock::new(Some(open)), timeout: seconds(timeout)? })
    }

    /// Close: later calls fail with `FAILED_PRECONDITION` (kind `closed`).
    /// The shards are told the client left (`Cluster::close`), so that it
    /// stops holding back what they collect.
    fn close(&self, py: Python<'_>) {
        let open = self.open.write().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(o) = open {
            py.allow_threads(|| o.rt.block_on(o.cluster.close()));
        }
    }

    #[getter]
    fn client_id(&self) -> PyResult<u32> {
        Ok(self.open()?.cluster.client_id())
    }

    fn create_table(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let o = self.open()?;
        self.run(py, &o, o.cluster.create_table(name))
    }

    fn drop_table(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let o = self.open()?;
        self.run(py, &o, o.cluster.drop_table(name))
    }

    fn list_tables(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let o = self.open()?;
        self.run(py, &o, o.cluster.list_tables())
    }

    /// Run a batch (`ops` as `milliscale.Batch` builds them) as one
    /// transaction: one call if its keys are all on one shard. Returns
    /// `(results, token, durable, attempts)`.
    #[pyo3(signature = (ops, read_only, retries))]
    fn execute<'py>(
        &self,
        py: Python<'py>,
        ops: Vec<crate::OpTuple>,
        read_only: bool,
        retries: u32,
    ) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
        let ops: Vec<crate::Op> = ops.into_iter().map(crate::Op::of).collect();
        let opts = client::TxnOptions { read_only, ..client::TxnOptions::default() };
        let batch = crate::batch_of(&ops)?.options(opts).retries(retries);
        let o = self.open()?;
        let r = self.run(py, &o, o.cluster.execute(batch))?;
        let results = crate::results_of(py, &ops, &r)?;
        (results, r.token, r.durable, r.attempts).into_pyobject(py)
    }

    /// Begin a transaction (at the client: no call).
    fn begin(&self) -> PyResult<NativeClusterTransaction> {
        let tx = self.open()?.cluster.begin();
        Ok(NativeClusterTransaction { begin_ts: tx.begin_ts(), tx: Mutex::new(Some(tx)) })
    }

    fn tx_get<'py>(
        &self,
        py: Python<'py>,
        tx: &NativeClusterTransaction,
        table: &str,
        key: Vec<u8>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let table = table.to_owned();
        let v = self.with_tx(py, tx, move |mut t| async move {
            let r = t.get(&table, &key).await;
            (t, r)
        })?;
        Ok(v.map(|v| PyBytes::new(py, &v)))
    }

    /// The values of many keys: one call per shard holding any of them.
    fn tx_get_many<'py>(
        &self,
        py: Python<'py>,
        tx: &NativeClusterTransaction,
        table: &str,
        keys: Vec<Vec<u8>>,
    ) -> PyResult<Vec<Option<Bound<'py, PyBytes>>>> {
        let table = table.to_owned();
        let v = self.with_tx(py, tx, move |mut t| async move {
            let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let r = t.get_many(&table, &refs).await;
            (t, r)
        })?;
        Ok(crate::values(py, v))
    }

    fn tx_put(
        &self,
        tx: &NativeClusterTransaction,
        table: &str,
        key: Vec<u8>,
        value: Vec<u8>,
    ) -> PyResult<()> {
        let mut t = tx.tx.lock().unwrap_or_else(PoisonError::into_inner);
        let t = t.as_mut().ok_or_else(ended)?;
        t.put(table, &key, &value).map_err(|e| call_error(&e))
    }

    fn tx_patch(
        &self,
        py: Python<'_>,
        tx: &NativeClusterTransaction,
        table: &str,
        key: Vec<u8>,
        offset: u32,
        bytes: Vec<u8>,
    ) -> PyResult<()> {
        let table = table.to_owned();
        self.with_tx(py, tx, move |mut t| async move {
            let r = t.patch(&table, &key, offset, &bytes).await;
            (t, r)
        })
    }

    fn tx_delete(
        &self,
        py: Python<'_>,
        tx: &NativeClusterTransaction,
        table: &str,
        key: Vec<u8>,
    ) -> PyResult<bool> {
        let table = table.to_owned();
        self.with_tx(py, tx, move |mut t| async move {
            let r = t.delete(&table, &key).await;
            (t, r)
        })
    }

    /// The rows of a range: `start <= key < end` or keys starting with
    /// `prefix`, at most `limit` (0: all), reversed if asked.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (tx, table, start, end, prefix, reverse, limit))]
    fn tx_scan<'py>(
        &self,
        py: Python<'py>,
        tx: &NativeClusterTransaction,
        table: &str,
        start: Option<Vec<u8>>,
        end: Option<Vec<u8>>,
        prefix: Option<Vec<u8>>,
        reverse: bool,
        limit: u64,
    ) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        let table = table.to_owned();
        let range = client::KeyRange { start, end, prefix, reverse, limit };
        let rows = self.with_tx(py, tx, move |mut t| async move {
            let r = t.scan(&table, range).await;
            (t, r)
        })?;
        Ok(rows.into_iter().map(|(k, v)| (PyBytes::new(py, &k), PyBytes::new(py, &v))).collect())
    }

    /// The shards the transaction touched so far.
    fn tx_shards(&self, tx: &NativeClusterTransaction) -> PyResult<Vec<u32>> {
        let t = tx.tx.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(t.as_ref().ok_or_else(ended)?.shards())
    }

    fn tx_commit(&self, py: Python<'_>, tx: &NativeClusterTransaction) -> PyResult<Option<u64>> {
        let o = self.open()?;
        let t = tx.tx.lock().unwrap_or_else(PoisonError::into_inner).take().ok_or_else(ended)?;
        self.run(py, &o, t.commit())
    }

    fn tx_abort(&self, tx: &NativeClusterTransaction) {
        if let Some(t) = tx.tx.lock().unwrap_or_else(PoisonError::into_inner).take() {
            t.abort();
        }
    }

    /// The cluster's change feed after `after` (a resolved commit
    /// timestamp), of `tables` (none: all) and keys starting with `prefix`,
    /// run by the shard this cluster was opened through.
    #[pyo3(signature = (after, tables, prefix))]
    fn changes(
        &self,
        py: Python<'_>,
        after: Option<u64>,
        tables: Vec<String>,
        prefix: Option<Vec<u8>>,
    ) -> PyResult<crate::changes::NativeChanges> {
        let o = self.open()?;
        let filter = client::ChangeFilter { tables, prefix };
        let feed = self.run(py, &o, o.cluster.changes(after, filter))?;
        let feed = Mutex::new(Some(crate::changes::Feed::Cluster(feed)));
        Ok(crate::changes::NativeChanges { rt: Arc::clone(&o.rt), feed })
    }

    /// Every shard's state: `(shard, address, error, prepared, remembered,
    /// versions, cpu_seconds, log_requests_per_s, log_usd_per_hour,
    /// standbys)`, the numbers `None` for a shard that did not answer;
    /// each standby `(address, applied_token, behind, last_seen_ms)`.
    #[allow(clippy::type_complexity)]
    fn status(
        &self,
        py: Python<'_>,
    ) -> PyResult<
        Vec<(
            u32,
            String,
            Option<String>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
            Option<f64>,
            Option<f64>,
            Option<f64>,
            Vec<(String, u64, u64, u64)>,
        )>,
    > {
        let o = self.open()?;
        let shards = self.run(py, &o, async { Ok(o.cluster.status().await) })?;
        Ok(shards
            .into_iter()
            .map(|s| {
                (
                    s.shard,
                    s.addr,
                    s.error,
                    s.info.as_ref().map(|i| i.prepared),
                    s.info.as_ref().map(|i| i.remembered),
                    s.info.as_ref().map(|i| i.versions),
                    s.server.as_ref().map(|x| x.cpu_seconds),
                    s.server.as_ref().and_then(|x| x.log_requests_per_s),
                    s.server.as_ref().and_then(|x| x.log_usd_per_hour),
                    s.info.as_ref().map_or_else(Vec::new, |i| {
                        i.standbys
                            .iter()
                            .map(|h| (h.addr.clone(), h.applied_token, h.behind, h.last_seen_ms))
                            .collect()
                    }),
                )
            })
            .collect())
    }
}
