"""Takeovers: the n-gram tree or the model draft, whichever is priced cheaper per token."""

from __future__ import annotations

from engine.speculation.decoder import Decoder
from engine.speculation.settings import DecodeSettings
from engine.speculation.takeover import MODEL, NGRAM, RETRY, Takeover

COPY_PROMPT = ("def area(width, height):\n    return width * height\n\n\n"
               "def area(width, height):\n    return width * height\n\n\n"
               "def area(width, height):\n    return")


def test_no_match_goes_to_the_model_and_both_are_measured_first():
    t = Takeover(model_name="early-exit")
    kind, why = t.choose(has_match=False)
    assert kind == MODEL and "no n-gram match" in why
    kinds = []
    for _ in range(4):
        k, why = t.choose(has_match=True)
        assert "measuring both" in why
        kinds.append(k)
        t.observe(k, 1, 10.0)
    assert sorted(kinds) == [MODEL, MODEL, NGRAM, NGRAM]


def test_the_higher_rate_wins_and_the_other_is_retried():
    t = Takeover(model_name="model")
    for _ in range(2):
        t.observe(NGRAM, 4, 20.0)        # 0.2 tok/ms
        t.observe(MODEL, 2, 40.0)        # 0.05 tok/ms
    picks = []
    for _ in range(RETRY + 2):
        k, why = t.choose(has_match=True)
        picks.append(k)
        t.observe(k, 4 if k == NGRAM else 2, 20.0 if k == NGRAM else 40.0)
    assert picks[:RETRY] == [NGRAM] * RETRY
    assert MODEL in picks[RETRY:]                        # re-tried once the favourite held RETRY windows
    k, why = t.choose(has_match=True)
    assert k == NGRAM and "n-gram tree 4.00 tok / 20.0 ms = 200.0 tok/s" in why
    # the text changes: the n-gram drafts start failing, the model takes over
    for _ in range(8):
        t.observe(NGRAM, 1, 30.0)
    assert t.choose(has_match=True)[0] == MODEL


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
    for ev in drafted:
        label = "n-gram tree" if ev.drafter == "tree" else "early-exit"
        assert ev.reason.startswith(f"takeover: {label},")
