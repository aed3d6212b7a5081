"""Every lesson on the bundled model, CPU, under the quick (test) budget: it writes its CSV and
Markdown, the CSV holds what the run's events and the profile say, and the Markdown quotes the
write-up's own numbers, read here from the write-ups' text (tests/fixtures/seeds: copies of
../shared/seeds). Each lesson runs once per session (tests/conftest.py's lesson_result); the
figures are tested in tests/workbench/test_lessons_gui.py."""

from __future__ import annotations

import csv
import re
import statistics
from pathlib import Path

import pytest

from engine.cost.plan import Cause

from engine.lessons import NAMES
from engine.lessons import seeds as S
from engine.lessons.runner import run_lesson
from engine.lessons.runs import Budget, LessonCancelled

SEEDS = Path(__file__).resolve().parents[2] / "fixtures" / "seeds"
WORDS = {"three": 3, "twenty-four": 24}


def said(seed: str, pattern: str) -> tuple[str, ...]:
    """What write-up `seed` (000, 001, 002) says where `pattern` matches: its groups."""
    (path,) = SEEDS.glob(f"{seed}_*.txt")
    m = re.search(pattern, path.read_text(encoding="utf-8"), re.M)
    assert m, f"seed {seed} no longer says {pattern!r}"
    return m.groups()


def number(word: str) -> float:
    return float(WORDS.get(word, word.replace(",", "")))


def said_numbers(seed: str, pattern: str) -> tuple[float, ...]:
    return tuple(number(g) for g in said(seed, pattern))


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


# where each write-up says what a lesson's handout must quote: (seed, pattern); a group that is a
# number must be among the numbers the handout gives as the write-up's, any other group in its words
QUOTED = {
    "knee": [("000", r"the ([\d.]+) millisecond decode floor divided by the ([\d.]+) milliseconds"),
             ("000", r"From one candidate up to about ([\w-]+),"),
             ("000", r"in one pass costs about (\d+) milliseconds"),
             ("000", r"about (\d+) milliseconds\. Same tokens")],
    "budget": [("000", r"^\| Linear prompt lookup[^|]*\| (\d+) \|"),
               ("000", r"^\| Deeper linear block[^|]*\| (\d+) \|"), ("000", r"^\| Token tree[^|]*\| (\d+) \|"),
               ("001", r"^\| Candidate tokens proposed[^|]*\| (\d+) \|"),
               ("001", r"^\| Tokens accepted[^|]*\| (\d+) \|")],
    "acceptance": [("001", r"at α = ([\d.]+) a block of (\d+) is worth about (\d+)x"),
                   ("001", r"at α = ([\d.]+) it is (barely better) than a block of (\d+)"),
                   ("001", r"climbs past about ([\d.]+)"), ("001", r"is about ([\d.]+)x rather than"),
                   ("001", r"report a consistent (\d+)x to (\d+)x")],
    "row-cost": [("002", r"Strix Halo ([\d.]+) \+ ([\d.]+) ms/row R9700 ([\d.]+) \+ ([\d.]+) ms/row"),
                 ("002", r"^1 2 ([\d.]+) ([\d.]+)$"), ("002", r"^2 3 ([\d.]+) ([\d.]+)$"),
                 ("002", r"^3 4 ([\d.]+) ([\d.]+)$")],
    "penalties": [("002", r"presence penalty of ([\d.]+)"), ("002", r"(H_i = last W) tokens of"),
                  ("002", r"same emitted IDs on (\d+) of (\d+) prompts"),
                  ("002", r"Strix Halo ([\d.]+) tok/s neutral vs ([\d.]+) penalized")],
    "rejection": [("002", r"draws ([\d,]+) trials per case"), ("002", r"fails the same test (in every control case)")],
    "ar-floor": [("002", r"probe(up to \w+) speculative windows"), ("002", r"decide(nothing strictly cheaper)"),
                 ("002", r"^([\d.]+)tok/s\nStrix Halo, greedy AR$"),
                 ("002", r"^([\d.]+)tok/s\nStrix Halo, greedy native MTP$"),
                 ("002", r"^([\d.]+)tok/s\nR9700, greedy AR$"), ("002", r"^([\d.]+)tok/s\nR9700, greedy native MTP$")],
}


def write_up_side(md: str) -> str:
    """What a handout gives as the write-up's: its claim and the write-up column of its table."""
    lines = md.splitlines()
    claim = [ln for ln in lines if ln.startswith("**The write-up's claim**")]
    cells = [ln.split(" | ")[1] for ln in lines if ln.startswith("| ") and not ln.startswith("| ---")]
    assert claim and cells
    return "\n".join(claim + cells)


