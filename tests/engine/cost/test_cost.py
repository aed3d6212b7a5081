"""The cost fit (engine/cost/fit.py), profiles and what-if pricing (engine/cost/profile.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import least_squares

from engine.cost.fit import CostFit, _hinge, fit_points
from engine.cost.profile import (CostProfile, describe_fit, format_break_even, profile_from_points,
                                 reference_profile, reference_profiles, what_if, windows_of)
from engine.errors import ParameterError, SpecscopeError

PROBE_ROWS = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]


def synthetic(flat, slope, knee, one, rows, noise, seed, samples=5):
    """Points of the hinge model with relative Gaussian noise, `samples` per row count (the
    probe keeps their median, as fit_points does with repeated rows)."""
    rng = np.random.default_rng(seed)
    pts = []
    for r in rows:
        true = one if r == 1 else flat + slope * max(0.0, r - knee)
        pts += [(r, true * (1 + noise * rng.standard_normal())) for _ in range(samples)]
    return pts


@pytest.mark.parametrize("flat,slope,knee,one", [
    (2.5, 0.01, 100.0, 1.4),     # H200-like: GEMV one-row point, knee near 100 rows
    (25.3, 1.04, 25.3 / 1.04, 25.3),   # the bundled RX 9070 XT roofline
    (10.0, 0.5, 12.0, 10.0),     # CPU-like: knee early, steep slope
])
def test_fit_recovers_hinge_parameters_within_5_percent(flat, slope, knee, one):
    for seed in range(25):
        f = fit_points(synthetic(flat, slope, knee, one, PROBE_ROWS, noise=0.01, seed=seed))
        assert f.flat_ms == pytest.approx(flat, rel=0.05)
        assert f.slope_ms_per_row == pytest.approx(slope, rel=0.05)
        assert f.knee_rows == pytest.approx(knee, rel=0.05)
        assert f.one_row_ms == pytest.approx(one, rel=0.05)
        assert f.intercept_ms == pytest.approx(flat - slope * knee, abs=0.05 * flat + 0.1 * slope * knee)


def test_fit_exact_points_are_reproduced():
    f = fit_points([(1, 1.0), (2, 2.0), (8, 2.0), (16, 2.0), (32, 4.0), (64, 8.0)])
    assert (f.flat_ms, f.slope_ms_per_row, f.knee_rows, f.one_row_ms) == pytest.approx((2.0, 0.125, 16.0, 1.0))
    assert [f.ms(r) for r in (1, 2, 16, 24, 64)] == pytest.approx([1.0, 2.0, 2.0, 3.0, 8.0])
    assert f.rms_rel == pytest.approx(0.0, abs=1e-9)


def test_fit_knee_between_probed_rows():
    # the knee at 20 rows lies between probed 16 and 24: the exact gap search must find it
    f = fit_points([(r, 3.0 + 0.2 * max(0, r - 20)) for r in (2, 4, 8, 16, 24, 32, 48, 64)])
    assert f.knee_rows == pytest.approx(20.0)
    assert f.slope_ms_per_row == pytest.approx(0.2)


def test_fit_is_robust_to_one_disturbed_point():
    pts = synthetic(2.5, 0.01, 100.0, 1.4, PROBE_ROWS, noise=0.005, seed=3, samples=1)
    pts = [(r, ms * 1.5) if r == 24 else (r, ms) for r, ms in pts]   # one bad median, +50%
    f = fit_points(pts)
    assert f.flat_ms == pytest.approx(2.5, rel=0.02)
    assert f.knee_rows == pytest.approx(100, rel=0.05)
    assert f.slope_ms_per_row == pytest.approx(0.01, rel=0.05)


def test_pure_noise_invents_no_knee():
    rng = np.random.default_rng(0)
    f = fit_points([(r, 4.0 * (1 + 0.01 * rng.standard_normal())) for r in (2, 4, 8, 16, 32, 64)])
    assert f.knee_rows is None and f.slope_ms_per_row == 0.0
    assert f.flat_ms == pytest.approx(4.0, rel=0.01)
    assert f.max_rows == 64          # flat to the last probe says nothing beyond it
    assert f.ms(1000) == f.flat_ms


def test_linear_every_row_costs_puts_the_knee_at_one_row():
    # the bundled Strix Halo linear fit, measured row by row: no flat part, no GEMV discount
    pts = synthetic(30.5, 6.9, 1.0, 30.5, range(1, 9), noise=0.005, seed=1)
    f = fit_points(pts)
    assert f.knee_rows == pytest.approx(1.0, abs=0.1)
    assert f.slope_ms_per_row == pytest.approx(6.9, rel=0.05)
    assert f.ms(4) == pytest.approx(30.5 + 3 * 6.9, rel=0.02)


def test_hinge_search_is_the_least_squares_optimum():
    """Parity with a general optimiser: scipy's least_squares from many starts never finds a
    lower weighted SSE than the exact knee search."""
    rng = np.random.default_rng(7)
    r = np.array([2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128], float)
    y = 3.0 + 0.05 * np.maximum(0, r - 30) + 0.03 * rng.standard_normal(len(r))
    w = 1 / y ** 2
    flat, slope, knee, sse = _hinge(r, y, w)

    def resid(p):
        return np.sqrt(w) * (y - (p[0] + p[1] * np.maximum(0, r - p[2])))

    best = min(least_squares(resid, [3.0, s, k], bounds=([0, 0, 0], [10, 1, 200])).cost * 2
               for s in (0.01, 0.05, 0.2) for k in (5, 20, 40, 80, 120))
    assert sse <= best * (1 + 1e-6) + 1e-15
    assert knee == pytest.approx(30, rel=0.15)


def test_fit_rejects_bad_points():
    with pytest.raises(ParameterError):
        fit_points([])
    with pytest.raises(ParameterError):
        fit_points([(0, 1.0)])
    with pytest.raises(ParameterError):
        fit_points([(2, float("nan"))])


# --- reference profiles ------------------------------------------------------------------


def test_reference_profiles_load_with_their_published_numbers():
    refs = reference_profiles()
    assert set(refs) == {"rx9070xt-qwen3.5-9b", "strix-halo-flash-next", "r9700-flash-next",
                         "h200-qwen3-8b-shape", "h200-qwen2.5-0.5b-shape", "h200-smollm2-135m-shape",
                         "h200-smollm2-135m-bundled-bf16", "h200-smollm2-135m-bundled-packed-bf16",
                         "h200-qwen3-8b-shape-q4km-packed"}
    # the packed 8B-like card measured with our kernels (BENCHMARKS.md): 9.57 ms a row, 1.27x bf16
    assert refs["h200-qwen3-8b-shape-q4km-packed"].ms(1) == pytest.approx(9.567, abs=1e-3)
    rx = refs["rx9070xt-qwen3.5-9b"]
    assert rx.kind == "roofline"
    assert rx.fit.knee_rows == pytest.approx(25.3 / 1.04)      # ~24 rows
    assert rx.ms(1) == rx.ms(24) == 25.3 and rx.ms(48) == pytest.approx(1.04 * 48)
    # the break-even table the linear fits imply, rows 2..4: (base + (R - 1) * per_row) / base
    halo, r97 = refs["strix-halo-flash-next"], refs["r9700-flash-next"]
    assert [round(be, 2) for _, _, be in halo.break_even_table([2, 3, 4])] == [1.23, 1.45, 1.68]
    assert [round(be, 2) for _, _, be in r97.break_even_table([2, 3, 4])] == [1.49, 1.98, 2.47]
    assert halo.max_rows == r97.max_rows == 8
    assert halo.break_even_table()[-1][0] == 8       # the default table stays in the valid range
    # H200 SmolLM2 shape: one row 1.37 ms, 2..64 rows ~2.5 ms (the GEMV -> GEMM jump)
    h = refs["h200-smollm2-135m-shape"]
    assert h.ms(1) == 1.3685
    for r in (2, 8, 32, 64):
        assert h.ms(r) == pytest.approx(2.5, rel=0.03)
    assert h.fit.rms_rel < 0.03
    q8 = refs["h200-qwen3-8b-shape"]
    assert 64 < q8.fit.knee_rows < 128 and q8.ms(512) == pytest.approx(16.56, rel=0.05)


@pytest.mark.parametrize("pid", ["rx9070xt-qwen3.5-9b", "strix-halo-flash-next", "h200-qwen3-8b-shape"])
def test_profiles_round_trip_through_json(pid):
    p = reference_profile(pid)
    back = CostProfile.from_json(p.to_json())
    assert back == p and back.extra == p.extra
    assert json.loads(p.to_json())["fit"]["one_row_ms"] == p.fit.one_row_ms


def test_probed_profile_round_trips_and_saves(tmp_path):
    pts = synthetic(2.5, 0.01, 100.0, 1.4, PROBE_ROWS, noise=0.01, seed=0, samples=1)
    p = profile_from_points(pts, id="x", device="NVIDIA H200", model="m", dtype="bfloat16",
                            context=1024, source="test", extra={"repeats": 5})
    path = p.save(tmp_path / "sub" / "x.json")
    back = CostProfile.load(path)
    assert back == p and back.extra == {"repeats": 5}
    assert back.points == tuple(sorted((int(r), float(ms)) for r, ms in pts))


def test_malformed_profiles_say_what_to_do(tmp_path):
    with pytest.raises(SpecscopeError, match="roofline"):
        CostProfile.from_json("{not json")
    with pytest.raises(SpecscopeError, match="malformed"):
        CostProfile.from_dict({"id": "a", "kind": "roofline", "decode_ms": 25.3})
    with pytest.raises(SpecscopeError):
        CostProfile.load(tmp_path / "missing.json")
    with pytest.raises(ParameterError):
        CostFit(flat_ms=-1.0, slope_ms_per_row=0.0, knee_rows=None, one_row_ms=1.0)


def test_describe_and_table_text():
    text = describe_fit(reference_profile("h200-smollm2-135m-shape"))
    assert "GEMV" in text and "1.369 ms" in text
    table = format_break_even(reference_profile("r9700-flash-next"), [2, 3, 4])
    assert table.splitlines()[1].split() == ["2", "1", "45.100", "1.49"]


# --- what-if ----------------------------------------------------------------------------


def test_what_if_matches_hand_computation():
    windows = [(9, 5), (1, 1), (4, 2)]
    r97 = what_if(windows, reference_profile("r9700-flash-next"))
    total = (30.3 + 14.8 * 8) + 30.3 + (30.3 + 14.8 * 3)          # 253.7 ms
    assert r97["tokens"] == 8 and r97["windows"] == 3
    assert r97["total_ms"] == pytest.approx(total)
    assert r97["tok_s"] == pytest.approx(8000 / total)
    assert r97["ar_ms"] == pytest.approx(8 * 30.3)
    assert r97["ar_tok_s"] == pytest.approx(1000 / 30.3)
    assert r97["speedup"] == pytest.approx(8 * 30.3 / total)       # < 1: loses on the R9700
    assert r97["extrapolated_windows"] == 1                          # 9 rows > the fit's 8
    rx = what_if(windows, reference_profile("rx9070xt-qwen3.5-9b"))
    assert rx["total_ms"] == pytest.approx(3 * 25.3)                 # all under the knee
    assert rx["speedup"] == pytest.approx(8 / 3)


def test_what_if_from_recorded_events_and_validation():
    events = [{"tokens": [5, 6, 7], "emitted": [5, 6]}, {"tokens": [], "emitted": [9]}]
    assert windows_of(events) == [(4, 2), (1, 1)]
    with pytest.raises(ParameterError):
        what_if([(2, 3)], reference_profile("r9700-flash-next"))    # 2 rows cannot emit 3
