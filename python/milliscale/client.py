"""The client of a ``milliscale serve`` server: the Rust client
(``milliscale-client``) through its native module, ``milliscale._native``."""

from __future__ import annotations

import enum
import random
import time
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterator, Optional, Sequence, TypeVar, Union

from milliscale import _native
from milliscale.changes import ChangedTransaction, Resolved, iterate
from milliscale.errors import MilliscaleError, StatusCode, UnavailableError, from_call_error

Bytes = Union[bytes, bytearray, memoryview, str]
T = TypeVar("T")

#: The largest message the client accepts (the server's default limit).
MAX_MESSAGE_BYTES = 16 << 20


def _b(x: Bytes) -> bytes:
    """Keys and values are bytes; a str is encoded as UTF-8."""
    if isinstance(x, str):
        return x.encode("utf-8")
    return bytes(x)


class Isolation(enum.IntEnum):
    """A transaction's isolation level."""

    #: The server's default (snapshot isolation unless configured).
    DEFAULT = 0
    #: Each read sees the latest committed version.
    READ_COMMITTED = 1
    #: Reads see the snapshot taken when the transaction begins (its first
    #: call); the first updater wins.
    SNAPSHOT = 2
    #: Snapshot isolation plus read validation at commit.
    SERIALIZABLE = 3


def _native_call(fn, *args):
    """Call the native module, its failures as this package's errors."""
    try:
        return fn(*args)
    except _native.CallError as e:
        raise from_call_error(*e.args) from None


@dataclass(frozen=True)
class Commit:
    """A committed transaction."""

    #: The commit's CSN: wait for it with :meth:`Client.wait_for`, or read
    #: your writes on a replica with ``at_token``. ``None`` if nothing was
    #: written.
    token: Optional[int]
    #: True if the commit was durable when the server answered.
    durable: bool


@dataclass(frozen=True)
class Status:
    """The server's role and progress."""

    role: str
    durable_token: int
    open_transactions: int
    version: str
    #: The server process's CPU time so far, in seconds.
    cpu_seconds: float


def _retrying(begin: Callable[[], ContextManager], fn: Callable, attempts: int):
    """Run ``fn(tx)`` in the transaction ``begin()`` gives (a context
    manager that commits at its end); on a retryable error run it again in
    a new one, up to ``attempts`` times, pausing a random, doubling while
    (1 ms doubling to 100 ms) between runs. What ``fn`` returned."""
    pause = 0.001
    for n in range(1, attempts + 1):
        try:
            with begin() as tx:
                return fn(tx)
        except MilliscaleError as e:
            if not e.retryable or n == attempts:
                raise
        time.sleep(random.uniform(0, pause))
        pause = min(pause * 2, 0.1)
    raise AssertionError("unreachable")


def _opt(x: Optional[Bytes]) -> Optional[bytes]:
    return None if x is None else _b(x)


