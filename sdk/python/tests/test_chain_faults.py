"""Faults injected in the middle of a cross-language call chain (issue 15): this Python client calls
the TypeScript actor Front (host 1), which calls the Go actor Middle (host 2), which calls the Rust
counter (host 3) — the apps of test_cross_language.py, on sidecars started here one by one so that
the last host can be given a fault the others do not share. The head of the chain (this client)
gets the kind of what went wrong below, decoded by the Go hop that saw it and named at the head of
the app error each relay answers ("outcome-unknown: ...", "unauthenticated: ..."):

- h3's sidecar frozen (SIGSTOP) past its lease TTL with a Counter turn handed to its app: on
  SIGCONT it fences, and the turn's answer becomes outcome-unknown (it may have run), never a
  clean failure and never ok; a call made after the fence is a clean failure (it never ran).
  FENCED itself never leaves the fenced host: a peer calling into it is answered unreachable (so
  it re-places) and a turn it had handed out ends outcome-unknown (sidecar placement/inbound.rs,
  runtime/lease.rs `settle`).
- h3's sidecar killed with a Counter turn in flight: outcome-unknown naming h3.
- h3 holding another mesh secret: Go's call to it is refused unauthenticated (h1 → h2 works).
- h3's Counter activation superseded (its epoch taken by "another host" in the shared state
  store): its write is refused, the chain ends stale-epoch and nothing is stored.

Needs node (with sdk/typescript built) and go, as test_cross_language.py does.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import sigx
from sigx.errors import AppError, InvalidError, SigxError

from conftest import CROSS_LANGUAGE as HERE, build_middle_go, sidecar_binary, tool


# Leases (beat = TTL / 5). A turn is bounded by its host's lease, so a chain whose last host is
# frozen past its TTL needs longer leases upstream to outlive the freeze.
TTL_MS = 1_000
LONG_TTL_MS = 10_000


@pytest.fixture(scope="module")
def middle_go() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="sigx-cf-go-") as d:
        yield build_middle_go(Path(d))


@dataclass
class Host:
    id: str
    socket: Path
    sidecar: subprocess.Popen
    app: subprocess.Popen
    dir: Path

    def log(self) -> str:
        return (self.dir / "sidecar.log").read_text(errors="replace")


class Chain:
    """Three hosts on one SQLite membership file: h1 serves Front, h2 Middle, h3 Counter."""

    def __init__(self, root: Path, middle: Path, secrets: tuple[str, str, str] = ("s3cret-one",) * 3,
                 ttls_ms: tuple[int, int, int] = (TTL_MS,) * 3, counter_delay_ms: int = 0) -> None:
        self.root = root
        bins = sidecar_binary().parent
        apps = [
            ("Front", [tool("node"), str(HERE / "front.mjs")], {}),
            ("Middle", [str(middle)], {}),
            ("Counter", [str(bins / "counter-app")], {"COUNTER_TURN_DELAY_MS": str(counter_delay_ms)}),
        ]
        # No SIGX_* setting of the shell leaks into the hosts.
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SIGX_", "COUNTER_"))}
        self.hosts: list[Host] = []
        try:
            for i, ((types, cmd, env), secret, ttl) in enumerate(zip(apps, secrets, ttls_ms), start=1):
                d = root / f"h{i}"
                d.mkdir()
                (d / "secret").write_text(secret)
                socket = d / "s.sock"
                host_id = f"chain-h{i}"
                with open(d / "sidecar.log", "wb") as log:
                    sidecar = subprocess.Popen(
                        [str(bins / "sigx-sidecar"), "--host-id", host_id, "--socket", str(socket),
                         "--health-addr", "127.0.0.1:0", "--mesh-addr", "127.0.0.1:0",
                         "--advertise", "127.0.0.1:0", "--membership", "sqlite",
                         "--sqlite-path", str(root / "membership.db"),
                         "--secret-file", str(d / "secret"), "--actors", types,
                         # The Rust counter-app also serves the worker Echo.
                         *(["--workers", "Echo"] if types == "Counter" else []),
                         "--beat-ms", str(ttl // 5), "--ttl-ms", str(ttl)],
                        env=dict(base, SIGX_LOG="info"), stdout=log, stderr=log)
                deadline = time.monotonic() + 20
                while not socket.exists():
                    assert sidecar.poll() is None, f"{host_id}'s sidecar exited:\n" + (d / "sidecar.log").read_text()
                    assert time.monotonic() < deadline, f"{host_id}'s sidecar made no socket in 20 s"
                    time.sleep(0.02)
                with open(d / "app.log", "wb") as log:
                    app = subprocess.Popen(cmd, env=dict(base, SIGX_SOCKET=str(socket), **env),
                                           stdout=log, stderr=log)
                self.hosts.append(Host(host_id, socket, sidecar, app, d))
            asyncio.run(self._converge())
        except BaseException:
            self.close()
            raise

    async def _converge(self) -> None:
        """Until every host sees the three types served by three active hosts."""
        want = ["Counter", "Front", "Middle"]
        deadline = time.monotonic() + 30
        seen: dict = {}
        while time.monotonic() < deadline:
            ok = True
            for h in self.hosts:
                try:
                    async with sigx.Client(str(h.socket)) as c:
                        m = await c.members()
                    seen[h.id] = sorted(",".join(x.stateful_types.names) for x in m.hosts)
                    ok = ok and seen[h.id] == want
                except SigxError as e:
                    seen[h.id] = repr(e)
                    ok = False
            if ok:
                return
            await asyncio.sleep(0.05)
        logs = "\n".join(f"--- {h.id}\n{h.log()[-3000:]}\n{(h.dir / 'app.log').read_text(errors='replace')[:1500]}"
                         for h in self.hosts)
        raise AssertionError(f"the chain's hosts did not converge in 30 s: {seen}\n{logs}")

    def close(self) -> None:
        for h in self.hosts:
            for p in (h.app, h.sidecar):
                if p.poll() is None:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                    p.wait(10)

    def status(self, i: int):
        async def go():
            async with sigx.Client(str(self.hosts[i].socket)) as c:
                return await c.status()

        return asyncio.run(go())


def front(chain: Chain, key: str, req: dict, timeout: float = 20) -> bytes:
    async def go() -> bytes:
        async with sigx.Client(str(chain.hosts[0].socket)) as c:
            return await c.call("Front", key, "call", json.dumps(req).encode(), timeout=timeout)

    return asyncio.run(go())


def front_error(chain: Chain, key: str, req: dict, timeout: float = 20) -> AppError:
    with pytest.raises(AppError) as e:
        front(chain, key, req, timeout)
    return e.value


@pytest.fixture
def chain_dir() -> Iterator[Path]:
    # A short directory: a Unix socket path is limited to 108 bytes.
    with tempfile.TemporaryDirectory(prefix="sigx-cf-") as d:
        yield Path(d)


def in_flight(chain: Chain, key: str, req: dict) -> tuple[threading.Thread, list]:
    """Calls Front in a thread; returns it once h3's app has been handed the Counter turn (h3's
    turn counter moved), with the list its answer (or error) will be appended to."""
    turns = chain.status(2).counters["turns"]
    answer: list = []

    def call() -> None:
        try:
            answer.append(front(chain, key, req))
        except BaseException as e:  # noqa: BLE001 — judged by the test
            answer.append(e)

    caller = threading.Thread(target=call)
    caller.start()
    deadline = time.monotonic() + 10
    while chain.status(2).counters["turns"] == turns:
        assert time.monotonic() < deadline, "the Counter turn was not handed to h3's app in 10 s"
        time.sleep(0.005)
    return caller, answer


def answer_of(caller: threading.Thread, answer: list):
    caller.join(30)
    assert not caller.is_alive(), "the chain's caller got no answer in 30 s"
    [a] = answer
    return a


@pytest.fixture
def slow_chain(middle_go: Path, chain_dir: Path) -> Iterator[Chain]:
    """h3's lease is short (1 s) and every Counter turn takes 500 ms; h1's and h2's leases
    (10 s) outlive a fault of h3, so their turns are still waiting when it is judged."""
    chain = Chain(chain_dir, middle_go, ttls_ms=(LONG_TTL_MS, LONG_TTL_MS, TTL_MS), counter_delay_ms=500)
    try:
        yield chain
    finally:
        chain.close()


def increment_in_flight(chain: Chain, key: str) -> tuple[threading.Thread, list]:
    """Counter/<key> activated on h3 by a first increment, then a second one handed to h3's app."""
    assert front(chain, key, {"method": "increment", "payload": "1"}) == b"1"
    return in_flight(chain, key, {"method": "increment", "payload": "1"})


