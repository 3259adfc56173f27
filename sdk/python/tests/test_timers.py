"""Per-activation timers through the Python SDK, against a real sigx-sidecar (no state store:
timers are in memory)."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import sigx
from sigx.errors import InvalidError

from conftest import Sidecar, run, start_sidecar, stop_sidecar, until

#: (key, activation_id, tick) for every tick the handlers saw, in order.
TICKS: list[tuple[str, str, sigx.TimerTick]] = []
#: (key, activation_id) of every deactivation, and how many ticks had run by then.
DEACTIVATED: list[tuple[str, str, int]] = []


@sigx.actor("Beeper")
class Beeper:
    def __init__(self, ctx: sigx.ActorContext) -> None:
        self.ctx = ctx

    async def on_timer(self, tick: sigx.TimerTick) -> None:
        TICKS.append((self.ctx.key, self.ctx.activation_id, tick))

    @sigx.method
    async def once(self, payload: bytes) -> bytes:
        replaced = await self.ctx.set_timer("once", timedelta(milliseconds=100), payload=payload)
        return self.ctx.activation_id.encode() if not replaced else b"replaced"

    @sigx.method
    async def every(self, payload: bytes) -> bytes:
        await self.ctx.set_timer("beat", timedelta(0), period=timedelta(milliseconds=int(payload)),
                                 payload="p")
        return self.ctx.activation_id.encode()

    @sigx.method
    async def stop(self, payload: bytes) -> bytes:
        existed = await self.ctx.cancel_timer(payload.decode())
        return str(existed).encode()

    @sigx.method
    async def bad(self, payload: bytes) -> bytes:
        kind = payload.decode()
        if kind == "name":
            await self.ctx.set_timer("", timedelta(seconds=1))
        elif kind == "delay":
            await self.ctx.set_timer("far", timedelta(days=400))
        elif kind == "zero-period":
            await self.ctx.set_timer("z", timedelta(0), period=timedelta(0))
        return b"set"


@sigx.actor("Brief", idle_timeout=0.6)
class Brief(Beeper):
    """Deactivates 600 ms after its last call; ticks do not keep it alive."""

    async def on_deactivate(self, reason: int) -> None:
        DEACTIVATED.append((self.ctx.key, self.ctx.activation_id, len(TICKS)))


@sigx.actor("Deaf")
class Deaf:
    """An actor type with no timer handler."""

    def __init__(self, ctx: sigx.ActorContext) -> None:
        self.ctx = ctx

    @sigx.method
    async def arm(self, payload: bytes) -> bytes:
        await self.ctx.set_timer("unheard", timedelta(0))
        return b"armed"


@sigx.worker("Crew")
class Crew:
    def __init__(self, ctx: sigx.WorkerContext) -> None:
        self.ctx = ctx

    @sigx.method
    async def arm(self, payload: bytes) -> bytes:
        await self.ctx.set_timer("nope", timedelta(seconds=1))
        return b"armed"


@pytest.fixture
def sidecar(pb) -> Iterator[Sidecar]:
    TICKS.clear()
    DEACTIVATED.clear()
    with tempfile.TemporaryDirectory(prefix="sigx-pyt-") as d:
        s = start_sidecar(Path(d), pb)
        try:
            yield s
        finally:
            stop_sidecar(s)


def serve(sidecar: Sidecar) -> sigx.App:
    return sigx.App(actors=[Beeper, Brief, Deaf], workers=[Crew], socket=str(sidecar.socket),
                    handle_signals=False, reconnect=False)


def ticks(key: str) -> list[sigx.TimerTick]:
    return [t for k, _, t in TICKS if k == key]


def test_a_one_shot_timer_ticks_once_with_its_payload(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with serve(sidecar) as app:
            await app.registered()
            act = (await app.client.call("Beeper", "one", "once", b"hello")).decode()
            await until("the one tick", lambda: ticks("one"), TICKS, every=0.01)
            [(key, tick_act, tick)] = TICKS
            assert (key, tick_act) == ("one", act), "a tick is a turn of the activation that set it"
            assert (tick.name, tick.payload, tick.period, tick.skipped) == ("once", b"hello", None, 0)
            assert tick.due.tzinfo is not None
            # Gone after its tick: cancelling finds nothing, and no second tick comes.
            assert await app.client.call("Beeper", "one", "stop", b"once") == b"False"
            await asyncio.sleep(0.3)
            assert len(ticks("one")) == 1, TICKS

    run(main())


def test_a_periodic_timer_ticks_by_its_period_until_cancelled(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with serve(sidecar) as app:
            await app.registered()
            await app.client.call("Beeper", "p", "every", b"50")
            await until("three ticks", lambda: len(ticks("p")) >= 3, TICKS, every=0.01)
            assert await app.client.call("Beeper", "p", "stop", b"beat") == b"True"
            # The cancel ran in a turn of the (non-reentrant) activation, so no tick was running.
            stopped = len(ticks("p"))
            seen = ticks("p")
            assert all((t.name, t.payload, t.period) == ("beat", b"p", timedelta(milliseconds=50))
                       for t in seen)
            for a, b in zip(seen, seen[1:]):
                gap = b.due - a.due
                # Due times keep the rhythm: each one (skipped + 1) periods after the previous
                # (within the millisecond rounding of the sidecar's clock readings).
                want = timedelta(milliseconds=50) * (b.skipped + 1)
                assert abs(gap - want) <= timedelta(milliseconds=2), (a, b)
            await asyncio.sleep(0.3)
            assert len(ticks("p")) == stopped, "a tick came after cancel_timer returned"
            assert await app.client.call("Beeper", "p", "stop", b"beat") == b"False"

    run(main())


def test_a_timer_is_gone_once_its_activation_deactivates(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with serve(sidecar) as app:
            await app.registered()
            first = (await app.client.call("Brief", "b", "every", b"40")).decode()
            await until("the idle deactivation", lambda: DEACTIVATED, TICKS, timeout=15, every=0.01)
            [(key, act, ticks_then)] = DEACTIVATED
            assert (key, act) == ("b", first)
            assert ticks_then >= 3, f"it ticked while alive: {TICKS}"
            await asyncio.sleep(0.4)
            assert len(ticks("b")) == ticks_then, "a tick ran after the activation deactivated"
            # A new activation starts with no timers.
            assert await app.client.call("Brief", "b", "stop", b"beat") == b"False"
            assert {a for k, a, _ in TICKS if k == "b"} == {first}

    run(main())


def test_bad_input_and_workers_are_invalid(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with serve(sidecar) as app:
            await app.registered()
            with pytest.raises(InvalidError, match=r"timer name of 0 bytes: names are 1..=256 bytes"):
                await app.client.call("Beeper", "bad", "bad", b"name")
            with pytest.raises(InvalidError, match=r"timer due_ms of 34560000000 ms exceeds .*use a reminder"):
                await app.client.call("Beeper", "bad", "bad", b"delay")
            with pytest.raises(InvalidError, match="period of zero; pass period=None"):
                await app.client.call("Beeper", "bad", "bad", b"zero-period")
            with pytest.raises(InvalidError, match="Crew is a worker type, and timers belong to an actor's activation"):
                await app.client.call("Crew", "w", "arm")
            # A type without on_timer answers its ticks INVALID: the sidecar counts a failure.
            assert await app.client.call("Deaf", "d", "arm") == b"armed"

            async def failures() -> int:
                return (await app.client.status()).counters.get("timerFailures", 0)

            deadline = time.monotonic() + 10
            while await failures() < 1:
                assert time.monotonic() < deadline, "the unhandled tick was not counted as failed"
                await asyncio.sleep(0.02)
            assert TICKS == []

    run(main())


def test_a_type_without_on_timer_and_a_worker_answer_invalid() -> None:
    from sigx.actors.v1 import app_pb2, types_pb2
    from sigx.dispatch import Dispatcher
    from sigx.registry import type_def

    def turn(turn_id: int, actor_type: str, kind: str) -> app_pb2.Turn:
        t = app_pb2.Turn(turn_id=turn_id, actor=types_pb2.ActorRef(actor_type=actor_type, key="k"),
                         activation_id="act-1", epoch=1)
        if kind == "activate":
            t.activate.SetInParent()
        else:
            t.timer.name = "beat"
            t.timer.period_ms = 10
        return t

    async def main() -> None:
        d = Dispatcher([type_def(Deaf), type_def(Crew), type_def(Beeper)], client=None)  # type: ignore[arg-type]
        assert (await d.handle(turn(1, "Deaf", "activate"))).WhichOneof("outcome") == "ok"
        r = await d.handle(turn(2, "Deaf", "timer"))
        assert r.error.kind == sigx.errors.errors_pb2.ERROR_KIND_INVALID
        assert "Deaf has no timer handler, but timer 'beat' ticked" in r.error.message
        assert "async def on_timer(self, tick: sigx.TimerTick)" in r.error.message
        w = await d.handle(turn(3, "Crew", "timer"))
        assert w.error.kind == sigx.errors.errors_pb2.ERROR_KIND_INVALID
        assert w.error.message == "Crew is a worker type: workers have no timers"
        assert (await d.handle(turn(4, "Beeper", "activate"))).WhichOneof("outcome") == "ok"
        ok = await d.handle(turn(5, "Beeper", "timer"))
        assert ok.WhichOneof("outcome") == "ok", ok
        [(key, act, tick)] = TICKS
        assert (key, act, tick.name, tick.period) == ("k", "act-1", "beat", timedelta(milliseconds=10))

    TICKS.clear()
    run(main())