class Transaction:
    """An interactive transaction held on the server.

    Use it as a context manager: it commits when the block ends normally
    and aborts when the block raises. Writes (``put``, ``patch``) do not
    wait: they travel with the transaction's next read or its commit, in
    one message, and a write's error (a conflict, a missing table) is
    raised by that next call; :meth:`flush` sends them at once. Reads wait
    for their answer; :meth:`get_many` reads several keys in one round
    trip. A transaction dropped unfinished is aborted with the client's next call
    (if none comes, by the server when the client closes, or at its idle
    timeout); until then it holds its writes' keys.

    The transaction begins on the server with its first call, in the same
    message, and takes its snapshot there, as a PostgreSQL or MySQL
    transaction takes its own at its first statement: creating one costs no
    round trip. Asking for its :attr:`id`, :attr:`snapshot` or
    :attr:`isolation` begins it at once (one round trip if nothing else has).
    A failure to begin (too many open transactions, a replica behind
    ``at_token``) is raised by its first call.
    """

    def __init__(self, client: "Client", native):
        self._client = client
        self._native = native
        self._begun: Optional[tuple[int, int, int]] = None
        #: After a commit, what it returned.
        self.commit_info: Optional[Commit] = None
        self._finished = False

    def _call(self, method: str, *args):
        return _native_call(getattr(self._client._conn, method), self._native, *args)

    def _begin(self) -> tuple[int, int, int]:
        if self._begun is None:
            self._begun = self._call("tx_begun")
        return self._begun

    @property
    def id(self) -> int:
        """Its id on the server (begins it, if it has not begun)."""
        return self._begin()[0]

    @property
    def snapshot(self) -> int:
        """The snapshot: commits with a smaller CSN are visible (begins it,
        if it has not begun: the snapshot is taken then)."""
        return self._begin()[1]

    @property
    def isolation(self) -> Isolation:
        """Its isolation level, as the server chose it (begins it, if it
        has not begun)."""
        return Isolation(self._begin()[2])

    def get(self, table: str, key: Bytes) -> Optional[bytes]:
        """The value of ``key``, or ``None`` if it has none."""
        return self._call("tx_get", table, _b(key))

    def get_many(self, table: str, keys: Sequence[Bytes]) -> list[Optional[bytes]]:
        """The values of ``keys`` (``None`` for a key without one), in one
        round trip."""
        return self._call("tx_get_many", table, [_b(k) for k in keys])

    def get_many_across(self, keys: Sequence[tuple[str, Bytes]]) -> list[Optional[bytes]]:
        """The values of keys in several tables, each ``(table, key)``
        (``None`` for a key without one), in one round trip."""
        return self._call("tx_get_many_across", [(t, _b(k)) for t, k in keys])

    def put(self, table: str, key: Bytes, value: Bytes) -> None:
        """Write ``value`` under ``key`` (sent with the next call)."""
        self._call("tx_put", table, _b(key), _b(value))

    def flush(self) -> None:
        """Send the writes held back now, and raise the error of one that
        failed."""
        self._call("tx_flush")

    def delete(self, table: str, key: Bytes) -> bool:
        """Delete ``key``; whether it had a value."""
        return self._call("tx_delete", table, _b(key))

    def patch(self, table: str, key: Bytes, offset: int, data: Bytes) -> None:
        """Overwrite bytes of ``key``'s value at ``offset`` (logged as a
        delta; sent with the next call, as a put is)."""
        self._call("tx_patch", table, _b(key), offset, _b(data))

    def scan(
        self,
        table: str,
        start: Optional[Bytes] = None,
        end: Optional[Bytes] = None,
        *,
        prefix: Optional[Bytes] = None,
        reverse: bool = False,
        limit: int = 0,
    ) -> Iterator[tuple[bytes, bytes]]:
        """The rows with ``start <= key < end`` (or starting with ``prefix``),
        at most ``limit`` (0: all). The server streams them in batches; the
        client collects them before the first is yielded."""
        rows = self._call("tx_scan", table, _opt(start), _opt(end), _opt(prefix), reverse, limit)
        return iter(rows)

    def commit(self, wait_durable: bool = True) -> Commit:
        """Commit. With ``wait_durable`` (the default) the answer comes once
        the commit is durable; without, once it is visible, and
        :meth:`Client.wait_for` waits for its token."""
        self._finished = True
        token, durable = self._call("tx_commit", wait_durable)
        self.commit_info = Commit(token, durable)
        return self.commit_info

    def abort(self) -> None:
        """Abort: undo every write (nothing if the transaction has ended)."""
        self._finished = True
        self._call("tx_abort")

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._finished:
            return
        if exc_type is None:
            self.commit()
        else:
            try:
                self.abort()
            except MilliscaleError:
                pass  # the transaction may already be gone (expired, server down)


