//! The native part of the `milliscale` Python package: the Rust client
//! (`milliscale-client`), its calls exposed to Python through PyO3. The
//! package's Python code (`python/milliscale/`) gives them their API:
//! context-manager transactions, retries, types and docstrings.
//!
//! Each call blocks the calling Python thread, with the GIL released, on
//! the connection's current-thread tokio runtime, which the caller drives
//! inside the call: no hand-off between threads (BENCHMARKS.md, "A call
//! from Python: the stubs against PyO3", measured this against a runtime
//! of its own thread). Threads may share a connection: tokio lets one of
//! them drive the runtime while the others wait for their answers.
//!
//! A failed call raises `CallError(code, message, kind, retryable)`: the
//! gRPC status code as a number, the server's message, the engine's error
//! kind and whether running the whole transaction again may succeed.

mod changes;
mod cluster;

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use milliscale_client as client;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use tokio::runtime::Runtime;

create_exception!(_native, CallError, PyException, "A call to the server failed.");

/// The `CallError` for a client error.
fn call_error(e: &client::Error) -> PyErr {
    CallError::new_err((
        e.code() as i32,
        e.message().to_owned(),
        e.kind().to_owned(),
        e.is_retryable(),
    ))
}

/// A call that ran out of time (DEADLINE_EXCEEDED, as a gRPC deadline).
fn deadline(after: Duration) -> PyErr {
    let message = format!("no answer within {:.3} s", after.as_secs_f64());
    CallError::new_err((
        client::Code::DeadlineExceeded as i32,
        message,
        "timeout".to_owned(),
        false,
    ))
}

fn isolation(i: i32) -> PyResult<client::Isolation> {
    Ok(match i {
        0 => client::Isolation::Default,
        1 => client::Isolation::ReadCommitted,
        2 => client::Isolation::Snapshot,
        3 => client::Isolation::Serializable,
        _ => return Err(PyValueError::new_err(format!("no isolation level {i}"))),
    })
}

fn isolation_number(i: client::Isolation) -> i32 {
    match i {
        client::Isolation::Default => 0,
        client::Isolation::ReadCommitted => 1,
        client::Isolation::Snapshot => 2,
        client::Isolation::Serializable => 3,
    }
}

fn seconds(s: Option<f64>) -> PyResult<Option<Duration>> {
    s.filter(|s| *s > 0.0)
        .map(|s| Duration::try_from_secs_f64(s).map_err(|e| PyValueError::new_err(e.to_string())))
        .transpose()
}

/// A key range from the Python call's arguments.
fn key_range(
    start: Option<Vec<u8>>,
    end: Option<Vec<u8>>,
    prefix: Option<Vec<u8>>,
    reverse: bool,
    limit: u64,
) -> client::KeyRange {
    client::KeyRange { start, end, prefix, reverse, limit }
}

/// A connection to a server (`milliscale.Client` holds one).
#[pyclass(frozen, module = "milliscale._native")]
struct Connection {
    /// `None` once closed.
    open: RwLock<Option<Open>>,
    /// The bound on each call (`None`: none).
    timeout: Option<Duration>,
}

/// An open connection: the client and the runtime its calls run on. The
/// connection closes when the last of its calls ends: dropping the
/// runtime drops its tasks, and with them the socket.
#[derive(Clone)]
struct Open {
    rt: Arc<Runtime>,
    client: client::Client,
}

impl Connection {
    /// The open connection (a clone: a call does not hold the lock, so
    /// `close` never waits for one), or the error of a closed one.
    fn open(&self) -> PyResult<Open> {
        match &*self.open.read().unwrap_or_else(PoisonError::into_inner) {
            Some(o) => Ok(o.clone()),
            None => Err(CallError::new_err((
                client::Code::FailedPrecondition as i32,
                "the client is closed".to_owned(),
                "closed".to_owned(),
                false,
            ))),
        }
    }

    /// Run `f` to its end on `open`'s runtime, within `timeout` (or the
    /// connection's). It is polled once with the GIL held: a call that
    /// needs no round trip (a transaction's write, held back by the
    /// client) ends there, without giving up the GIL and taking it back,
    /// which with many threads costs a switch each way. Otherwise the GIL
    /// is released while the runtime drives it to its end.
    /// The timeout of a call of `t`: its begin's `wait` added to the
    /// connection's while it has not begun (the call begins it).
    fn first(&self, tx: &NativeTransaction, t: &client::Transaction) -> Option<Duration> {
        if t.id().is_some() { None } else { self.timeout.map(|x| x + tx.wait) }
    }

