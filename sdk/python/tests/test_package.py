"""The package builds as a wheel, and its checked-in stubs match proto/."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

SDK = Path(__file__).resolve().parents[1]


def test_pip_wheel_builds_the_sigx_package() -> None:
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "--disable-pip-version-check", "-w", out, str(SDK)],
            check=True, capture_output=True,
        )
        wheels = list(Path(out).glob("sigx-*.whl"))
        assert len(wheels) == 1, wheels
        import zipfile

        names = zipfile.ZipFile(wheels[0]).namelist()
        assert "sigx/app.py" in names and "sigx/actors/v1/app_pb2_grpc.py" in names


def test_checked_in_stubs_are_fresh() -> None:
    sys.path.insert(0, str(SDK / "tools"))
    from gen_stubs import generate

    with tempfile.TemporaryDirectory() as out:
        generate(Path(out))
        fresh = sorted(Path(out, "sigx/actors/v1").glob("*.py*"))
        assert fresh
        for f in fresh:
            checked_in = SDK / "src/sigx/actors/v1" / f.name
            assert checked_in.read_text() == f.read_text(), (
                f"{checked_in} is stale: run `python sdk/python/tools/gen_stubs.py`"
            )
