"""Window pricing and the AR floor (engine/chooser.py), on the bundled reference profiles."""

from __future__ import annotations

import math

import pytest

from engine.cost.acceptance import reproject as _reproject
from engine.cost.chooser import WindowChooser
from engine.cost.floor import ArFloor
from engine.cost.plan import FLOOR_BAD_WINDOW, FLOOR_NO_GAIN, Cause
from engine.cost.profile import reference_profile
from engine.errors import ParameterError
from engine.speculation.events import (BONUS, CORRECTION, FROM_DRAFT, TARGET, Provenance, WindowEvent,
                           WindowStats)

RX = "rx9070xt-qwen3.5-9b"          # cheap rows: flat to ~24 rows
H200 = "h200-smollm2-135m-shape"    # cheap rows, but one row (GEMV) is 1.8x cheaper than two
R97 = "r9700-flash-next"            # expensive rows: +14.8 ms per row on a 30.3 ms step
HALO = "strix-halo-flash-next"


def chooser(pid, **kw):
    kw.setdefault("max_depth", 16)
    kw.setdefault("max_width", 4)
    return WindowChooser(reference_profile(pid), **kw)


def feed(ch, drafter, depth, width, accepted, rejected, n):
    for _ in range(n):
        ch.observe(drafter, depth, width, accepted, rejected)


# --- the expected-token model --------------------------------------------------------------


def test_expected_tokens_is_one_plus_running_products():
    ch = chooser(RX, prior=0.5)
    assert ch.expected_tokens("d", 3, 1) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    # one window: 2 accepted then a rejection at depth 3, ema 0.3
    ch.observe("d", 4, 1, accepted_len=2, rejected=True)
    a = [0.65, 0.65, 0.35, 0.35]          # depth 4 unobserved: inherits depth 3
    assert [ch.acceptance("d", 1, d) for d in (1, 2, 3, 4)] == pytest.approx(a)
    want = 1 + sum(math.prod(a[:j]) for j in range(1, 5))
    assert ch.expected_tokens("d", 4, 1) == pytest.approx(want)
    # a window that ran to a leaf (bonus) says nothing about the depth below it
    ch.observe("d", 4, 1, accepted_len=1, rejected=False)
    assert ch.acceptance("d", 1, 2) == pytest.approx(0.65)
    assert ch.acceptance("d", 1, 1) == pytest.approx(0.65 + 0.3 * 0.35)


def test_width_reprojection_and_learned_widths():
    # cold start: "any of w" from per-try odds, with correlation 0.5 -> e(3) = 2 tries
    assert _reproject(0.5, 1, 3, 0.5) == pytest.approx(0.75)
    assert _reproject(0.75, 3, 1, 0.5) == pytest.approx(0.5)
    assert _reproject(0.5, 1, 3, 1.0) == pytest.approx(0.5)       # fully correlated: no gain
    ch = chooser(RX, prior=0.5)
    assert ch.acceptance("d", 3, 1) == pytest.approx(0.75)
    # measured: width 1 always rejected, width 3 always accepted -> the tree wins
    feed(ch, "d", 4, 1, 0, True, 10)
    feed(ch, "d", 4, 3, 4, False, 10)
    assert ch.acceptance("d", 1, 1) < 0.05 and ch.acceptance("d", 3, 1) > 0.95
    c = ch.choose("d", available_width=3)
    assert c.width >= 2 and c.depth >= 4
    assert ch.choose("d", available_width=1).plain is False   # width 1 alone: still free rows


# --- choices ------------------------------------------------------------------------------


@pytest.mark.parametrize("pid", [RX, H200, R97, HALO])
def test_zero_acceptance_decodes_plainly(pid):
    c = chooser(pid, prior=0.0).choose("lookup")
    assert c.plain and c.rows == 1 and c.expected_tokens == 1.0
    assert c.predicted_ms == reference_profile(pid).ms(1)
    assert c.cause == Cause.NOT_BEATING and c.figures["best_tokens"] / c.figures["best_ms"] <= 1 / c.predicted_ms