    fn run<T: Send>(
        &self,
        py: Python<'_>,
        open: &Open,
        timeout: Option<Duration>,
        f: impl Future<Output = client::Result<T>> + Send,
    ) -> PyResult<T> {
        let timeout = timeout.or(self.timeout);
        let call = async {
            match timeout {
                None => f.await.map_err(|e| call_error(&e)),
                Some(t) => match tokio::time::timeout(t, f).await {
                    Ok(r) => r.map_err(|e| call_error(&e)),
                    Err(_) => Err(deadline(t)),
                },
            }
        };
        let mut call = std::pin::pin!(call);
        let first = {
            let _runtime = open.rt.enter();
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            call.as_mut().poll(&mut cx)
        };
        match first {
            std::task::Poll::Ready(r) => r,
            std::task::Poll::Pending => py.allow_threads(|| open.rt.block_on(call)),
        }
    }
}

#[pymethods]
impl Connection {
    #[new]
    // The arguments of `milliscale.Client`, one for one.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (address, token=None, tls_ca=None, tls_domain=None, timeout=None, connect_timeout=10.0, max_message_bytes=16 << 20))]
    fn new(
        py: Python<'_>,
        address: String,
        token: Option<String>,
        tls_ca: Option<Vec<u8>>,
        tls_domain: Option<String>,
        timeout: Option<f64>,
        connect_timeout: f64,
        max_message_bytes: usize,
    ) -> PyResult<Connection> {
        let rt =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| {
                PyValueError::new_err(format!("cannot start the client's runtime: {e}"))
            })?;
        let mut b = client::Client::builder(address).max_message_bytes(max_message_bytes);
        if let Some(t) = token {
            b = b.token(t);
        }
        if let Some(ca) = tls_ca {
            b = b.tls(ca);
        }
        if let Some(d) = tls_domain {
            b = b.tls_domain(d);
        }
        if let Some(t) = seconds(Some(connect_timeout))? {
            b = b.connect_timeout(t);
        }
        let client = py.allow_threads(|| rt.block_on(b.connect())).map_err(|e| call_error(&e))?;
        let open = Open { rt: Arc::new(rt), client };
        Ok(Connection { open: RwLock::new(Some(open)), timeout: seconds(timeout)? })
    }

    /// Close the connection: later calls, and calls of the transactions
    /// begun on it, fail with `FAILED_PRECONDITION` (kind `closed`); calls
    /// under way finish. The connection itself closes when the last of
    /// them ends, and the server then aborts the transactions still open
    /// on it.
    fn close(&self) {
        self.open.write().unwrap_or_else(PoisonError::into_inner).take();
    }

    fn create_table(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let o = self.open()?;
        self.run(py, &o, None, o.client.create_table(name))
    }

    fn drop_table(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let o = self.open()?;
        self.run(py, &o, None, o.client.drop_table(name))
    }

    fn list_tables(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let o = self.open()?;
        self.run(py, &o, None, o.client.list_tables())
    }

    /// An interactive transaction, begun by its first call.
    #[pyo3(signature = (isolation, read_only, durable_snapshot, at_token, wait))]
    fn begin(
        &self,
        isolation: i32,
        read_only: bool,
        durable_snapshot: bool,
        at_token: Option<u64>,
        wait: f64,
    ) -> PyResult<NativeTransaction> {
        let wait = seconds(Some(wait))?.unwrap_or_default();
        let opts = client::TxnOptions {
            isolation: self::isolation(isolation)?,
            read_only: read_only || durable_snapshot,
            read_at: if durable_snapshot {
                client::ReadAt::Durable
            } else {
                client::ReadAt::Latest
            },
            at_token,
            wait,
        };
        let o = self.open()?;
        Ok(NativeTransaction {
            rt: o.rt.handle().clone(),
            wait,
            tx: Mutex::new(Some(o.client.transaction(opts))),
        })
    }

    /// Begin `tx` now if it has not begun (its snapshot taken here):
    /// `(id, snapshot, isolation)`.
    fn tx_begun(&self, py: Python<'_>, tx: &NativeTransaction) -> PyResult<(u64, u64, i32)> {
        let o = self.open()?;
        tx.with(|t| {
            self.run(py, &o, self.first(tx, t), t.begin_now())?;
            let begun = || PyValueError::new_err("a transaction begun without its answer");
            let (id, snapshot) = (t.id().ok_or_else(begun)?, t.snapshot().ok_or_else(begun)?);
            Ok((id, snapshot, isolation_number(t.isolation().ok_or_else(begun)?)))
        })
    }

    /// Run a batch: `ops` is a list of `(kind, table, key, value, limit,
    /// start, end, prefix, reverse)` tuples as `milliscale.Batch` builds
    /// them. Returns `(results, token, durable, attempts)`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (ops, isolation, wait_durable, retries, at_token, wait))]
    fn execute<'py>(
        &self,
        py: Python<'py>,
        ops: Vec<OpTuple>,
        isolation: i32,
        wait_durable: bool,
        retries: u32,
        at_token: Option<u64>,
        wait: f64,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let ops: Vec<Op> = ops.into_iter().map(Op::of).collect();
        let batch = batch_of(&ops)?;
        let wait = seconds(Some(wait))?.unwrap_or_default();
        let opts = client::TxnOptions {
            isolation: self::isolation(isolation)?,
            read_only: ops.iter().all(|o| matches!(o.kind.as_str(), "get" | "scan")),
            at_token,
            wait,
            ..client::TxnOptions::default()
        };
        let durability =
            if wait_durable { client::Durability::Wait } else { client::Durability::Precommit };
        let batch = batch.options(opts).durability(durability).retries(retries);
        let timeout = self.timeout.map(|t| t + wait);
        let o = self.open()?;
        let r = self.run(py, &o, timeout, o.client.execute(batch))?;
        let results = results_of(py, &ops, &r)?;
        (results, r.token, r.durable, r.attempts).into_pyobject(py)
    }

    /// Wait until `token` is durable (writer) or applied (replica).
    fn wait_for(&self, py: Python<'_>, token: u64, wait: f64) -> PyResult<u64> {
        let wait = seconds(Some(wait))?.unwrap_or_default();
        let timeout = Some(wait + Duration::from_secs(5));
        let o = self.open()?;
        self.run(py, &o, timeout, o.client.wait_for(token, wait))
    }

    /// The server's change feed after `after` (a CSN), of `tables` (none:
    /// all) and keys starting with `prefix`.
    #[pyo3(signature = (after, tables, prefix))]
    fn changes(
        &self,
        py: Python<'_>,
        after: Option<u64>,
        tables: Vec<String>,
        prefix: Option<Vec<u8>>,
    ) -> PyResult<changes::NativeChanges> {
        let o = self.open()?;
        let filter = client::ChangeFilter { tables, prefix };
        let feed = self.run(py, &o, None, o.client.changes(after, filter))?;
        let feed = Mutex::new(Some(changes::Feed::One(feed)));
        Ok(changes::NativeChanges { rt: Arc::clone(&o.rt), feed })
    }

    /// `(role, durable_token, open_transactions, version, cpu_seconds)`.
    fn status(&self, py: Python<'_>) -> PyResult<(String, u64, u32, String, f64)> {
        let o = self.open()?;
        let s = self.run(py, &o, None, o.client.status())?;
        Ok((s.role, s.durable_token, s.open_transactions, s.version, s.cpu_seconds))
    }

    /// Run a call of transaction `tx` on this connection. Keys and values
    /// are read from the caller's `bytes` in place (the client copies
    /// what it sends once).
    fn tx_get<'py>(
        &self,
        py: Python<'py>,
        tx: &NativeTransaction,
        table: &str,
        key: &[u8],
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let o = self.open()?;
        let v = tx.with(|t| self.run(py, &o, self.first(tx, t), t.get(table, key)))?;
        Ok(v.map(|v| PyBytes::new(py, &v)))
    }

    /// Several keys in one call: a value or `None` each.
    fn tx_get_many<'py>(
        &self,
        py: Python<'py>,
        tx: &NativeTransaction,
        table: &str,
        keys: Vec<Vec<u8>>,
    ) -> PyResult<Vec<Option<Bound<'py, PyBytes>>>> {
        let o = self.open()?;
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let v = tx.with(|t| self.run(py, &o, self.first(tx, t), t.get_many(table, &refs)))?;
        Ok(values(py, v))
    }

    /// Keys of several tables in one call, `(table, key)` each: a value
    /// or `None` each.
    fn tx_get_many_across<'py>(
        &self,
        py: Python<'py>,
        tx: &NativeTransaction,
        keys: Vec<(String, Vec<u8>)>,
    ) -> PyResult<Vec<Option<Bound<'py, PyBytes>>>> {
        let o = self.open()?;
        let refs: Vec<(&str, &[u8])> =
            keys.iter().map(|(t, k)| (t.as_str(), k.as_slice())).collect();
        let v = tx.with(|t| self.run(py, &o, self.first(tx, t), t.get_many_across(&refs)))?;
        Ok(values(py, v))
    }

    fn tx_put(
        &self,
        py: Python<'_>,
        tx: &NativeTransaction,
        table: &str,
        key: &[u8],
        value: &[u8],
    ) -> PyResult<()> {
        let o = self.open()?;
        tx.with(|t| self.run(py, &o, self.first(tx, t), t.put(table, key, value)))
    }

    fn tx_delete(
        &self,
        py: Python<'_>,
        tx: &NativeTransaction,
        table: &str,
        key: &[u8],
    ) -> PyResult<bool> {
        let o = self.open()?;
        tx.with(|t| self.run(py, &o, self.first(tx, t), t.delete(table, key)))
    }

    fn tx_patch(
        &self,
        py: Python<'_>,
        tx: &NativeTransaction,
        table: &str,
        key: &[u8],
        offset: u32,
        data: &[u8],
    ) -> PyResult<()> {
        let o = self.open()?;
        tx.with(|t| self.run(py, &o, self.first(tx, t), t.patch(table, key, offset, data)))
    }

    /// Send `tx`'s held writes and wait for them.
    fn tx_flush(&self, py: Python<'_>, tx: &NativeTransaction) -> PyResult<()> {
        let o = self.open()?;
        tx.with(|t| self.run(py, &o, self.first(tx, t), t.flush()))
    }

    /// The rows of a range, as `(key, value)` pairs.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (tx, table, start, end, prefix, reverse, limit))]
    fn tx_scan<'py>(
        &self,
        py: Python<'py>,
        tx: &NativeTransaction,
        table: &str,
        start: Option<Vec<u8>>,
        end: Option<Vec<u8>>,
        prefix: Option<Vec<u8>>,
        reverse: bool,
        limit: u64,
    ) -> PyResult<Bound<'py, PyList>> {
        let range = key_range(start, end, prefix, reverse, limit);
        let o = self.open()?;
        let rows = tx.with(|t| self.run(py, &o, self.first(tx, t), t.scan(table, range)))?;
        let out = PyList::empty(py);
        for (k, v) in rows {
            out.append((PyBytes::new(py, &k), PyBytes::new(py, &v)))?;
        }
        Ok(out)
    }

    /// Commit `tx`: `(token, durable)`.
    fn tx_commit(
        &self,
        py: Python<'_>,
        tx: &NativeTransaction,
        wait_durable: bool,
    ) -> PyResult<(Option<u64>, bool)> {
        let o = self.open()?;
        let t = tx.take()?;
        let d = if wait_durable { client::Durability::Wait } else { client::Durability::Precommit };
        let c = self.run(py, &o, self.first(tx, &t), t.commit_with(d))?;
        Ok((c.token, c.durable))
    }

    /// Abort `tx` (nothing if it has ended). After `close` it only
    /// forgets `tx`: the transaction ended with the connection.
    fn tx_abort(&self, py: Python<'_>, tx: &NativeTransaction) -> PyResult<()> {
        let t = tx.tx.lock().unwrap_or_else(PoisonError::into_inner).take();
        match (t, self.open()) {
            (Some(t), Ok(o)) => self.run(py, &o, None, t.abort()),
            _ => Ok(()),
        }
    }
}

