"""Durable reminders (DESIGN.md §11): "wake me up later", by name, on an actor.

A reminder is stored by the sidecar beside the actor's state and outlives activations, hosts and
restarts. At its due time the actor gets a reminder turn wherever it lives (activated if need
be): its class's `async def on_reminder(self, reminder: sigx.Reminder)` runs, turn-based like a
method, and its `ctx.state` writes commit the same way. Delivery is at least once: a handler that
raises (or times out, or whose host dies) is retried with backoff for the same occurrence
(`reminder.attempt` 2, 3, ... up to 10; the same `reminder.due`), so make it idempotent per
(`name`, `due`). Raising `sigx.errors.InvalidError` abandons the occurrence at once.

    invoice = client.actor("Invoice", "inv-7")
    await invoice.set_reminder("overdue", timedelta(hours=1))      # or a datetime
    await self.ctx.this_actor().set_reminder("tick", timedelta(seconds=1),
                                             period=timedelta(minutes=5))
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from sigx.actors.v1 import app_pb2, types_pb2
from sigx.errors import InvalidError

if TYPE_CHECKING:
    from sigx.client import Client


@dataclass(frozen=True)
class Reminder:
    """A due reminder, as `on_reminder` sees it."""

    name: str
    payload: bytes
    #: This occurrence's due time (UTC): the same on every retry of it, so (`name`, `due`)
    #: identifies the occurrence for an idempotent handler.
    due: datetime
    #: None for a one-shot reminder.
    period: timedelta | None
    #: 1 for the first delivery of this occurrence, 2 and up for retries.
    attempt: int


@dataclass(frozen=True)
class ReminderInfo:
    """A stored reminder, as `list_reminders` returns it."""

    name: str
    #: Its next due time (UTC).
    due: datetime
    #: None for a one-shot reminder.
    period: timedelta | None
    payload: bytes
    #: Failed deliveries of the current occurrence so far.
    failed_attempts: int


def from_unix_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(max(ms, 0) / 1000, tz=timezone.utc)


def _period_of(ms: int) -> timedelta | None:
    return timedelta(milliseconds=ms) if ms > 0 else None


def reminder_from_proto(r: app_pb2.Reminder) -> Reminder:
    return Reminder(r.name, bytes(r.payload), from_unix_ms(r.due_unix_ms),
                    _period_of(r.period_ms), r.attempt)


def info_from_proto(r: app_pb2.ReminderInfo) -> ReminderInfo:
    return ReminderInfo(r.name, from_unix_ms(r.due_unix_ms), _period_of(r.period_ms),
                        bytes(r.payload), r.failed_attempts)


def set_request(
    actor_type: str,
    key: str,
    name: str,
    due: datetime | timedelta,
    period: timedelta | None,
    payload: bytes | str,
    epoch: int = 0,
) -> app_pb2.SetReminderRequest:
    """The wire request; the sidecar checks the name, period and payload limits and names them.
    A nonzero `epoch` fences it: the store refuses it once a newer activation exists."""
    req = app_pb2.SetReminderRequest(
        actor=types_pb2.ActorRef(actor_type=actor_type, key=key),
        name=name,
        payload=payload.encode() if isinstance(payload, str) else bytes(payload),
        epoch=epoch,
    )
    if isinstance(due, datetime):
        # A naive datetime is local time, as datetime.timestamp() reads it.
        req.due_unix_ms = int(due.timestamp() * 1000)
    elif isinstance(due, timedelta):
        req.due_in_ms = max(0, int(due / timedelta(milliseconds=1)))
    else:
        raise TypeError(
            f"reminder {name!r}: due must be a datetime (when) or a timedelta (how long from now), "
            f"not {type(due).__name__}"
        )
    if period is not None:
        ms = period / timedelta(milliseconds=1)
        if ms < 0:
            raise InvalidError(f"reminder {name!r} has a negative period ({period}); use None for one-shot")
        # A positive period under 1 ms stays positive so the sidecar names the minimum.
        req.period_ms = max(1, int(ms)) if ms > 0 else 0
    return req


class ActorHandle:
    """One actor, by type and key: call it and manage its reminders (`client.actor(type, key)`,
    or `ctx.this_actor()` inside a turn).

    A handle from `ctx.this_actor()` carries its activation's epoch (`fence`): once a newer
    activation of the actor exists, the store refuses its reminder changes (`StaleEpoch`, nothing
    changed), so an activation that outlived its lease cannot rearrange its successor's
    reminders. `fence` 0 (a client's handle) is unfenced."""

    def __init__(self, client: Client, actor_type: str, key: str, fence: int = 0) -> None:
        self.client = client
        self.actor_type = actor_type
        self.key = key
        #: The epoch its reminder changes carry; 0: unfenced.
        self.fence = fence

    def __repr__(self) -> str:
        return f"ActorHandle({self.actor_type}/{self.key})"

    async def call(self, method: str, payload: bytes = b"", *, timeout: float | None = None) -> bytes:
        return await self.client.call(self.actor_type, self.key, method, payload, timeout=timeout)

    async def set_reminder(
        self,
        name: str,
        due: datetime | timedelta,
        *,
        period: timedelta | None = None,
        payload: bytes | str = b"",
    ) -> datetime:
        """Sets (or replaces) a reminder of this actor. See `Client.set_reminder`."""
        return await self.client.set_reminder(
            self.actor_type, self.key, name, due, period=period, payload=payload, epoch=self.fence
        )

    async def delete_reminder(self, name: str) -> bool:
        """Deletes a reminder of this actor; whether it existed."""
        return await self.client.delete_reminder(self.actor_type, self.key, name, epoch=self.fence)

    async def list_reminders(self) -> list[ReminderInfo]:
        """This actor's reminders, by name."""
        return await self.client.list_reminders(self.actor_type, self.key)
