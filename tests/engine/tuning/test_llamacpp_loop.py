"""engine.tuning.llamacpp_loop: llama-speculative-simple's statistics read, the loop's overheads
fitted, the calibration kept in a llama.cpp profile (old profiles without it still load).

The recorded output (tests/fixtures/llamacpp/speculative-simple_cpu_smollm2.json) is
llama-speculative-simple's own stderr, from a CPU build of the pinned tree (provenance inside)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "llamacpp"
H200_BENCH = FIX / "llama-bench_h200_smollm2-q4_1_d1000.json"
RECORDED = FIX / "speculative-simple_cpu_smollm2.json"


def _recorded() -> dict:
    return json.loads(RECORDED.read_text())


def test_the_printed_statistics_are_read() -> None:
    from engine.tuning.llamacpp_loop import parse_loop_output
    rec = _recorded()
    for run in rec["runs"]:
        r = parse_loop_output(run["stderr"], run["prompt"], run["setting"])
        assert r.decoded >= rec["tokens"] and r.decode_s > 0
        # each window emits its accepted drafts plus one; the 1-token decodes are the windows
        # that drafted nothing but the first (counted with the prompt's batch); the batched
        # tokens hold the prompt, the first window and every other drafted window, and the
        # counters agree on it in every run (a constant left over: 2 tokens in this build)
        assert r.drafted_windows is not None and 0 <= r.drafted_windows <= r.windows
        rest = r.batch_tokens - (r.encoded - 1) - (r.windows - r.one_row_runs) - r.drafted
        assert rest == 2, run["setting"]
        if run["setting"] == "plain":
            assert r.drafted == r.accepted == r.drafted_windows == 0 and r.windows == r.decoded
            assert r.one_row_runs == r.decoded - 1
        assert r.sampling_ms is not None and r.graphs_reused is not None


def test_not_llamacpp_output_is_one_clear_error() -> None:
    from engine.tuning.llamacpp_loop import LoopCalibrationError, parse_loop_output
    with pytest.raises(LoopCalibrationError, match="no decode statistics"):
        parse_loop_output("usage: something else\n")


def _synthetic(profile, row: float, win: float):
    """Runs whose decode time is exactly the curve plus the given overheads (plain step 2 ms)."""
    from engine.tuning.llamacpp_loop import LoopRun
    from engine.tuning.llamacpp_price import pass_ms
    base = pass_ms(profile)
    step = 0.002
    runs = []
    for i, prompt in enumerate(("a", "b", "c")):
        runs.append(LoopRun(prompt, "plain", 129, 129 * step, 0, 0, 128, 100, 101))
        for setting, wd, d in (("ngram-simple n12 m48", 10 + i, 12), ("ngram-simple n3 m8", 20 + 3 * i, 4)):
            acc = wd * (1 + i)
            windows = 129 - acc
            steps = (windows - wd) + wd * (base(1 + d) / base(1) + win + row * d)
            runs.append(LoopRun(prompt, setting, 129, steps * step, wd * d, acc, windows - wd - 1,
                                100 + wd * (1 + d), 101))
    return runs


@pytest.mark.parametrize("row,win", [(0.53, 0.0), (0.2, 1.5), (0.0, 0.0)])
def test_the_fit_finds_the_overheads_the_runs_were_made_with(row, win) -> None:
    from engine.cost.llamacpp_bench import load_llama_bench_json
    from engine.tuning.llamacpp_loop import fit_loop
    prof = load_llama_bench_json(H200_BENCH)
    cal = fit_loop(_synthetic(prof, row, win), prof)
    assert cal.row_overhead == pytest.approx(row, abs=2e-3)
    assert cal.window_overhead == pytest.approx(win, abs=2e-3)
    assert cal.rel_rms < 1e-3
    for s in cal.settings:           # measured = fitted, and the curve alone is never dearer
        assert s["fitted"] == pytest.approx(s["measured"], rel=1e-2) and s["curve"] >= s["measured"] - 1e-3


def test_the_fit_never_gives_a_negative_overhead() -> None:
    """Runs faster than the curve prices them (noise): both overheads stay >= 0."""
    from engine.cost.llamacpp_bench import load_llama_bench_json
    from engine.tuning.llamacpp_loop import LoopRun, fit_loop
    prof = load_llama_bench_json(H200_BENCH)
    runs = [r if r.setting == "plain" else LoopRun(**{**r.to_dict(), "decode_s": r.decode_s * 0.7})
            for r in _synthetic(prof, 0.1, 0.1)]
    cal = fit_loop(runs, prof)
    assert cal.row_overhead == 0.0 and cal.window_overhead == 0.0
    assert fit_loop([r for r in runs if r.setting == "plain"], prof) is None      # nothing drafted


def test_the_fit_on_the_recorded_runs() -> None:
    """Every recorded run that drafted is fitted, in plain steps of its prompt's plain run, and
    the fit is never further from the measured steps than the curve alone."""
    from engine.cost.llamacpp_bench import load_llama_bench_json
    from engine.tuning.llamacpp_loop import fit_loop, parse_loop_output
    rec = _recorded()
    runs = [parse_loop_output(r["stderr"], r["prompt"], r["setting"]) for r in rec["runs"]]
    cal = fit_loop(runs, load_llama_bench_json(FIX / "llama-bench_cpu-t1_smollm2-q4_1_d1024.json"))
    drafted = [r for r in runs if r.setting != "plain" and r.drafted]
    assert len(cal.runs) == len(drafted) >= 6 and cal.row_overhead >= 0 and cal.window_overhead >= 0
    plain = {r.prompt: r for r in runs if r.setting == "plain"}
    for r, f in zip(drafted, cal.runs):
        p = plain[r.prompt]
        assert f["measured_steps"] == pytest.approx(r.decode_s / (p.decode_s / p.decoded), abs=0.01)
    sse = lambda key: sum((f[key] - f["measured_steps"]) ** 2 for f in cal.runs)  # noqa: E731
    assert sse("fitted_steps") <= sse("curve_steps") + 1e-6


def test_the_calibration_round_trips_in_the_profile_and_old_profiles_load(tmp_path) -> None:
    from engine.cost.llamacpp_bench import load_llama_bench_json
    from engine.cost.profile import CostProfile
    from engine.tuning.llamacpp_loop import fit_loop, profile_calibration, with_calibration
    prof = load_llama_bench_json(H200_BENCH)
    cal = fit_loop(_synthetic(prof, 0.4, 0.3), prof, command=["llama-speculative-simple", "-m", "M"])
    prof.save(tmp_path / "old.json")                      # a profile from before the calibration
    old = CostProfile.load(tmp_path / "old.json")
    assert profile_calibration(old) is None and old.points == prof.points
    with_calibration(prof, cal).save(tmp_path / "new.json")
    new = CostProfile.load(tmp_path / "new.json")
    assert profile_calibration(new) == cal and new.points == prof.points
    assert load_llama_bench_json(tmp_path / "new.json").extra["loop_calibration"]["row_overhead"] == cal.row_overhead
