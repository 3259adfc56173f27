"""`/metrics` of a real sigx-sidecar, parsed with the Prometheus project's own Python parser
(prometheus_client's OpenMetrics parser, which rejects malformed exposition): counters are
counters with `_total`, and the call-latency histogram counts exactly the calls made, by result
kind (issue 16)."""

from __future__ import annotations

import socket
import time
import tempfile
import urllib.request
from pathlib import Path

import grpc
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import start_sidecar, stop_sidecar
from counter_app import CounterApp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(pb, target: str, key: str, method: str) -> grpc.StatusCode:
    with grpc.insecure_channel(target) as channel:
        request = pb.app.CallRequest(
            actor=pb.types.ActorRef(actor_type="Counter", key=key), method=method, timeout_ms=10_000
        )
        try:
            pb.grpc.ActorHostStub(channel).Call(request, timeout=15)
            return grpc.StatusCode.OK
        except grpc.RpcError as e:
            return e.code()


def scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(family, suffix: str, **labels) -> float:
    found = [s.value for s in family.samples if s.name == family.name + suffix and s.labels == labels]
    assert len(found) == 1, f"{family.name}{suffix}{labels}: {family.samples}"
    return found[0]


def test_metrics_parse_and_the_call_histogram_counts_every_call(pb) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="sigx-py-") as d:
        sidecar = start_sidecar(Path(d), pb, {"SIGX_HEALTH_ADDR": f"127.0.0.1:{port}"})
        app = CounterApp(pb, sidecar.target)
        try:
            oks = [call(pb, sidecar.target, f"k{i % 3}", "incr") for i in range(7)]
            fails = [call(pb, sidecar.target, "k0", "fail") for _ in range(2)]
            assert oks == [grpc.StatusCode.OK] * 7, oks
            assert all(c != grpc.StatusCode.OK for c in fails), fails
            families = scrape(port)
        finally:
            app.close()
            stop_sidecar(sidecar)

    calls = families["sigx_call_duration_seconds"]
    assert calls.type == "histogram" and calls.unit == "seconds"
    assert sample(calls, "_count", kind="ok") == 7
    assert sample(calls, "_count", kind="app") == 2
    buckets = [s for s in calls.samples if s.name.endswith("_bucket") and s.labels["kind"] == "ok"]
    counts = [s.value for s in buckets]
    assert counts == sorted(counts) and buckets[-1].labels["le"] == "+Inf" and counts[-1] == 7
    assert sample(calls, "_sum", kind="ok") > 0

    turns = families["sigx_turn_duration_seconds"]
    assert sample(turns, "_count", actor_type="Counter") == 9

    # Running totals are counters (exposed with `_total`); levels are gauges.
    assert families["sigx_turns"].type == "counter"
    assert sample(families["sigx_turns"], "_total") == 9
    assert sample(families["sigx_activations"], "_total") == 3
    assert families["sigx_ready"].type == "gauge"
    assert sample(families["sigx_ready"], "") == 1
    assert families["sigx_app_errors"].type == "counter"
    assert sample(families["sigx_app_errors"], "_total") == 2
    assert all(f.type in ("counter", "gauge", "histogram") for f in families.values())


def test_clustered_hosts_export_renewal_collection_and_directory_rpc_histograms(pb) -> None:
    """Two hosts on one SQLite membership file: each lease renewal is one `ok` observation of
    `sigx_membership_renewal_duration_seconds`, joining ran at least one complete collection
    round, and new actors whose directory partition the other host owns were looked up over
    the mesh (`sigx_directory_rpc_duration_seconds{rpc="lookup"}`); a single host (the test
    above) exports none of these families."""
    ports = [free_port(), free_port()]
    with tempfile.TemporaryDirectory(prefix="sigx-py-") as d:
        sidecars, apps = [], []
        try:
            for i, port in enumerate(ports):
                home = Path(d) / f"h{i}"
                home.mkdir()
                env = {
                    "SIGX_HEALTH_ADDR": f"127.0.0.1:{port}",
                    "SIGX_HOST_ID": f"py-host-{i}",
                    "SIGX_MEMBERSHIP": "sqlite",
                    "SIGX_SQLITE_PATH": str(Path(d) / "members.db"),
                    "SIGX_MESH_ADDR": f"127.0.0.1:{free_port()}",
                    "SIGX_BEAT_MS": "100",
                    "SIGX_TTL_MS": "1000",
                }
                sidecars.append(start_sidecar(home, pb, env))
                apps.append(CounterApp(pb, sidecars[-1].target))
                wait_ready(port)
            wait_members(pb, sidecars[0].target, 2)
            oks = [call(pb, sidecars[0].target, f"r{k}", "incr") for k in range(24)]
            assert oks == [grpc.StatusCode.OK] * 24, oks
            first = scrape(ports[0])
            time.sleep(1.0)
            later = scrape(ports[0])
        finally:
            for app in apps:
                app.close()
            for sidecar in sidecars:
                stop_sidecar(sidecar)

    renewals = later["sigx_membership_renewal_duration_seconds"]
    assert renewals.type == "histogram" and renewals.unit == "seconds"
    before = sample(first["sigx_membership_renewal_duration_seconds"], "_count", kind="ok")
    after = sample(renewals, "_count", kind="ok")
    # A beat of 100 ms for one second: about ten renewals, and every one observed.
    assert after - before >= 5, (before, after)
    assert sample(renewals, "_sum", kind="ok") > 0
    rounds = later["sigx_collection_round_duration_seconds"]
    assert sample(rounds, "_count", kind="complete") >= 1
    rpcs = later["sigx_directory_rpc_duration_seconds"]
    lookups = sample(rpcs, "_count", rpc="lookup", kind="ok")
    # 24 new actors, each looked up at its partition's owner, about half of them the other
    # host: those are RPCs, the rest are answered in process and are not.
    assert 1 <= lookups < 24, lookups
    assert "sigx_membership_renewal_duration_seconds" not in families_of_single_host(pb)


def wait_members(pb, target: str, n: int) -> None:
    deadline = time.monotonic() + 15
    with grpc.insecure_channel(target) as channel:
        while True:
            view = pb.grpc.ActorHostStub(channel).Members(pb.app.MembersRequest(), timeout=5)
            if len(view.hosts) >= n:
                return
            assert time.monotonic() < deadline, f"the view never reached {n} hosts: {view}"
            time.sleep(0.05)


def wait_ready(port: int) -> None:
    deadline = time.monotonic() + 15
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        assert time.monotonic() < deadline, "the clustered host never became ready"
        time.sleep(0.05)


def families_of_single_host(pb) -> dict:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="sigx-py-") as d:
        sidecar = start_sidecar(Path(d), pb, {"SIGX_HEALTH_ADDR": f"127.0.0.1:{port}"})
        try:
            return scrape(port)
        finally:
            stop_sidecar(sidecar)