def test_rejections_turn_a_gemv_card_to_plain_decoding():
    # H200: a window costs 1.82 one-row steps, so it must emit 1.82 tokens to pay
    ch = chooser(H200)
    assert not ch.choose("lookup").plain                      # prior 0.5: worth a try
    feed(ch, "lookup", 8, 1, 0, True, 6)
    feed(ch, "lookup", 8, 2, 0, True, 6)
    feed(ch, "lookup", 8, 3, 0, True, 6)
    feed(ch, "lookup", 8, 4, 0, True, 6)
    assert ch.choose("lookup").plain


@pytest.mark.parametrize("pid", [RX, H200])
def test_full_acceptance_on_cheap_rows_goes_deep(pid):
    ch = chooser(pid)
    feed(ch, "lookup", 4, 1, 4, False, 8)                 # every draft accepted
    c = ch.choose("lookup")
    assert c.depth == 16                                   # as deep as allowed
    assert c.expected_tokens > 12
    assert ch.choose("lookup", available_depth=5).depth == 5


def test_expensive_rows_keep_windows_shallow():
    # the same moderate acceptance: deep and wide on the RX 9070 XT, depth 1 on the R9700
    rx, r97 = chooser(RX, prior=0.7), chooser(R97, prior=0.7)
    c_rx, c_97 = rx.choose("mtp"), r97.choose("mtp")
    assert c_rx.depth >= 6 and c_rx.rows <= 26                # stays near the knee
    assert c_97.depth == 1 and c_97.width == 1
    # and at high acceptance the R9700 still respects its 8-row fit
    hi = chooser(R97, prior=0.95).choose("mtp")
    assert 2 <= hi.depth and hi.rows <= 8


def test_chooser_picks_the_best_rate_exhaustively():
    """With one acceptance rate alpha at every depth (the prior, nothing observed), a chain of k
    drafts emits Leviathan's (1 - alpha^(k+1)) / (1 - alpha) tokens: the pick is the k with the
    most of those per ms of the profile's k + 1 rows, or plain decoding when none beats one
    token per one-row pass (ties: the fewest rows); checked by brute force with that closed form,
    not the chooser's running products."""
    for pid in (RX, H200, R97, HALO):
        prof = reference_profile(pid)
        for alpha in (0.3, 0.6, 0.8, 0.95):
            ch = chooser(pid, max_depth=12, max_width=1, prior=alpha)
            rates = [((1 - alpha ** (k + 1)) / (1 - alpha) / prof.ms(k + 1), k)
                     for k in range(1, 13) if prof.max_rows is None or k + 1 <= prof.max_rows]
            best_rate = max(r for r, _ in rates)
            best_k = min(k for r, k in rates if r >= best_rate * (1 - 1e-9))   # ties: fewest rows
            c = ch.choose("d")
            if best_rate > 1 / prof.ms(1) * (1 + 1e-9):
                assert c.depth == best_k and c.width == 1, (pid, alpha)
                assert c.expected_tokens == pytest.approx((1 - alpha ** (best_k + 1)) / (1 - alpha))
            else:
                assert c.plain, (pid, alpha)
    # a hand figure: alpha 0.8, depth 3 -> 1 + 0.8 + 0.64 + 0.512 tokens
    assert chooser(RX, prior=0.8).expected_tokens("d", 3, 1) == pytest.approx(2.952)


def test_no_draft_and_row_limits():
    ch = chooser(RX, max_rows=10)
    c = ch.choose("lookup", available_depth=0)
    assert c.plain and c.cause == Cause.NO_CONTINUATION
    assert all(x.rows <= 10 for x in ch.candidates("lookup"))
    assert ch.choose("lookup").rows <= 10


def test_plain_steps_relax_estimates_so_a_written_off_drafter_is_retried():
    ch = chooser(H200, relax=0.05)
    feed(ch, "lookup", 8, 1, 0, True, 12)
    for w in (2, 3, 4):
        feed(ch, "lookup", 8, w, 0, True, 12)
    assert ch.choose("lookup").plain
    steps = 0
    while ch.choose("lookup").plain:
        ch.observe("lookup", 0, 0, 0, False)
        steps += 1
        assert steps < 500
    assert steps > 5                                       # not immediately, but eventually


