"""One cross-language chain in a 3-host `sigx dev up` cluster (issue 15, Build item 4): this Python
client calls the TypeScript actor Front (host 1), which calls the Go actor Middle (host 2), which
calls the Rust counter (host 3, the real counter-app). Every host runs one app with its declared
type, so every call crosses hosts, sidecars and languages.

Errors cross every boundary intact: an app or invalid error keeps its kind and its exact message
through each relay; a kind a handler cannot answer (activation with its unplaceable cause,
unreachable, wrong-host, timeout) is decoded by the hop that saw it and named at the head of the
app error it answers; a deadline of the Python caller ends as Timeout here. The kinds that need a
fault injected mid-chain (outcome-unknown, unauthenticated, stale-epoch) are test_chain_faults.py's. Needs node (with sdk/typescript built) and go: `make test-lang` installs them.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import sigx
from sigx.errors import AppError, InvalidError, Timeout

from conftest import CROSS_LANGUAGE as HERE, build_middle_go, sidecar_binary, tool



@pytest.fixture(scope="module")
def cluster() -> Iterator[Path]:
    bins = sidecar_binary().parent
    with tempfile.TemporaryDirectory(prefix="sigx-x-") as d:
        middle = build_middle_go(Path(d))
        dev = subprocess.Popen(
            [str(bins / "sigx"), "dev", "up", "--dir", str(Path(d) / "c"),
             "--app", f"exec {tool('node')} {HERE / 'front.mjs'}", "--actors", "Front",
             "--app", f"exec {middle}", "--actors", "Middle",
             "--app", f"exec {bins / 'counter-app'}", "--actors", "Counter"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        lines: list[str] = []
        running = threading.Event()

        def read() -> None:
            assert dev.stdout is not None
            for line in dev.stdout:
                lines.append(line.rstrip("\n"))
                if line.startswith("running; Ctrl-C"):
                    running.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert running.wait(90), "the cluster was not ready in 90 s:\n" + "\n".join(lines)
            yield Path(d) / "c"
        finally:
            dev.send_signal(signal.SIGINT)
            code = dev.wait(90)
            reader.join(5)
        assert code == 0, "\n".join(lines)


def front(cluster: Path, key: str, req: dict, timeout: float | None = 20) -> bytes:
    async def go() -> bytes:
        async with sigx.Client(str(cluster / "host-1" / "sidecar.sock")) as c:
            return await c.call("Front", key, "call", json.dumps(req).encode(), timeout=timeout)

    return asyncio.run(go())


def test_each_hop_runs_in_its_own_language_on_its_own_host(cluster: Path) -> None:
    async def types() -> dict[str, str]:
        async with sigx.Client(str(cluster / "host-1" / "sidecar.sock")) as c:
            m = await c.members(status=sigx.ANY)
            return {",".join(h.stateful_types.names): h.id for h in m.hosts}

    seen = asyncio.run(types())
    assert sorted(seen) == ["Counter", "Front", "Middle"], seen
    assert len(set(seen.values())) == 3


def test_a_value_crosses_python_ts_go_rust_and_back(cluster: Path) -> None:
    assert front(cluster, "ok", {"method": "increment", "payload": "5"}) == b"5"
    assert front(cluster, "ok", {"method": "increment", "payload": "37"}) == b"42"
    assert front(cluster, "ok", {"method": "get"}) == b"42"


def test_the_rust_counters_app_error_reaches_python_with_its_kind_and_message(cluster: Path) -> None:
    front(cluster, "full", {"method": "increment", "payload": "1"})
    with pytest.raises(AppError) as e:
        front(cluster, "full", {"method": "increment", "payload": str(2**63 - 1)})
    assert str(e.value.message) == "full: the count would overflow"


def test_an_invalid_error_keeps_its_kind_from_rust_and_from_go(cluster: Path) -> None:
    with pytest.raises(InvalidError) as e:
        front(cluster, "inv", {"method": "nosuch"})
    assert "nosuch" in e.value.message
    with pytest.raises(InvalidError) as e:
        front(cluster, "inv", {"payload": "1"})  # Go's own refusal, relayed by TypeScript
    assert e.value.message == "Middle.call needs the method to call on the Rust counter"


def test_kinds_a_handler_cannot_answer_arrive_named_by_the_hop_that_decoded_them(cluster: Path) -> None:
    # Go calls a type no host serves: routing gives up (ACTIVATION) with UNPLACEABLE as the
    # cause, both decoded by the Go SDK.
    with pytest.raises(AppError) as e:
        front(cluster, "np", {"method": "get", "type": "Nobody"})
    assert e.value.message.startswith("activation: "), e.value.message
    assert "(cause unplaceable: " in e.value.message, e.value.message
    # TypeScript's own deadline on its call to Go passes while Go sleeps: its SDK decodes TIMEOUT.
    with pytest.raises(AppError) as e:
        front(cluster, "slow", {"method": "get", "sleep_ms": 3000, "tsTimeoutMs": 300})
    assert e.value.message.startswith("timeout: "), e.value.message


def test_dispatch_errors_from_go_arrive_named_unreachable_and_wrong_host(cluster: Path) -> None:
    async def hosts() -> dict[str, str]:
        async with sigx.Client(str(cluster / "host-1" / "sidecar.sock")) as c:
            m = await c.members()
            return {",".join(h.stateful_types.names): h.id for h in m.hosts}

    counter_host = asyncio.run(hosts())["Counter"]
    # A host id nobody has: the Go SDK decodes UNREACHABLE (the call never ran).
    with pytest.raises(AppError) as e:
        front(cluster, "d", {"method": "echo", "type": "Echo", "dispatch_on": "no-such-host"})
    assert e.value.message.startswith("unreachable: "), e.value.message
    assert "no-such-host" in e.value.message
    # The Rust counter's host serves no Echo worker.
    with pytest.raises(AppError) as e:
        front(cluster, "d", {"method": "echo", "type": "Echo", "dispatch_on": counter_host})
    assert e.value.message.startswith("wrong-host: "), e.value.message


def test_the_python_callers_deadline_ends_the_chain_as_timeout(cluster: Path) -> None:
    with pytest.raises(Timeout):
        front(cluster, "late", {"method": "get", "sleep_ms": 5000}, timeout=0.5)
    # The chain still serves afterwards.
    assert front(cluster, "late", {"method": "get"}) == b"0"
