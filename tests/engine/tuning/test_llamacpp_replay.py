"""The replay that prices llama.cpp configurations is what a live run with the ported drafter
does: the same windows (rows, emitted) on the bundled model, greedy, on a code-edit prompt."""

from __future__ import annotations

import pytest

from engine.tuning.llamacpp_price import LlamaCppConfig, Stream, default_grid, replay

NEW = 24


@pytest.fixture(scope="module")
def prompt_and_ar(cpu_runtime, code_edit_prompts):
    from engine.io.prompts import encode_prompt
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    ids = encode_prompt(cpu_runtime.tokenizer, code_edit_prompts[0]["messages"])
    ar = Decoder(cpu_runtime, ids, DecodeSettings(draft="none", max_new_tokens=NEW), detail=False).run()
    return ids, ar["tokens"]


@pytest.mark.parametrize("spec_type, n, m", [("ngram-simple", 3, 8), ("ngram-map-k", 2, 6)])
def test_replay_is_a_live_run_of_the_ported_drafter(cpu_runtime, prompt_and_ar, spec_type, n, m) -> None:
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    ids, ar_tokens = prompt_and_ar
    s = DecodeSettings(draft=spec_type, depth=m, width=1, ngram_min=1, ngram_max=n, max_new_tokens=NEW)
    dec = Decoder(cpu_runtime, ids, s, detail=False)
    live = [(1 + len(ev.tokens), len(ev.emitted)) for ev in dec.windows()]
    assert dec.new_tokens == ar_tokens                       # lossless, greedy
    replayed = replay(Stream("p", tuple(ids), tuple(ar_tokens)), LlamaCppConfig(spec_type, n, m))
    assert sum(r > 1 for r, _ in live) >= 2                 # it really drafted
    # the last window may differ: llama.cpp still drafts on the last token (n_max 0 cuts nothing)
    assert live[:-1] == replayed[:len(live) - 1]
    assert sum(e for _, e in replayed) == NEW


def test_every_configuration_of_the_grid_can_draft() -> None:
    grid = default_grid()
    assert all(c.size_m >= c.size_n for c in grid)
    assert {c.spec_type for c in grid} == {"ngram-simple", "ngram-map-k", "ngram-map-k4v"}