def test_a_drafter_that_fails_for_long_is_retried_less_often():
    """Plain steps relax toward the drafter's own fading record, not the bare prior: after 12
    failures it comes back as before; after 60 it takes longer."""
    def steps_to_retry(failures):
        ch = chooser(H200, relax=0.05)
        for w in (1, 2, 3, 4):
            feed(ch, "lookup", 8, w, 0, True, failures)
        steps = 0
        while ch.choose("lookup").plain:
            ch.observe("lookup", 0, 0, 0, False)
            steps += 1
            assert steps < 2000
        return steps
    few, many = steps_to_retry(12), steps_to_retry(60)
    assert many > few + 10


def test_measured_overhead_is_priced_in():
    ch = chooser(RX, prior=0.2)
    assert not ch.choose("d").plain                         # rows under the knee are free
    # windows measured 30 ms above the profile (drafting, masks, commit), plain steps on it
    for _ in range(5):
        ch.observe("d", 2, 1, 0, True, measured_ms=25.3 + 30.0)
        ch.observe("d", 0, 0, 0, False, measured_ms=25.3)
    assert ch.predicted_ms(3) == pytest.approx(55.3)
    assert ch.choose("d").plain


def test_choose_among_drafters_pays_on_the_same_clock():
    ch = chooser(R97)
    feed(ch, "ngram", 3, 1, 3, False, 10)
    feed(ch, "mtp", 3, 1, 0, True, 10)
    name, c = ch.choose_among({"mtp": None, "ngram": 3})
    assert name == "ngram" and c.depth == 3


def test_observe_event_reads_a_window_event():
    stats = WindowStats(3, 1, 3.0, 4, 2, [1.0, 1.0], 10.0, 0.1)
    ev = WindowEvent(index=0, committed_len=10, root_token=1, root_text="a",
                     tokens=[5, 6, 7, 8], texts=["b", "c", "d", "e"], parents=[-1, 0, 1, 2],
                     depths=[1, 2, 3, 4], provenance=[Provenance(0, 3, "lookup")] * 4, rows=[],
                     accepted_path=[0, 1], emitted=[5, 6, 9], emitted_texts=["b", "c", "x"],
                     emitted_kinds=[FROM_DRAFT, FROM_DRAFT, CORRECTION], propose_ms=0.1,
                     verify_ms=25.0, commit_ms=0.1, window_ms=25.3, stats=stats,
                     drafter="lookup", depth=4, width=1, greedy=True)
    ch = chooser(RX)
    ch.observe_event(ev)
    assert [ch.acceptance("lookup", 1, d) for d in (1, 2, 3)] == pytest.approx([0.65, 0.65, 0.35])
    plain = {**ev.to_dict(), "tokens": [], "depths": [], "parents": [], "accepted_path": [],
             "emitted": [3], "emitted_kinds": [TARGET], "depth": 0}
    ch.observe_event(plain)                                  # a plain step: relaxes only
    # toward its record: 0 of 1 tried at depth 3, shrunk by 4 pseudo-trials at the prior 0.5
    assert ch.acceptance("lookup", 1, 3) == pytest.approx(0.35 + 0.02 * ((0 + 4 * 0.5) / (1 + 4) - 0.35))
    full = {**ev.to_dict(), "accepted_path": [0, 1, 2, 3], "emitted_kinds": [FROM_DRAFT] * 4 + [BONUS]}
    ch.observe_event(full)
    assert ch.acceptance("lookup", 1, 4) > 0.35


def test_bad_arguments():
    with pytest.raises(ParameterError):
        chooser(RX, max_depth=0)
    with pytest.raises(ParameterError):
        chooser(RX, ema=1.5)
    with pytest.raises(ParameterError):
        chooser(RX).observe("d", 2, 1, accepted_len=3, rejected=False)


# --- the AR floor -------------------------------------------------------------------------


