"""The committed gRPC stubs match the schema: generating them again gives
the same files."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_stubs_match_the_schema(tmp_path):
    pytest.importorskip("grpc_tools")
    # The interpreter that has grpc_tools (this one), not whichever
    # python3 comes first on the PATH.
    env = dict(os.environ, PYTHON=sys.executable)
    script = ROOT / "scripts" / "gen-python-stubs.sh"
    subprocess.run(["bash", str(script), str(tmp_path)], check=True, env=env)
    committed = ROOT / "python" / "milliscale" / "v1"
    fresh = tmp_path / "milliscale" / "v1"
    names = sorted(p.name for p in fresh.iterdir() if p.is_file())
    assert names == sorted(p.name for p in committed.iterdir() if p.is_file() and p.suffix != ".pyc")
    for name in names:
        assert (fresh / name).read_text() == (committed / name).read_text(), (
            f"python/milliscale/v1/{name} is stale: run scripts/gen-python-stubs.sh"
        )
    shutil.rmtree(tmp_path / "milliscale")