/// One operation of a batch as `milliscale.Batch` passes it: `(kind,
/// table, key, value, limit, start, end, prefix, reverse)`.
/// The batch of `ops`, as `milliscale.Batch` built them.
pub(crate) fn batch_of(ops: &[Op]) -> PyResult<client::Batch> {
    let mut batch = client::Batch::new();
    for op in ops {
        match op.kind.as_str() {
            "get" => batch.get(&op.table, &op.key),
            "put" => batch.put(&op.table, &op.key, &op.value),
            "delete" => batch.delete(&op.table, &op.key),
            "patch" => batch.patch(&op.table, &op.key, op.limit as u32, &op.value),
            "scan" => batch.scan(&op.table, op.range()),
            other => return Err(PyValueError::new_err(format!("no operation {other:?}"))),
        };
    }
    Ok(batch)
}

/// What each of `ops` returned in `r`, for Python: a get's value, a
/// delete's `existed`, a scan's rows, `None` for the rest.
pub(crate) fn results_of<'py>(
    py: Python<'py>,
    ops: &[Op],
    r: &client::BatchResult,
) -> PyResult<Bound<'py, PyList>> {
    let results = PyList::empty(py);
    for (i, op) in ops.iter().enumerate() {
        match op.kind.as_str() {
            "get" => results.append(r.value(i).map(|v| PyBytes::new(py, v)))?,
            "delete" => results.append(r.existed(i))?,
            "scan" => {
                let rows = PyList::empty(py);
                for (k, v) in r.rows(i) {
                    rows.append((PyBytes::new(py, &k), PyBytes::new(py, &v)))?;
                }
                results.append(rows)?;
            }
            _ => results.append(py.None())?,
        }
    }
    Ok(results)
}

