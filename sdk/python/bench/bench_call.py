"""SDK overhead bench (issue 15), Python: an actor call through a real sigx-sidecar next to a raw
grpc.aio unary echo over a Unix socket, measured in the same run.

* raw: a trivial grpc.aio server (the generated ActorHost service, only `Call`, answering the
  payload back) and a grpc.aio client on a Unix socket, default options: the cost of one unary
  round trip on Python's stock gRPC stack, asyncio API (the API the SDK is built on).
* sdk: `sigx.Client.call` → the sigx-sidecar process (release build, `SIGX_BIN_DIR`) → the Serve
  stream → a `sigx.App` serving the `Bench` actor, whose `echo` returns the payload → back.

Both sides live in this one process and its one event loop (client and server, as an app that
calls actors does), like the Rust bench (e2e/benches/call.rs). The sequential calls of the two
alternate in ROUNDS blocks so both see the same machine; then CONCURRENCY callers each for
THROUGHPUT_S seconds. Prints one `lang-bench` line of key=value figures that
scripts/bench-lang.sh reads.

Run: `make bench-lang`, or `SIGX_BIN_DIR=<dir with sigx-sidecar> .tools/venv-py/bin/python
sdk/python/bench/bench_call.py`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import grpc

import sigx
from sigx.actors.v1 import app_pb2, app_pb2_grpc

SEQUENTIAL = int(os.environ.get("SIGX_BENCH_CALLS", "3000"))
ROUNDS = 6
WARMUP = 200
CONCURRENCY = 32
THROUGHPUT_S = float(os.environ.get("SIGX_BENCH_THROUGHPUT_S", "2"))
PAYLOAD = bytes([7]) * 64


def sidecar_binary() -> Path:
    d = os.environ.get("SIGX_BIN_DIR")
    if not d or not (Path(d) / "sigx-sidecar").is_file():
        raise SystemExit(f"bench_call.py: set SIGX_BIN_DIR to a directory holding sigx-sidecar (got {d!r})")
    return Path(d) / "sigx-sidecar"


def start_sidecar(dir: Path) -> tuple[subprocess.Popen, Path]:
    socket = dir / "s.sock"
    env = dict(
        os.environ,
        SIGX_SOCKET=str(socket),
        SIGX_MEMBERSHIP="none",
        SIGX_HEALTH_ADDR="127.0.0.1:0",
        SIGX_HOST_ID="py-bench",
        SIGX_INSECURE="true",
        SIGX_LOG=os.environ.get("SIGX_LOG", "warn"),
    )
    log = open(dir / "sidecar.log", "wb")
    process = subprocess.Popen([sidecar_binary()], env=env, stdout=log, stderr=log)
    return process, socket


def stop_sidecar(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@sigx.actor("Bench")
class Bench:
    def __init__(self, ctx: sigx.ActorContext) -> None:
        self.ctx = ctx

    @sigx.method
    async def echo(self, payload: bytes) -> bytes:
        return payload


class RawEcho(app_pb2_grpc.ActorHostServicer):
    async def Call(self, request, context):  # noqa: N802 (the generated name)
        return app_pb2.CallResponse(payload=request.payload)


def percentile(sorted_lat: list[float], q: float) -> float:
    return sorted_lat[int((len(sorted_lat) - 1) * q)]


async def throughput(call) -> float:
    until = time.perf_counter() + THROUGHPUT_S
    done = 0

    async def caller(w: int) -> None:
        nonlocal done
        i = w
        while time.perf_counter() < until:
            await call(i)
            done += 1
            i += CONCURRENCY

    await asyncio.gather(*(caller(w) for w in range(CONCURRENCY)))
    return done / THROUGHPUT_S


async def measure_pair(base, sdk) -> tuple[dict, dict]:
    for i in range(WARMUP):
        await base(i)
        await sdk(i)
    lat: tuple[list[float], list[float]] = ([], [])
    per_round = SEQUENTIAL // ROUNDS
    for r in range(ROUNDS):
        for side, call in ((0, base), (1, sdk)):
            for i in range(r * per_round, (r + 1) * per_round):
                t = time.perf_counter()
                await call(i)
                lat[side].append((time.perf_counter() - t) * 1e6)
    out = []
    for side, call in ((0, base), (1, sdk)):
        s = sorted(lat[side])
        out.append({"p50": percentile(s, 0.50), "p99": percentile(s, 0.99), "per_s": await throughput(call)})
    return out[0], out[1]


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="sigx-pybench-") as d:
        dir = Path(d)
        process, socket = start_sidecar(dir)
        try:
            raw_path = dir / "raw.sock"
            server = grpc.aio.server()
            app_pb2_grpc.add_ActorHostServicer_to_server(RawEcho(), server)
            server.add_insecure_port(f"unix://{raw_path}")
            await server.start()
            raw_channel = grpc.aio.insecure_channel(f"unix://{raw_path}")
            raw = app_pb2_grpc.ActorHostStub(raw_channel)
            request = app_pb2.CallRequest(payload=PAYLOAD, method="echo")
            request.actor.actor_type = "Bench"
            request.actor.key = "k"

            async def base(_i: int) -> None:
                response = await raw.Call(request)
                assert len(response.payload) == len(PAYLOAD)

            deadline = time.monotonic() + 15
            while not socket.exists():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"sigx-sidecar did not start:\n{(dir / 'sidecar.log').read_text()}")
                await asyncio.sleep(0.02)
            async with sigx.App(actors=[Bench], socket=str(socket), handle_signals=False,
                                app_name="py-bench") as app:
                await app.registered()
                client = app.client

                async def via_sigx(i: int) -> None:
                    answer = await client.call("Bench", f"k{i % 64}", "echo", PAYLOAD)
                    assert len(answer) == len(PAYLOAD)

                raw_f, sdk_f = await measure_pair(base, via_sigx)
            await raw_channel.close()
            await server.stop(None)
        finally:
            stop_sidecar(process)
    print(
        f"lang-bench lang=python stack=grpcio-{grpc.__version__}-aio calls={SEQUENTIAL} "
        f"raw_p50_us={raw_f['p50']:.1f} raw_p99_us={raw_f['p99']:.1f} raw_per_s={raw_f['per_s']:.0f} "
        f"sdk_p50_us={sdk_f['p50']:.1f} sdk_p99_us={sdk_f['p99']:.1f} sdk_per_s={sdk_f['per_s']:.0f}",
        flush=True,
    )


if __name__ == "__main__":
    asyncio.run(main())
