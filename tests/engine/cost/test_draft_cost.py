"""Pricing model drafts (engine/cost/draft_cost.py) and the chooser that pays for them.

The arithmetic is checked against hand-computed figures on synthetic profiles; the probe and the
decoder run on the real bundled model."""

from __future__ import annotations

import pytest

from engine.cost.chooser import WindowChooser
from engine.cost.draft_cost import (DraftCost, draft_break_even, early_exit_cost, exit_line,
                                    format_exit_break_even)
from engine.cost.plan import Cause
from engine.cost.profile import profile_from_points
from engine.errors import ParameterError


def flat_profile(one=10.0, multi=12.0, exits=None):
    """A GPU-like curve: one row 10 ms, 2..64 rows 12 ms."""
    extra = {"exit_ms": {str(k): v for k, v in exits.items()}, "n_layers": 30} if exits else {}
    return profile_from_points([(1, one), (2, multi), (8, multi), (64, multi)], id="t", device="d",
                               model="m", dtype="float32", context=512, source="test", extra=extra)


def test_draft_ms_of_chains_and_trees_by_hand():
    prof = profile_from_points([(1, 10.0), (2, 12.0), (4, 16.0), (8, 24.0), (16, 40.0)], id="t",
                               device="d", model="m", dtype="f", context=1, source="s")
    cost = DraftCost("half", 5.0, prof)            # a draft pass is half a target pass
    assert cost.draft_ms(0) == 0.0
    assert cost.draft_ms(4) == pytest.approx(20.0)              # 4 one-row passes
    # width 2, depth 3: the root (1 row), then 1 + 2 = 3 rows, then 1 + 2 + 4 = 7 rows
    want = 5.0 + 5.0 * prof.ms(3) / 10.0 + 5.0 * prof.ms(7) / 10.0
    assert cost.draft_ms(3, 2) == pytest.approx(want)
    with pytest.raises(ParameterError, match="positive"):
        DraftCost("free", 0.0, prof)


def test_exit_line_recovers_a_line_and_never_goes_negative():
    pts = {k: 0.4 + 0.03 * k for k in (7, 15, 22, 30)}
    head, layer = exit_line(pts)
    assert head == pytest.approx(0.4) and layer == pytest.approx(0.03)
    assert exit_line({10: 5.0}) == (0.0, 0.5)
    head, layer = exit_line({1: 10.0, 30: 1.0})            # noise: decreasing with depth
    assert head >= 0 and layer >= 0


def test_early_exit_cost_from_probed_layers_interpolates_and_falls_back():
    prof = flat_profile(exits={7: 3.0, 15: 5.0, 22: 7.0, 30: 9.0})
    assert early_exit_cost(prof, 15, 30).one_row_ms == pytest.approx(5.0)    # probed
    # the least-squares line through those four, by hand: mean K 18.5, mean ms 6, slope
    # 76 / 289 ms a layer, so 6 + (28 - 18.5) x 76 / 289 at K = 28
    assert early_exit_cost(prof, 28, 30).one_row_ms == pytest.approx(6 + 9.5 * 76 / 289)
    # points on a line (0.8 ms + 0.2 ms a layer): between and past them, on the line
    on_line = flat_profile(exits={8: 2.4, 16: 4.0, 24: 5.6})
    assert early_exit_cost(on_line, 12, 30).one_row_ms == pytest.approx(3.2)
    assert early_exit_cost(on_line, 28, 30).one_row_ms == pytest.approx(6.4)
    # no probed layers and no runtime: the layers' share of a one-row pass
    assert early_exit_cost(flat_profile(), 15, 30).one_row_ms == pytest.approx(5.0)


def test_break_even_says_when_a_draft_can_never_pay():
    prof = flat_profile()
    dear = DraftCost("as dear as the target", 10.0, prof)
    # depth k: k x 10 ms of drafting + 12 ms of verify, against 10 ms a token: never below k + 1
    for k, _rows, d, w, be in draft_break_even(prof, dear, depths=(1, 2, 4)):
        assert d == pytest.approx(10.0 * k) and w == pytest.approx(10.0 * k + 12.0)
        assert be > k + 1
    cheap = DraftCost("a tenth", 1.0, prof)
    assert all(be < k + 1 for k, *_x, be in draft_break_even(prof, cheap, depths=(1, 2, 4)))
    table = format_exit_break_even(flat_profile(exits={3: 1.0, 30: 10.0}))
    lines = table.splitlines()
    assert lines[2].split()[:3] == ["3", "1.000", "1.30"]      # (1 + 12) / 10 at depth 1
    assert lines[3].split()[2] == "-"                           # 30 layers: never pays


