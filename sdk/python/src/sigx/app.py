"""`sigx.App`: registers the types with the sidecar and serves their turns, reconnecting.

    async with sigx.App(actors=[Counter]) as app:
        await app.wait()        # until SIGTERM/SIGINT (or app.stop()) has drained it

Serving runs in a background task. Stopping sends Drain and keeps answering turns until the
sidecar ends the stream with OK. A stream the sidecar ends with OK on its own (it got SIGTERM) is
a clean "stopping" end; any other end (UNAVAILABLE, a reset) is "broken". Either way the app
drops its activations (no deactivation hooks: the sidecar already deactivated or lost them) and,
unless `reconnect=False`, re-opens Serve with capped backoff (100 ms doubling to 5 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from sigx.actors.v1 import app_pb2, app_pb2_grpc
from sigx.client import Client, channel_for, socket_from_env
from sigx.dispatch import Clock, Dispatcher, wall_clock_ms
from sigx.errors import ServeError, from_rpc_error
from sigx.registry import type_def

log = logging.getLogger("sigx")

REGISTER_TIMEOUT_S = 10.0
DRAIN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class SessionEnd:
    """How one Serve session ended: `clean` = the sidecar ended it with OK (it drained this app:
    "stopping"); otherwise it broke ("crashed")."""

    clean: bool
    reason: str


class App:
    """The app beside one sidecar (default socket $SIGX_SOCKET)."""

    def __init__(
        self,
        *,
        actors: Sequence[type] = (),
        workers: Sequence[type] = (),
        app_name: str = "sigx-python-app",
        socket: str | None = None,
        reconnect: bool = True,
        handle_signals: bool = True,
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.socket = socket or socket_from_env()
        self.app_name = app_name
        self.reconnect = reconnect
        self.handle_signals = handle_signals
        self.types = [type_def(c) for c in [*actors, *workers]]
        names = [t.name for t in self.types]
        if len(set(names)) != len(names):
            raise ServeError(f"type names must be unique across actors and workers: {names}")
        self.client = Client(self.socket)
        self.dispatcher = Dispatcher(self.types, self.client, clock)
        self.host_id: str | None = None
        self.sessions = 0
        self.last_end: SessionEnd | None = None
        self._registered = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def registration(self) -> app_pb2.Register:
        return app_pb2.Register(
            actors=[t.spec() for t in self.types if t.stateful],
            workers=[t.spec() for t in self.types if not t.stateful],
            app_name=self.app_name,
        )

    async def __aenter__(self) -> App:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()
        with contextlib.suppress(Exception):
            await self.wait()
        await self.client.close()

    def start(self) -> None:
        """Starts serving in the background (`async with` does it)."""
        if self._task is None:
            self._task = asyncio.create_task(self.serve(), name=f"sigx-serve-{self.app_name}")
            if self.handle_signals:
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    with contextlib.suppress(NotImplementedError, RuntimeError):
                        loop.add_signal_handler(sig, self.stop)

    def stop(self) -> None:
        """Asks the sidecar to drain this app; serving ends once it has."""
        self._stop.set()

    async def wait(self) -> None:
        """Until serving has ended; re-raises a fatal ServeError."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def registered(self, timeout: float = 15.0) -> str:
        """Waits until registered with the sidecar; returns its host id."""
        waiter = asyncio.ensure_future(self._registered.wait())
        pending = [waiter] + ([self._task] if self._task else [])
        done, _ = await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            waiter.cancel()
            if self._task in done:
                self._task.result()
                raise ServeError("serving ended before the app registered")
            raise TimeoutError(f"not registered with the sidecar at {self.socket} in {timeout} s")
        assert self.host_id is not None
        return self.host_id

    async def serve(self) -> None:
        """The serving loop: sessions, reconnecting with backoff, until stopped."""
        delay = 0.1
        while not self._stop.is_set():
            registered, end = await self._session()
            self._registered.clear()
            self.dispatcher.drop_all()
            if end is None:  # we drained and the sidecar let us go
                return
            self.last_end = end
            if registered:
                delay = 0.1
                (log.info if end.clean else log.warning)(
                    "serve session ended (%s): %s", "stopping" if end.clean else "crashed", end.reason
                )
            if not self.reconnect:
                if end.clean:
                    return
                raise ServeError(f"the serve stream broke: {end.reason}")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            delay = min(delay * 2, 5.0)

    async def _session(self) -> tuple[bool, SessionEnd | None]:
        """One Serve stream. Returns (registered?, how it ended; None = drained on our request)."""
        channel = channel_for(self.socket)
        out: asyncio.Queue[app_pb2.AppMessage | None] = asyncio.Queue()
        turns: set[asyncio.Task[Any]] = set()
        try:
            call = app_pb2_grpc.ActorHostStub(channel).Serve()
            try:
                await call.write(app_pb2.AppMessage(register=self.registration()))
                first = await asyncio.wait_for(call.read(), REGISTER_TIMEOUT_S)
            except (grpc.RpcError, asyncio.TimeoutError, grpc.aio.UsageError) as e:
                call.cancel()
                if isinstance(e, grpc.RpcError) and e.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    raise ServeError(f"the sidecar refused the registration: {from_rpc_error(e)}")
                return False, SessionEnd(False, f"could not register: {e!r:.300}")
            if first is grpc.aio.EOF or first.WhichOneof("msg") != "registered":
                code = await call.code()
                return False, SessionEnd(False, f"no Registered from the sidecar ({code})")
            self.host_id = first.registered.host_id
            # A fence is terminal for that sidecar only; a restarted one is a new host.
            self.dispatcher.fenced = False
            self.sessions += 1
            self._registered.set()
            log.info("registered with %s (session %d)", self.host_id, self.sessions)

            async def writer() -> None:
                while (msg := await out.get()) is not None:
                    await call.write(msg)

            async def run_turn(turn: app_pb2.Turn) -> None:
                out.put_nowait(app_pb2.AppMessage(result=await self.dispatcher.handle(turn)))

            writing = asyncio.create_task(writer())
            reading = asyncio.ensure_future(call.read())
            stopping = asyncio.ensure_future(self._stop.wait())
            drain_deadline: float | None = None
            loop = asyncio.get_running_loop()
            try:
                while True:
                    timeout = None if drain_deadline is None else drain_deadline - loop.time()
                    waits = {reading, writing} | ({stopping} if drain_deadline is None else set())
                    done, _ = await asyncio.wait(waits, timeout=timeout,
                                                 return_when=asyncio.FIRST_COMPLETED)
                    if not done:
                        log.warning("the sidecar did not drain this app in %s s", DRAIN_TIMEOUT_S)
                        return True, None
                    if stopping in done and drain_deadline is None:
                        out.put_nowait(app_pb2.AppMessage(drain=app_pb2.Drain()))
                        drain_deadline = loop.time() + DRAIN_TIMEOUT_S
                    if writing in done:
                        writing.result()
                        return True, SessionEnd(False, "the writer ended")
                    if reading not in done:
                        continue
                    try:
                        msg = reading.result()
                    except grpc.RpcError as e:
                        if drain_deadline is not None:
                            return True, None
                        return True, SessionEnd(False, f"the serve stream failed: {from_rpc_error(e)}")
                    if msg is grpc.aio.EOF:
                        code = await call.code()
                        if drain_deadline is not None:
                            return True, None
                        return True, SessionEnd(
                            code == grpc.StatusCode.OK, f"the sidecar ended the stream with {code.name}"
                        )
                    which = msg.WhichOneof("msg")
                    if which == "turn":
                        t = asyncio.create_task(run_turn(msg.turn))
                        turns.add(t)
                        t.add_done_callback(turns.discard)
                    elif which == "fenced":
                        n = self.dispatcher.fence()
                        log.error("the sidecar fenced (%s): dropped %d activations", msg.fenced.reason, n)
                    reading = asyncio.ensure_future(call.read())
            except grpc.RpcError as e:
                return True, SessionEnd(False, f"the serve stream failed: {from_rpc_error(e)}")
            finally:
                stopping.cancel()
                reading.cancel()
                if turns and drain_deadline is None:
                    # The stream is gone: no answer can reach anyone, so stop the handlers now.
                    self.dispatcher.cancel_running()
                if turns:
                    await asyncio.wait(turns, timeout=10)
                out.put_nowait(None)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(writing, 2)
                with contextlib.suppress(Exception):
                    await call.done_writing()
                call.cancel()
        finally:
            await channel.close()
