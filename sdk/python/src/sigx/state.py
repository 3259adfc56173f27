"""Durable actor state from inside a turn (DESIGN.md §11): `self.ctx.state`.

Reads go to the sidecar (and its state store) under the turn's activation and epoch; writes are
collected during the turn and travel with its result, committed by the sidecar as one atomic
batch before the caller sees the answer. Reads see the turn's own writes (and, through the store,
every earlier turn's). A turn that fails (raises) writes nothing. If the store refuses the batch (a
newer activation of the actor exists: `sigx.errors.StaleEpoch`, or a limit: `InvalidError` naming
it), the caller gets that error and the activation is dropped.

    count = await self.ctx.state.get("count", 0)
    self.ctx.state.put("count", count + 1)

Limits (checked by the sidecar): keys 1..=1024 bytes, values up to 1 MiB, up to 1000 writes and
4 MiB per turn.
"""

from __future__ import annotations

import json
from typing import Any

import grpc

from sigx.actors.v1 import app_pb2, types_pb2
from sigx.errors import AppError, InvalidError, from_rpc_error

_DELETED = object()


class State:
    """The actor's durable key/value state as one turn sees it. Writes (`put*`, `delete`) are
    pending until the turn returns; `get*` and `items` see them at once."""

    def __init__(self, client: Any, actor_type: str, key: str, activation_id: str, epoch: int) -> None:
        self._client = client
        self._actor = types_pb2.ActorRef(actor_type=actor_type, key=key)
        self._activation_id = activation_id
        #: The activation's fencing token (see `ActorContext.epoch`).
        self.epoch = epoch
        self._order: list[app_pb2.StateWrite] = []
        self._latest: dict[str, object] = {}  # key -> bytes, or _DELETED

    def _check(self) -> None:
        if self.epoch == 0:
            raise InvalidError(
                f"{self._actor.actor_type} has no durable state: workers (and sidecars older than "
                "state) give turns no epoch; keep state in an actor type"
            )

    async def _read(self, keys: list[str], all_: bool) -> list[app_pb2.StateEntry]:
        self._check()
        request = app_pb2.ReadStateRequest(
            actor=self._actor, activation_id=self._activation_id, epoch=self.epoch,
            keys=keys, all=all_,
        )
        try:
            response = await self._client._stub.ReadState(request, timeout=30)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self._client.socket) from None
        return list(response.entries)

    async def get_bytes(self, key: str) -> bytes | None:
        """The raw value of `key`: this turn's own pending write if there is one, else the
        store's; None when absent."""
        if key in self._latest:
            v = self._latest[key]
            return None if v is _DELETED else v  # type: ignore[return-value]
        entries = await self._read([key], False)
        if entries and entries[0].found:
            return bytes(entries[0].value)
        return None

    async def get_str(self, key: str, default: str | None = None) -> str | None:
        """The value of `key` as UTF-8 text, or `default` when absent."""
        raw = await self.get_bytes(key)
        return default if raw is None else raw.decode()

    async def get(self, key: str, default: Any = None) -> Any:
        """The value of `key` decoded from JSON, or `default` when absent."""
        raw = await self.get_bytes(key)
        if raw is None:
            return default
        try:
            return json.loads(raw)
        except ValueError as e:
            raise AppError(
                f"state key {key!r} of {self._actor.actor_type}/{self._actor.key} does not hold "
                f"the JSON this code expects ({e}); read it with get_bytes"
            ) from None

    async def items(self) -> dict[str, bytes]:
        """Every entry of the actor (raw values), in key order, this turn's writes applied."""
        stored = {e.key: bytes(e.value) for e in await self._read([], True) if e.found}
        for k, v in self._latest.items():
            if v is _DELETED:
                stored.pop(k, None)
            else:
                stored[k] = v  # type: ignore[assignment]
        return dict(sorted(stored.items()))

    def put_bytes(self, key: str, value: bytes) -> None:
        """Sets `key` to the raw `value` when the turn succeeds."""
        self._check()
        value = bytes(value)
        self._latest[key] = value
        self._order.append(app_pb2.StateWrite(key=key, put=value))

    def put_str(self, key: str, value: str) -> None:
        """Sets `key` to `value` as UTF-8 text when the turn succeeds."""
        self.put_bytes(key, value.encode())

    def put(self, key: str, value: Any) -> None:
        """Sets `key` to `value` encoded as JSON when the turn succeeds."""
        try:
            raw = json.dumps(value, separators=(",", ":")).encode()
        except (TypeError, ValueError) as e:
            raise InvalidError(f"state value for key {key!r} is not JSON-serialisable: {e}") from None
        self.put_bytes(key, raw)

    def delete(self, key: str) -> None:
        """Removes `key` when the turn succeeds (absent is fine)."""
        self._check()
        self._latest[key] = _DELETED
        self._order.append(app_pb2.StateWrite(key=key, delete=True))

    def writes(self) -> list[app_pb2.StateWrite]:
        """The pending batch, in order (the SDK sends it with an ok result)."""
        return list(self._order)
