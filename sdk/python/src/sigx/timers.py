"""Timers of an activation (DESIGN.md §11): "tick me while I am active", from inside a turn.

A timer lives in the sidecar's memory and belongs to the activation that set it
(`self.ctx.set_timer(...)` in a method, `on_activate` or a tick handler). Its ticks are turns of
that activation: the class's `async def on_timer(self, tick: sigx.TimerTick)` runs one at a time
with the other turns (unless the type is reentrant), bounded like a call, and its `ctx.state`
writes commit the same way. A timer ends when cancelled, after its one tick (one-shot), or with
the activation: a new activation starts with none, so set them again in `on_activate`. Ticks do
not reset the idle timeout, a failed tick is not retried, and a periodic timer skips ticks
(`tick.skipped`) rather than piling them up while the activation is busy. For a wake-up that must
survive the activation, use a durable reminder (`sigx.reminders`).

    async def on_activate(self) -> None:
        await self.ctx.set_timer("flush", timedelta(seconds=1), period=timedelta(seconds=1))

    async def on_timer(self, tick: sigx.TimerTick) -> None:
        await self.flush()
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import grpc

from sigx.actors.v1 import app_pb2, types_pb2
from sigx.errors import InvalidError, from_rpc_error
from sigx.reminders import from_unix_ms

if TYPE_CHECKING:
    from sigx.client import Client

#: The sidecar answers timer requests at once; this only bounds a sidecar that never answers.
_RPC_TIMEOUT_S = 10


@dataclass(frozen=True)
class TimerTick:
    """One tick of a timer, as `on_timer` sees it."""

    name: str
    payload: bytes
    #: None for a one-shot timer (this is its only tick, and it is gone already: setting the name
    #: again from the handler sets a new timer).
    period: timedelta | None
    #: When the tick was due (UTC, the pod's wall clock): earlier than now when the activation
    #: was busy.
    due: datetime
    #: Ticks of this periodic timer skipped since the previous one because it was still queued or
    #: running when they fell due.
    skipped: int


def tick_from_proto(t: app_pb2.TimerTick) -> TimerTick:
    period = timedelta(milliseconds=t.period_ms) if t.period_ms > 0 else None
    return TimerTick(t.name, bytes(t.payload), period, from_unix_ms(t.due_unix_ms), t.skipped)


def _millis(name: str, what: str, d: timedelta) -> int:
    if not isinstance(d, timedelta):
        raise TypeError(f"timer {name!r}: the {what} must be a timedelta, not {type(d).__name__}")
    if d < timedelta(0):
        raise InvalidError(f"timer {name!r} has a negative {what} ({d}); use a timedelta >= 0")
    ms = d / timedelta(milliseconds=1)
    # A positive value under 1 ms stays positive (a period of 0 would mean one-shot).
    return max(1, int(ms)) if ms > 0 else 0


def set_request(
    actor_type: str,
    key: str,
    activation_id: str,
    name: str,
    after: timedelta,
    period: timedelta | None,
    payload: bytes | str,
) -> app_pb2.SetTimerRequest:
    """The wire request; the sidecar checks the name, delay, period and payload limits and
    names them."""
    period_ms = 0
    if period is not None:
        period_ms = _millis(name, "period", period)
        if period_ms == 0:
            raise InvalidError(
                f"timer {name!r} has a period of zero; pass period=None for a one-shot timer"
            )
    return app_pb2.SetTimerRequest(
        actor=types_pb2.ActorRef(actor_type=actor_type, key=key),
        activation_id=activation_id,
        name=name,
        due_ms=_millis(name, "delay", after),
        period_ms=period_ms,
        payload=payload.encode() if isinstance(payload, str) else bytes(payload),
    )


async def set_timer(client: Client, req: app_pb2.SetTimerRequest) -> bool:
    """Sends SetTimer; whether a timer of that name was replaced."""
    try:
        return (await client._stub.SetTimer(req, timeout=_RPC_TIMEOUT_S)).replaced
    except grpc.RpcError as e:
        raise from_rpc_error(e, client.socket) from None


async def cancel_timer(
    client: Client, actor_type: str, key: str, activation_id: str, name: str
) -> bool:
    """Sends CancelTimer; whether a timer of that name existed."""
    req = app_pb2.CancelTimerRequest(
        actor=types_pb2.ActorRef(actor_type=actor_type, key=key),
        activation_id=activation_id,
        name=name,
    )
    try:
        return (await client._stub.CancelTimer(req, timeout=_RPC_TIMEOUT_S)).existed
    except grpc.RpcError as e:
        raise from_rpc_error(e, client.socket) from None


def worker_refusal(worker_type: str, what: str) -> InvalidError:
    return InvalidError(
        f"{what}: {worker_type} is a worker type, and timers belong to an actor's activation; "
        "use an actor type (@sigx.actor)"
    )