def test_the_last_hops_host_fenced_with_a_turn_in_flight_ends_the_chain_outcome_unknown(
        slow_chain: Chain) -> None:
    chain = slow_chain
    counter = chain.hosts[2]
    caller, answer = increment_in_flight(chain, "f")
    # h3's sidecar frozen (its app keeps running and answers) for 1.3 x its TTL: on SIGCONT
    # it finds its lease lapsed and fences, and the answer its app gave cannot be reported.
    # (h2 judges h3 expired only after h3's TTL plus h2's own drift margin, 1 s: by then h3
    # has answered. Should h2 judge it first, it ends the call as outcome-unknown too.)
    counter.sidecar.send_signal(signal.SIGSTOP)
    time.sleep(1.3 * TTL_MS / 1000)
    counter.sidecar.send_signal(signal.SIGCONT)
    e = answer_of(caller, answer)
    # Outcome-unknown (the increment may have run on h3), decoded by Go and relayed by
    # TypeScript: never a clean failure such as fenced, timeout or unreachable, never ok.
    assert isinstance(e, AppError), repr(e)
    assert e.message.startswith("outcome-unknown: "), e.message
    # Either h3 itself reports it (naming itself: relayed by h2, nothing else would say which
    # host fenced) or h2 judged h3 gone first.
    assert counter.id in e.message, e.message
    assert ("is fenced" in e.message and "lease lapsed" in e.message) or (
        "left this host's view with the call in flight" in e.message
    ), e.message
    print("in flight:", e.message)

    deadline = time.monotonic() + 10
    while (state := chain.status(2).state) != "fenced":
        assert time.monotonic() < deadline, f"{counter.id} is {state!r}, not fenced, 10 s on:\n{counter.log()}"
        time.sleep(0.05)
    # A call made now never runs on the fenced host: a clean failure, never outcome-unknown.
    e = front_error(chain, "f", {"method": "get"})
    assert not e.message.startswith("outcome-unknown: "), e.message
    assert e.message.startswith(("activation: ", "unreachable: ")), e.message
    print("after the fence:", e.message)


