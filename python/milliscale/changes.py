"""Change feeds: a server's, every committed transaction after a cursor,
whole, in CSN order, each write as the row's whole new value; and a
cluster's, the same merged by commit timestamp across the shards, with
resolved timestamps (design record 0014). ``Client.changes`` and
``Cluster.changes`` make them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Union

from milliscale.errors import from_call_error
from milliscale import _native


@dataclass(frozen=True)
class Change:
    """One write of a committed transaction."""

    table: str
    key: bytes
    #: The row's whole value after the transaction; ``None``: deleted.
    value: Optional[bytes]


@dataclass(frozen=True)
class ChangedTransaction:
    """A committed transaction, whole."""

    #: Its CSN: the cursor to save once it is handled, and to pass as
    #: ``after`` to resume after it.
    csn: int
    #: Its writes, in the order it made them (those the filter keeps).
    changes: list[Change]


@dataclass(frozen=True)
class Resolved:
    """Every transaction below ``csn`` has been delivered."""

    csn: int


Event = Union[ChangedTransaction, Resolved]


@dataclass(frozen=True)
class ClusterChangedTransaction:
    """A committed transaction of a cluster, whole: its writes on every
    shard."""

    #: Its commit timestamp (µs of the cluster's hybrid clock).
    ts: int
    #: The client that committed it.
    client: int
    #: Its writes (those the filter keeps).
    changes: list[Change]


@dataclass(frozen=True)
class ResolvedTs:
    """Every transaction of the cluster at or below commit timestamp ``ts``
    has been delivered, and none will come: the cursor to save once
    everything before it is handled, and to pass as ``after``."""

    ts: int


ClusterEvent = Union[ClusterChangedTransaction, ResolvedTs]


def _events(native, resolved: bool, until: Optional[int], past) -> Iterator[tuple]:
    """A native feed's events as ``(at, client, changes)`` for a
    transaction and ``(at, None, None)`` for a resolved point (only with
    ``resolved``), until the server ends it or ``past(at)`` says a resolved
    point reached ``until``; the feed stops when the iteration does (a
    ``break``, the generator closed)."""
    try:
        while True:
            try:
                # A short wait at a time, so that Ctrl-C is seen.
                e = native.next(0.2)
            except _native.CallError as err:
                raise from_call_error(*err.args) from None
            if e is None:
                continue
            at, client, writes = e
            if writes is None:
                if at == 0:
                    return  # the server ended the feed
                if resolved:
                    yield at, None, None
                if until is not None and past(at, until):
                    return
                continue
            yield at, client, [Change(t, k, v) for t, k, v in writes]
    finally:
        native.close()


def iterate(native, resolved: bool, until: Optional[int]) -> Iterator[Event]:
    """A server's feed: every transaction below a resolved CSN came."""
    for csn, _, changes in _events(native, resolved, until, lambda at, u: at > u):
        yield Resolved(csn) if changes is None else ChangedTransaction(csn, changes)


def iterate_cluster(native, resolved: bool, until: Optional[int]) -> Iterator[ClusterEvent]:
    """A cluster's feed: every transaction at or below a resolved
    timestamp came."""
    for ts, client, changes in _events(native, resolved, until, lambda at, u: at >= u):
        yield ResolvedTs(ts) if changes is None else ClusterChangedTransaction(ts, client, changes)
