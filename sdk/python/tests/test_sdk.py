"""The sigx Python SDK against a real sigx-sidecar, plus its not-after logic on a fake clock."""

from __future__ import annotations

import asyncio
import signal
import tempfile
from pathlib import Path

import pytest

import sigx
from sigx.actors.v1 import app_pb2, errors_pb2, types_pb2
from sigx.dispatch import Dispatcher
from sigx.errors import AppError, InvalidError, OutcomeUnknown, Timeout, Unreachable
from sigx.registry import type_def

from conftest import Sidecar, start_sidecar, stop_sidecar


@sigx.actor("Counter")
class Counter:
    def __init__(self, ctx: sigx.ActorContext) -> None:
        self.ctx = ctx
        self.count = 0
        self.inside = 0
        self.max_inside = 0

    @sigx.method
    async def incr(self, payload: bytes) -> bytes:
        self.inside += 1
        self.max_inside = max(self.max_inside, self.inside)
        await asyncio.sleep(0.005)  # an await point where an overlapping turn would interleave
        self.count += 1
        self.inside -= 1
        return str(self.count).encode()

    @sigx.method
    async def overlap(self, payload: bytes) -> bytes:
        return str(self.max_inside).encode()

    @sigx.method
    async def fail(self, payload: bytes) -> bytes:
        raise ValueError("asked to fail")

    @sigx.method
    async def bad(self, payload: bytes) -> bytes:
        raise InvalidError("bad input, as asked")

    @sigx.method
    async def hang(self, payload: bytes) -> bytes:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            CANCELLED.append(sigx.current_turn().key)
            raise
        return b"never"


CANCELLED: list[str] = []


