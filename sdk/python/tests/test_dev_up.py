"""`sigx dev up --app`: the Python counter example as the app of a local dev cluster, called
through `sigx call`, stopped cleanly with Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from conftest import REPO, sidecar_binary

EXAMPLE = REPO / "examples" / "counter-python" / "counter.py"


def sigx() -> Path:
    path = sidecar_binary().parent / "sigx"
    assert path.is_file(), f"no sigx binary beside {sidecar_binary()}: cargo build --workspace --bins"
    return path


def test_dev_up_runs_the_python_counter_via_app_and_stops_it_cleanly() -> None:
    with tempfile.TemporaryDirectory(prefix="sigx-pydev-") as d:
        dir_ = Path(d) / "c"
        app = f"exec {sys.executable} {EXAMPLE}"
        dev = subprocess.Popen(
            [str(sigx()), "dev", "up", "--dir", str(dir_), "--hosts", "2", "--app", app,
             "--actors", "Counter"],
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
            assert running.wait(60), "dev up was not ready in 60 s:\n" + "\n".join(lines)

            def call(host: int, *args: str) -> str:
                out = subprocess.run(
                    [str(sigx()), "call", "Counter/py", *args, "--socket",
                     str(dir_ / f"host-{host}" / "sidecar.sock")],
                    capture_output=True, text=True, timeout=30,
                )
                assert out.returncode == 0, out.stdout + out.stderr
                return out.stdout.strip()

            # Two hosts, one activation: calls through either host reach the same counter, kept
            # in the cluster's shared state.
            assert call(1, "incr") == "1"
            assert call(2, "incr", "41") == "42"
            assert call(1, "incr") == "43"
        finally:
            dev.send_signal(signal.SIGINT)
            code = dev.wait(60)
            reader.join(5)
        text = "\n".join(lines)
        assert code == 0, text
        for host in (1, 2):
            assert f"sidecar {host} stopped" in text, text
            assert f"app {host} (exec {sys.executable}" in text, text
        stopped = [l for l in lines if l.strip().startswith("app ") and l.endswith(") stopped")]
        assert len(stopped) == 2, text
