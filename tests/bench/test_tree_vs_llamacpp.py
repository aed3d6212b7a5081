"""bench/tree_vs_llamacpp.py's interleaved form (--llama-build): llama.cpp's n-gram runs of a
prompt between ours. Without a llama.cpp build the script says what is missing; with one
(SPECSCOPE_LLAMA_SPEC_BUILD names its build dir, as ../shared/peers builds it) a one-prompt run
on the bundled model, on this CPU, records both sides prompt by prompt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "tree_vs_llamacpp.py"


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    from engine.io.load import default_model_path
    return subprocess.run([sys.executable, str(SCRIPT), "--model", str(default_model_path()), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_without_llama_cpp_it_says_what_to_build(tmp_path):
    r = _run("--llama-build", str(tmp_path), "--device", "cpu", "--dtype", "float32",
             "--out", str(tmp_path / "out.json"), "--workload", "code-edit", "--per-category", "1")
    assert r.returncode != 0 and not (tmp_path / "out.json").exists()
    assert f"no llama-speculative-simple under {tmp_path}" in r.stderr
    assert "Traceback" not in r.stderr
    r = _run("--llama-build", str(tmp_path), "--repeats", "0", "--out", str(tmp_path / "o.json"))
    assert r.returncode != 0 and "--repeats 1 or more" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.skipif(not os.environ.get("SPECSCOPE_LLAMA_SPEC_BUILD"),
                    reason="SPECSCOPE_LLAMA_SPEC_BUILD names no llama.cpp build")
def test_interleaved_run_records_both_sides_per_prompt(tmp_path):
    out, lo = tmp_path / "tvl.json", tmp_path / "llama.json"
    r = _run("--llama-build", os.environ["SPECSCOPE_LLAMA_SPEC_BUILD"], "--device", "cpu",
             "--dtype", "float32", "--workload", "specbench:qa", "--per-category", "1", "--tokens", "12",
             "--repeats", "1", "--configs", "none,tree:4:2", "--out", str(out), "--llama-out", str(lo))
    assert r.returncode == 0, r.stderr[-2000:]
    res, llama = json.loads(out.read_text()), json.loads(lo.read_text())
    assert res["interleaved"] and llama["interleaved"]
    (row,) = res["rows"]
    runs = [x for x in llama["runs"] if x["prompt"] == row["prompt"]]
    assert sorted(x["variant"] for x in runs) == ["ngram-simple", "plain", "spec-default"]
    best = max((x for x in runs if x["variant"] != "plain"), key=lambda x: x["tok_s"])
    assert row["llama"]["variant"] == best["variant"] and row["llama"]["tok_s"] == best["tok_s"]
    assert row["ratio"]["tree:4:2"] == pytest.approx(row["ours"]["tree:4:2"] / best["tok_s"])
