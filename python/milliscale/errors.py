"""The errors a server returns, as exceptions.

Each carries the gRPC status ``code``, the engine's error ``kind`` (from
the ``milliscale-error`` metadata) and ``retryable`` (from
``milliscale-retryable``): run the whole transaction again.
"""

from __future__ import annotations

from typing import Optional

import grpc


class MilliscaleError(Exception):
    """A call failed. ``retryable`` says whether running the whole
    transaction again may succeed."""

    def __init__(self, message: str, code: Optional[grpc.StatusCode], kind: str, retryable: bool):
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
    grpc.StatusCode.ABORTED: ConflictError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: BusyError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgumentError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineError,
}


def from_rpc_error(e: grpc.RpcError) -> MilliscaleError:
    """The exception for a failed call."""
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    meta = {}
    if hasattr(e, "trailing_metadata") and e.trailing_metadata() is not None:
        meta = {k: v for k, v in e.trailing_metadata()}
    kind = meta.get("milliscale-error", "transport")
    retryable = meta.get("milliscale-retryable") == "true"
    cls = _BY_KIND.get(kind) or _BY_CODE.get(code, MilliscaleError)
    return cls(details or "", code, kind, retryable)
