"""The Race dock's exactness and baseline lines, with real widgets and the bundled model: a race
of plain decoding (`plain`) against a tree ends with "identical to plain decoding" under the lanes,
in green, and the baseline named as every view names it ("plain decoding N tok/s (measured)"),
the plain side's decode tok/s (prefill excluded) that the tree's speed-up is quoted against;
with no plain side it says why there is no check and the baseline comes from the probe; a
difference (a real verdict on an altered token list) shows where it first differs, in red."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from tests.workbench.conftest import SMALL, TIMEOUT_MS
from sweep_helpers import cpu_like_profile
from workbench import theme


def _race(qtbot, race, a: str, b: str) -> dict:
    race.set_entrants(a, b)
    with qtbot.waitSignal(race.finished, timeout=TIMEOUT_MS) as done:
        assert race.start()
        assert race.exact.full_text()            # the plan (or why not) shows while it runs
    return done.args[0]


def _lane_says(text: str, side: dict, base_tok_s: float | None) -> None:
    """A lane's line: decode tok/s first (over the baseline where given), then tok/s with the
    prefill in; the figures the report's, up to the one decimal shown."""
    m = re.match(r"decode ([0-9.]+) tok/s (?:\(([0-9.]+)× plain decoding\) )?· ([0-9.]+) tok/s incl\. "
                 r"prefill · ", text)
    assert m, text
    assert float(m[1]) == pytest.approx(side["decode_tok_s"], abs=0.051)
    assert float(m[3]) == pytest.approx(side["tok_s"], abs=0.051)
    if base_tok_s is None:
        assert m[2] is None, text
    else:
        assert float(m[2]) == pytest.approx(side["decode_tok_s"] / base_tok_s, abs=0.006)


def test_race_shows_the_exactness_verdict_under_the_lanes(qtbot, make_window, cpu_runtime):
    from engine.speculation.exactness import compare
    win = make_window(settings=replace(SMALL, max_new_tokens=8))
    race = win.race
    report = _race(qtbot, race, "tree:4:2", "plain")
    c = report["check_exact"]
    assert report["reference"] == 1 and c["identical"] and c["compared"] == 8
    a, b = race.lanes
    assert a.output.toPlainText() == b.output.toPlainText()
    line = race.exact.full_text()
    assert line == "exactness, A vs plain B: identical to plain decoding (8 tokens)"
    assert theme.GREEN in race.exact.styleSheet()

    # one baseline: the plain side's decode tok/s (its own device time after its first window,
    # the prefill excluded), measured, named as every view names it; the tree quoted against it
    sa, sb = report["sides"]
    for side in (sa, sb):
        assert side["decode_tok_s"] == pytest.approx(
            (side["new_tokens"] - side["first_tokens"]) / (side["device_s"] - side["first_token_s"]),
            rel=2e-3)
        assert side["tok_s"] == pytest.approx(side["new_tokens"] / side["device_s"], rel=2e-3)
    assert sb["first_tokens"] == 1 and sb["decode_tok_s"] > sb["tok_s"]   # the prefill left out
    assert report["baseline"] == {"tok_s": sb["decode_tok_s"], "source": "measured"}
    assert report["baseline_side"] == 1
    assert race.baseline.full_text() == (f"baseline: plain decoding {sb['decode_tok_s']:.1f} tok/s "
                                         "(measured), lane B's decode speed")
    _lane_says(a.stats.text(), sa, sb["decode_tok_s"])
    _lane_says(b.stats.text(), sb, None)                       # no ratio to itself
    assert "AR" not in a.stats.text() + b.stats.text() + race.baseline.full_text()

    # no plain side: nothing is compared, and the line says why; the baseline is the sides' own
    # plain steps (windows with nothing to draft on this prompt), measured, said so
    win.card_profile = cpu_like_profile(cpu_runtime)          # a one-row pass of 50 ms
    report = _race(qtbot, race, "tree:4:2", "lookup:4:1")
    assert report["check_exact"] is None and report["reference"] is None
    assert race.exact.full_text() == ("no exactness check: neither side is plain decoding "
                                      "(enter plain on one side)")
    assert theme.MUTED in race.exact.styleSheet()
    base = report["baseline"]
    assert base["source"] == "measured" and report["baseline_side"] is None
    assert race.baseline.full_text() == (f"baseline: plain decoding {base['tok_s']:.1f} tok/s "
                                         "(measured), the sides' plain steps")

    # a prompt that repeats: both sides draft every window, no plain step: the probe's one-row pass
    win.prompt_editor.set_prompt("def add(a, b):\n    return a + b\n" * 8)
    report = _race(qtbot, race, "tree:4:2", "lookup:4:1")
    assert report["baseline"] == {"tok_s": 20.0, "source": "probe"} and report["baseline_side"] is None
    assert race.baseline.full_text() == ("baseline: plain decoding 20.0 tok/s (probe), "
                                         "the cost profile's one-row pass")
    _lane_says(a.stats.text(), report["sides"][0], 20.0)

    # a difference: the real verdict on plain's tokens with one altered, shown as the race shows it
    plain = cpu_runtime.tokenizer.encode(" width * height\n\n")
    spec = plain[:2] + [plain[3]] + plain[3:]
    v = compare(spec, plain, None, cpu_runtime.tokenizer.token_text)
    race._show_exact(dict(report, check_exact=v.to_dict(), reference=0))
    assert race.exact.full_text().startswith("exactness, B vs plain A: first differs at token 2: ")
    assert theme.RED in race.exact.styleSheet()