def run_floor(pid, depth, emitted_per_window):
    """Drive a floor the way the decoder does, pricing every pass on a reference profile."""
    prof = reference_profile(pid)
    floor = ArFloor()
    log = []
    for emitted in emitted_per_window:
        if floor.want_plain_step():
            floor.record_plain(prof.ms(1))
            log.append("plain")
        else:
            floor.record_window(prof.ms(1 + depth), emitted)
            log.append("window")
    return floor, log


def test_floor_retires_low_acceptance_on_expensive_rows():
    # R9700, depth 3 (4 rows, 74.7 ms) emitting 1-2 tokens: >= 37 ms/token vs 30.3 plain;
    # the probes are judged together, six of them
    floor, log = run_floor(R97, 3, [1, 2, 1, 2, 1, 1, 1, 1, 1, 1])
    assert floor.retired and floor.state == "retired"
    assert log == ["plain"] + ["window"] * 6 + ["plain"] * 3
    assert floor.ar_windows == 4 and floor.want_plain_step()
    assert floor.figures["status"] == FLOOR_NO_GAIN and floor.figures["best"] >= floor.ar_ms


def test_floor_stays_on_for_high_acceptance_on_cheap_rows():
    # RX 9070 XT, depth 8 (9 rows, 25.3 ms) emitting 5 tokens: 5 ms/token vs 25.3 plain
    floor, log = run_floor(RX, 8, [5, 5, 5, 5, 5])
    assert floor.state == "speculating" and not floor.retired
    assert log == ["plain", "window", "window", "window", "window"]
    assert floor.ar_windows == 1


def test_floor_gemv_card_needs_two_tokens_per_window():
    # H200: a window costs 2.49 ms, a plain step 1.37: one token per window never pays
    floor, log = run_floor(H200, 8, [1] * 8)
    assert floor.retired and log.count("window") == floor.max_probes
    # the probes pay together: windows of 1, 1, 3, 3 tokens, 1.249 ms/token (not after three)
    floor, log = run_floor(H200, 8, [1, 1, 1, 3, 3])
    assert floor.state == "speculating" and log.count("window") == 4


def test_floor_ties_and_bad_timings_retire():
    floor = ArFloor()
    floor.record_plain(10.0)
    for _ in range(floor.max_probes):
        floor.record_window(20.0, 2)                  # exactly plain's cost per token
    assert floor.retired
    for bad in (float("nan"), 0.0, -1.0, float("inf")):
        floor = ArFloor()
        floor.record_plain(10.0)
        floor.record_window(bad, 3)
        assert floor.retired and floor.figures["status"] == FLOOR_BAD_WINDOW
    floor = ArFloor()
    floor.record_plain(float("nan"))
    assert floor.retired
    with pytest.raises(ParameterError):
        ArFloor().record_window(5.0, 2)               # no plain step timed yet


def test_a_pessimistic_profile_is_corrected_for_windows_by_the_plain_steps():
    """A profile measured on a busy machine (here: every cost 3x the real one) must not keep
    windows out for good: before any window is measured, windows are priced at the ratio the
    plain steps showed, so a drafter that accepts well gets its first window."""
    ch = chooser(R97, prior=0.5)
    real = ch.profile.ms(1)
    feed(ch, "d", 4, 1, 4, False, 10)            # the drafter accepts everything it proposes
    c_before = ch.choose("d", available_width=1)
    for _ in range(3):                            # plain steps measured at a third of the profile
        ch.observe("d", 0, 0, 0, False, measured_ms=real / 3, rows=1)
    c_after = ch.choose("d", available_width=1)
    assert ch.predicted_ms(5) == pytest.approx(ch.profile.ms(5) / 3)
    assert ch.predicted_ms(1) == pytest.approx(real / 3)
    assert not c_after.plain
    assert c_after.tokens_per_ms > 2.5 * c_before.tokens_per_ms      # ~3x, less the relaxation
    ch.observe("d", 4, 1, 4, False, measured_ms=ch.profile.ms(5), rows=5)   # a window measured:
    assert ch.predicted_ms(5) == pytest.approx(ch.profile.ms(5))            # its own overhead rules
