"""Python's stock grpcio, default channel options, against a real sigx-sidecar (issue 15)."""

from __future__ import annotations

import grpc
import pytest
from grpc_status import rpc_status

from conftest import Sidecar
from counter_app import CounterApp

TYPE_URL = "type.googleapis.com/sigx.actors.v1.ErrorDetail"


def call(pb, sidecar: Sidecar, key: str, method: str, actor_type: str = "Counter") -> bytes:
    # A channel of its own, as a separate client process would have.
    with grpc.insecure_channel(sidecar.target) as channel:
        request = pb.app.CallRequest(
            actor=pb.types.ActorRef(actor_type=actor_type, key=key), method=method, timeout_ms=10_000
        )
        return pb.grpc.ActorHostStub(channel).Call(request, timeout=15).payload


def error_detail(pb, err: grpc.RpcError):
    """The ErrorDetail, read with the standard helper: grpc_status.rpc_status.from_call."""
    status = rpc_status.from_call(err)
    assert status is not None, f"no grpc-status-details-bin on {err.code()} {err.details()!r}"
    assert status.code == err.code().value[0]
    assert status.message == err.details()
    assert [d.type_url for d in status.details] == [TYPE_URL]
    detail = pb.errors.ErrorDetail()
    assert status.details[0].Unpack(detail)
    metadata = dict(err.trailing_metadata() or ())
    assert metadata.get("sigx-error-kind") is not None, metadata
    return detail, metadata["sigx-error-kind"]


def test_status_answers_with_default_channel_options(pb, sidecar: Sidecar) -> None:
    with grpc.insecure_channel(sidecar.target) as channel:
        status = pb.grpc.ActorHostStub(channel).Status(pb.app.StatusRequest(), timeout=5)
    assert status.state == "waiting-for-app"
    assert status.host.id.startswith("py-host"), status.host


def test_a_python_app_serves_turns_and_a_python_client_calls_it(pb, sidecar: Sidecar) -> None:
    app = CounterApp(pb, sidecar.target)
    try:
        assert app.host_id.startswith("py-host")
        assert [call(pb, sidecar, "a", "incr") for _ in range(3)] == [b"1", b"2", b"3"]
        assert call(pb, sidecar, "b", "incr") == b"1"
        kinds = [(kind, key) for kind, key, _ in app.events]
        assert kinds[:4] == [("activate", "a"), ("invoke", "a"), ("invoke", "a"), ("invoke", "a")]
        assert ("activate", "b") in kinds
        activations = {key: act for kind, key, act in app.events if kind == "activate"}
        assert activations["a"] and activations["a"] != activations["b"]
    finally:
        app.close()


def test_errors_decode_with_the_stock_status_helper(pb, sidecar: Sidecar) -> None:
    app = CounterApp(pb, sidecar.target)
    try:
        with pytest.raises(grpc.RpcError) as failed:
            call(pb, sidecar, "a", "fail")
        assert failed.value.code() == grpc.StatusCode.UNKNOWN
        detail, kind = error_detail(pb, failed.value)
        assert detail.kind == pb.errors.ERROR_KIND_APP and kind == "app"
        assert "asked to fail" in detail.message

        with pytest.raises(grpc.RpcError) as unknown:
            call(pb, sidecar, "a", "get", actor_type="NoSuchType")
        assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        detail, kind = error_detail(pb, unknown.value)
        assert detail.kind == pb.errors.ERROR_KIND_INVALID and kind == "invalid"
    finally:
        app.close()


def test_a_second_app_is_refused_with_a_decodable_error(pb, sidecar: Sidecar) -> None:
    first = CounterApp(pb, sidecar.target)
    try:
        with pytest.raises(grpc.RpcError) as refused:
            CounterApp(pb, sidecar.target, app_name="second")
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        detail, kind = error_detail(pb, refused.value)
        assert detail.kind == pb.errors.ERROR_KIND_WRONG_HOST and kind == "wrong-host"
        assert "already registered" in detail.message
    finally:
        first.close()


def test_sigterm_ends_the_serve_stream_with_ok_after_deactivating(pb, sidecar: Sidecar) -> None:
    import signal

    app = CounterApp(pb, sidecar.target)
    try:
        assert call(pb, sidecar, "a", "incr") == b"1"
        sidecar.process.send_signal(signal.SIGTERM)
        assert app.ended.wait(20), "the Serve stream did not end within 20 s of SIGTERM"
        assert app.end[0] == grpc.StatusCode.OK, f"the stream broke: {app.end}\n{sidecar.log_text()}"
        assert [(k, key) for k, key, _ in app.events] == [
            ("activate", "a"),
            ("invoke", "a"),
            ("deactivate", "a"),
        ]
        assert sidecar.process.wait(timeout=20) == 0
    finally:
        app.close()
