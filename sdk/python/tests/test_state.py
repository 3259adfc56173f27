"""Durable state and epochs through the Python SDK, against a real sigx-sidecar on SQLite state."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import sigx
from sigx.errors import AppError, InvalidError

from conftest import Sidecar, run, start_sidecar, stop_sidecar

EPOCHS: list[int] = []


@sigx.actor("Box")
class Box:
    """Keeps nothing in memory: every value it answers came from ctx.state."""

    def __init__(self, ctx: sigx.ActorContext) -> None:
        self.ctx = ctx
        EPOCHS.append(ctx.epoch)

    @sigx.method
    async def put(self, payload: bytes) -> bytes:
        """{"k": key, "v": value}: puts, then answers what a read in the same turn sees."""
        req = json.loads(payload)
        before = await self.ctx.state.get(req["k"])
        self.ctx.state.put(req["k"], req["v"])
        after = await self.ctx.state.get(req["k"])
        return json.dumps({"before": before, "after": after}).encode()

    @sigx.method
    async def get(self, payload: bytes) -> bytes:
        return json.dumps(await self.ctx.state.get(payload.decode())).encode()

    @sigx.method
    async def text(self, payload: bytes) -> bytes:
        self.ctx.state.put_str("t", payload.decode())
        self.ctx.state.put_bytes("b", b"\x00\xff" + payload)
        return (await self.ctx.state.get_str("t") or "") + "|" + (await self.ctx.state.get_bytes("b")).hex()

    @sigx.method
    async def delete(self, payload: bytes) -> bytes:
        self.ctx.state.delete(payload.decode())
        return json.dumps(await self.ctx.state.get(payload.decode(), "gone")).encode()

    @sigx.method
    async def items(self, payload: bytes) -> bytes:
        return json.dumps({k: v.decode(errors="replace") for k, v in (await self.ctx.state.items()).items()}).encode()

    @sigx.method
    async def put_then_fail(self, payload: bytes) -> bytes:
        self.ctx.state.put(payload.decode(), "from a failed turn")
        raise ValueError("failing after a put")

    @sigx.method
    async def set(self, payload: bytes) -> bytes:
        self.ctx.state.put_str("s", payload.decode())
        self.ctx.state.delete("gone")
        return b""

    @sigx.method
    async def big(self, payload: bytes) -> bytes:
        self.ctx.state.put_bytes("big", b"x" * (1024 * 1024 + 1))
        return b"answered"

    @sigx.method
    async def epoch(self, payload: bytes) -> bytes:
        return str(self.ctx.epoch).encode()


@pytest.fixture
def state_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="sigx-pys-") as d:
        yield Path(d)


def start(state_dir: Path, pb, name: str) -> Sidecar:
    sock = state_dir / name
    sock.mkdir()
    return start_sidecar(
        sock, pb, {"SIGX_STATE": "sqlite", "SIGX_STATE_PATH": str(state_dir / "state.db")}
    )


async def call(app: sigx.App, key: str, method: str, payload: object = b"") -> object:
    if not isinstance(payload, bytes):
        payload = json.dumps(payload).encode() if not isinstance(payload, str) else payload.encode()
    return json.loads(await app.client.call("Box", key, method, payload))


def serve(sidecar: Sidecar) -> sigx.App:
    return sigx.App(actors=[Box], socket=str(sidecar.socket), handle_signals=False, reconnect=False)


def test_put_then_get_in_a_later_turn_and_read_your_writes(state_dir: Path, pb) -> None:
    sidecar = start(state_dir, pb, "a")

    async def main() -> None:
        async with serve(sidecar) as app:
            await app.registered()
            assert await call(app, "k1", "put", {"k": "n", "v": 1}) == {"before": None, "after": 1}
            assert await call(app, "k1", "get", "n") == 1
            assert await call(app, "k1", "put", {"k": "n", "v": [2, 3]}) == {"before": 1, "after": [2, 3]}
            assert await call(app, "k1", "get", "n") == [2, 3]
            assert await call(app, "k2", "get", "n") is None, "state is per actor"
            got = (await app.client.call("Box", "k1", "text", b"hi")).decode()
            assert got == "hi|00ff6869"

    try:
        run(main())
    finally:
        stop_sidecar(sidecar)


def test_delete_and_items(state_dir: Path, pb) -> None:
    sidecar = start(state_dir, pb, "a")

    async def main() -> None:
        async with serve(sidecar) as app:
            await app.registered()
            for k, v in [("b", 2), ("a", 1), ("c", 3)]:
                await call(app, "k", "put", {"k": k, "v": v})
            assert await call(app, "k", "items") == {"a": "1", "b": "2", "c": "3"}
            assert list((await call(app, "k", "items")).keys()) == ["a", "b", "c"]
            assert await call(app, "k", "delete", "b") == "gone"
            assert await call(app, "k", "get", "b") is None
            assert await call(app, "k", "items") == {"a": "1", "c": "3"}

    try:
        run(main())
    finally:
        stop_sidecar(sidecar)


def test_a_failed_turn_writes_nothing_and_an_over_limit_value_is_named(state_dir: Path, pb) -> None:
    sidecar = start(state_dir, pb, "a")

    async def main() -> None:
        async with serve(sidecar) as app:
            await app.registered()
            await call(app, "k", "put", {"k": "x", "v": "kept"})
            with pytest.raises(AppError, match="failing after a put"):
                await app.client.call("Box", "k", "put_then_fail", b"x")
            assert await call(app, "k", "get", "x") == "kept"
            with pytest.raises(InvalidError, match="over the limit of 1048576 bytes"):
                await app.client.call("Box", "k", "big")
            assert await call(app, "k", "get", "big") is None
            # The refusal dropped that activation; the actor activates again with its state.
            assert await call(app, "k", "get", "x") == "kept"

    try:
        run(main())
    finally:
        stop_sidecar(sidecar)


def test_state_survives_a_sidecar_restart_and_the_epoch_grows(state_dir: Path, pb) -> None:
    EPOCHS.clear()

    async def first() -> int:
        async with serve(sidecar) as app:
            await app.registered()
            await call(app, "durable", "put", {"k": "v", "v": {"n": 41}})
            return int(await app.client.call("Box", "durable", "epoch"))

    async def second() -> tuple[object, int]:
        async with serve(sidecar) as app:
            await app.registered()
            return await call(app, "durable", "get", "v"), int(await app.client.call("Box", "durable", "epoch"))

    sidecar = start(state_dir, pb, "a")
    try:
        epoch1 = run(first())
    finally:
        stop_sidecar(sidecar)
    assert sidecar.process.returncode == 0
    sidecar = start(state_dir, pb, "b")
    try:
        value, epoch2 = run(second())
    finally:
        stop_sidecar(sidecar)
    assert value == {"n": 41}
    assert epoch1 > 0 and epoch2 > epoch1, (epoch1, epoch2)
    assert EPOCHS == [epoch1, epoch2], "ctx.epoch is the epoch of each activation"


def test_a_worker_has_no_state() -> None:
    from sigx.state import State

    s = State(None, "W", "k", "", 0)
    with pytest.raises(InvalidError, match="no durable state"):
        s.put("a", 1)


def test_only_an_ok_result_carries_the_turns_writes_in_order() -> None:
    from sigx.actors.v1 import app_pb2, types_pb2
    from sigx.dispatch import Dispatcher
    from sigx.registry import type_def

    def turn(turn_id: int, method: str | None) -> app_pb2.Turn:
        t = app_pb2.Turn(turn_id=turn_id, actor=types_pb2.ActorRef(actor_type="Box", key="k"),
                         activation_id="act-1", epoch=5)
        if method is None:
            t.activate.SetInParent()
        else:
            t.invoke.method = method
            t.invoke.payload = b"v"
        return t

    async def main() -> None:
        d = Dispatcher([type_def(Box)], client=None)  # type: ignore[arg-type]
        assert (await d.handle(turn(1, None))).WhichOneof("outcome") == "ok"
        failed = await d.handle(turn(2, "put_then_fail"))
        assert failed.WhichOneof("outcome") == "error" and list(failed.writes) == []
        ok = await d.handle(turn(3, "set"))
        assert ok.WhichOneof("outcome") == "ok"
        assert [(w.key, w.WhichOneof("op")) for w in ok.writes] == [("s", "put"), ("gone", "delete")]
        assert ok.writes[0].put == b"v"

    run(main())
