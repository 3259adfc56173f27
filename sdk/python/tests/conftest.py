"""Fixtures: stubs generated from proto/ by grpc_tools.protoc, and a real sigx-sidecar process.

Only stock grpcio with default channel options is used: these tests are what a new user writing
an app in Python does, and they fail if the sidecar needs any client-side workaround.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

REPO = Path(__file__).resolve().parents[3]
PROTO = REPO / "proto"


def sidecar_binary() -> Path:
    """The sigx-sidecar to test: $SIGX_BIN_DIR, else $CARGO_TARGET_DIR/debug, else ./target/debug."""
    candidates = []
    if os.environ.get("SIGX_BIN_DIR"):
        candidates.append(Path(os.environ["SIGX_BIN_DIR"]))
    if os.environ.get("CARGO_TARGET_DIR"):
        candidates.append(Path(os.environ["CARGO_TARGET_DIR"]) / "debug")
    candidates.append(REPO / "target" / "debug")
    for d in candidates:
        if (d / "sigx-sidecar").is_file():
            return d / "sigx-sidecar"
    raise RuntimeError(
        f"no sigx-sidecar binary in {[str(c) for c in candidates]}: run `cargo build --workspace "
        "--bins` first, or point SIGX_BIN_DIR at the directory that holds it"
    )


CROSS_LANGUAGE = Path(__file__).resolve().parent / "cross_language"


def tool(name: str) -> str:
    """A program the cross-language tests need on PATH (node, go)."""
    path = shutil.which(name)
    assert path, f"{name} is not on PATH: the cross-language tests need it (scripts/install-lang-tools.sh)"
    return path


def build_middle_go(dir: Path) -> Path:
    """Builds the Go hop of the cross-language chain (cross_language/middle-go) into `dir`, after
    checking that the TypeScript hop's SDK is built."""
    dist = REPO / "sdk" / "typescript" / "dist" / "index.js"
    assert dist.is_file(), f"{dist} is missing: build the TypeScript SDK (cd sdk/typescript && npm run build)"
    out = dir / "middle-go"
    build = subprocess.run([tool("go"), "build", "-o", str(out), "."], cwd=CROSS_LANGUAGE / "middle-go",
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, f"building the Go hop failed:\n{build.stdout}{build.stderr}"
    return out


@pytest.fixture(scope="session")
def pb(tmp_path_factory: pytest.TempPathFactory):
    """The generated stubs of sigx.actors.v1, made from proto/ now (never stale)."""
    from grpc_tools import protoc

    out = tmp_path_factory.mktemp("stubs")
    files = sorted(str(p.relative_to(PROTO)) for p in (PROTO / "sigx").rglob("*.proto"))
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            *files,
        ]
    )
    assert code == 0, f"grpc_tools.protoc failed on {files}"
    sys.path.insert(0, str(out))
    from sigx.actors.v1 import app_pb2, app_pb2_grpc, errors_pb2, types_pb2

    return _Stubs(app_pb2, app_pb2_grpc, errors_pb2, types_pb2)


@dataclass
class _Stubs:
    app: object
    grpc: object
    errors: object
    types: object


@dataclass
class Sidecar:
    process: subprocess.Popen
    socket: Path
    log: Path

    @property
    def target(self) -> str:
        return f"unix://{self.socket}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start_sidecar(dir: Path, pb, extra_env: dict[str, str] | None = None) -> Sidecar:
    """A sidecar on `dir`/s.sock (no membership), with `extra_env` added (e.g. a state store)."""
    socket = dir / "s.sock"
    log = dir / "sidecar.log"
    env = dict(
        os.environ,
        SIGX_SOCKET=str(socket),
        SIGX_MEMBERSHIP="none",
        SIGX_HEALTH_ADDR="127.0.0.1:0",
        SIGX_HOST_ID="py-host",
        SIGX_INSECURE="true",
        SIGX_DRAIN_TIMEOUT_MS="5000",
    )
    env.update(extra_env or {})
    with open(log, "wb") as out:
        process = subprocess.Popen([sidecar_binary()], env=env, stdout=out, stderr=out)
    sidecar = Sidecar(process, socket, log)
    deadline = time.monotonic() + 15
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"sigx-sidecar exited with {process.returncode}:\n{sidecar.log_text()}")
        if socket.exists():
            with grpc.insecure_channel(sidecar.target) as channel:
                try:
                    pb.grpc.ActorHostStub(channel).Status(pb.app.StatusRequest(), timeout=2)
                    return sidecar
                except grpc.RpcError:
                    pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"sigx-sidecar did not answer Status within 15 s:\n{sidecar.log_text()}")
        time.sleep(0.05)


def stop_sidecar(sidecar: Sidecar) -> None:
    if sidecar.process.poll() is None:
        sidecar.process.send_signal(signal.SIGTERM)
        try:
            sidecar.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            sidecar.process.kill()
            sidecar.process.wait()


@pytest.fixture
def sidecar(tmp_path: Path, pb) -> Iterator[Sidecar]:
    # A short directory: a Unix socket path is limited to 108 bytes.
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sigx-py-") as d:
        s = start_sidecar(Path(d), pb)
        try:
            yield s
        finally:
            stop_sidecar(s)


def run(coro, timeout: float = 60):
    """Runs one test's coroutine to its end, failing the test after `timeout` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def until(what: str, check, seen, timeout: float = 10.0, every: float = 0.02) -> None:
    """Waits for `check()` to hold (deliveries arrive on the sidecar's schedule); the failure
    shows `seen`, what the handlers saw so far."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s; saw {seen}")
        await asyncio.sleep(every)
