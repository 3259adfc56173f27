"""`/metrics` of a real sigx-operator, leading on the real control plane the e2e tests build
(`.tools/bin/sigx-controlplane`: etcd, kube-apiserver and kube-controller-manager from Go
modules), parsed with the Prometheus project's own Python parser (issue 16: "the operator's
metrics likewise"): counters are counters with `_total`, the reconcile latency is a histogram
in seconds, and the leader gauge reads 1 once this replica holds the leader Lease."""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import REPO, sidecar_binary
from test_metrics import free_port, sample


def controlplane_binary() -> Path:
    path = Path(os.environ.get("SIGX_CONTROLPLANE", REPO / ".tools" / "bin" / "sigx-controlplane"))
    assert path.is_file(), f"{path} is missing: run `make controlplane` (make test does)"
    return path


def create_actor_cluster(kubeconfig: Path, scratch: Path) -> None:
    """POSTs an ActorCluster with the admin credentials of the control plane's kubeconfig (the
    few fields it writes, read without a YAML library)."""
    text = kubeconfig.read_text()
    field = lambda name: re.search(rf"{name}: (\S+)", text).group(1)  # noqa: E731
    files = {}
    for name in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
        files[name] = scratch / name
        files[name].write_bytes(base64.b64decode(field(name)))
    context = ssl.create_default_context(cafile=str(files["certificate-authority-data"]))
    context.load_cert_chain(files["client-certificate-data"], files["client-key-data"])
    body = {"apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorCluster",
            "metadata": {"name": "demo"}, "spec": {"sidecar": {"image": "ghcr.io/sigx/sidecar:0.1.0"}}}
    request = urllib.request.Request(
        f"{field('server')}/apis/actors.sigx.dev/v1alpha1/namespaces/default/actorclusters",
        data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, context=context, timeout=10) as r:
        assert r.status == 201, r.status


def scrape(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_the_operators_metrics_parse_and_say_it_leads() -> None:
    operator = sidecar_binary().parent / "sigx-operator"
    assert operator.is_file(), f"{operator} is missing: cargo build --workspace --bins"
    with tempfile.TemporaryDirectory(prefix="sigx-py-op-") as d:
        kubeconfig = Path(d) / "kubeconfig"
        cp = subprocess.Popen(
            [controlplane_binary(), "--kubeconfig", kubeconfig, "--crds", REPO / "crds" / "generated"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(Path(d) / "cp.log", "wb"),
        )
        op = None
        try:
            line = cp.stdout.readline().decode()
            assert line.startswith("ready "), f"the control plane did not start: {line!r}"
            port = free_port()
            env = dict(os.environ, KUBECONFIG=str(kubeconfig), POD_NAME="op-py", POD_NAMESPACE="default",
                       SIGX_METRICS_ADDR=f"127.0.0.1:{port}", SIGX_LEADER_LEASE_SECONDS="5",
                       SIGX_LEADER_GRACE_SECONDS="1")
            env.pop("KUBERNETES_SERVICE_HOST", None)
            env.pop("SIGX_WATCH_NAMESPACE", None)
            op = subprocess.Popen([operator], env=env, stdout=subprocess.DEVNULL,
                                  stderr=open(Path(d) / "operator.log", "wb"))
            create_actor_cluster(kubeconfig, Path(d))
            deadline = time.monotonic() + 60
            while True:
                families = scrape(port)
                if (families and sample(families["sigx_operator_leader"], "") == 1
                        and "sigx_operator_reconciles" in families
                        and sample(families["sigx_operator_secrets_generated"], "_total") == 1):
                    break
                assert op.poll() is None, (Path(d) / "operator.log").read_text()
                assert time.monotonic() < deadline, f"never led: {families}"
                time.sleep(0.2)
        finally:
            if op is not None:
                op.terminate()
                op.wait(timeout=30)
            cp.stdin.close()
            cp.wait(timeout=60)

    assert families["sigx_operator_leader"].type == "gauge"
    reconciles = families["sigx_operator_reconciles"]
    assert reconciles.type == "counter"
    runs = sample(reconciles, "_total", kind="ActorCluster")
    assert runs >= 1
    # Every reconciliation is one observation of the latency histogram.
    duration = families["sigx_operator_reconcile_duration_seconds"]
    assert duration.type == "histogram" and duration.unit == "seconds"
    assert sample(duration, "_count", kind="ActorCluster") == runs
    buckets = [s for s in duration.samples if s.name.endswith("_bucket") and s.labels["kind"] == "ActorCluster"]
    assert [b.value for b in buckets] == sorted(b.value for b in buckets) and buckets[-1].value == runs
    # The cluster's mesh secret was generated once (no secretRef in its spec).
    assert families["sigx_operator_secrets_generated"].type == "counter"
