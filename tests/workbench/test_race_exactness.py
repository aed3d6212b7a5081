"""The Race dock's exactness line, with real widgets and the bundled model: a race of plain
decoding (`ar`) against a tree ends with "identical to plain decoding" under the lanes, in green;
with no plain side it says why there is no check; a difference (a real verdict on an altered
token list) shows where it first differs, in red."""

from __future__ import annotations

from dataclasses import replace

from tests.workbench.conftest import SMALL, TIMEOUT_MS
from workbench import theme


def _race(qtbot, race, a: str, b: str) -> dict:
    race.set_entrants(a, b)
    with qtbot.waitSignal(race.finished, timeout=TIMEOUT_MS) as done:
        assert race.start()
        assert race.exact.full_text()            # the plan (or why not) shows while it runs
    return done.args[0]


def test_race_shows_the_exactness_verdict_under_the_lanes(qtbot, make_window, cpu_runtime):
    from engine.speculation.exactness import compare
    win = make_window(settings=replace(SMALL, max_new_tokens=8))
    race = win.race
    report = _race(qtbot, race, "tree:4:2", "ar")
    c = report["check_exact"]
    assert report["reference"] == 1 and c["identical"] and c["compared"] == 8
    a, b = race.lanes
    assert a.output.toPlainText() == b.output.toPlainText()
    line = race.exact.full_text()
    assert line == "exactness, A vs plain B: identical to plain decoding (8 tokens)"
    assert theme.GREEN in race.exact.styleSheet()

    # no plain side: nothing is compared, and the line says why
    report = _race(qtbot, race, "tree:4:2", "lookup:4:1")
    assert report["check_exact"] is None and report["reference"] is None
    assert race.exact.full_text() == ("no exactness check: neither side is plain decoding "
                                      "(enter ar on one side)")
    assert theme.MUTED in race.exact.styleSheet()

    # a difference: the real verdict on plain's tokens with one altered, shown as the race shows it
    plain = cpu_runtime.tokenizer.encode(" width * height\n\n")
    spec = plain[:2] + [plain[3]] + plain[3:]
    v = compare(spec, plain, None, cpu_runtime.tokenizer.token_text)
    race._show_exact(dict(report, check_exact=v.to_dict(), reference=0))
    assert race.exact.full_text().startswith("exactness, B vs plain A: first differs at token 2: ")
    assert theme.RED in race.exact.styleSheet()
