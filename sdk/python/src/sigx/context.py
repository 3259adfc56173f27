"""What a handler knows about its actor and its turn."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from sigx.client import Client


@dataclass(frozen=True)
class ActorContext:
    """Given to an actor class's constructor: one per activation."""

    actor_type: str
    key: str
    #: Unique per activation: a fencing token for external state.
    activation_id: str
    #: For calling other actors from inside a handler.
    client: Client


@dataclass(frozen=True)
class WorkerContext:
    """Given to a worker class's constructor: one per App."""

    worker_type: str
    client: Client


@dataclass(frozen=True)
class TurnInfo:
    """The turn now running (`sigx.current_turn()`)."""

    turn_id: int
    actor_type: str
    key: str
    activation_id: str
    #: Unix ms after which the turn must not run (0 = unbounded): the handler is cancelled then.
    not_after_unix_ms: int


_current: contextvars.ContextVar[TurnInfo] = contextvars.ContextVar("sigx_turn")


def current_turn() -> TurnInfo:
    """The turn the calling handler runs in; raises LookupError outside a handler."""
    return _current.get()