def chooser_with(cost: DraftCost, **kw) -> WindowChooser:
    ch = WindowChooser(cost.curve, max_depth=kw.pop("max_depth", 4), max_width=1, prior=0.5, **kw)
    ch.register("early-exit", rows_of=lambda k, w: 1 + k, draft_ms=cost.draft_ms)
    return ch


def test_a_draft_that_cannot_pay_is_never_tried_and_a_cheap_one_is_tried_then_learned():
    prof = flat_profile()
    dear = chooser_with(DraftCost("dear", 10.0, prof))
    c = dear.choose("early-exit")
    assert c.plain and not c.explore            # even all-accepted windows lose: no first try
    assert c.cause == Cause.NEVER_PAYS
    # the verdict holds (no re-pricing) until HOLD windows were observed, then is priced again
    from engine.cost.chooser import HOLD
    dear.register("early-exit", draft_ms=DraftCost("free", 1e-6, prof).draft_ms)
    assert dear.choose("early-exit") is c
    for _ in range(HOLD):
        dear.observe("early-exit", 0, 0, 0, False)
    assert not dear.choose("early-exit").plain        # nearly free drafts: tried now
    cheap = chooser_with(DraftCost("cheap", 4.0, prof))
    # at the prior 0.5 no window pays (depth 1: 1.5 tok in 16 ms < 1 tok in 10 ms), but one
    # accepted in full could (2 tok in 16 ms): it is tried once
    first = cheap.choose("early-exit")
    assert first.explore and first.depth >= 1 and first.cause == Cause.FIRST_TRY
    assert first.predicted_ms == pytest.approx(12.0 + 4.0 * first.depth)
    # it turns out to be accepted every time: the chooser now drafts deep on its own
    for _ in range(6):
        cheap.observe("early-exit", 4, 1, accepted_len=4, rejected=False, measured_ms=28.0, draft_ms=16.0)
    c = cheap.choose("early-exit")
    assert not c.plain and not c.explore and c.depth == 4
    # and when it is rejected at once every time, plain decoding comes back
    for _ in range(12):
        cheap.observe("early-exit", 4, 1, accepted_len=0, rejected=True, measured_ms=28.0, draft_ms=16.0)
    assert cheap.choose("early-exit").plain


def test_measured_draft_time_corrects_the_predicted_one():
    prof = flat_profile()
    ch = chooser_with(DraftCost("cheap", 1.0, prof), overhead_ema=0.5)
    assert ch.draft_ms("early-exit", 3, 1) == pytest.approx(3.0)
    # the draft passes really take 3x what the profile said
    ch.observe("early-exit", 3, 1, accepted_len=3, rejected=False, measured_ms=30.0, draft_ms=9.0)
    assert ch.draft_ms("early-exit", 3, 1) == pytest.approx(9.0)
    # and the window overhead is what is left: 30 - 9 - 12 = 9 ms
    assert ch.predicted_ms(4) == pytest.approx(12.0 + 9.0)
    # n-gram drafters pay no draft time
    assert ch.draft_ms("tree", 3, 1) == 0.0


def test_window_overhead_learns_a_per_row_cost_once_rows_vary():
    """Sampled windows fetch and score every row's logits on the host: the measured time above
    the profile grows with rows, and the chooser prices that slope once it has seen sizes vary."""
    prof = flat_profile()
    ch = WindowChooser(prof, max_depth=8, max_width=1, overhead_ema=0.2)
    for _ in range(3):                   # one size only: a constant overhead, no slope guessed
        ch.observe("d", 3, 1, 1, True, measured_ms=12.0 + 1.0 + 0.1 * 4, rows=4)
    assert ch.predicted_ms(30) == pytest.approx(12.0 + 1.4)
    for i in range(60):                  # sizes 2..17, gap 1 + 0.1 x rows
        rows = 2 + i % 16
        ch.observe("d", rows - 1, 1, 0, True, measured_ms=12.0 + 1.0 + 0.1 * rows, rows=rows)
    assert ch.predicted_ms(30) == pytest.approx(12.0 + 1.0 + 0.1 * 30, rel=0.02)
    assert ch.predicted_ms(2) == pytest.approx(12.0 + 1.2, rel=0.02)
