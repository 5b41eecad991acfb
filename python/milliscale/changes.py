"""A server's change feed: every committed transaction after a cursor,
whole, in CSN order, each write as the row's whole new value (design record
0014). ``Client.changes`` makes one."""

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


def iterate(native, resolved: bool, until: Optional[int]) -> Iterator[Event]:
    """The events of a native feed, as Python objects; the feed stops when
    the iteration does (a ``break``, the generator closed)."""
    try:
        while True:
            try:
                # A short wait at a time, so that Ctrl-C is seen.
                e = native.next(0.2)
            except _native.CallError as err:
                raise from_call_error(*err.args) from None
            if e is None:
                continue
            csn, writes = e
            if writes is None:
                if csn == 0:
                    return  # the server ended the feed
                if resolved:
                    yield Resolved(csn)
                if until is not None and csn > until:
                    return
                continue
            yield ChangedTransaction(csn, [Change(t, k, v) for t, k, v in writes])
    finally:
        native.close()
