"""Every lesson on the bundled model, CPU, under the quick (test) budget: it writes its CSV and
Markdown, the CSV holds what the run's events and the profile say, and the Markdown quotes the
write-up's own numbers. Each lesson runs once per session (tests/conftest.py's lesson_result); the figures are tested
in tests/workbench/test_lessons_gui.py."""

from __future__ import annotations

import csv
import math

import pytest

from engine.lessons import NAMES
from engine.lessons import seeds as S
from engine.lessons.runner import run_lesson
from engine.lessons.runs import Budget, LessonCancelled

def read_csv(out, name):
    with open(out / f"{name}.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def points(rows, series):
    got = [(float(r["x"]), float(r["y"])) for r in rows if r["kind"] == "point" and r["series"] == series]
    assert got, f"no points of series {series!r}"
    return got


def compare(rows, quantity):
    r = next(r for r in rows if r["kind"] == "compare" and r["series"] == quantity)
    return (float(r["x"]) if r["x"] else None), (float(r["y"]) if r["y"] else None)


# the write-up's numbers each lesson's handout must quote
REFERENCES = {
    "knee": ["25.3 ms", "1.04 ms", "≈ 24 rows", "606 ms", "25 ms"],
    "budget": ["8 per drafted pass", "24 per drafted pass", "6 of 8"],
    "acceptance": ["about 8x", "barely better", "2.4x", "0.5"],
    "row-cost": ["30.5 + 6.9 Halo", "30.3 + 14.8 R9700", "1.23 Halo, 1.49 R9700", "1.45 Halo, 1.98 R9700",
                 "1.68 Halo, 2.47 R9700"],
    "penalties": ["1.50", "H_i = last W of prompt", "24 of 24 prompts", "33.87 vs 33.82"],
    "rejection": ["200,000", "in every control case"],
    "ar-floor": ["up to three", "nothing strictly cheaper", "33.78", "58.67", "34.92", "40.71"],
}


@pytest.mark.parametrize("name", NAMES)
def test_files_and_the_write_ups_numbers(lesson_result, name):
    result, out = lesson_result(name)
    md = (out / f"{name}.md").read_text(encoding="utf-8")
    for ref in REFERENCES[name]:
        assert ref in md, f"{name}.md does not quote the write-up's {ref!r}"
    assert "Why they differ" in md and result.why in md
    rows = read_csv(out, name)
    assert [r["kind"] for r in rows].count("compare") == len(result.comparisons)
    n_points = sum(len(s.x) for p in result.panels for s in p.series)
    assert sum(r["kind"] == "point" for r in rows) == n_points > 0


def test_knee_csv_is_the_probe(lesson_result):
    result, out = lesson_result("knee")
    prof = result.data["profile"]
    rows = read_csv(out, "knee")
    assert points(rows, "this card: probe medians") == [(float(r), ms) for r, ms in prof.points]
    for x, y in points(rows, "this card: fit"):
        assert y == pytest.approx(prof.ms(int(x)), rel=1e-12)
    for x, y in points(rows, "RX 9070 XT, Qwen3.5-9B (seed 000): max(25.3, 1.04 × rows)"):
        assert y == pytest.approx(max(25.3, 1.04 * x))
    assert compare(rows, "one decode step (1 row)") == (S.RX9070_DECODE_MS, prof.fit.one_row_ms)
    assert compare(rows, "24 tokens as 24 decode steps")[1] == pytest.approx(24 * prof.ms(1))
    assert compare(rows, "24 tokens in one pass")[1] == pytest.approx(prof.ms(24))


def test_row_cost_csv_is_the_profile_and_the_seeds_fits(lesson_result):
    result, out = lesson_result("row-cost")
    prof = result.data["profile"]
    rows = read_csv(out, "row-cost")
    for x, y in points(rows, "this card (probe)"):
        assert y == pytest.approx(prof.ms(int(x)) / prof.ms(1), rel=1e-12)
    halo = dict(points(rows, "Strix Halo 30.5 + 6.9 ms/row (seed 002)"))
    r9700 = dict(points(rows, "R9700 30.3 + 14.8 ms/row (seed 002)"))
    # the bundled fits give back the write-up's own break-even table
    assert [round(halo[r], 2) for r in (2.0, 3.0, 4.0)] == list(S.HALO_BREAK_EVEN)
    assert [round(r9700[r], 2) for r in (2.0, 3.0, 4.0)] == list(S.R9700_BREAK_EVEN)
    # the chooser drafts no shallower as acceptance rises, on every card
    for card in ("Strix Halo", "R9700", "this card"):
        depths = [y for _, y in points(rows, card)]
        assert depths == sorted(depths)
    assert compare(rows, "tokens to break even, 1 draft")[1] == pytest.approx(prof.break_even(2))


def test_budget_csv_is_counted_from_the_events(lesson_result):
    result, out = lesson_result("budget")
    rows = read_csv(out, "budget")
    cand = [y for _, y in points(rows, "candidate tokens per drafted pass")]
    acc = [y for _, y in points(rows, "accepted draft tokens per pass")]
    tok_s = [y for _, y in points(rows, "tok/s")]
    for i, shape in enumerate(("linear d8", "linear d24", "tree 3 x d8")):
        evs = [e for run in result.data["runs"][shape] for e in run.events]
        drafted = [e for e in evs if e.tokens]
        assert cand[i] == pytest.approx(sum(len(e.tokens) for e in drafted) / len(drafted))
        assert acc[i] == pytest.approx(sum(len(e.accepted_path) for e in evs) / len(evs))
        reports = [run.report for run in result.data["runs"][shape]]
        assert tok_s[i] == pytest.approx(sum(r["new_tokens"] for r in reports) / sum(r["wall_s"] for r in reports),
                                         rel=1e-3)
        depth = 24 if shape == "linear d24" else 8
        assert max(len(e.tokens) for e in evs) <= (24 if shape != "linear d8" else 8)
        assert max((max(e.depths) for e in drafted), default=0) <= depth


def test_acceptance_points_are_the_runs_alpha(lesson_result):
    result, out = lesson_result("acceptance")
    rows = read_csv(out, "acceptance")
    for x, y in points(rows, "γ = 16"):
        assert y == pytest.approx(S.expected_tokens(x, 16))
    assert S.expected_tokens(0.9, 16) == pytest.approx(8.33, abs=0.01)
    code = [e for run in result.data["runs"]["code edits"] for e in run.events if e.tokens]
    accepted = sum(len(e.accepted_path) for e in code)
    tried = accepted + sum("correction" in e.emitted_kinds for e in code)
    series = next(r["series"] for r in rows if r["kind"] == "point" and r["series"].startswith("code edits"))
    (alpha, tpp), = points(rows, series)
    assert alpha == pytest.approx(accepted / tried)
    assert tpp == pytest.approx(sum(len(e.emitted) for e in code) / len(code))


def test_penalties_rows_are_the_runs_rows(lesson_result):
    result, out = lesson_result("penalties")
    run = result.data["run"]
    verdicts = result.data["verdicts"]
    assert len(verdicts) == sum(len(e.rows) for e in run.events)
    assert run.events[0].rows[0].penalty is not None            # the run was penalized
    for v in verdicts:
        ev = run.events[v.window]
        assert v.right == ev.rows[v.row].target_token
        if v.depth == 0:                    # the root's history has no draft token: one history
            assert v.right == v.wrong and v.tv == 0.0
    # a flipped row on the accepted path is the only way the emitted tokens can differ
    for w in result.data["windows"]:
        ev = run.events[w["index"]]
        on_path = {0} | {i + 1 for i in ev.accepted_path}
        if w["emitted"] != w["wrong_emitted"]:
            assert on_path & set(w["flipped_rows"])


def test_rejection_control_shows_the_distortion(lesson_result):
    result, out = lesson_result("rejection")
    d = result.data
    (_, pv_right, _), (_, pv_control, _) = d["chi2"]["right"], d["chi2"]["control"]
    assert pv_right > 1e-3, "rejection sampling must follow p"
    assert pv_control < 1e-6 and d["tv"]["control"] > 5 * d["tv"]["right"], \
        "the control (residual replaced by p) must show its distortion"
    assert d["distorted"]
    rows = read_csv(out, "rejection")
    p0 = d["window"]["p"][0]
    shown = [y for _, y in points(rows, "p: the target")]
    assert shown == sorted(shown, reverse=True) and shown[0] == pytest.approx(float(p0.max()))
    evrows = [r for e in d["run"].events for r in e.rows if r.node >= 0 and r.accept_prob is not None]
    evrows = evrows[:24]                                     # the rows the figure draws
    assert [y for _, y in points(rows, "q(x): the early exit")] == pytest.approx([r.q for r in evrows])
    assert [y for _, y in points(rows, "accept probability min(1, p/q)")] == pytest.approx(
        [min(1.0, r.p / r.q) for r in evrows], rel=1e-5)      # the verifier divides in float64


def test_ar_floor_points_are_the_windows(lesson_result):
    result, out = lesson_result("ar-floor")
    on = result.data["on"]
    rows = read_csv(out, "ar-floor")
    drawn = sorted((x, y) for r in rows if r["kind"] == "point" and r["panel"].startswith("the floor")
                   for x, y in [(float(r["x"]), float(r["y"]))])
    assert drawn == sorted((float(e.index), e.window_ms / len(e.emitted)) for e in on.events)
    first = on.events[0]
    assert not first.tokens and on.ar_ms == pytest.approx(first.window_ms)   # the timed plain step
    mark = next(r for r in rows if r["kind"] == "mark")
    assert float(mark["y"]) == pytest.approx(on.ar_ms)
    assert len(on.probes) <= S.FLOOR_MAX_PROBES
    if on.floor[-1][0] == "retired":
        assert all(ms / n >= on.ar_ms for ms, n in on.probes)


def test_a_lesson_stops_when_asked(cpu_runtime):
    import threading
    stop = threading.Event()
    seen = []

    def progress(msg, frac):
        seen.append(msg)
        stop.set()
    with pytest.raises(LessonCancelled):
        run_lesson("knee", cpu_runtime, Budget.quick_budget(), stop, progress)
    assert len(seen) == 1


def test_times(lesson_result):
    """Not a check: prints each lesson's time under the test budget (pytest -s)."""
    for name in NAMES:
        lesson_result(name)
    times = lesson_result.times
    print("lesson times:", {k: round(v, 1) for k, v in times.items()}, f"total {sum(times.values()):.1f} s")
    assert set(times) == set(NAMES) and all(math.isfinite(v) and v > 0 for v in times.values())
