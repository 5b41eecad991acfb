"""Milliscale from Python: a client of a ``milliscale serve`` server, or
of a cluster of them (:class:`Cluster`).

>>> from milliscale import Client
>>> db = Client("127.0.0.1:7878")                  # doctest: +SKIP
>>> db.create_table("accounts")                    # doctest: +SKIP
>>> token = db.put("accounts", b"alice", b"100")   # durable on return
>>> with db.transaction() as tx:                   # commits at the end
...     tx.put("accounts", b"bob", tx.get("accounts", b"alice"))
>>> db.run(lambda tx: tx.get("accounts", b"bob"))  # retried on conflicts

See ``python/README.md``.
"""

from milliscale.changes import Change, ChangedTransaction, ClusterChangedTransaction, Resolved, ResolvedTs
from milliscale.client import (
    Batch,
    BatchResult,
    Client,
    Commit,
    Isolation,
    Status,
    Transaction,
)
from milliscale.cluster import Cluster, ClusterTransaction, ShardStatus, StandbyHealth
from milliscale.errors import (
    AlreadyExistsError,
    BusyError,
    ConflictError,
    DeadlineError,
    ExpiredError,
    InvalidArgumentError,
    MilliscaleError,
    NotFoundError,
    PermissionDeniedError,
    StaleError,
    StatusCode,
    UnauthenticatedError,
    UnavailableError,
)

__version__ = "0.1.0"

__all__ = [
    "AlreadyExistsError",
    "Batch",
    "BatchResult",
    "BusyError",
    "Change",
    "ChangedTransaction",
    "ClusterChangedTransaction",
    "Client",
    "Cluster",
    "ClusterTransaction",
    "Commit",
    "ConflictError",
    "DeadlineError",
    "ExpiredError",
    "InvalidArgumentError",
    "Isolation",
    "MilliscaleError",
    "NotFoundError",
    "PermissionDeniedError",
    "Resolved",
    "ResolvedTs",
    "StaleError",
    "ShardStatus",
    "StandbyHealth",
    "Status",
    "StatusCode",
    "Transaction",
    "UnauthenticatedError",
    "UnavailableError",
]
