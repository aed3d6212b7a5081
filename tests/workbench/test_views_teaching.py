"""The views read as teaching figures: one decision per verify line, tree colours that match the
legend, plots whose legends name every curve, docks whose parts never overlap (issue 35)."""

from __future__ import annotations

from engine.speculation.events import ACCEPTED, BONUS, CORRECTION, NOT_REACHED, REJECTED, ROOT, TARGET

from tests.workbench.conftest import SMALL, show, wait_idle
from workbench.tokens import fmt_prob, fmt_top, visible


def _run(qtbot, make_window, settings=SMALL):
    win = make_window(settings)
    assert win.start_run()
    wait_idle(qtbot, win)
    assert len(win.store) >= 2, "the run made too few windows to check anything"
    return win


def test_each_verify_line_is_one_decision(qtbot, make_window):
    """Proposed token, the target's pick and p from the parent row, the verdict, and what was
    emitted there (the correction for the rejection that cut the path), all matching the events."""
    win = _run(qtbot, make_window)
    corrections = bonuses = rejected_lines = 0
    for idx, ev in enumerate(win.store.events):
        show(win, idx)
        m = win.rows.model
        assert m.rowCount() == len(ev.rows)
        last = ev.accepted_path[-1] if ev.accepted_path else -1
        for r in ev.rows:
            cell = [m.index(r.row, c).data() for c in range(m.columnCount())]
            parent_row = ev.rows[ev.parents[r.node] + 1] if r.node >= 0 else r
            assert cell[2] == ("—" if r.outcome == ROOT else visible(ev.texts[r.node], 24))
            assert cell[3] == visible(parent_row.target_text, 24)
            assert cell[4] == fmt_prob(r.p)
            assert cell[9] == f"row {parent_row.row}: {fmt_top(parent_row.top)}"
            assert cell[7].split()[0] == {ROOT: "root", ACCEPTED: "accepted", REJECTED: "rejected",
                                          NOT_REACHED: "not"}[r.outcome]
            kind = ev.emitted_kinds[-1]
            if r.outcome == REJECTED and ev.parents[r.node] == last and kind == CORRECTION:
                # greedy: the correction is the parent row's own pick, shown on the same line
                assert cell[8] == f"‘{visible(ev.emitted_texts[-1], 16)}’ (correction)"
                assert ev.emitted[-1] == parent_row.target_token
                corrections += 1
            elif r.outcome == ACCEPTED:
                assert r.node in ev.accepted_path
                tail = f", then bonus ‘{visible(ev.emitted_texts[-1], 16)}’"
                assert cell[8] == "kept" + (tail if r.node == last and kind == BONUS else "")
                bonuses += r.node == last and kind == BONUS
            elif r.outcome == ROOT:
                assert cell[8] == (f"‘{visible(ev.emitted_texts[-1], 16)}’ (target)"
                                   if not ev.tokens and kind == TARGET else "")
            rejected_lines += r.outcome == REJECTED
    assert corrections and rejected_lines, "no correction in the run: the check could not fail"