pub(crate) type OpTuple = (
    String,
    String,
    Vec<u8>,
    Vec<u8>,
    u64,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    bool,
);

/// One operation of a batch.
pub(crate) struct Op {
    kind: String,
    table: String,
    key: Vec<u8>,
    value: Vec<u8>,
    /// A scan's limit, or a patch's offset.
    limit: u64,
    start: Option<Vec<u8>>,
    end: Option<Vec<u8>>,
    prefix: Option<Vec<u8>>,
    reverse: bool,
}

impl Op {
    pub(crate) fn of((kind, table, key, value, limit, start, end, prefix, reverse): OpTuple) -> Op {
        Op { kind, table, key, value, limit, start, end, prefix, reverse }
    }

    fn range(&self) -> client::KeyRange {
        key_range(
            self.start.clone(),
            self.end.clone(),
            self.prefix.clone(),
            self.reverse,
            self.limit,
        )
    }
}

/// An interactive transaction held on the server; its calls go through
/// the `Connection` that began it.
#[pyclass(frozen, module = "milliscale._native")]
struct NativeTransaction {
    /// How long its begin may wait (a replica catching up to `at_token`):
    /// added to its first call's timeout.
    wait: Duration,
    /// `None` once committed or aborted.
    tx: Mutex<Option<client::Transaction>>,
    /// The connection's runtime.
    rt: tokio::runtime::Handle,
}

