"""Durable reminders through the Python SDK, against a real sigx-sidecar on SQLite state."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import sigx
from sigx.errors import InvalidError, StaleEpoch

from conftest import Sidecar, run, start_sidecar, stop_sidecar, until

#: (key, reminder) for every delivery the handler saw, in order, and when it ran.
SEEN: list[tuple[str, sigx.Reminder, datetime]] = []
ACTIVATED: list[str] = []


@sigx.actor("Alarm")
class Alarm:
    def __init__(self, ctx: sigx.ActorContext) -> None:
        self.ctx = ctx

    async def on_activate(self) -> None:
        ACTIVATED.append(self.ctx.key)

    async def on_reminder(self, reminder: sigx.Reminder) -> None:
        SEEN.append((self.ctx.key, reminder, datetime.now(timezone.utc)))
        if reminder.payload == b"fail-once" and reminder.attempt == 1:
            raise RuntimeError("failing the first delivery on purpose")
        self.ctx.state.put("last", reminder.name)

    @sigx.method
    async def arm(self, payload: bytes) -> bytes:
        """Sets a reminder on this very actor from inside its own turn."""
        due = await self.ctx.this_actor().set_reminder(
            "self", timedelta(milliseconds=100), payload=payload
        )
        return str(int(due.timestamp() * 1000)).encode()

    @sigx.method
    async def last(self, payload: bytes) -> bytes:
        return (await self.ctx.state.get("last", "")).encode()


#: `this_actor()` of each Lapse activation, kept past its end, with its epoch.
KEPT: list[tuple[int, sigx.ActorHandle]] = []
#: (epoch, reason) of each Lapse deactivation.
LAPSED: list[tuple[int, int]] = []


@sigx.actor("Lapse", idle_timeout=0.4)
class Lapse:
    """Deactivates 400 ms after its last call, so the next call gets a newer activation."""

    def __init__(self, ctx: sigx.ActorContext) -> None:
        self.ctx = ctx

    async def on_deactivate(self, reason: int) -> None:
        LAPSED.append((self.ctx.epoch, reason))

    @sigx.method
    async def keep(self, payload: bytes) -> bytes:
        me = self.ctx.this_actor()
        KEPT.append((self.ctx.epoch, me))
        await me.set_reminder("mine", timedelta(hours=1))
        return str(self.ctx.epoch).encode()


@sigx.actor("Mute")
class Mute:
    """An actor type with no reminder handler."""

    def __init__(self, ctx: sigx.ActorContext) -> None:
        pass

    @sigx.method
    async def ping(self, payload: bytes) -> bytes:
        return b"pong"


@sigx.worker("Pool")
class Pool:
    def __init__(self, ctx: sigx.WorkerContext) -> None:
        pass

    @sigx.method
    async def ping(self, payload: bytes) -> bytes:
        return b"pong"


@pytest.fixture
def sidecar(pb) -> Iterator[Sidecar]:
    SEEN.clear()
    ACTIVATED.clear()
    KEPT.clear()
    LAPSED.clear()
    with tempfile.TemporaryDirectory(prefix="sigx-pyr-") as d:
        s = start_sidecar(Path(d), pb, {"SIGX_STATE": "sqlite", "SIGX_STATE_PATH": f"{d}/state.db"})
        try:
            yield s
        finally:
            stop_sidecar(s)


def serve(sidecar: Sidecar) -> sigx.App:
    return sigx.App(actors=[Alarm, Lapse, Mute], workers=[Pool], socket=str(sidecar.socket),
                    handle_signals=False, reconnect=False)


def seen(key: str) -> list[sigx.Reminder]:
    return [r for k, r, _ in SEEN if k == key]


def test_a_one_shot_reminder_activates_the_actor_and_is_then_gone(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with serve(sidecar) as app:
            await app.registered()
            alarm = app.client.actor("Alarm", "one")
            before = datetime.now(timezone.utc)
            due = await alarm.set_reminder("wake", timedelta(milliseconds=300), payload=b"hello")
            after = datetime.now(timezone.utc)
            # Relative to the sidecar's clock (the same machine's here).
            slack = timedelta(milliseconds=200)
            assert before + timedelta(milliseconds=300) - slack <= due <= after + timedelta(milliseconds=300) + slack
            listed = await alarm.list_reminders()
            assert [(i.name, i.due, i.period, i.payload) for i in listed] == [
                ("wake", due, None, b"hello")
            ]
            await until("the one-shot delivery", lambda: seen("one"), SEEN)
            assert ACTIVATED == ["one"], "the reminder activated the actor (nothing else called it)"
            [r] = seen("one")
            assert (r.name, r.payload, r.due, r.period, r.attempt) == ("wake", b"hello", due, None, 1)
            assert r.due.tzinfo is not None
            ran_at = SEEN[0][2]
            assert ran_at >= due - timedelta(milliseconds=5), (ran_at, due)
            # Settled after the turn answered: poll for the row to go.
            deadline = time.monotonic() + 5
            while await alarm.list_reminders() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert await alarm.list_reminders() == []
            assert await alarm.call("last") == b"wake", "the reminder turn's state write committed"
            assert seen("one") == [r], "a one-shot reminder fires once"

    run(main())


def test_a_periodic_reminder_ticks_by_its_period_until_deleted(sidecar: Sidecar) -> None:
    period = timedelta(milliseconds=300)

    async def main() -> None:
        async with serve(sidecar) as app:
            await app.registered()
            alarm = app.client.actor("Alarm", "tick")
            first = await alarm.set_reminder("tick", datetime.now(timezone.utc), period=period,
                                             payload="p")
            await until("three ticks", lambda: len(seen("tick")) >= 3, SEEN)
            assert await alarm.delete_reminder("tick") is True
            ticks = seen("tick")
            assert ticks[0].due == first
            for a, b in zip(ticks, ticks[1:]):
                gap = b.due - a.due
                assert gap > timedelta(0) and gap % period == timedelta(0), (a.due, b.due)
            assert all((t.name, t.payload, t.period, t.attempt) == ("tick", b"p", period, 1)
                       for t in ticks)
            assert await alarm.list_reminders() == []
            after_delete = len(seen("tick"))
            await asyncio.sleep(4 * period.total_seconds())
            # One delivery may already have been in flight when the delete landed.
            assert len(seen("tick")) <= after_delete + 1, seen("tick")
            assert await alarm.delete_reminder("tick") is False

    run(main())


def test_a_failed_delivery_is_retried_as_attempt_2_of_the_same_occurrence(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with serve(sidecar) as app:
            await app.registered()
            alarm = app.client.actor("Alarm", "retry")
            due = await alarm.set_reminder("flaky", timedelta(0), payload=b"fail-once")
            await until("the retry", lambda: len(seen("retry")) >= 2, SEEN)
            first, second = seen("retry")[:2]
            assert (first.attempt, second.attempt) == (1, 2)
            assert first.due == second.due == due, "a retry keeps the occurrence's due time"
            deadline = time.monotonic() + 5
            while await alarm.list_reminders() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert await alarm.list_reminders() == []
            assert len(seen("retry")) == 2, "the ok second attempt settled it"

    run(main())


def test_an_actor_sets_its_own_reminder_from_inside_a_turn(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with serve(sidecar) as app:
            await app.registered()
            due_ms = int(await app.client.call("Alarm", "me", "arm", b"from-myself"))
            await until("the self-set reminder", lambda: seen("me"), SEEN)
            [r] = seen("me")
            assert (r.name, r.payload, r.attempt) == ("self", b"from-myself", 1)
            assert int(r.due.timestamp() * 1000) == due_ms

    run(main())


def test_this_actor_carries_its_epoch_and_a_superseded_one_changes_nothing(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with serve(sidecar) as app:
            await app.registered()
            first = int(await app.client.call("Lapse", "l", "keep"))
            await until("the idle deactivation", lambda: LAPSED, LAPSED)
            assert LAPSED == [(first, sigx.DEACTIVATE_REASON_IDLE)]
            second = int(await app.client.call("Lapse", "l", "keep"))
            assert second > first
            [(e1, old), (e2, current)] = KEPT
            assert (e1, old.fence, e2, current.fence) == (first, first, second, second)
            # The first activation's handle is stale: the store refuses its set and delete.
            with pytest.raises(StaleEpoch):
                await old.set_reminder("late", timedelta(hours=1))
            with pytest.raises(StaleEpoch):
                await old.delete_reminder("mine")
            with pytest.raises(StaleEpoch):
                await app.client.set_reminder("Lapse", "l", "late", timedelta(seconds=1), epoch=first)
            handle = app.client.actor("Lapse", "l")
            assert [r.name for r in await handle.list_reminders()] == ["mine"]
            # The current activation's handle, and a client's unfenced one, still work.
            assert await current.delete_reminder("mine") is True
            await handle.set_reminder("outside", timedelta(hours=1))
            assert [r.name for r in await handle.list_reminders()] == ["outside"]

    run(main())


def test_bad_input_is_invalid_with_the_sidecars_reason(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with serve(sidecar) as app:
            await app.registered()
            alarm = app.client.actor("Alarm", "bad")
            with pytest.raises(InvalidError, match="period of 50 ms, under the minimum of 100 ms"):
                await alarm.set_reminder("fast", timedelta(seconds=1),
                                         period=timedelta(milliseconds=50))
            with pytest.raises(InvalidError, match=r"a reminder name must be 1..=256 bytes \(got 0 bytes\)"):
                await alarm.set_reminder("", timedelta(seconds=1))
            with pytest.raises(InvalidError, match="workers have no reminders"):
                await app.client.set_reminder("Pool", "k", "x", timedelta(seconds=1))
            with pytest.raises(TypeError, match="due must be a datetime"):
                await alarm.set_reminder("x", 5)  # type: ignore[arg-type]
            assert await alarm.list_reminders() == []

    run(main())


def test_a_type_without_a_handler_and_a_worker_answer_invalid() -> None:
    from sigx.actors.v1 import app_pb2, types_pb2
    from sigx.dispatch import Dispatcher
    from sigx.registry import type_def

    def turn(turn_id: int, actor_type: str, kind: str) -> app_pb2.Turn:
        t = app_pb2.Turn(turn_id=turn_id, actor=types_pb2.ActorRef(actor_type=actor_type, key="k"),
                         activation_id="act-1", epoch=1)
        if kind == "activate":
            t.activate.SetInParent()
        else:
            t.reminder.name = "nag"
            t.reminder.attempt = 1
        return t

    async def main() -> None:
        d = Dispatcher([type_def(Mute), type_def(Pool)], client=None)  # type: ignore[arg-type]
        assert (await d.handle(turn(1, "Mute", "activate"))).WhichOneof("outcome") == "ok"
        r = await d.handle(turn(2, "Mute", "reminder"))
        assert r.error.kind == sigx.errors.errors_pb2.ERROR_KIND_INVALID
        assert "Mute has no reminder handler, but reminder 'nag' came due" in r.error.message
        assert "on_reminder" in r.error.message
        w = await d.handle(turn(3, "Pool", "reminder"))
        assert w.error.kind == sigx.errors.errors_pb2.ERROR_KIND_INVALID
        assert w.error.message == "Pool is a worker type: workers have no reminders"

    run(main())
