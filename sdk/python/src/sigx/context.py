"""What a handler knows about its actor and its turn."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from datetime import timedelta

from sigx.client import Client
from sigx import timers
from sigx.reminders import ActorHandle
from sigx.state import State
from sigx.trace import TraceContext


@dataclass(frozen=True)
class ActorContext:
    """Given to an actor class's constructor: one per activation."""

    actor_type: str
    key: str
    #: Unique per activation (not ordered: fence external writes with `epoch`).
    activation_id: str
    #: For calling other actors from inside a handler.
    client: Client
    #: The activation's epoch: its fencing token for systems outside sigx, strictly greater than
    #: every earlier activation's of this actor. Store it with what you write there and refuse a
    #: write whose epoch is lower than the one stored (compare, refuse lower).
    epoch: int = 0

    def this_actor(self) -> ActorHandle:
        """This actor as a handle: set, delete and list its own reminders
        (`self.ctx.this_actor().set_reminder(...)`), or call it (from another task only: a
        non-reentrant actor calling itself from its own turn waits for itself). Its reminder
        changes carry this activation's epoch: once a newer activation exists they raise
        `StaleEpoch` and change nothing."""
        return ActorHandle(self.client, self.actor_type, self.key, self.epoch)

    async def set_timer(
        self,
        name: str,
        after: timedelta,
        *,
        period: timedelta | None = None,
        payload: bytes | str = b"",
    ) -> bool:
        """Sets (or replaces, by name) an in-memory timer of this activation: its first tick
        `after` from now, then every `period` (None: one tick). Each tick runs the class's
        `on_timer` as a turn of this activation (see `sigx.timers`). Gone when the activation
        deactivates; use a reminder for a wake-up that must outlive it. Returns whether a timer of
        that name was replaced; bad input raises `InvalidError` with the sidecar's reason."""
        req = timers.set_request(self.actor_type, self.key, self.activation_id, name, after,
                                 period, payload)
        return await timers.set_timer(self.client, req)

    async def cancel_timer(self, name: str) -> bool:
        """Cancels this activation's timer `name`: no tick of it starts afterwards. Returns
        whether it existed (an unknown name is fine)."""
        return await timers.cancel_timer(self.client, self.actor_type, self.key,
                                         self.activation_id, name)

    @property
    def state(self) -> State:
        """The actor's durable state as the running turn sees it (see `sigx.state`). Writes go
        out with the turn's result; raises LookupError outside a handler of this actor."""
        turn = _current.get()
        if turn.actor_type != self.actor_type or turn.key != self.key:
            raise LookupError(
                f"ctx.state of {self.actor_type}/{self.key} used in a turn of "
                f"{turn.actor_type}/{turn.key}; use each actor's own ctx"
            )
        return turn.state


@dataclass(frozen=True)
class WorkerContext:
    """Given to a worker class's constructor: one per App."""

    worker_type: str
    client: Client

    async def set_timer(self, name: str, after: timedelta, *, period: timedelta | None = None,
                        payload: bytes | str = b"") -> bool:
        """Always raises `InvalidError`: timers belong to an actor's activation, and a worker
        has none."""
        raise timers.worker_refusal(self.worker_type, "set_timer")

    async def cancel_timer(self, name: str) -> bool:
        """Always raises `InvalidError`, like `set_timer`."""
        raise timers.worker_refusal(self.worker_type, "cancel_timer")


@dataclass(frozen=True)
class TurnInfo:
    """The turn now running (`sigx.current_turn()`)."""

    turn_id: int
    actor_type: str
    key: str
    activation_id: str
    #: Unix ms after which the turn must not run (0 = unbounded): the handler is cancelled then.
    not_after_unix_ms: int
    #: The activation's epoch (0 for workers); see `ActorContext.epoch`.
    epoch: int = 0
    #: This turn's view of the actor's durable state and its pending writes.
    state: State = field(default=None, repr=False)  # type: ignore[assignment]
    #: The turn's W3C trace context (None when the call that caused it was untraced): the
    #: sidecar's turn span when it exports spans, else the caller's context. Calls made from the
    #: handler carry it (see `sigx.trace`).
    trace: TraceContext | None = None


_current: contextvars.ContextVar[TurnInfo] = contextvars.ContextVar("sigx_turn")


def current_turn() -> TurnInfo:
    """The turn the calling handler runs in; raises LookupError outside a handler."""
    return _current.get()
