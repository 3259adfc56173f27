"""Running turns: activations, the turn-based guarantee, worker concurrency, the lease bound.

A turn read at or after its `not_after_unix_ms` is refused without running any code
(TurnError UNREACHABLE: it never ran); so is one read at or after its `not_after_boot_ms` on the
machine's boot clock (Linux `CLOCK_BOOTTIME`), which a suspend advances and no wall-clock step
moves, so a wall clock stepped back across a suspend cannot make a queued turn look in time. A handler still running at not-after, or when the sidecar
fences, gets `asyncio.CancelledError` and the turn is answered TIMEOUT (it may have run in part).
The clock is injectable so that both can be tested without waiting for a lease.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sigx.actors.v1 import app_pb2, errors_pb2
from sigx.client import Client
from sigx.context import ActorContext, TurnInfo, WorkerContext, _current
from sigx.trace import TraceContext, _trace
from sigx.errors import ActorError
from sigx.registry import TypeDef
from sigx.reminders import reminder_from_proto
from sigx.state import State
from sigx.timers import tick_from_proto

log = logging.getLogger("sigx")

#: Unix milliseconds now. Injectable: the not-after logic reads nothing else.
Clock = Callable[[], int]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


#: Boot-clock milliseconds now, or None where the platform has no boot clock. Injectable.
BootClock = Callable[[], "int | None"]


def boot_clock_ms() -> int | None:
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is None:
        return None
    return time.clock_gettime_ns(boottime) // 1_000_000


@dataclass
class _Activation:
    activation_id: str
    instance: Any
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _error(turn_id: int, kind: errors_pb2.ErrorKind, message: str) -> app_pb2.TurnResult:
    return app_pb2.TurnResult(turn_id=turn_id, error=app_pb2.TurnError(kind=kind, message=message))


class Dispatcher:
    """Answers turns for the registered types. One per App; activations survive only as long as
    the Serve session that made them (`drop_all` on reconnect, `fence` on a FenceNotice)."""

    def __init__(self, types: list[TypeDef], client: Client, clock: Clock = wall_clock_ms,
                 boot_clock: BootClock = boot_clock_ms) -> None:
        self.types = {t.name: t for t in types}
        self.client = client
        self.clock = clock
        self.boot_clock = boot_clock
        self.activations: dict[tuple[str, str], _Activation] = {}
        self.workers: dict[str, Any] = {}
        self.semaphores = {
            t.name: asyncio.Semaphore(t.max_concurrency or 16)
            for t in types
            if not t.stateful
        }
        self.running: set[asyncio.Task[Any]] = set()
        self.fenced = False

    def drop_all(self) -> int:
        """Forgets every activation without running deactivation hooks (the session is gone)."""
        n = len(self.activations)
        self.activations.clear()
        return n

    def cancel_running(self) -> None:
        """Cancels every running handler (their session ended: nobody can be answered)."""
        for task in list(self.running):
            task.cancel()

    def fence(self) -> int:
        """The sidecar fenced: cancel every running handler, drop every activation at once."""
        self.fenced = True
        self.cancel_running()
        return self.drop_all()

    async def handle(self, turn: app_pb2.Turn) -> app_pb2.TurnResult:
        turn_id = turn.turn_id
        now = self.clock()
        not_after = turn.not_after_unix_ms
        if not_after <= 0 and turn.timeout_ms > 0:
            not_after = now + turn.timeout_ms
        if self.fenced:
            return _error(turn_id, errors_pb2.ERROR_KIND_UNREACHABLE,
                          "the sidecar fenced; this turn was not run")
        if not_after > 0 and now >= not_after:
            return _error(
                turn_id,
                errors_pb2.ERROR_KIND_UNREACHABLE,
                f"the turn arrived {now - not_after} ms past its not-after; it was not run",
            )
        boot_left = self._boot_left(turn.not_after_boot_ms)
        if boot_left is not None and boot_left <= 0:
            return _error(
                turn_id,
                errors_pb2.ERROR_KIND_UNREACHABLE,
                f"the turn arrived {-boot_left} ms past its not-after on the boot clock; "
                "it was not run",
            )
        state = State(self.client, turn.actor.actor_type, turn.actor.key, turn.activation_id,
                      turn.epoch)
        info = TurnInfo(turn_id, turn.actor.actor_type, turn.actor.key, turn.activation_id,
                        not_after, turn.epoch, state, TraceContext.from_proto(turn.trace))
        task = asyncio.create_task(self._run(turn, info))
        self.running.add(task)
        try:
            lefts = [] if not_after <= 0 else [not_after - self.clock()]
            boot_left = self._boot_left(turn.not_after_boot_ms)
            if boot_left is not None:
                lefts.append(boot_left)
            timeout = max(0.0, min(lefts) / 1000) if lefts else None
            done, _ = await asyncio.wait({task}, timeout=timeout)
            if not done:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                return _error(turn_id, errors_pb2.ERROR_KIND_TIMEOUT,
                              "the handler was cancelled at the turn's not-after; it may have run in part")
            if task.cancelled():
                return _error(turn_id, errors_pb2.ERROR_KIND_TIMEOUT,
                              "the handler was cancelled because the sidecar fenced; it may have run in part")
            try:
                payload = task.result()
            except ActorError as e:
                return _error(turn_id, e.kind, e.message)
            except Exception as e:  # the actor's own failure, passed to the caller
                log.debug("handler failed", exc_info=True)
                return _error(turn_id, errors_pb2.ERROR_KIND_APP, f"{type(e).__name__}: {e}")
            # Only an ok outcome carries the turn's writes: a failed turn writes nothing.
            return app_pb2.TurnResult(turn_id=turn_id, ok=payload, writes=state.writes())
        finally:
            self.running.discard(task)

    def _boot_left(self, not_after_boot_ms: int) -> int | None:
        """Milliseconds left before the turn's boot-clock not-after (None: not set, or no boot
        clock here)."""
        if not_after_boot_ms <= 0:
            return None
        now = self.boot_clock()
        return None if now is None else not_after_boot_ms - now

    async def _run(self, turn: app_pb2.Turn, info: TurnInfo) -> bytes:
        _current.set(info)
        # Calls made from the handler (and the tasks it creates) continue the turn's trace.
        _trace.set(info.trace)
        td = self.types.get(turn.actor.actor_type)
        if td is None:
            raise _invalid(f"this app registers no type {turn.actor.actor_type!r}")
        kind = turn.WhichOneof("kind")
        if not td.stateful:
            if kind == "reminder":
                raise _invalid(f"{td.name} is a worker type: workers have no reminders")
            if kind == "timer":
                raise _invalid(f"{td.name} is a worker type: workers have no timers")
            if kind != "invoke":
                return b""
            instance = self.workers.get(td.name)
            if instance is None:
                instance = td.cls(WorkerContext(td.name, self.client))
                self.workers[td.name] = instance
            async with self.semaphores[td.name]:
                return await _invoke(td, instance, turn.invoke)
        ref = (td.name, turn.actor.key)
        if kind == "activate":
            ctx = ActorContext(td.name, turn.actor.key, turn.activation_id, self.client,
                               turn.epoch)
            act = _Activation(turn.activation_id, td.cls(ctx))
            hook = getattr(act.instance, "on_activate", None)
            if hook is not None:
                await hook()
            self.activations[ref] = act
            return b""
        found = self.activations.get(ref)
        if found is None or found.activation_id != turn.activation_id:
            raise _invalid(
                f"no activation {turn.activation_id!r} of {td.name}/{turn.actor.key} here "
                "(dropped by a reconnect or a fence); the sidecar will activate it again"
            )
        act = found
        if kind == "deactivate":
            self.activations.pop(ref, None)
            hook = getattr(act.instance, "on_deactivate", None)
            if hook is not None:
                await hook(turn.deactivate.reason)
            return b""
        run, body = {
            "reminder": (_remind, turn.reminder),
            "timer": (_tick, turn.timer),
        }.get(kind, (_invoke, turn.invoke))
        if td.reentrant:
            return await run(td, act.instance, body)
        # The sidecar already sends one turn at a time; the lock keeps it so even if it did not.
        async with act.lock:
            return await run(td, act.instance, body)


def _invalid(message: str) -> ActorError:
    from sigx.errors import InvalidError

    return InvalidError(message)


async def _remind(td: TypeDef, instance: Any, reminder: app_pb2.Reminder) -> bytes:
    hook = getattr(instance, "on_reminder", None)
    if hook is None:
        # INVALID: the sidecar abandons the occurrence instead of retrying it ten times.
        raise _invalid(
            f"{td.name} has no reminder handler, but reminder {reminder.name!r} came due; add "
            "`async def on_reminder(self, reminder: sigx.Reminder)` to the class, or delete the "
            "reminder"
        )
    await hook(reminder_from_proto(reminder))
    return b""


async def _tick(td: TypeDef, instance: Any, tick: app_pb2.TimerTick) -> bytes:
    hook = getattr(instance, "on_timer", None)
    if hook is None:
        # INVALID: counted as a failed tick by the sidecar (ticks are never retried).
        raise _invalid(
            f"{td.name} has no timer handler, but timer {tick.name!r} ticked; add "
            "`async def on_timer(self, tick: sigx.TimerTick)` to the class, or cancel the timer"
        )
    await hook(tick_from_proto(tick))
    return b""


async def _invoke(td: TypeDef, instance: Any, invoke: app_pb2.Invoke) -> bytes:
    attr = td.methods.get(invoke.method)
    if attr is None:
        raise _invalid(f"{td.name} has no method {invoke.method!r}; it has {sorted(td.methods)}")
    out = await getattr(instance, attr)(bytes(invoke.payload))
    if out is None:
        return b""
    if isinstance(out, str):
        return out.encode()
    return bytes(out)
