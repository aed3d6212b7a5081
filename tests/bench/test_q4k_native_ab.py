"""bench/q4k_native_ab.py's CPU dry run (``--device cpu``: Triton's interpreter, tiny shapes):
the A/B runs end to end and finds Q4_KN's outputs bit-identical to Q4_K's. Skipped without
triton (CI has none)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow      # an A/B script's dry run (~13 s of make test's CPU): `make test-slow`
def test_dry_run_on_cpu(tmp_path):
    out = tmp_path / "ab.json"
    env = dict(os.environ, TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "q4k_native_ab.py"), "--device", "cpu",
                        "--json", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    res = json.loads(out.read_text())
    same, total = res["identical"]
    assert total >= 10 and same == total, p.stdout[-2000:]
    assert all(e.get("same_as_q4k") for e in res["sweep"]), res["sweep"]
    assert f"identical {same}/{total}" in p.stdout
