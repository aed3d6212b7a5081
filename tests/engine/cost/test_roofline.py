"""The roofline probe and `specscope roofline` (engine/cost/probe.py, specscope/roofline.py), timed on real CPU work.

The timer is a real verify-shaped workload: one [rows, 2048] x [2048, 2048] float32 matmul,
streaming 16 MB of "weights" per pass like a decode step does. Until the model runtime is
the subject of its own probe test, it stands in for `runtime.time_verify_pass`.
"""

from __future__ import annotations

import argparse
import io
import time

import pytest
import torch

from engine.cost.profile import CostProfile
from engine.errors import ParameterError, SpecscopeError
from engine.cost.probe import (MIN_REPEATS, ProbeProgress, find_profile, probe, probe_profile,
                               profile_path, resolve_profile)
from specscope.roofline import add_roofline_args, run_roofline


class MatmulTimer:
    """Times one real pass of `rows` rows through a weight matrix (the runtime's interface)."""

    device_name = "CPU test matmul"
    device = torch.device("cpu")
    model_id = "matmul-2048"
    dtype_name = "float32"

    def __init__(self, dim: int = 2048):
        g = torch.Generator().manual_seed(0)
        self.w = torch.randn(dim, dim, generator=g)
        self.x = torch.randn(64, dim, generator=g)
        self.calls: list[tuple[int, int]] = []

    def time_verify_pass(self, n_rows: int, context: int) -> float:
        self.calls.append((n_rows, context))
        x = self.x[:n_rows]
        t0 = time.perf_counter()
        y = x @ self.w
        float(y[0, 0])
        return (time.perf_counter() - t0) * 1e3


@pytest.fixture(scope="module")
def timer():
    return MatmulTimer()


def test_probe_times_real_passes(timer):
    seen: list[ProbeProgress] = []
    pts = probe(lambda n: timer.time_verify_pass(n, 0), [16, 1, 64, 4], repeats=3, warmup=1,
                progress=seen.append)
    assert [r for r, _ in pts] == [1, 4, 16, 64]
    assert all(ms > 0 for _, ms in pts)
    # 64 rows do 64x the arithmetic of one over the same weights: on a CPU that is clearly dearer
    assert dict(pts)[64] > dict(pts)[1]
    assert [p.done for p in seen] == list(range(1, 13)) and seen[-1].total == 12
    assert [p.rows for p in seen[:4]] == [1, 4, 16, 64]        # round-robin, not row by row
    assert [p.round for p in seen] == [1] * 4 + [2] * 4 + [3] * 4


def test_probe_budget_stops_after_the_minimum_rounds(timer):
    timer.calls.clear()
    probe(lambda n: timer.time_verify_pass(n, 0), [1, 2], repeats=50, warmup=0, budget_s=0.0)
    assert len(timer.calls) == 2 * MIN_REPEATS


def test_probe_rejects_bad_timings_and_rows():
    with pytest.raises(SpecscopeError, match="positive"):
        probe(lambda n: 0.0, [1, 2], repeats=1, warmup=0)
    with pytest.raises(SpecscopeError):
        probe(lambda n: float("nan"), [1], repeats=1, warmup=0)
    with pytest.raises(ParameterError):
        probe(lambda n: 1.0, [0, 1], repeats=1, warmup=0)


def parse(*argv):
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="auto")          # the CLI's common options come first
    add_roofline_args(p)
    return p.parse_args(list(argv))


def test_roofline_command_writes_a_valid_profile(timer, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_CACHE", str(tmp_path / "cache"))
    out, err = io.StringIO(), io.StringIO()
    args = parse("--rows", "1,2,8,32", "--repeats", "3", "--warmup", "1", "--context", "256")
    assert run_roofline(args, lambda a: timer, out=out, err=err) == 0
    path = profile_path(timer.device_name, timer.model_id, "float32")
    assert path.parent == tmp_path / "cache" / "profiles" and path.is_file()
    prof = CostProfile.load(path)
    assert prof == find_profile(timer.device_name, timer.model_id, "float32")
    assert [r for r, _ in prof.points] == [1, 2, 8, 32]
    assert (prof.device, prof.model, prof.dtype, prof.context, prof.kind) == (
        "CPU test matmul", "matmul-2048", "float32", 256, "measured")
    assert prof.fit.one_row_ms == dict(prof.points)[1]
    assert prof.ms(32) > prof.ms(1)
    assert all(c == 256 for _, c in timer.calls[-16:])
    text = out.getvalue()
    assert "break-even" in text and "tokens to beat plain decoding" in text and str(path) in text
    assert " AR" not in text                 # plain decoding, named as every view names it
    assert "round 3: 12/12 passes" in err.getvalue()


def test_roofline_out_file_and_zero_arg_factory(timer, tmp_path):
    args = parse("--rows", "1,4", "--repeats", "1", "--warmup", "0", "--out", str(tmp_path / "p.json"))
    assert run_roofline(args, lambda: timer, out=io.StringIO(), err=io.StringIO()) == 0
    assert CostProfile.load(tmp_path / "p.json").points[0][0] == 1


def test_bad_rows_option(timer):
    with pytest.raises(ParameterError, match="comma-separated"):
        run_roofline(parse("--rows", "1,two"), lambda a: timer, out=io.StringIO(), err=io.StringIO())


def test_workbench_probe_entry_reports_fractions(timer, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_CACHE", str(tmp_path))
    msgs: list[tuple[str, float]] = []
    prof = probe_profile(timer, context=64, progress=lambda m, f: msgs.append((m, f)), save=True,
                         rows=[1, 2, 4], repeats=1, warmup=0)
    # the plan first (0), then each pass, then done
    assert [f for _, f in msgs] == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0, 1.0])
    assert find_profile(timer.device_name, timer.model_id, "float32") == prof


def test_resolve_profile_falls_back_to_a_matching_reference(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_CACHE", str(tmp_path))
    ref = resolve_profile("NVIDIA H200 (CUDA)", "SmolLM2-135M-Instruct.Q4_1.gguf", "bfloat16")
    assert ref is not None and ref.id == "h200-smollm2-135m-bundled-bf16"   # the real weights win over the shape
    assert resolve_profile("CPU x86_64", "SmolLM2-135M-Instruct.Q4_1.gguf", "float32") is None
    # packed weights cost differently: only a reference measured packed stands in for them
    packed = resolve_profile("NVIDIA H200 (CUDA)", "SmolLM2-135M-Instruct.Q4_1.gguf [packed]", "bfloat16")
    assert packed is not None and packed.id == "h200-smollm2-135m-bundled-packed-bf16"
    assert packed.ms(1) > ref.ms(1)                       # measured: 2.92 vs 2.57 ms on the H200
    # and a float32 run is not priced by a bfloat16 card
    assert resolve_profile("NVIDIA H200 (CUDA)", "SmolLM2-135M-Instruct.Q4_1.gguf", "float32") is None