class Batch:
    """A one-shot transaction: operations run in order, then commit, in one
    round trip (:meth:`Client.execute`)."""

    def __init__(self) -> None:
        # (kind, table, key, value, limit or offset, start, end, prefix,
        # reverse), as the native module takes them.
        self._ops: list[tuple] = []

    def _op(self, kind: str, table: str, key=b"", value=b"", limit=0, start=None, end=None, prefix=None, reverse=False) -> "Batch":
        self._ops.append((kind, table, key, value, limit, start, end, prefix, reverse))
        return self

    def get(self, table: str, key: Bytes) -> "Batch":
        """Read ``key``."""
        return self._op("get", table, _b(key))

    def put(self, table: str, key: Bytes, value: Bytes) -> "Batch":
        """Write ``value`` under ``key``."""
        return self._op("put", table, _b(key), _b(value))

    def delete(self, table: str, key: Bytes) -> "Batch":
        """Delete ``key``."""
        return self._op("delete", table, _b(key))

    def patch(self, table: str, key: Bytes, offset: int, data: Bytes) -> "Batch":
        """Overwrite bytes of ``key``'s value at ``offset``."""
        return self._op("patch", table, _b(key), _b(data), offset)

    def scan(self, table: str, *, limit: int, start=None, end=None, prefix=None, reverse=False) -> "Batch":
        """Read at most ``limit`` rows (at most 10,000)."""
        return self._op("scan", table, b"", b"", limit, _opt(start), _opt(end), _opt(prefix), reverse)

    def __len__(self) -> int:
        return len(self._ops)


@dataclass(frozen=True)
class BatchResult:
    """What a batch returned: one entry per operation (the value of a get,
    whether a delete found a value, the rows of a scan, ``None`` for a put)."""

    results: list
    token: Optional[int]
    durable: bool
    attempts: int


