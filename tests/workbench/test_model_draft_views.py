"""Model drafts in the workbench (real bundled model, real widgets, offscreen): the controls
switch a running decoder to the early-exit drafter, and the tree, verify rows and stats show the
real q of each draft token and which drafter the window used."""

from __future__ import annotations

import dataclasses

import pytest

from engine.speculation.sampling import SamplingConfig

from tests.workbench.conftest import SMALL, show, wait_idle, wait_windows


def test_controls_switch_to_early_exit_and_views_show_q(qtbot, make_window):
    from workbench.tokens import fmt_prob
    s = dataclasses.replace(SMALL, max_new_tokens=20, seed=2,
                            sampling=SamplingConfig(temperature=0.7))
    win = make_window(s)
    c = win.controls
    assert not c.exit_layer.isEnabled() and not c.draft_model.isEnabled()
    win.step()                                   # one n-gram window, then paused
    wait_windows(qtbot, win, 1)
    qtbot.waitUntil(lambda: win.run.state == "paused", timeout=60_000)
    # "model" without a file: one inline error, nothing sent
    c.draft.setCurrentText("model")
    assert "--draft-model" in c.error_text()
    assert c.draft_model.isEnabled() and not c.ngram_min.isEnabled()
    c.exit_layer.setValue(20)                    # still invalid as a whole: nothing is sent
    with qtbot.waitSignal(c.settings_changed):
        c.draft.setCurrentText("early-exit")
    # a model drafts chains or trees (width), priced by the cost model when adaptive is on
    assert c.exit_layer.isEnabled() and c.width.isEnabled() and c.adaptive.isEnabled()
    win.step()
    wait_windows(qtbot, win, 2)
    qtbot.waitUntil(lambda: win.run.state == "paused", timeout=60_000)   # the step has ended
    win.run_or_resume()
    wait_idle(qtbot, win)
    assert win.store[0].drafter == "tree"
    model_windows = [i for i, ev in enumerate(win.store.events) if ev.drafter == "early-exit"]
    assert model_windows and model_windows[0] == 1
    drafted = [i for i in model_windows if win.store[i].tokens]
    assert drafted
    for i in drafted:
        ev = win.store[i]
        assert ev.settings["exit_layer"] == 20
        show(win, i)
        states = {st.node: st for st in win.tree.node_states()}
        for node in range(len(ev.tokens)):
            q = ev.rows[node + 1].q
            assert q is not None and 0 < q <= 1
            assert states[node].q == q and "q" in states[node].label
            # the verify rows' q column, and the acceptance min(1, p/q) of every tried row
            assert win.rows.model.index(node + 1, 5).data() == fmt_prob(q)
            # a first child is accepted with min(1, p/q) (later siblings against the residual p')
            acc = ev.rows[node + 1].accept_prob
            first_child = ev.parents.index(ev.parents[node]) == node
            if acc is not None and first_child:
                assert acc == pytest.approx(min(1.0, ev.rows[node + 1].p / q), rel=1e-5)
        assert win.stats.state["drafter"] == "early-exit"
        assert "early-exit" in win.stats.drafter.text() and "verify" in win.stats.drafter.text()
