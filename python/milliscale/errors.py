"""The errors a server returns, as exceptions.

Each carries the gRPC status ``code`` (:class:`StatusCode`), the engine's error ``kind`` (from
the ``milliscale-error`` metadata) and ``retryable`` (from
``milliscale-retryable``): run the whole transaction again.
"""

from __future__ import annotations

import enum
from typing import Optional


class StatusCode(enum.IntEnum):
    """The gRPC status codes, as the server and the client send them."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class MilliscaleError(Exception):
    """A call failed. ``retryable`` says whether running the whole
    transaction again may succeed."""

    def __init__(self, message: str, code: Optional[StatusCode], kind: str, retryable: bool):
        super().__init__(message)
        self.message = message
        self.code = code
        self.kind = kind
        self.retryable = retryable

    def __str__(self) -> str:
        name = self.code.name if self.code is not None else "UNKNOWN"
        return f"{self.message} ({self.kind}, {name})"


class ConflictError(MilliscaleError):
    """Another transaction touched the same data first (ABORTED); retry."""


class BusyError(MilliscaleError):
    """A cap on open transactions was reached (RESOURCE_EXHAUSTED); retry later."""


class ExpiredError(MilliscaleError):
    """The transaction idled past the server's timeout and was aborted; retry."""


class StaleError(MilliscaleError):
    """A replica had not applied the token in time (UNAVAILABLE, kind stale)."""


class UnavailableError(MilliscaleError):
    """The server or its log's stores cannot take the call (UNAVAILABLE)."""


class UnauthenticatedError(MilliscaleError):
    """No bearer token, or one the server does not know."""


class PermissionDeniedError(MilliscaleError):
    """The call writes, and the token or the server (a replica) is read-only."""


class NotFoundError(MilliscaleError):
    """No such table, key or transaction."""


class AlreadyExistsError(MilliscaleError):
    """The table exists."""


class InvalidArgumentError(MilliscaleError):
    """The request was malformed or over a limit."""


class DeadlineError(MilliscaleError):
    """A wait ran out (a token not durable or applied in time)."""


_BY_KIND = {
    "conflict": ConflictError,
    "busy": BusyError,
    "limit": BusyError,
    "expired": ExpiredError,
    "stale": StaleError,
    "read_only": PermissionDeniedError,
}

_BY_CODE = {
    StatusCode.ABORTED: ConflictError,
    StatusCode.RESOURCE_EXHAUSTED: BusyError,
    StatusCode.UNAVAILABLE: UnavailableError,
    StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    StatusCode.NOT_FOUND: NotFoundError,
    StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    StatusCode.OUT_OF_RANGE: InvalidArgumentError,
    StatusCode.DEADLINE_EXCEEDED: DeadlineError,
}


def from_call_error(code: int, message: str, kind: str, retryable: bool) -> MilliscaleError:
    """The exception for a failed call, from what the native client says
    of it: the status code, the server's message, the engine's error kind
    (``milliscale-error``; ``transport`` when the server said none) and
    whether the whole transaction may be run again."""
    try:
        status = StatusCode(code)
    except ValueError:
        status = StatusCode.UNKNOWN
    kind = kind or "transport"
    cls = _BY_KIND.get(kind) or _BY_CODE.get(status, MilliscaleError)
    return cls(message or "", status, kind, retryable)