def test_the_seeds_module_holds_the_write_ups_numbers():
    """engine.lessons.seeds against the write-ups' text (no model)."""
    floor, per_candidate = said_numbers("000", QUOTED["knee"][0][1])
    assert (S.RX9070_DECODE_MS, S.RX9070_MS_PER_CANDIDATE) == (floor, per_candidate)
    assert S.RX9070_KNEE == said_numbers("000", QUOTED["knee"][1][1])[0] == round(floor / per_candidate)
    assert (S.RX9070_PASS_24_MS, S.RX9070_STEPS_24_MS) == (said_numbers("000", QUOTED["knee"][2][1])
                                                            + said_numbers("000", QUOTED["knee"][3][1]))
    assert S.RX9070_AR_TOK_S == said_numbers("000", r"lands about ([\d.]+) tokens per second")[0]
    assert [b for _, b in S.BUDGET_TABLE] == [said_numbers(s, p)[0] for s, p in QUOTED["budget"][:3]]
    assert (S.LOOKUP_PROPOSED, S.LOOKUP_ACCEPTED, S.LOOKUP_STEPS_AVOIDED) == tuple(
        said_numbers("001", p)[0] for p in (QUOTED["budget"][3][1], QUOTED["budget"][4][1],
                                            r"^\| Serial decode steps avoided[^|]*\| (\d+) \|"))
    alpha, gamma, times = said_numbers("001", QUOTED["acceptance"][0][1])
    assert (alpha, gamma, S.GAMMA16_AT_09) == (0.9, 16, times)
    assert S.ALPHA_FLAT_UNTIL == said_numbers("001", QUOTED["acceptance"][2][1])[0]
    assert S.LOOKUP_AVERAGE_SPEEDUP == said_numbers("001", QUOTED["acceptance"][3][1])[0]
    assert S.LOOKUP_SPEEDUP_RANGE == said_numbers("001", QUOTED["acceptance"][4][1])
    assert (S.HALO_BASE_MS, S.HALO_MS_PER_ROW, S.R9700_BASE_MS, S.R9700_MS_PER_ROW) == said_numbers(
        "002", QUOTED["row-cost"][0][1])
    table = [said_numbers("002", p) for _, p in QUOTED["row-cost"][1:]]
    assert (S.HALO_BREAK_EVEN, S.R9700_BREAK_EVEN) == (tuple(h for h, _ in table), tuple(r for _, r in table))
    assert S.MTP_DEFAULT_DEPTH == said_numbers("002", r"the draft depth defaults to (\d+)")[0]
    assert S.PRESENCE_PENALTY == said_numbers("002", QUOTED["penalties"][0][1])[0]
    assert S.PENALTY_PROMPTS_IDENTICAL == said_numbers("002", QUOTED["penalties"][2][1])
    assert S.PENALTY_AR_TOK_S == said_numbers("002", QUOTED["penalties"][3][1])
    assert S.REJECTION_TRIALS == said_numbers("002", QUOTED["rejection"][0][1])[0]
    assert S.FLOOR_MAX_PROBES == number(said("002", QUOTED["ar-floor"][0][1])[0].split()[-1])
    assert (S.HALO_AR_TOK_S, S.HALO_MTP_TOK_S, S.R9700_AR_TOK_S, S.R9700_MTP_TOK_S) == tuple(
        said_numbers("002", p)[0] for _, p in QUOTED["ar-floor"][2:])


