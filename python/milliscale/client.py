"""The client of a ``milliscale serve`` server, over the generated gRPC stubs."""

from __future__ import annotations

import enum
import random
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence, TypeVar, Union

import grpc

from milliscale.errors import MilliscaleError, UnavailableError, from_rpc_error
from milliscale.v1 import milliscale_pb2 as pb
from milliscale.v1 import milliscale_pb2_grpc as pb_grpc

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
    DEFAULT = pb.ISOLATION_UNSPECIFIED
    #: Each read sees the latest committed version.
    READ_COMMITTED = pb.ISOLATION_READ_COMMITTED
    #: Reads see the snapshot taken at begin; the first updater wins.
    SNAPSHOT = pb.ISOLATION_SNAPSHOT
    #: Snapshot isolation plus read validation at commit.
    SERIALIZABLE = pb.ISOLATION_SERIALIZABLE


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


def _range(
    start: Optional[Bytes], end: Optional[Bytes], prefix: Optional[Bytes], reverse: bool, limit: int
) -> pb.KeyRange:
    r = pb.KeyRange(reverse=reverse, limit=limit)
    if start is not None:
        r.start = _b(start)
    if end is not None:
        r.end = _b(end)
    if prefix is not None:
        r.prefix = _b(prefix)
    return r


