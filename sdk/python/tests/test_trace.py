"""The W3C trace context through the Python SDK, against a real sigx-sidecar (export off, so the
sidecar passes the caller's context through unchanged): a turn exposes its trace, and a call made
from inside the turn carries it to the nested turn."""

from __future__ import annotations

import asyncio
import json

import sigx

from conftest import Sidecar, run

TRACE = sigx.TraceContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "sigx=py")


def seen(t: sigx.TraceContext | None) -> dict | None:
    return None if t is None else {"traceparent": t.traceparent, "tracestate": t.tracestate}


@sigx.actor("Relay")
class Relay:
    def __init__(self, ctx: sigx.ActorContext) -> None:
        self.ctx = ctx

    @sigx.method
    async def inner(self, payload: bytes) -> bytes:
        turn = sigx.current_turn()
        assert sigx.current_trace() == turn.trace, "the ambient trace is the turn's"
        return json.dumps({"turn": seen(turn.trace)}).encode()

    @sigx.method
    async def outer(self, payload: bytes) -> bytes:
        """Calls Relay/<key>-inner from the turn: directly, and from a task it creates."""
        key = f"{self.ctx.key}-inner"
        direct = json.loads(await self.ctx.client.call("Relay", key, "inner"))
        in_task = json.loads(await asyncio.create_task(self.ctx.client.call("Relay", key, "inner")))
        return json.dumps({"turn": seen(sigx.current_turn().trace), "inner": [direct, in_task]}).encode()

    @sigx.method
    async def detached(self, payload: bytes) -> bytes:
        """A call made outside the turn's trace (the check below can fail)."""
        with sigx.with_trace(None):
            inner = json.loads(await self.ctx.client.call("Relay", f"{self.ctx.key}-inner", "inner"))
        return json.dumps({"turn": seen(sigx.current_turn().trace), "inner": [inner]}).encode()


def test_a_turn_exposes_its_trace_and_a_nested_call_carries_it(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with sigx.App(actors=[Relay], socket=str(sidecar.socket), handle_signals=False,
                            reconnect=False) as app:
            await app.registered()
            with sigx.with_trace(TRACE):
                outer = json.loads(await app.client.call("Relay", "o", "outer", timeout=10))
                detached = json.loads(await app.client.call("Relay", "d", "detached", timeout=10))
            plain = json.loads(await app.client.call("Relay", "p", "inner", timeout=10))
        want = seen(TRACE)
        assert outer["turn"] == want, outer
        assert outer["inner"] == [{"turn": want}, {"turn": want}], outer
        assert detached["turn"] == want and detached["inner"] == [{"turn": None}], detached
        assert plain == {"turn": None}, "an untraced call's turn has no trace"

    run(main())