class Client:
    """A connection to a ``milliscale serve`` server.

    ``address`` is ``host:port``. ``token`` is the bearer token, if the
    server wants one. ``tls_ca`` (PEM bytes) makes the connection TLS,
    trusting that authority; the server's certificate must carry the
    address's host, or ``tls_domain`` if given. ``timeout`` bounds each call, in seconds. The constructor
    waits up to ``connect_timeout`` seconds for the server to answer (a
    server that is still starting), then raises :class:`UnavailableError`.
    Thread-safe: threads may share one client.
    """

    def __init__(
        self,
        address: str,
        token: Optional[str] = None,
        *,
        tls_ca: Optional[bytes] = None,
        tls_domain: Optional[str] = None,
        timeout: Optional[float] = 30.0,
        connect_timeout: float = 10.0,
    ):
        deadline = time.monotonic() + connect_timeout
        pause = 0.05
        while True:
            try:
                self._conn = _native.Connection(
                    address,
                    token,
                    tls_ca,
                    tls_domain,
                    timeout,
                    max(0.1, deadline - time.monotonic()),
                    MAX_MESSAGE_BYTES,
                )
                break
            except _native.CallError as e:
                # A server that is still starting: try again until the
                # deadline.
                if time.monotonic() + pause > deadline:
                    raise UnavailableError(
                        f"cannot connect to {address} within {connect_timeout} s: {e.args[1]}",
                        StatusCode.UNAVAILABLE,
                        "client",
                        False,
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.5)

    def close(self) -> None:
        """Close the connection. Later calls raise :class:`MilliscaleError`
        (``FAILED_PRECONDITION``, kind ``closed``), as do those of the
        transactions begun on it (``abort`` does nothing); calls under way
        finish. The server aborts the transactions left open on it when the
        connection closes."""
        self._conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # Tables.

    def create_table(self, name: str) -> None:
        """Create a table (durable on return)."""
        _native_call(self._conn.create_table, name)

    def drop_table(self, name: str) -> None:
        """Drop a table (durable on return)."""
        _native_call(self._conn.drop_table, name)

    def list_tables(self) -> list[str]:
        """The tables' names, in creation order."""
        return _native_call(self._conn.list_tables)

    # Transactions.

    def transaction(
        self,
        isolation: Isolation = Isolation.DEFAULT,
        *,
        read_only: bool = False,
        durable_snapshot: bool = False,
        at_token: Optional[int] = None,
        wait: float = 0.0,
    ) -> Transaction:
        """An interactive transaction; use it in a ``with`` block. It begins
        with its first call (see :class:`Transaction`).

        ``read_only`` refuses writes (required on a replica and with a
        read-only token). ``durable_snapshot`` reads only durable commits
        (writer only). ``at_token`` sees that commit and all before it: a
        replica waits up to ``wait`` seconds (0: the server's default)
        for it, then raises :class:`StaleError`.
        """
        native = _native_call(
            self._conn.begin, int(isolation), read_only, durable_snapshot, at_token, wait
        )
        return Transaction(self, native)

    def run(
        self,
        fn: Callable[[Transaction], T],
        isolation: Isolation = Isolation.DEFAULT,
        *,
        attempts: int = 16,
        read_only: bool = False,
    ) -> T:
        """Run ``fn(tx)`` in a transaction and commit it; when the
        transaction fails with a retryable error (a conflict, an expired or
        crowded-out transaction), run it again in a new one, up to
        ``attempts`` times, pausing a random, doubling while between runs.
        Returns what ``fn`` returned."""
        return _retrying(lambda: self.transaction(isolation, read_only=read_only), fn, attempts)

    def execute(
        self,
        batch: Batch,
        isolation: Isolation = Isolation.DEFAULT,
        *,
        wait_durable: bool = True,
        retries: int = 8,
        at_token: Optional[int] = None,
        wait: float = 0.0,
    ) -> BatchResult:
        """Run a batch as one transaction in one round trip; the server runs
        it again, up to ``retries`` more times, when it conflicts."""
        results, token, durable, attempts = _native_call(
            self._conn.execute, batch._ops, int(isolation), wait_durable, retries, at_token, wait
        )
        return BatchResult(results, token, durable, attempts)

    def get(self, table: str, key: Bytes, *, at_token: Optional[int] = None) -> Optional[bytes]:
        """Read ``key`` (a one-shot read)."""
        return self.execute(Batch().get(table, key), at_token=at_token).results[0]

    def put(self, table: str, key: Bytes, value: Bytes) -> int:
        """Write ``key`` in a transaction of its own; returns the token, once durable."""
        token = self.execute(Batch().put(table, key, value)).token
        assert token is not None
        return token

    def delete(self, table: str, key: Bytes) -> bool:
        """Delete ``key`` in a transaction of its own; whether it had a value."""
        return bool(self.execute(Batch().delete(table, key)).results[0])

    def scan(self, table: str, start=None, end=None, *, prefix=None, reverse=False, limit=0) -> list[tuple[bytes, bytes]]:
        """The rows of a range, read in one read-only transaction."""
        with self.transaction(read_only=True) as tx:
            return list(tx.scan(table, start, end, prefix=prefix, reverse=reverse, limit=limit))

    def wait_for(self, token: int, timeout: float = 5.0) -> int:
        """Wait until ``token`` is durable (writer) or applied (replica);
        what the server reached. Raises :class:`DeadlineError` past ``timeout``."""
        return _native_call(self._conn.wait_for, token, timeout)

    def status(self) -> Status:
        """The server's role and progress."""
        return Status(*_native_call(self._conn.status))

    def changes(
        self,
        table: Optional[str] = None,
        *,
        tables: Sequence[str] = (),
        prefix: Optional[Bytes] = None,
        after: Optional[int] = None,
        resolved: bool = False,
        until: Optional[int] = None,
    ) -> Iterator[Union[ChangedTransaction, Resolved]]:
        """The server's change feed: each committed transaction with a CSN
        above ``after`` (the last one handled; ``None``: from the newest
        checkpoint) as a :class:`ChangedTransaction`, whole, in CSN order,
        each write as the row's whole new value (``None``: deleted). Only
        ``table`` (or ``tables``) and keys starting with ``prefix``, if
        given. With ``resolved``, also :class:`Resolved` points (every
        transaction below was delivered). It runs until the server ends it
        or, with ``until``, once every transaction up to that CSN has been
        delivered. A cursor below the server's retention window
        (without one, its newest checkpoint) raises
        :class:`InvalidArgumentError` (kind ``cursor``) naming the oldest."""
        names = list(tables) + ([table] if table is not None else [])
        native = _native_call(
            self._conn.changes, after, names, None if prefix is None else _b(prefix)
        )
        return iterate(native, resolved, until)


__all__: Sequence[str] = [
    "Batch",
    "BatchResult",
    "Client",
    "Commit",
    "Isolation",
    "Status",
    "Transaction",
]