class Transaction:
    """An interactive transaction held on the server.

    Use it as a context manager: it commits when the block ends normally
    and aborts when the block raises. Every call is one round trip.
    """

    def __init__(self, client: "Client", txn_id: int, snapshot: int, isolation: Isolation):
        self._client = client
        self.id = txn_id
        #: The snapshot: commits with a smaller CSN are visible.
        self.snapshot = snapshot
        self.isolation = isolation
        #: After a commit, what it returned.
        self.commit_info: Optional[Commit] = None
        self._finished = False

    def get(self, table: str, key: Bytes) -> Optional[bytes]:
        """The value of ``key``, or ``None`` if it has none."""
        r = self._client._call("Get", pb.GetRequest(txn_id=self.id, table=table, key=_b(key)))
        return r.value if r.HasField("value") else None

    def put(self, table: str, key: Bytes, value: Bytes) -> None:
        """Write ``value`` under ``key``."""
        req = pb.PutRequest(txn_id=self.id, table=table, key=_b(key), value=_b(value))
        self._client._call("Put", req)

    def delete(self, table: str, key: Bytes) -> bool:
        """Delete ``key``; whether it had a value."""
        req = pb.DeleteRequest(txn_id=self.id, table=table, key=_b(key))
        return self._client._call("Delete", req).existed

    def patch(self, table: str, key: Bytes, offset: int, data: Bytes) -> None:
        """Overwrite bytes of ``key``'s value at ``offset`` (logged as a delta)."""
        req = pb.PatchRequest(txn_id=self.id, table=table, key=_b(key), offset=offset, bytes=_b(data))
        self._client._call("Patch", req)

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
        streamed from the server in batches; at most ``limit`` (0: all)."""
        req = pb.ScanRequest(
            txn_id=self.id, table=table, range=_range(start, end, prefix, reverse, limit)
        )
        try:
            for batch in self._client._stub.Scan(req, metadata=self._client._metadata):
                for row in batch.rows:
                    yield row.key, row.value
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def commit(self, wait_durable: bool = True) -> Commit:
        """Commit. With ``wait_durable`` (the default) the answer comes once
        the commit is durable; without, once it is visible, and
        :meth:`Client.wait_for` waits for its token."""
        self._finished = True
        d = pb.DURABILITY_WAIT if wait_durable else pb.DURABILITY_PRECOMMIT
        r = self._client._call("Commit", pb.CommitRequest(txn_id=self.id, durability=d))
        self.commit_info = Commit(r.token if r.HasField("token") else None, r.durable)
        return self.commit_info

    def abort(self) -> None:
        """Abort: undo every write."""
        if self._finished:
            return
        self._finished = True
        self._client._call("Abort", pb.AbortRequest(txn_id=self.id))

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
        self._ops: list[pb.Operation] = []
        # The first operation's table, named once in the request; the
        # operations on it leave their own table empty.
        self._table = ""

    def _op(self, table: str, **op) -> "Batch":
        if not self._ops:
            self._table = table
        self._ops.append(pb.Operation(table="" if table == self._table else table, **op))
        return self

    def get(self, table: str, key: Bytes) -> "Batch":
        """Read ``key``."""
        return self._op(table, get=_b(key))

    def put(self, table: str, key: Bytes, value: Bytes) -> "Batch":
        """Write ``value`` under ``key``."""
        return self._op(table, put=pb.Row(key=_b(key), value=_b(value)))

    def delete(self, table: str, key: Bytes) -> "Batch":
        """Delete ``key``."""
        return self._op(table, delete=_b(key))

    def scan(self, table: str, *, limit: int, start=None, end=None, prefix=None, reverse=False) -> "Batch":
        """Read at most ``limit`` rows (at most 10,000)."""
        return self._op(table, scan=_range(start, end, prefix, reverse, limit))

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


def _result(r: pb.OperationResult):
    which = r.WhichOneof("result")
    if which == "get":
        return r.get.value if r.get.HasField("value") else None
    if which == "delete":
        return r.delete.existed
    if which == "scan":
        return [(row.key, row.value) for row in r.scan.rows]
    return None


class Client:
    """A connection to a ``milliscale serve`` server.

    ``address`` is ``host:port``. ``token`` is the bearer token, if the
    server wants one. ``tls_ca`` (PEM bytes) makes the connection TLS,
    trusting that authority; ``tls_domain`` is the name on the server's
    certificate. ``timeout`` bounds each call, in seconds. The constructor
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
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", -1),
        ]
        if tls_domain:
            options.append(("grpc.ssl_target_name_override", tls_domain))
        if tls_ca is not None:
            creds = grpc.ssl_channel_credentials(root_certificates=tls_ca)
            self._channel = grpc.secure_channel(address, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=connect_timeout)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise UnavailableError(
                f"cannot connect to {address} within {connect_timeout} s",
                grpc.StatusCode.UNAVAILABLE,
                "client",
                False,
            ) from None
        self._stub = pb_grpc.MilliscaleStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout

    def close(self) -> None:
        """Close the connection."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, request, timeout: Optional[float] = None):
        try:
            return getattr(self._stub, method)(
                request, metadata=self._metadata, timeout=timeout or self._timeout
            )
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    # Tables.

    def create_table(self, name: str) -> None:
        """Create a table (durable on return)."""
        self._call("CreateTable", pb.CreateTableRequest(name=name))

    def drop_table(self, name: str) -> None:
        """Drop a table (durable on return)."""
        self._call("DropTable", pb.DropTableRequest(name=name))

    def list_tables(self) -> list[str]:
        """The tables' names, in creation order."""
        return list(self._call("ListTables", pb.ListTablesRequest()).names)

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
        """Begin an interactive transaction; use it in a ``with`` block.

        ``read_only`` refuses writes (required on a replica and with a
        read-only token). ``durable_snapshot`` reads only durable commits
        (writer only). ``at_token`` sees that commit and all before it: a
        replica waits up to ``wait`` seconds (0: the server's default)
        for it, then raises :class:`StaleError`.
        """
        req = pb.BeginRequest(
            isolation=int(isolation),
            read_only=read_only or durable_snapshot,
            read_at=pb.READ_AT_DURABLE if durable_snapshot else pb.READ_AT_LATEST,
            wait_ms=int(wait * 1000),
        )
        if at_token is not None:
            req.at_token = at_token
        r = self._call("Begin", req, timeout=(self._timeout or 0) + wait or None)
        return Transaction(self, r.txn_id, r.snapshot, Isolation(r.isolation))

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
        pause = 0.001
        for n in range(1, attempts + 1):
            try:
                with self.transaction(isolation, read_only=read_only) as tx:
                    return fn(tx)
            except MilliscaleError as e:
                if not e.retryable or n == attempts:
                    raise
            time.sleep(random.uniform(0, pause))
            pause = min(pause * 2, 0.1)
        raise AssertionError("unreachable")

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
        req = pb.ExecuteRequest(
            table=batch._table,
            operations=batch._ops,
            isolation=int(isolation),
            durability=pb.DURABILITY_WAIT if wait_durable else pb.DURABILITY_PRECOMMIT,
            max_retries=retries,
            wait_ms=int(wait * 1000),
        )
        if at_token is not None:
            req.at_token = at_token
        r = self._call("Execute", req)
        return BatchResult(
            [_result(x) for x in r.results],
            r.token if r.HasField("token") else None,
            r.durable,
            r.attempts,
        )

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
        r = self._call(
            "WaitFor", pb.WaitForRequest(token=token, wait_ms=int(timeout * 1000)), timeout=timeout + 5
        )
        return r.reached

    def status(self) -> Status:
        """The server's role and progress."""
        s = self._call("Status", pb.StatusRequest())
        return Status(s.role, s.durable_token, s.open_transactions, s.version, s.cpu_seconds)


__all__: Sequence[str] = [
    "Batch",
    "BatchResult",
    "Client",
    "Commit",
    "Isolation",
    "Status",
    "Transaction",
]
