"""The client of a cluster of ``milliscale serve --cluster`` shards: one
database over many servers, its transactions serializable across them.
The client coordinates each transaction (MILANA): reads go to the keys'
shards at the transaction's begin timestamp, writes stay here until the
commit, which prepares on every shard touched and commits on all of them
or none. See ``python/README.md``."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence, TypeVar, Union

from milliscale import _native
from milliscale.changes import ClusterChangedTransaction, ResolvedTs, iterate_cluster
from milliscale.client import Batch, BatchResult, Bytes, Commit, Isolation, _b, _native_call, _opt, _retrying
from milliscale.errors import (
    InvalidArgumentError,
    MilliscaleError,
    StatusCode,
    UnavailableError,
    from_call_error,
)

T = TypeVar("T")


def _serializable(isolation: Isolation) -> None:
    """A cluster's transactions are SERIALIZABLE; another level is refused."""
    if isolation not in (Isolation.DEFAULT, Isolation.SERIALIZABLE):
        raise InvalidArgumentError(
            f"a cluster's transactions are SERIALIZABLE; {Isolation(isolation).name} is not offered",
            StatusCode.INVALID_ARGUMENT,
            "invalid_input",
            False,
        )


@dataclass(frozen=True)
class StandbyHealth:
    """A shard's hot standby as the shard last heard from it."""

    address: str
    #: Every token below this was applied at its last check.
    applied_token: int
    #: The shard's durable token less that: how far it trails.
    behind: int
    #: Milliseconds since its last check (it checks every 100 ms).
    last_seen_ms: int


@dataclass(frozen=True)
class ShardStatus:
    """One shard's state (:meth:`Cluster.shards`); the numbers are ``None``
    when the shard did not answer, and ``error`` says why."""

    shard: int
    address: str
    error: Optional[str]
    #: Multi-shard transactions prepared there and not yet decided.
    prepared: Optional[int]
    #: Decided transactions it still remembers.
    remembered: Optional[int]
    #: Committed versions it holds.
    versions: Optional[int]
    #: Its server process's CPU time so far, in seconds.
    cpu_seconds: Optional[float]
    #: Its log's write requests to its stores a second, since it opened.
    log_requests_per_s: Optional[float] = None
    #: The same in dollars an hour at its stores' prices (``None`` without one).
    log_usd_per_hour: Optional[float] = None
    #: Its standbys that checked on it in the last ten minutes.
    standbys: tuple[StandbyHealth, ...] = ()


class ClusterTransaction:
    """A transaction on a cluster. Reads are calls to the keys' shards;
    writes are kept here until :meth:`commit`. Use it as a context manager:
    it commits when the block ends normally and aborts when it raises
    (an abort sends nothing: nothing was written yet)."""

    def __init__(self, cluster: "Cluster", native, read_only: bool):
        self._cluster = cluster
        self._native = native
        #: The begin timestamp (µs of the client's hybrid clock).
        self.begin_ts: int = native.begin_ts
        self.isolation = Isolation.SERIALIZABLE
        self.read_only = read_only
        #: After a commit, what it returned: the commit timestamp as its
        #: token (``None`` if it wrote nothing), durable.
        self.commit_info: Optional[Commit] = None
        self._finished = False

    def _writes(self, what: str) -> None:
        if self.read_only:
            raise MilliscaleError(
                f"{what} writes, and the transaction is read-only",
                StatusCode.FAILED_PRECONDITION,
                "read_only",
                False,
            )

    def _call(self, method: str, *args):
        return _native_call(getattr(self._cluster._conn, method), self._native, *args)

    def get(self, table: str, key: Bytes) -> Optional[bytes]:
        """The value of ``key`` at the transaction's timestamp, or ``None``."""
        return self._call("tx_get", table, _b(key))

    def get_many(self, table: str, keys: Sequence[Bytes]) -> list[Optional[bytes]]:
        """The values of ``keys`` (``None`` where there is none), in their
        order: one call for each shard holding any of them, the shards at
        once. Each is a read as :meth:`get`'s, validated at commit."""
        return self._call("tx_get_many", table, [_b(k) for k in keys])

    def put(self, table: str, key: Bytes, value: Bytes) -> None:
        """Write ``value`` under ``key`` (at commit)."""
        self._writes("put")
        self._call("tx_put", table, _b(key), _b(value))

    def patch(self, table: str, key: Bytes, offset: int, data: Bytes) -> None:
        """Overwrite ``len(data)`` bytes of ``key``'s value at ``offset``
        (at commit): a read of the value, validated at commit, then a write
        of the whole new value. Raises if the key has no value or the range
        passes its end."""
        self._writes("patch")
        self._call("tx_patch", table, _b(key), offset, _b(data))

    def delete(self, table: str, key: Bytes) -> bool:
        """Delete ``key`` (at commit); whether it had a value."""
        self._writes("delete")
        return self._call("tx_delete", table, _b(key))

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
        """The rows with ``start <= key < end`` (or starting with ``prefix``)
        at the transaction's timestamp, at most ``limit`` (0: all), across
        the shards that hold them. The commit checks that nothing in the
        range changed or appeared since (no phantom). A reverse scan reads
        the whole range, then reverses it."""
        rows = self._call("tx_scan", table, _opt(start), _opt(end), _opt(prefix), reverse, limit)
        return iter(rows)

    def shards(self) -> list[int]:
        """The shards it touched so far (its participants if it commits now)."""
        return self._call("tx_shards")

    def commit(self) -> Commit:
        """Commit; durable on return. The :class:`Commit`'s token is the
        commit timestamp (the version of its writes on every shard), or
        ``None`` if it wrote nothing. A :class:`ConflictError` means nothing
        of it committed (run it again); an :class:`UnavailableError` of
        kind ``unknown`` means a shard's vote did not come back and the
        shards settle it: do not assume either outcome."""
        self._finished = True
        self.commit_info = Commit(self._call("tx_commit"), True)
        return self.commit_info

    def abort(self) -> None:
        """Abort (nothing was sent to the shards to undo)."""
        self._finished = True
        self._cluster._conn.tx_abort(self._native)

    def __enter__(self) -> "ClusterTransaction":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._finished:
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()