def test_the_last_hops_sidecar_killed_with_a_turn_in_flight_ends_the_chain_outcome_unknown(
        slow_chain: Chain) -> None:
    chain = slow_chain
    counter = chain.hosts[2]
    caller, answer = increment_in_flight(chain, "k")
    counter.sidecar.kill()
    e = answer_of(caller, answer)
    assert isinstance(e, AppError), repr(e)
    assert e.message.startswith("outcome-unknown: "), e.message
    assert counter.id in e.message, e.message
    print("killed:", e.message)
    # A call made now never runs on the dead host: a clean failure, never outcome-unknown.
    e = front_error(chain, "k", {"method": "get"})
    assert e.message.startswith(("activation: ", "unreachable: ")), e.message
    print("after the kill:", e.message)


def test_the_last_hops_host_holding_another_mesh_secret_refuses_the_middle_hop_unauthenticated(
        middle_go: Path, chain_dir: Path) -> None:
    chain = Chain(chain_dir, middle_go, secrets=("s3cret-one", "s3cret-one", "s3cret-two"))
    try:
        # The first hop (h1 → h2, same secret) works: Go's own refusal comes back intact.
        with pytest.raises(InvalidError) as i:
            front(chain, "u", {"payload": "1"})
        assert i.value.message == "Middle.call needs the method to call on the Rust counter"
        # Go's call to the Rust counter on h3 is refused by h3: decoded by Go as unauthenticated,
        # naming the host whose mesh request was refused.
        e = front_error(chain, "u", {"method": "increment", "payload": "1"})
        assert e.message.startswith("unauthenticated: "), e.message
        assert '"chain-h2"' in e.message and "wrong MAC" in e.message, e.message
        print("unauthenticated:", e.message)
    finally:
        chain.close()


def test_the_last_hops_activation_superseded_refuses_its_write_and_the_chain_ends_stale_epoch(
        middle_go: Path, chain_dir: Path) -> None:
    chain = Chain(chain_dir, middle_go)
    try:
        assert front(chain, "s", {"method": "increment", "payload": "1"}) == b"1"
        # What a newer activation of Counter/s on another host does first: take the next epoch
        # from the state store every host shares (DESIGN.md §11). h3's activation is now stale.
        db = sqlite3.connect(chain_dir / "sigx-state.db", timeout=10)
        try:
            with db:
                bumped = db.execute("UPDATE sigx_actor_epochs SET epoch = epoch + 1 "
                                    "WHERE actor_type = 'Counter' AND actor_key = 's'").rowcount
        finally:
            db.close()
        assert bumped == 1, "Counter/s has no epoch row in the shared state store"
        # The increment runs on h3's stale activation; its write is refused. Decoded by Go as
        # stale-epoch and relayed by TypeScript: never ok, never outcome-unknown.
        e = front_error(chain, "s", {"method": "increment", "payload": "1"})
        assert e.message.startswith("stale-epoch: "), e.message
        assert "actor Counter/s is at epoch 2, this activation holds epoch 1" in e.message, e.message
        print("stale-epoch:", e.message)
        # None of it was stored, and the next call gets a new activation that serves again.
        assert front(chain, "s", {"method": "get"}) == b"1"
        assert front(chain, "s", {"method": "increment", "payload": "1"}) == b"2"
    finally:
        chain.close()
