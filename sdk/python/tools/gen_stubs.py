"""Regenerates the checked-in stubs in src/sigx/actors/v1 from proto/ with grpc_tools.protoc.

Run it after changing proto/ (`python tools/gen_stubs.py`); tests/test_stubs_fresh.py fails while
the checked-in stubs differ from what this produces.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROTO = ROOT / "proto"
OUT = Path(__file__).resolve().parents[1] / "src"


def generate(out: Path) -> None:
    """Writes sigx/actors/v1/*_pb2*.py, and .pyi type stubs for the messages, under `out`."""
    from grpc_tools import protoc

    files = sorted(str(p.relative_to(PROTO)) for p in (PROTO / "sigx").rglob("*.proto"))
    args = ["protoc", f"-I{PROTO}", f"--python_out={out}", f"--pyi_out={out}",
            f"--grpc_python_out={out}", *files]
    if protoc.main(args) != 0:
        raise RuntimeError(f"grpc_tools.protoc failed on {files}")


if __name__ == "__main__":
    generate(OUT)
    sys.exit(0)
