"""Calling actors and workers, and reading membership, through the local sidecar (grpc.aio)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import grpc
import grpc.aio

from sigx.actors.v1 import app_pb2, app_pb2_grpc, types_pb2
from sigx.errors import from_rpc_error
from sigx.reminders import ActorHandle, ReminderInfo, from_unix_ms, info_from_proto, set_request
from sigx.trace import current_trace

#: Where the sidecar listens when SIGX_SOCKET is unset (the same default as the sidecar's).
DEFAULT_SOCKET = "/var/run/sigx/sidecar.sock"
SOCKET_ENV = "SIGX_SOCKET"
#: The gRPC deadline runs this much past the call's own: the sidecar answers TIMEOUT itself, and
#: the transport deadline is only a backstop for a sidecar that never answers.
TRANSPORT_SLACK_S = 2.0

ANY = app_pb2.MEMBER_STATUS_FILTER_ANY
ACTIVE = app_pb2.MEMBER_STATUS_FILTER_ACTIVE

# Placement preferences for the actor a call activates (`Client.call(..., locality=...)`),
# relative to the host the call enters: a host on the same node (its NODE_NAME), else the same
# zone (its SIGX_ZONE), else any eligible host. They only place: an actor already active
# elsewhere is called where it is, and no preference ever fails a call.
LOCALITY_ANY = app_pb2.LOCALITY_ANY
LOCALITY_SAME_NODE = app_pb2.LOCALITY_SAME_NODE
LOCALITY_SAME_ZONE = app_pb2.LOCALITY_SAME_ZONE


def socket_from_env() -> str:
    """$SIGX_SOCKET, or DEFAULT_SOCKET when it is unset or empty."""
    return os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


def channel_for(socket: str) -> grpc.aio.Channel:
    """A grpc.aio channel on the sidecar's Unix socket, default options."""
    return grpc.aio.insecure_channel(f"unix://{socket}")


@dataclass(frozen=True)
class Members:
    """One membership view: a per-sidecar change token and the matching hosts."""

    version: int
    hosts: list[types_pb2.HostDescriptor]


