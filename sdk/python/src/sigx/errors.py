"""Typed errors: one class per sigx error kind (errors.proto), rooted at `ActorError`.

`OutcomeUnknown` is deliberately *not* an `ActorError`: it says the connection died with the call
in flight, so the call may or may not have run. It is never retried for you. Both share
`SigxError` so `except sigx.errors.SigxError` catches everything the SDK raises for a call.
"""

from __future__ import annotations

import grpc
from grpc_status import rpc_status

from sigx.actors.v1 import errors_pb2

DETAIL_TYPE_URL = "type.googleapis.com/sigx.actors.v1.ErrorDetail"


class SigxError(Exception):
    """Anything a sigx call can fail with."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ActorError(SigxError):
    """A definite answer from the runtime or the actor: the kind says which."""

    kind: errors_pb2.ErrorKind = errors_pb2.ERROR_KIND_APP
    #: The kind's short name, as in the `sigx-error-kind` metadata entry.
    name: str = "app"

    def __init__(
        self,
        message: str,
        *,
        owner_hint: str = "",
        retry_after_ms: int = 0,
        cause: ActorError | OutcomeUnknown | None = None,
    ) -> None:
        super().__init__(message)
        self.owner_hint = owner_hint
        self.retry_after_ms = retry_after_ms
        self.cause = cause

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"


class Fenced(ActorError):
    """The host fenced itself (lost its lease); terminal until it restarts."""

    kind, name = errors_pb2.ERROR_KIND_FENCED, "fenced"


class Unplaceable(ActorError):
    """No active host registers the type."""

    kind, name = errors_pb2.ERROR_KIND_UNPLACEABLE, "unplaceable"


class Unreachable(ActorError):
    """The target could not be reached; the call never ran (retrying is safe)."""

    kind, name = errors_pb2.ERROR_KIND_UNREACHABLE, "unreachable"


class WrongHost(ActorError):
    """The target does not hold or accept this actor; the call never ran."""

    kind, name = errors_pb2.ERROR_KIND_WRONG_HOST, "wrong-host"


class Timeout(ActorError):
    """The call's deadline passed; a late result is discarded."""

    kind, name = errors_pb2.ERROR_KIND_TIMEOUT, "timeout"


class AppError(ActorError):
    """The actor's own error; the message is the handler's."""

    kind, name = errors_pb2.ERROR_KIND_APP, "app"


class ActivationError(ActorError):
    """Routing retries were spent; `cause` holds the last answer."""

    kind, name = errors_pb2.ERROR_KIND_ACTIVATION, "activation"


class InvalidError(ActorError):
    """Bad input: unknown type or method, oversize payload, ..."""

    kind, name = errors_pb2.ERROR_KIND_INVALID, "invalid"


class Unauthenticated(ActorError):
    """A mesh peer failed the HMAC / mTLS check."""

    kind, name = errors_pb2.ERROR_KIND_UNAUTHENTICATED, "unauthenticated"


class StaleEpoch(ActorError):
    """The turn ran on an activation a newer one had superseded: the state store refused its
    writes (none is stored) and the activation was dropped. Effects outside the store may have
    happened; not retried by sigx."""

    kind, name = errors_pb2.ERROR_KIND_STALE_EPOCH, "stale-epoch"


class OutcomeUnknown(SigxError):
    """The connection died with the call in flight: it may or may not have run. Not retried."""

    kind = errors_pb2.ERROR_KIND_OUTCOME_UNKNOWN
    name = "outcome-unknown"

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"


BY_KIND: dict[errors_pb2.ErrorKind, type[ActorError]] = {
    c.kind: c
    for c in (
        Fenced,
        Unplaceable,
        Unreachable,
        WrongHost,
        Timeout,
        AppError,
        ActivationError,
        InvalidError,
        Unauthenticated,
        StaleEpoch,
    )
}


class ServeError(Exception):
    """Serving stopped for good: the registration is invalid, or the stream broke and
    reconnecting was turned off (`App(reconnect=False)`)."""


def from_detail(detail: errors_pb2.ErrorDetail) -> ActorError | OutcomeUnknown:
    """The typed error for one ErrorDetail (UNSPECIFIED reads as outcome-unknown, as the proto says)."""
    cause = from_detail(detail.cause) if detail.HasField("cause") else None
    cls = BY_KIND.get(detail.kind)
    if cls is None:
        return OutcomeUnknown(detail.message)
    return cls(
        detail.message,
        owner_hint=detail.owner_hint,
        retry_after_ms=detail.retry_after_ms,
        cause=cause,
    )


def from_rpc_error(err: grpc.RpcError, socket: str = "") -> ActorError | OutcomeUnknown:
    """Reads a failed RPC to the sidecar.

    A status carrying an ErrorDetail is decoded as is. Without one: a dial failure is
    `Unreachable` (the call never ran); UNAVAILABLE/CANCELLED/other transport failures are
    `OutcomeUnknown` (the request may have been run); DEADLINE_EXCEEDED is `Timeout`.
    """
    status = None
    try:
        status = rpc_status.from_call(err)  # type: ignore[arg-type]
    except ValueError:
        status = None
    if status is not None:
        for any_ in status.details:
            if any_.type_url == DETAIL_TYPE_URL:
                detail = errors_pb2.ErrorDetail()
                any_.Unpack(detail)
                return from_detail(detail)
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN  # type: ignore[attr-defined]
    details = (err.details() if hasattr(err, "details") else str(err)) or ""  # type: ignore[attr-defined]
    where = f" at {socket}" if socket else ""
    if code == grpc.StatusCode.UNAVAILABLE and _never_connected(details):
        return Unreachable(
            f"could not reach the sidecar{where} ({details}); is it running, and does "
            "SIGX_SOCKET name its socket? The call did not run: retrying is safe"
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Timeout(f"the call's deadline passed before the sidecar answered ({details})")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidError(details)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return Unauthenticated(details)
    return OutcomeUnknown(
        f"the connection to the sidecar{where} failed with the call in flight "
        f"({code.name}: {details}); it may or may not have run"
    )


def _never_connected(details: str) -> bool:
    d = details.lower()
    return any(
        s in d
        for s in ("failed to connect", "connection refused", "no such file", "connect failed")
    )


__all__ = [
    "SigxError",
    "ActorError",
    "Fenced",
    "Unplaceable",
    "Unreachable",
    "WrongHost",
    "Timeout",
    "AppError",
    "ActivationError",
    "InvalidError",
    "Unauthenticated",
    "StaleEpoch",
    "OutcomeUnknown",
    "ServeError",
    "from_detail",
    "from_rpc_error",
]
