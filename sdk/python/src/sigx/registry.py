"""Declaring actor and worker types with decorators (`@sigx.actor`, `@sigx.worker`, `@sigx.method`)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sigx.actors.v1 import app_pb2

T = TypeVar("T", bound=type)
Handler = Callable[[Any, bytes], Awaitable[bytes | None]]

_METHOD_ATTR = "__sigx_method__"
_TYPE_ATTR = "__sigx_type__"


@dataclass(frozen=True)
class TypeDef:
    """One registered type: what the sidecar is told, and which coroutine answers each method."""

    name: str
    cls: type
    stateful: bool
    reentrant: bool = False
    idle_timeout_ms: int = 0
    max_concurrency: int = 0
    methods: dict[str, str] = field(default_factory=dict)  # wire name -> attribute name

    def spec(self) -> app_pb2.ActorTypeSpec | app_pb2.WorkerTypeSpec:
        if self.stateful:
            return app_pb2.ActorTypeSpec(
                name=self.name,
                reentrant=self.reentrant,
                idle_timeout_ms=self.idle_timeout_ms,
                methods=sorted(self.methods),
            )
        return app_pb2.WorkerTypeSpec(
            name=self.name, max_concurrency=self.max_concurrency, methods=sorted(self.methods)
        )


def method(fn: Any = None, *, name: str | None = None) -> Any:
    """Marks an `async def m(self, payload: bytes) -> bytes` as a callable method (wire name =
    `name` or the function's name)."""

    def mark(f: Any) -> Any:
        if not inspect.iscoroutinefunction(f):
            raise TypeError(f"@sigx.method {f.__qualname__} must be an `async def`")
        setattr(f, _METHOD_ATTR, name or f.__name__)
        return f

    return mark(fn) if fn is not None else mark


def _collect(cls: type) -> dict[str, str]:
    methods: dict[str, str] = {}
    for attr, value in inspect.getmembers(cls):
        wire = getattr(value, _METHOD_ATTR, None)
        if wire is not None:
            if wire in methods:
                raise TypeError(f"{cls.__qualname__} declares method {wire!r} twice")
            methods[wire] = attr
    if not methods:
        raise TypeError(f"{cls.__qualname__} has no @sigx.method; declare at least one")
    return methods


def actor(
    name: str, *, reentrant: bool = False, idle_timeout: float | None = None
) -> Callable[[T], T]:
    """Declares a stateful actor type. The class is instantiated once per activation with the
    activation's `sigx.ActorContext`; optional `async def on_activate(self)` and
    `async def on_deactivate(self, reason: int)` run as the Activate/Deactivate turns, and
    `async def on_reminder(self, reminder: sigx.Reminder)` as its due reminders' turns, and
    `async def on_timer(self, tick: sigx.TimerTick)` as its timers' ticks (`ctx.set_timer`).
    `idle_timeout` (seconds) defaults to the sidecar's (5 minutes)."""

    def wrap(cls: T) -> T:
        setattr(
            cls,
            _TYPE_ATTR,
            TypeDef(
                name=name,
                cls=cls,
                stateful=True,
                reentrant=reentrant,
                idle_timeout_ms=int((idle_timeout or 0) * 1000),
                methods=_collect(cls),
            ),
        )
        return cls

    return wrap


def worker(name: str, *, max_concurrency: int = 0) -> Callable[[T], T]:
    """Declares a stateless worker type, instantiated once per App with a `sigx.WorkerContext`.
    At most `max_concurrency` turns run at once on this host (0 = the sidecar's default, 16)."""

    def wrap(cls: T) -> T:
        setattr(
            cls,
            _TYPE_ATTR,
            TypeDef(
                name=name,
                cls=cls,
                stateful=False,
                max_concurrency=max_concurrency,
                methods=_collect(cls),
            ),
        )
        return cls

    return wrap


def type_def(cls: type) -> TypeDef:
    td = getattr(cls, _TYPE_ATTR, None)
    if not isinstance(td, TypeDef) or td.cls is not cls:
        raise TypeError(f"{cls!r} is not declared with @sigx.actor(...) or @sigx.worker(...)")
    return td