class Client:
    """Calls on the sidecar at `socket` (default $SIGX_SOCKET). Every failure raises a subclass of
    `sigx.errors.ActorError`, or `sigx.errors.OutcomeUnknown` when the call may have run."""

    def __init__(self, socket: str | None = None, *, timeout: float | None = None) -> None:
        self.socket = socket or socket_from_env()
        self.timeout = timeout
        self._channel = channel_for(self.socket)
        self._stub = app_pb2_grpc.ActorHostStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _deadline(self, timeout: float | None) -> tuple[int, float | None]:
        t = self.timeout if timeout is None else timeout
        if t is None:
            return 0, None
        return max(1, int(t * 1000)), t + TRANSPORT_SLACK_S

    async def call(
        self,
        actor_type: str,
        key: str,
        method: str,
        payload: bytes = b"",
        *,
        timeout: float | None = None,
        locality: int = LOCALITY_ANY,
    ) -> bytes:
        """Calls `method` on the actor (or worker) `actor_type`/`key`, anywhere in the cluster.
        `timeout` (seconds) bounds the whole call; unset = the sidecar's default (30 s).
        `locality` (`LOCALITY_SAME_NODE` / `LOCALITY_SAME_ZONE`) says where an actor this call
        activates should go, near this app's sidecar. Inside a
        handler the call carries the turn's W3C trace context (`sigx.current_trace()`), so the
        callee's spans and turn continue the turn's trace."""
        timeout_ms, grpc_timeout = self._deadline(timeout)
        request = app_pb2.CallRequest(
            actor=types_pb2.ActorRef(actor_type=actor_type, key=key),
            method=method,
            payload=payload,
            timeout_ms=timeout_ms,
            locality=locality,
        )
        trace = current_trace()
        if trace is not None:
            request.trace.CopyFrom(trace.to_proto())
        try:
            response = await self._stub.Call(request, timeout=grpc_timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.socket) from None
        return bytes(response.payload)

    async def dispatch_on(
        self,
        host_id: str,
        worker_type: str,
        key: str,
        method: str,
        payload: bytes = b"",
        *,
        timeout: float | None = None,
    ) -> bytes:
        """One attempt at a worker method on the chosen host: no retries, no re-placement."""
        timeout_ms, grpc_timeout = self._deadline(timeout)
        request = app_pb2.DispatchOnRequest(
            host_id=host_id,
            worker=types_pb2.ActorRef(actor_type=worker_type, key=key),
            method=method,
            payload=payload,
            timeout_ms=timeout_ms,
        )
        try:
            response = await self._stub.DispatchOn(request, timeout=grpc_timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.socket) from None
        return bytes(response.payload)

    async def locate(self, actor_type: str, key: str, *, timeout: float | None = None) -> app_pb2.LocateResponse:
        """Where the stateful actor `actor_type`/`key` is active (`active`, `host_id`,
        `activation_id`; `epoch` only when this sidecar's host runs it). Activates nothing."""
        timeout_ms, grpc_timeout = self._deadline(timeout)
        request = app_pb2.LocateRequest(
            actor=types_pb2.ActorRef(actor_type=actor_type, key=key), timeout_ms=timeout_ms
        )
        try:
            return await self._stub.Locate(request, timeout=grpc_timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.socket) from None

    async def list_actors(
        self,
        actor_type: str,
        *,
        page_size: int = 0,
        page_token: str = "",
        with_reminders: bool = False,
        timeout: float | None = None,
    ) -> app_pb2.ListActorsResponse:
        """One page of the live activations of `actor_type` across the fleet, from the
        directory owners: pass each page's `next_page_token` until it is empty, and check
        `incomplete` (partitions whose owner did not answer are in `skipped`)."""
        timeout_ms, grpc_timeout = self._deadline(timeout)
        request = app_pb2.ListActorsRequest(
            actor_type=actor_type,
            page_size=page_size,
            page_token=page_token,
            timeout_ms=timeout_ms,
            with_reminders=with_reminders,
        )
        try:
            return await self._stub.ListActors(request, timeout=grpc_timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.socket) from None

    async def members(self, *, status: app_pb2.MemberStatusFilter = ACTIVE, registers: str = "") -> Members:
        """The current membership view (active hosts by default; `status=sigx.ANY` for all)."""
        try:
            r = await self._stub.Members(
                app_pb2.MembersRequest(status=status, registers=registers), timeout=10
            )
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.socket) from None
        return Members(r.version, list(r.hosts))

    async def watch_members(
        self, *, status: app_pb2.MemberStatusFilter = ACTIVE, registers: str = ""
    ) -> AsyncIterator[Members]:
        """The membership view now, then again on every change the sidecar observes."""
        call = self._stub.WatchMembers(app_pb2.MembersRequest(status=status, registers=registers))
        try:
            async for r in call:
                yield Members(r.version, list(r.hosts))
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.socket) from None
        finally:
            call.cancel()

    def actor(self, actor_type: str, key: str) -> ActorHandle:
        """A handle on one actor: `call`, `set_reminder`, `delete_reminder`, `list_reminders`."""
        return ActorHandle(self, actor_type, key)

    async def set_reminder(
        self,
        actor_type: str,
        key: str,
        name: str,
        due: datetime | timedelta,
        *,
        period: timedelta | None = None,
        payload: bytes | str = b"",
        epoch: int = 0,
    ) -> datetime:
        """Sets (or replaces, by name) a durable reminder of the actor `actor_type`/`key` and
        returns its first due time (UTC). `due` is a `datetime` (when; one in the past is due now)
        or a `timedelta` (how long from now, on the sidecar's clock). `period` None is a one-shot
        reminder, deleted once delivered; otherwise at least 100 ms. `payload` (at most 64 KiB)
        comes back with every occurrence. The actor's `on_reminder` runs when it is due (see
        `sigx.reminders`). Bad input raises `InvalidError` with the sidecar's reason. A nonzero
        `epoch` (an activation's, `ctx.epoch`) fences the change: once a newer activation exists
        it raises `StaleEpoch` and nothing changes (`ctx.this_actor()` sets it for you)."""
        req = set_request(actor_type, key, name, due, period, payload, epoch)
        try:
            r = await self._stub.SetReminder(req, timeout=10)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.socket) from None
        return from_unix_ms(r.due_unix_ms)

    async def delete_reminder(
        self, actor_type: str, key: str, name: str, *, epoch: int = 0
    ) -> bool:
        """Deletes a reminder by name; whether it existed (absent is fine). `epoch` fences it as
        in `set_reminder`."""
        req = app_pb2.DeleteReminderRequest(
            actor=types_pb2.ActorRef(actor_type=actor_type, key=key), name=name, epoch=epoch
        )
        try:
            return (await self._stub.DeleteReminder(req, timeout=10)).existed
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.socket) from None

    async def list_reminders(self, actor_type: str, key: str) -> list[ReminderInfo]:
        """The actor's stored reminders, sorted by name."""
        req = app_pb2.ListRemindersRequest(actor=types_pb2.ActorRef(actor_type=actor_type, key=key))
        try:
            r = await self._stub.ListReminders(req, timeout=10)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.socket) from None
        return [info_from_proto(i) for i in r.reminders]

    async def status(self) -> app_pb2.StatusResponse:
        """This sidecar's identity, state, activations and counters."""
        try:
            return await self._stub.Status(app_pb2.StatusRequest(), timeout=10)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.socket) from None
