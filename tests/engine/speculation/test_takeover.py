"""Takeovers: the n-gram tree, the model draft or a plain step, whichever is priced cheaper per
token. What a choice says is checked on its figures and its event's Cause; an event's words are
checked only as engine.cost.plan.describe's of those, not for what they say."""

from __future__ import annotations

import pytest

from engine.cost.plan import Cause, describe
from engine.speculation.decoder import Decoder
from engine.speculation.settings import DecodeSettings
from engine.speculation.takeover import MODEL, NGRAM, PLAIN, RETRY, Takeover

COPY_PROMPT = ("def area(width, height):\n    return width * height\n\n\n"
               "def area(width, height):\n    return width * height\n\n\n"
               "def area(width, height):\n    return")


COST = {NGRAM: (4, 20.0), MODEL: (2, 40.0), PLAIN: (1, 25.0)}   # 0.2, 0.05, 0.04 tok/ms


def test_no_match_never_drafts_ngrams_and_every_choice_is_measured_first():
    t = Takeover(model_name="early-exit")
    for _ in range(4):
        kind, why = t.choose(has_match=False)
        assert kind in (MODEL, PLAIN) and why["kind"] == kind and why["match"] is False
        t.observe(kind, 1, 10.0)
    t = Takeover(model_name="early-exit")
    kinds = []
    for _ in range(6):
        k, why = t.choose(has_match=True)
        assert why["why"] == "measuring" and why["match"] is True
        kinds.append(k)
        t.observe(k, 1, 10.0)
    assert sorted(kinds) == sorted([MODEL, NGRAM, PLAIN] * 2)


def test_the_highest_rate_wins_and_the_others_are_retried():
    t = Takeover(model_name="model")
    for _ in range(2):
        for k in (NGRAM, MODEL, PLAIN):
            t.choose(has_match=True)
            t.observe(k, *COST[k])
    picks = []
    for _ in range(RETRY + 4):
        k, why = t.choose(has_match=True)
        picks.append(k)
        t.observe(k, *COST[k])
    assert picks.count(NGRAM) >= RETRY and {MODEL, PLAIN} <= set(picks)   # both re-tried
    k, why = t.choose(has_match=True)
    # the moving averages of what each kind did: every window of a kind was the same
    assert k == NGRAM and why["why"] == "best"
    for kind, (tokens, ms) in COST.items():
        assert (why[f"{kind}_tokens"], why[f"{kind}_ms"]) == pytest.approx((tokens, ms))
    # without a match: the cheaper of the model and a plain step
    assert t.choose(has_match=False)[0] == MODEL
    # the text changes: the n-gram drafts start failing, the model takes over
    for _ in range(8):
        t.observe(NGRAM, 1, 30.0)
    assert t.choose(has_match=True)[0] == MODEL
    # and a plain step where the model drafts are slower than it
    for _ in range(8):
        t.observe(MODEL, 1, 60.0)
    assert t.choose(has_match=False)[0] == PLAIN


def test_takeover_run_is_lossless_and_says_who_drafted(cpu_runtime):
    rt = cpu_runtime
    ids = rt.tokenizer.encode(COPY_PROMPT)
    n = 20
    ar = Decoder(rt, ids, DecodeSettings(draft="none", max_new_tokens=n), detail=False).run()
    s = DecodeSettings(draft="early-exit", exit_layer=20, depth=3, width=2, takeover=True,
                       max_new_tokens=n)
    dec = Decoder(rt, ids, s, detail=False)
    events = list(dec.windows())
    assert dec.report()["tokens"] == ar["tokens"]
    drafted = [ev for ev in events if ev.tokens]
    assert {ev.drafter for ev in drafted} == {"tree", "early-exit"}
    for ev in events:
        if ev.cause == Cause.LAST_TOKEN:             # the request's last token: no choice made
            continue
        assert ev.cause == Cause.TAKEOVER and ev.reason == describe(ev.cause, ev.figures)
        if ev.tokens:
            assert ev.figures["kind"] == (NGRAM if ev.drafter == "tree" else MODEL)
