"""bench/llamacpp_spec.py: the export's prediction per category beside llama.cpp's measured runs
(fixtures: the real CPU runs of llamacpp_spec_cpu_code-edit.json, the sweep and llama-bench JSON
the export was priced on)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "llamacpp"
sys.path.insert(0, str(ROOT / "bench"))

import llamacpp_spec as ls  # noqa: E402


def test_predicted_beside_measured_per_category(tmp_path) -> None:
    from engine.cost.llamacpp_bench import load_llama_bench_json
    from engine.tuning.llamacpp_loop import LoopCalibration, with_calibration
    runs = json.loads((FIX / "llamacpp_spec_cpu_code-edit.json").read_text())
    sweep, bench = FIX / "sweep_cpu_code-edit.json", FIX / "llama-bench_cpu-t1_smollm2-q4_1_d1024.json"
    flags = runs["variants"]["exported"]
    pred = ls.predicted(str(sweep), str(bench), flags)
    v = ls.predicted_vs_measured(runs["runs"], pred)["code-edit"]
    ratios = sorted(r["tok_s"] / p["tok_s"] for r in runs["runs"] if r["variant"] == "exported"
                    for p in runs["runs"] if p["variant"] == "plain" and p["prompt"] == r["prompt"]
                    and p["repeat"] == r["repeat"])
    assert v["prompts"] == len(ratios) == 10
    assert v["measured"] == pytest.approx((ratios[4] + ratios[5]) / 2, abs=1e-3)
    assert v["predicted"] == pytest.approx(1.20, abs=0.01) and not v["within_15pct"]   # uncalibrated
    cal = LoopCalibration(0.51, 0.0, 0.0, 0.0, 128, date="test")     # the CPU calibration
    with_calibration(load_llama_bench_json(bench), cal).save(tmp_path / "cal.json")
    assert ls.predicted(str(sweep), str(tmp_path / "cal.json"), flags)["code-edit"] < pred["code-edit"] - 0.2
    assert ls.predicted(str(sweep), "unused", ls.NEVER_DRAFTS) == {"code-edit": 1.0}
    assert "code-edit" in ls.format_versus({"code-edit": v})
