"""A Counter actor served on the Serve stream with nothing but grpcio and the generated stubs."""

from __future__ import annotations

import queue
import threading

import grpc


class CounterApp:
    """Registers the `Counter` type and answers its turns, one at a time, on a thread of its own.

    `incr` adds one and answers the new count in ASCII; `fail` answers an APP error; any other
    method an INVALID one. `end` holds how the Serve stream ended: (code, details, trailers).
    """

    def __init__(self, pb, target: str, app_name: str = "py-counter") -> None:
        self.pb = pb
        self.channel = grpc.insecure_channel(target)
        self.outbox: queue.Queue = queue.Queue()
        self.counts: dict[str, int] = {}
        self.events: list[tuple[str, str, str]] = []
        self.end: tuple | None = None
        self.ended = threading.Event()
        register = pb.app.Register(
            actors=[pb.app.ActorTypeSpec(name="Counter")], app_name=app_name
        )
        self.outbox.put(pb.app.AppMessage(register=register))
        self.stream = pb.grpc.ActorHostStub(self.channel).Serve(iter(self.outbox.get, None))
        first = next(self.stream)
        if first.WhichOneof("msg") != "registered":
            raise AssertionError(f"expected Registered first, got {first}")
        self.host_id = first.registered.host_id
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _answer(self, turn) -> dict:
        kind = turn.WhichOneof("kind")
        key = turn.actor.key
        self.events.append((kind, key, turn.activation_id))
        if kind == "activate":
            self.counts[key] = 0
            return {"ok": b""}
        if kind == "deactivate":
            self.counts.pop(key, None)
            return {"ok": b""}
        method = turn.invoke.method
        if method == "incr":
            self.counts[key] += 1
            return {"ok": str(self.counts[key]).encode()}
        errors = self.pb.errors
        if method == "fail":
            return {"error": self.pb.app.TurnError(kind=errors.ERROR_KIND_APP, message="asked to fail")}
        return {
            "error": self.pb.app.TurnError(
                kind=errors.ERROR_KIND_INVALID, message=f"Counter has no method {method!r}"
            )
        }

    def _serve(self) -> None:
        try:
            for msg in self.stream:
                if msg.WhichOneof("msg") != "turn":
                    continue
                result = self.pb.app.TurnResult(turn_id=msg.turn.turn_id, **self._answer(msg.turn))
                self.outbox.put(self.pb.app.AppMessage(result=result))
            self.end = (grpc.StatusCode.OK, "", ())
        except grpc.RpcError as e:
            self.end = (e.code(), e.details(), e.trailing_metadata() or ())
        finally:
            self.ended.set()

    def drain(self) -> None:
        self.outbox.put(self.pb.app.AppMessage(drain=self.pb.app.Drain()))

    def close(self) -> None:
        self.outbox.put(None)
        self.channel.close()
