"""The W3C trace context of calls: a turn's, exposed to its handler and carried by the calls it
makes.

The context rides on a `contextvars.ContextVar`, so it follows asyncio tasks the way a turn's
code runs: inside a handler, `current_trace()` is the turn's trace (the sidecar's turn span when
it exports spans, else the caller's own context), and every `Client.call` made from the handler,
or from a task it creates, carries it as `CallRequest.trace`, so the callee's spans and turn are
children of this turn. Outside a handler, `with_trace(...)` sets one for a block of calls.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

from sigx.actors.v1 import types_pb2


@dataclass(frozen=True)
class TraceContext:
    """One span's W3C `traceparent` and `tracestate` headers."""

    traceparent: str
    tracestate: str = ""

    def to_proto(self) -> types_pb2.TraceContext:
        return types_pb2.TraceContext(traceparent=self.traceparent, tracestate=self.tracestate)

    @staticmethod
    def from_proto(tc: types_pb2.TraceContext) -> TraceContext | None:
        """None when `tc` holds no traceparent (an untraced call)."""
        return TraceContext(tc.traceparent, tc.tracestate) if tc.traceparent else None


_trace: contextvars.ContextVar[TraceContext | None] = contextvars.ContextVar(
    "sigx_trace", default=None
)


def current_trace() -> TraceContext | None:
    """The trace context calls made now carry: the running turn's inside a handler."""
    return _trace.get()


@contextlib.contextmanager
def with_trace(trace: TraceContext | None) -> Iterator[None]:
    """Calls made inside the block carry `trace` (None: no trace)."""
    token = _trace.set(trace)
    try:
        yield
    finally:
        _trace.reset(token)