def run(coro):  # no pytest-asyncio: one event loop per test
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_serve_and_call(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with sigx.App(actors=[Counter], socket=str(sidecar.socket), handle_signals=False) as app:
            assert (await app.registered()).startswith("py-host")
            c = app.client
            assert [await c.call("Counter", "a", "incr") for _ in range(3)] == [b"1", b"2", b"3"]
            assert await c.call("Counter", "b", "incr") == b"1"
            members = await c.members(status=sigx.ANY)
            assert [h.id for h in members.hosts] == [app.host_id]

    run(main())


def test_concurrent_calls_to_one_actor_never_overlap(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with sigx.App(actors=[Counter], socket=str(sidecar.socket), handle_signals=False) as app:
            await app.registered()
            got = await asyncio.gather(*(app.client.call("Counter", "x", "incr") for _ in range(20)))
            assert sorted(int(g) for g in got) == list(range(1, 21))
            assert await app.client.call("Counter", "x", "overlap") == b"1"

    run(main())


def test_errors_decode_to_typed_errors(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with sigx.App(actors=[Counter], socket=str(sidecar.socket), handle_signals=False) as app:
            await app.registered()
            with pytest.raises(AppError, match="asked to fail") as e:
                await app.client.call("Counter", "a", "fail")
            assert isinstance(e.value, sigx.errors.ActorError)
            with pytest.raises(InvalidError, match="bad input"):
                await app.client.call("Counter", "a", "bad")
            with pytest.raises(InvalidError):
                await app.client.call("NoSuchType", "a", "get")
            with pytest.raises(Timeout):
                await app.client.call("Counter", "a", "hang", timeout=0.3)
        async with sigx.Client(str(sidecar.socket) + ".missing") as nobody:
            with pytest.raises(Unreachable):
                await nobody.call("Counter", "a", "incr", timeout=2)

    run(main())


def test_a_short_call_timeout_cancels_the_handler_at_not_after(sidecar: Sidecar) -> None:
    CANCELLED.clear()

    async def main() -> None:
        async with sigx.App(actors=[Counter], socket=str(sidecar.socket), handle_signals=False) as app:
            await app.registered()
            with pytest.raises(Timeout):
                await app.client.call("Counter", "slow", "hang", timeout=0.5)
            for _ in range(100):
                if CANCELLED:
                    break
                await asyncio.sleep(0.05)
            assert CANCELLED == ["slow"], "the handler was not cancelled at its not-after"

    run(main())


def test_sidecar_sigterm_ends_the_session_cleanly(sidecar: Sidecar) -> None:
    async def main() -> None:
        app = sigx.App(actors=[Counter], socket=str(sidecar.socket), reconnect=False,
                       handle_signals=False)
        async with app:
            await app.registered()
            assert await app.client.call("Counter", "a", "incr") == b"1"
            sidecar.process.send_signal(signal.SIGTERM)
            await app.wait()  # returns, does not raise ServeError
            assert app.last_end is not None and app.last_end.clean, app.last_end

    run(main())
    assert sidecar.process.wait(timeout=20) == 0


def test_the_app_reconnects_to_a_restarted_sidecar(pb) -> None:
    with tempfile.TemporaryDirectory(prefix="sigx-py-") as d:
        first = start_sidecar(Path(d), pb)

        async def main() -> None:
            nonlocal first
            async with sigx.App(actors=[Counter], socket=str(first.socket), handle_signals=False) as app:
                await app.registered()
                assert await app.client.call("Counter", "a", "incr") == b"1"
                await asyncio.to_thread(stop_sidecar, first)
                first = await asyncio.to_thread(start_sidecar, Path(d), pb)
                for _ in range(200):
                    if app.sessions >= 2 and app._registered.is_set():
                        break
                    await asyncio.sleep(0.05)
                assert app.sessions == 2, "the app did not register with the restarted sidecar"
                assert await app.client.call("Counter", "a", "incr") == b"1"

        try:
            run(main())
        finally:
            stop_sidecar(first)


# The not-after logic, on a fake clock (a real lease is too long to wait for).

def _turn(kind: str, not_after: int, method: str = "hang", turn_id: int = 7) -> app_pb2.Turn:
    t = app_pb2.Turn(turn_id=turn_id, actor=types_pb2.ActorRef(actor_type="Counter", key="k"),
                     activation_id="act-1", not_after_unix_ms=not_after)
    if kind == "activate":
        t.activate.SetInParent()
    else:
        t.invoke.method = method
    return t


class FakeClock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_a_turn_read_at_or_past_not_after_is_refused_unrun() -> None:
    async def main() -> None:
        clock = FakeClock(10_000)
        d = Dispatcher([type_def(Counter)], client=None, clock=clock)  # type: ignore[arg-type]
        r = await d.handle(_turn("activate", not_after=10_000))
        assert r.error.kind == errors_pb2.ERROR_KIND_UNREACHABLE
        assert not d.activations, "the refused Activate ran"
        r = await d.handle(_turn("activate", not_after=10_001))
        assert r.WhichOneof("outcome") == "ok" and d.activations

    run(main())


def test_a_running_turn_is_cancelled_at_not_after_and_answers_timeout() -> None:
    async def main() -> None:
        clock = FakeClock(10_000)
        d = Dispatcher([type_def(Counter)], client=None, clock=clock)  # type: ignore[arg-type]
        await d.handle(_turn("activate", not_after=0))
        CANCELLED.clear()
        r = await d.handle(_turn("invoke", not_after=10_100))
        assert r.error.kind == errors_pb2.ERROR_KIND_TIMEOUT
        assert CANCELLED == ["k"]

    run(main())


def test_a_turn_past_its_boot_not_after_is_refused_though_the_wall_clock_says_in_time() -> None:
    """Regression (issue 12, schedule S_wall_step_back_inside_a_suspend): a turn queued before a
    VM suspend, read at the resume after the wall clock was stepped back. The wall clock says
    it is in time; the boot clock says it is past, and refuses it."""
    async def main() -> None:
        wall, boot = FakeClock(10_000), FakeClock(500_000)
        d = Dispatcher([type_def(Counter)], client=None, clock=wall,  # type: ignore[arg-type]
                       boot_clock=boot)
        t = _turn("activate", not_after=10_500)
        t.not_after_boot_ms = 500_500
        wall.now -= 30_000 - 4_000  # a 4 s suspend, the wall clock stepped back 30 s
        boot.now += 4_000
        r = await d.handle(t)
        assert r.error.kind == errors_pb2.ERROR_KIND_UNREACHABLE, r
        assert "boot clock" in r.error.message
        assert not d.activations, "the refused Activate ran"
        # Without a boot clock the same turn runs: the wall clock alone was fooled.
        bootless = Dispatcher([type_def(Counter)], client=None, clock=wall,  # type: ignore[arg-type]
                              boot_clock=lambda: None)
        r = await bootless.handle(t)
        assert r.WhichOneof("outcome") == "ok" and bootless.activations

    run(main())


def test_a_running_turn_is_cancelled_at_its_boot_not_after() -> None:
    async def main() -> None:
        d = Dispatcher([type_def(Counter)], client=None, clock=FakeClock(10_000),  # type: ignore[arg-type]
                       boot_clock=FakeClock(500_000))
        await d.handle(_turn("activate", not_after=0))
        CANCELLED.clear()
        t = _turn("invoke", not_after=70_000)  # the wall bound is a minute away
        t.not_after_boot_ms = 500_100
        r = await d.handle(t)
        assert r.error.kind == errors_pb2.ERROR_KIND_TIMEOUT
        assert CANCELLED == ["k"]

    run(main())


def test_a_fence_cancels_running_turns_and_drops_activations() -> None:
    async def main() -> None:
        d = Dispatcher([type_def(Counter)], client=None, clock=FakeClock(0))  # type: ignore[arg-type]
        await d.handle(_turn("activate", not_after=0))
        CANCELLED.clear()
        running = asyncio.create_task(d.handle(_turn("invoke", not_after=0)))
        await asyncio.sleep(0.05)
        assert d.fence() == 1 and not d.activations
        r = await running
        assert r.error.kind == errors_pb2.ERROR_KIND_TIMEOUT and CANCELLED == ["k"]

    run(main())


def test_outcome_unknown_is_not_an_actor_error() -> None:
    assert not issubclass(OutcomeUnknown, sigx.errors.ActorError)
    assert issubclass(OutcomeUnknown, sigx.errors.SigxError)


DEACTIVATED: list[tuple[str, int]] = []


@sigx.actor("Hooked")
class Hooked:
    def __init__(self, ctx: sigx.ActorContext) -> None:
        self.key = ctx.key
        self.activated = False

    async def on_activate(self) -> None:
        self.activated = True

    async def on_deactivate(self, reason: int) -> None:
        DEACTIVATED.append((self.key, reason))

    @sigx.method
    async def get(self, payload: bytes) -> bytes:
        return b"activated" if self.activated else b"not activated"


@sigx.worker("Slow", max_concurrency=2)
class Slow:
    def __init__(self, ctx: sigx.WorkerContext) -> None:
        self.inside = 0
        self.max_inside = 0

    @sigx.method
    async def work(self, payload: bytes) -> bytes:
        self.inside += 1
        self.max_inside = max(self.max_inside, self.inside)
        await asyncio.sleep(0.05)
        self.inside -= 1
        return str(self.max_inside).encode()


def test_hooks_workers_dispatch_on_and_watch_members(sidecar: Sidecar) -> None:
    DEACTIVATED.clear()

    async def main() -> None:
        app = sigx.App(actors=[Hooked], workers=[Slow], socket=str(sidecar.socket),
                       handle_signals=False)
        async with app:
            host = await app.registered()
            assert await app.client.call("Hooked", "h", "get") == b"activated"
            got = await asyncio.gather(*(app.client.call("Slow", "", "work") for _ in range(6)))
            assert max(int(g) for g in got) == 2, f"more than max_concurrency=2 at once: {got}"
            assert await app.client.dispatch_on(host, "Slow", "k", "work") in (b"1", b"2")
            watch = app.client.watch_members(status=sigx.ANY)
            first = await anext(watch)
            assert [h.id for h in first.hosts] == [host]
            await watch.aclose()
            app.stop()  # drain: the sidecar deactivates through the app, then ends with OK
            await app.wait()
        assert DEACTIVATED == [("h", sigx.DEACTIVATE_REASON_SHUTDOWN)]

    run(main())


def test_a_connection_lost_mid_call_is_outcome_unknown(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with sigx.App(actors=[Counter], socket=str(sidecar.socket), handle_signals=False,
                            reconnect=False) as app:
            await app.registered()
            async with sigx.Client(str(sidecar.socket)) as client:
                call = asyncio.create_task(client.call("Counter", "k", "hang", timeout=20))
                await asyncio.sleep(0.5)
                sidecar.process.kill()  # the connection dies with the call in flight
                with pytest.raises(OutcomeUnknown) as e:
                    await call
                assert not isinstance(e.value, sigx.errors.ActorError)

    run(main())


def test_the_counter_example_serves_and_drains_on_sigterm(sidecar: Sidecar) -> None:
    import os
    import subprocess
    import sys

    example = Path(__file__).resolve().parents[3] / "examples/counter-python/counter.py"
    env = dict(os.environ, SIGX_SOCKET=str(sidecar.socket))
    proc = subprocess.Popen([sys.executable, str(example)], env=env)
    try:
        async def main() -> None:
            async with sigx.Client(str(sidecar.socket)) as client:
                for _ in range(200):
                    if (await client.status()).app_connected:
                        break
                    await asyncio.sleep(0.05)
                assert await client.call("Counter", "e", "incr", b"5") == b"5"
                assert await client.call("Counter", "e", "incr") == b"6"
                proc.send_signal(signal.SIGTERM)
                assert await asyncio.to_thread(proc.wait, 30) == 0
                status = await client.status()
                assert not status.app_connected and not status.activations, status

        run(main())
    finally:
        if proc.poll() is None:
            proc.kill()


def test_every_kind_decodes_to_its_own_class() -> None:
    seen = set()
    for kind in range(errors_pb2.ERROR_KIND_FENCED, errors_pb2.ERROR_KIND_STALE_EPOCH + 1):
        err = sigx.errors.from_detail(
            errors_pb2.ErrorDetail(kind=kind, message="m", owner_hint="h", retry_after_ms=40)
        )
        assert err.kind == kind and err.message == "m"
        assert isinstance(err, sigx.errors.ActorError) == (kind != errors_pb2.ERROR_KIND_OUTCOME_UNKNOWN)
        seen.add(type(err))
    assert len(seen) == 11
    unspecified = sigx.errors.from_detail(errors_pb2.ErrorDetail(kind=0, message="?"))
    assert isinstance(unspecified, OutcomeUnknown)
    wrapped = sigx.errors.from_detail(errors_pb2.ErrorDetail(
        kind=errors_pb2.ERROR_KIND_ACTIVATION, message="gave up",
        cause=errors_pb2.ErrorDetail(kind=errors_pb2.ERROR_KIND_WRONG_HOST, message="moved")))
    assert isinstance(wrapped, sigx.errors.ActivationError)
    assert isinstance(wrapped.cause, sigx.errors.WrongHost)


@sigx.actor("Rendezvous", reentrant=True)
class Rendezvous:
    """Two turns that can only both finish if they run at once (reentrant)."""

    def __init__(self, ctx: sigx.ActorContext) -> None:
        self.arrived = 0
        self.both = asyncio.Event()

    @sigx.method
    async def meet(self, payload: bytes) -> bytes:
        self.arrived += 1
        if self.arrived == 2:
            self.both.set()
        await asyncio.wait_for(self.both.wait(), 5)
        return b"met"


def test_a_reentrant_actor_runs_its_turns_at_once(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with sigx.App(actors=[Rendezvous], socket=str(sidecar.socket),
                            handle_signals=False) as app:
            await app.registered()
            got = await asyncio.gather(*(app.client.call("Rendezvous", "r", "meet", timeout=10)
                                         for _ in range(2)))
            assert got == [b"met", b"met"]

    run(main())


def test_the_registration_carries_every_declared_option() -> None:
    @sigx.actor("Idle", reentrant=True, idle_timeout=1.5)
    class Idle:
        def __init__(self, ctx: sigx.ActorContext) -> None: ...

        @sigx.method(name="Get")
        async def get(self, payload: bytes) -> bytes:
            return b""

    async def main() -> None:
        app = sigx.App(actors=[Idle, Counter], workers=[Slow], socket="/nonexistent",
                       handle_signals=False)
        reg = app.registration()
        idle = next(a for a in reg.actors if a.name == "Idle")
        assert (idle.reentrant, idle.idle_timeout_ms, list(idle.methods)) == (True, 1500, ["Get"])
        counter = next(a for a in reg.actors if a.name == "Counter")
        assert list(counter.methods) == ["bad", "fail", "hang", "incr", "overlap"]
        assert [(w.name, w.max_concurrency, list(w.methods)) for w in reg.workers] == [
            ("Slow", 2, ["work"])
        ]
        with pytest.raises(sigx.errors.ServeError, match="unique"):
            sigx.App(actors=[Counter, Counter], socket="/nonexistent")
        with pytest.raises(TypeError, match="not declared"):
            sigx.App(actors=[int], socket="/nonexistent")

    run(main())