/// A transaction dropped unfinished (not used as a context manager, and
/// neither committed nor aborted) is aborted: the Rust client's
/// transaction sends the abort from the runtime it is dropped in, here
/// the connection's, which sends it with the connection's next call (if
/// none comes, the server aborts it when the connection closes, or at its
/// idle timeout).
impl Drop for NativeTransaction {
    fn drop(&mut self) {
        let _in = self.rt.enter();
        self.tx.get_mut().unwrap_or_else(PoisonError::into_inner).take();
    }
}

impl NativeTransaction {
    fn with<T>(&self, f: impl FnOnce(&mut client::Transaction) -> PyResult<T>) -> PyResult<T> {
        let mut g = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        match g.as_mut() {
            Some(t) => f(t),
            None => Err(ended()),
        }
    }

    fn take(&self) -> PyResult<client::Transaction> {
        self.tx.lock().unwrap_or_else(PoisonError::into_inner).take().ok_or_else(ended)
    }
}

/// Values read (a `get_many`'s), as Python `bytes` or `None`.
fn values(py: Python<'_>, v: Vec<Option<Vec<u8>>>) -> Vec<Option<Bound<'_, PyBytes>>> {
    v.into_iter().map(|v| v.map(|v| PyBytes::new(py, &v))).collect()
}

fn ended() -> PyErr {
    let message = "the transaction has ended (committed or aborted)".to_owned();
    CallError::new_err((
        client::Code::FailedPrecondition as i32,
        message,
        "ended".to_owned(),
        false,
    ))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Connection>()?;
    m.add_class::<NativeTransaction>()?;
    m.add_class::<changes::NativeChanges>()?;
    m.add_class::<cluster::ClusterConnection>()?;
    m.add_class::<cluster::NativeClusterTransaction>()?;
    m.add("CallError", m.py().get_type::<CallError>())?;
    Ok(())
}