class Cluster:
    """A cluster of ``milliscale serve --cluster`` shards, opened through any
    shard's ``address`` (``host:port``), which gives the shard map.

    ``token``, ``tls_ca`` and ``tls_domain`` are as for :class:`Client`, for
    every shard. ``client_id`` names this client's transactions: two
    clients running at once must not share one (default: a random one).
    ``timeout`` bounds each call, in seconds. The constructor waits up to
    ``connect_timeout`` seconds for the shard to answer. Thread-safe.
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
        client_id: Optional[int] = None,
    ):
        deadline = time.monotonic() + connect_timeout
        pause = 0.05
        while True:
            try:
                self._conn = _native.ClusterConnection(
                    address, token, tls_ca, tls_domain, timeout, client_id
                )
                break
            except _native.CallError as e:
                # Only a shard not answering yet is waited for; a refusal
                # (a token, a bad address) is raised at once.
                if e.args[0] != StatusCode.UNAVAILABLE:
                    raise from_call_error(*e.args) from None
                if time.monotonic() + pause > deadline:
                    raise UnavailableError(
                        f"cannot open the cluster through {address} within {connect_timeout} s: {e.args[1]}",
                        StatusCode.UNAVAILABLE,
                        "client",
                        False,
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.5)

    @property
    def client_id(self) -> int:
        """This client's id."""
        return self._conn.client_id

    def close(self) -> None:
        """Close: later calls raise :class:`MilliscaleError` (kind ``closed``).

        The shards are told this client left, so that it stops holding
        back the old versions and decisions they collect (a client that
        just goes away holds them for the shards' client silence, 10 s).
        """
        self._conn.close()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # Tables: one call to every shard.

    def create_table(self, name: str) -> None:
        """Create a table on every shard (its keys may live on any)."""
        _native_call(self._conn.create_table, name)

    def drop_table(self, name: str) -> None:
        """Drop a table and its rows on every shard."""
        _native_call(self._conn.drop_table, name)

    def list_tables(self) -> list[str]:
        """The tables' names, sorted."""
        return _native_call(self._conn.list_tables)

    # Transactions.

    def transaction(self, isolation: Isolation = Isolation.DEFAULT, *, read_only: bool = False) -> ClusterTransaction:
        """Begin a transaction (SERIALIZABLE; another isolation level is
        refused with :class:`InvalidArgumentError`). ``read_only`` refuses
        writes; a read-only transaction is validated here, with no call at
        commit. A single server's ``durable_snapshot`` and ``at_token`` are
        not offered (a cluster's reads are at the transaction's timestamp,
        and everything they see is durable)."""
        _serializable(isolation)
        return ClusterTransaction(self, _native_call(self._conn.begin), read_only)

    def run(
        self,
        fn: Callable[[ClusterTransaction], T],
        isolation: Isolation = Isolation.DEFAULT,
        *,
        attempts: int = 16,
        read_only: bool = False,
    ) -> T:
        """Run ``fn(tx)`` in a transaction and commit it; on a retryable
        error (a conflict, a shard that moved or did not answer before
        anything was prepared), run it again, up to ``attempts`` times,
        pausing a random, doubling while between runs. Returns what ``fn``
        returned."""
        _serializable(isolation)
        return _retrying(lambda: self.transaction(isolation, read_only=read_only), fn, attempts)

    def execute(
        self,
        batch: Batch,
        isolation: Isolation = Isolation.DEFAULT,
        *,
        wait_durable: bool = True,
        retries: int = 8,
    ) -> BatchResult:
        """Run a batch's operations in order as one transaction, again up to
        ``retries`` more times on a retryable error. A batch whose keys all
        live on one shard is one call: the shard runs it whole. Any other
        runs at the client, one call per shard read, then the two-phase
        commit. The result's token is the commit timestamp (``None`` if
        nothing was written); it is durable on return (``wait_durable`` is
        accepted for :class:`Client`'s sake). A scan needs a limit of 1 to
        10,000 rows."""
        _serializable(isolation)
        for kind, _table, _key, _value, limit, *_rest in batch._ops:
            if kind == "scan" and limit == 0:
                raise InvalidArgumentError(
                    "a batch's scan needs a limit above 0",
                    StatusCode.INVALID_ARGUMENT,
                    "invalid_input",
                    False,
                )
        results, token, durable, attempts = _native_call(self._conn.execute, batch._ops, False, retries)
        return BatchResult(results, token, durable, attempts)

    def get(self, table: str, key: Bytes) -> Optional[bytes]:
        """Read ``key`` (a read-only transaction of its own)."""
        return self.run(lambda tx: tx.get(table, key), read_only=True)

    def put(self, table: str, key: Bytes, value: Bytes) -> int:
        """Write ``key`` in a transaction of its own; returns its commit
        timestamp, once durable."""
        token = self.execute(Batch().put(table, key, value)).token
        assert token is not None
        return token

    def delete(self, table: str, key: Bytes) -> bool:
        """Delete ``key`` in a transaction of its own; whether it had a value."""
        return self.run(lambda tx: tx.delete(table, key))

    def scan(self, table: str, start=None, end=None, *, prefix=None, reverse=False, limit=0) -> list[tuple[bytes, bytes]]:
        """The rows of a range, read in a read-only transaction of its own."""
        return self.run(
            lambda tx: list(tx.scan(table, start, end, prefix=prefix, reverse=reverse, limit=limit)),
            read_only=True,
        )

    def changes(
        self,
        table: Optional[str] = None,
        *,
        tables: Sequence[str] = (),
        prefix: Optional[Bytes] = None,
        after: Optional[int] = None,
        resolved: bool = False,
        until: Optional[int] = None,
    ) -> Iterator[Union[ClusterChangedTransaction, ResolvedTs]]:
        """The cluster's change feed, merged by commit timestamp from every
        shard's log and run by the shard this cluster was opened through:
        each committed transaction with a timestamp above ``after`` (the
        last resolved timestamp handled; ``None``: from now) as a
        :class:`ClusterChangedTransaction`, whole (its writes on every
        shard), once, in timestamp order, each write as the row's whole new
        value (``None``: deleted). Only ``table`` (or ``tables``) and keys
        starting with ``prefix``, if given. With ``resolved``, also
        :class:`ResolvedTs` points (nothing at or below will come). It runs
        until the shard ends it or, with ``until``, once a resolved
        timestamp reaches it. Save the resolved timestamp as the cursor:
        a transaction's own ``ts`` is not one (another at the same or a
        lower timestamp on another shard may still come). A cursor older
        than a shard's retention window raises :class:`InvalidArgumentError`
        naming the shard."""
        names = list(tables) + ([table] if table is not None else [])
        native = _native_call(
            self._conn.changes, after, names, None if prefix is None else _b(prefix)
        )
        return iterate_cluster(native, resolved, until)

    def shards(self) -> list[ShardStatus]:
        """Every shard's state, asked now."""
        return [
            ShardStatus(*s[:-1], standbys=tuple(StandbyHealth(*h) for h in s[-1]))
            for s in _native_call(self._conn.status)
        ]


__all__: Sequence[str] = ["Cluster", "ClusterTransaction", "ShardStatus", "StandbyHealth"]