@pytest.mark.parametrize("name", NAMES)
def test_files_and_the_write_ups_numbers(lesson_result, name):
    result, out = lesson_result(name)
    md = (out / f"{name}.md").read_text(encoding="utf-8")
    quoted = write_up_side(md)
    numbers = {float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", quoted)}
    for seed, pattern in QUOTED[name]:
        for word in said(seed, pattern):
            if re.fullmatch(r"[\d.,]+", word) or word in WORDS:
                assert number(word) in numbers, f"{name}.md does not quote seed {seed}'s {word!r}"
            else:
                assert word in quoted, f"{name}.md does not quote seed {seed}'s {word!r}"
    assert "Why they differ" in md and result.why in md
    rows = read_csv(out, name)
    assert [r["kind"] for r in rows].count("compare") == len(result.comparisons)
    n_points = sum(len(s.x) for p in result.panels for s in p.series)
    assert sum(r["kind"] == "point" for r in rows) == n_points > 0


def test_knee_csv_is_the_probe(lesson_result):
    result, out = lesson_result("knee")
    prof = result.data["profile"]
    rows = read_csv(out, "knee")
    assert points(rows, "this CPU: probe medians") == [(float(r), ms) for r, ms in prof.points]
    for x, y in points(rows, "this CPU: fit"):
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
    for x, y in points(rows, "this CPU (probe)"):
        assert y == pytest.approx(prof.ms(int(x)) / prof.ms(1), rel=1e-12)
    halo = dict(points(rows, "Strix Halo 30.5 + 6.9 ms/row (seed 002)"))
    r9700 = dict(points(rows, "R9700 30.3 + 14.8 ms/row (seed 002)"))
    # the bundled fits give back the write-up's own break-even table
    assert [round(halo[r], 2) for r in (2.0, 3.0, 4.0)] == list(S.HALO_BREAK_EVEN)
    assert [round(r9700[r], 2) for r in (2.0, 3.0, 4.0)] == list(S.R9700_BREAK_EVEN)
    # the chooser drafts no shallower as acceptance rises, on every card
    for card in ("Strix Halo", "R9700", "this CPU"):
        depths = [y for _, y in points(rows, card)]
        assert depths == sorted(depths)
    assert compare(rows, "tokens to break even, 1 draft")[1] == pytest.approx(prof.break_even(2))


def emitted_tokens(run) -> list[int]:
    return [t for e in run.events for t in e.emitted]


def test_budget_shapes_spend_the_write_ups_budget_and_emit_plain_decoding(lesson_result):
    """Each shape's bars against what its verify passes did, its budget against seed 000's table,
    and its text against plain decoding's (greedy speculation emits exactly what plain decoding does)."""
    result, out = lesson_result("budget")
    rows = read_csv(out, "budget")
    budgets = [said_numbers(seed, p)[0] for seed, p in QUOTED["budget"][:3]]          # 8, 24, 24
    assert [y for _, y in points(rows, "seed 000's budget (candidate tokens)")] == budgets
    cand = [y for _, y in points(rows, "candidate tokens per drafted pass")]
    acc = [y for _, y in points(rows, "accepted draft tokens per pass")]
    tok_s = [y for _, y in points(rows, "tok/s")]
    runs = result.data["runs"]
    new_tokens = Budget.quick_budget().new_tokens
    for plain in runs["plain decoding"]:
        assert plain.report["finish_reason"] == "length" and len(emitted_tokens(plain)) == new_tokens
    for i, shape in enumerate(("linear d8", "linear d24", "tree 3 x d8")):
        assert [emitted_tokens(r) for r in runs[shape]] == [emitted_tokens(r) for r in runs["plain decoding"]], shape
        evs = [e for run in runs[shape] for e in run.events]
        drafted = [e for e in evs if e.tokens]
        # the decoder's own running counts (its last window's statistics), not the lesson's
        last = [run.events[-1].stats for run in runs[shape]]
        assert sum(st.forward_passes for st in last) == len(evs)
        assert cand[i] == pytest.approx(sum(st.proposed_draft_tokens for st in last) / len(drafted))
        assert 1 <= max(len(e.tokens) for e in drafted) <= budgets[i]
        # each pass emits its accepted drafts and one token of the target's: the request's
        # tokens less one per pass
        total = new_tokens * len(runs[shape])
        assert acc[i] == pytest.approx(total / len(evs) - 1)
        assert acc[i] == pytest.approx(sum(st.accepted_draft_tokens for st in last) / len(evs))
        assert tok_s[i] == pytest.approx(total / sum(run.report["wall_s"] for run in runs[shape]), rel=1e-3)
        depth = 24 if shape == "linear d24" else 8
        assert max((max(e.depths) for e in drafted), default=0) <= depth


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_acceptance_curves_are_leviathans_and_the_points_the_runs_tokens(lesson_result):
    result, out = lesson_result("acceptance")
    rows = read_csv(out, "acceptance")

    def curve(gamma: float) -> dict[float, float]:
        return {round(x, 6): y for x, y in points(rows, f"γ = {int(gamma)}")}
    # each curve summed term by term: the i-th draft is reached with probability α^i
    for g in (2, 4, 8, 16):
        for x, y in curve(g).items():
            assert y == pytest.approx(sum(x ** i for i in range(g + 1)), rel=1e-9)
    # the write-up's reading of them, in its own numbers
    alpha, gamma, times = said_numbers("001", QUOTED["acceptance"][0][1])
    assert round(curve(gamma)[alpha]) == times                             # "about 8x"
    a, _, g4 = said("001", QUOTED["acceptance"][1][1])                    # "barely better"
    assert curve(gamma)[float(a)] < 1.1 * curve(float(g4))[float(a)]
    flat = said_numbers("001", QUOTED["acceptance"][2][1])[0]             # flat until 0.5
    assert all(y <= 1 / (1 - flat) for x, y in curve(gamma).items() if x <= flat)
    # the code edits' point, counted from the raw tokens: a linear draft's accepted tokens are the
    # prefix it shares with what its window emitted (greedy: the target's own token follows the
    # first draft that misses, or all drafts and a bonus token)
    code_runs = result.data["runs"]["code edits"]
    assert all(r.report["finish_reason"] == "length" for r in code_runs)
    drafted = [e for r in code_runs for e in r.events if e.tokens]
    accepted = tried = 0
    for e in drafted:
        assert e.parents == list(range(-1, len(e.tokens) - 1))             # width 1: one chain
        k = common_prefix(e.tokens, e.emitted)
        assert len(e.emitted) == k + 1
        accepted += k
        tried += k + (k < len(e.tokens))
    series = next(r["series"] for r in rows if r["kind"] == "point" and r["series"].startswith("code edits"))
    (alpha_here, per_pass), = points(rows, series)
    assert alpha_here == pytest.approx(accepted / tried)
    assert per_pass == pytest.approx(1 + accepted / len(drafted))


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
    # what the floor was told: each window's whole cycle, its own time and the loop's around it
    assert all(e.cycle_ms >= e.window_ms for e in on.events)
    assert drawn == sorted((float(e.index), e.cycle_ms / len(e.emitted)) for e in on.events)
    first = on.events[0]
    # the floor's plain cost is the median of its last (up to five) timed plain steps: the plain
    # steps it asked for (or the request's last token, where it wanted one) but the untimed leads
    # (the first of the run, the first after a window, where plain steps queue: graphs); not a
    # window that found nothing to draft
    assert not first.tokens
    plain = [e.cycle_ms for e in on.events if not e.tokens and not e.figures.get("lead")
             and Cause(e.cause) in (Cause.AR_FLOOR, Cause.LAST_TOKEN)]
    leads = [i for i, e in enumerate(on.events) if e.figures.get("lead")]
    assert plain and all(i == 0 or on.events[i - 1].tokens for i in leads)
    assert any(on.ar_ms == pytest.approx(statistics.median(plain[i:i + k]))
               for k in range(1, 6) for i in range(len(plain)))
    mark = next(r for r in rows if r["kind"] == "mark")
    assert float(mark["y"]) == pytest.approx(on.ar_ms)
    # the first decision, the write-up's rule: up to three probes held against the timed step,
    # each drawn; retired only if none was strictly cheaper
    probes, timed = result.data["probes"], result.data["timed_ms"]
    assert 1 <= len(probes) <= S.FLOOR_MAX_PROBES
    assert sorted((ms / n) for ms, n in probes) == pytest.approx(sorted(
        float(r["y"]) for r in rows if r["kind"] == "point" and r["series"] == "probe window"))
    decided = next(s for s in result.data["steps"] if s["state"] != "probing")
    cheaper = [ms / n < timed for ms, n in probes]
    assert decided["state"] == ("speculating" if cheaper[-1] else "retired") and not any(cheaper[:-1])


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


@pytest.mark.parametrize("name", NAMES)
def test_every_lessons_svg_is_a_light_handout_readable_at_its_size(lesson_result, name):
    """engine.lessons.svg (no Qt): well-formed, light by default and dark on request, no text under
    14 px at the export width, the device named in the table's head."""
    import xml.etree.ElementTree as ET

    from engine.lessons.svg import render_svg
    result, _ = lesson_result(name)
    light, dark = render_svg(result), render_svg(result, "dark")
    ns = "{http://www.w3.org/2000/svg}"
    for text, bg in ((light, "#ffffff"), (dark, "#22272e")):
        root = ET.fromstring(text)
        assert root.get("width") == "1600"
        assert root.find(f"{ns}rect").get("fill") == bg
        sizes = [float(t.get("font-size")) for t in root.iter(f"{ns}text")]
        assert sizes and min(sizes) >= 14
    texts = [t.text for t in ET.fromstring(light).iter(f"{ns}text")]
    assert result.here.startswith("this CPU") and any(t and t.startswith("this CPU (") for t in texts)
    assert not any("this card" in (t or "") for t in texts)


def test_probability_axes_stop_at_one(lesson_result):
    result, _ = lesson_result("rejection")
    for panel in result.panels:
        assert panel.y_range is not None and panel.y_range[0] == 0 and panel.y_range[1] <= 1.0


def test_acceptance_runs_each_workload_on_its_own_prompts(lesson_result):
    """The three points are three workloads: different prompts, from the category named."""
    result, _ = lesson_result("acceptance")
    prompts = result.data["prompts"]
    assert [pid.split("-")[0] for pid, _ in prompts["summarization"]] == ["summarization"]
    assert [pid.split("-")[0] for pid, _ in prompts["roleplay"]] == ["roleplay"]
    ids = [tuple(i) for name in prompts for _, i in prompts[name]]
    assert len(set(ids)) == len(ids) == 3
