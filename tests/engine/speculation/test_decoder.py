"""Decoder behaviour across settings changes: a switch applied between windows never changes
what greedy decoding emits."""

from __future__ import annotations

import dataclasses
import queue

from engine.speculation.decoder import Decoder
from engine.io.prompts import default_prompt, encode_prompt
from engine.speculation.settings import DecodeSettings


def test_switching_to_adaptive_mid_run_keeps_greedy_output(cpu_runtime, tmp_path, monkeypatch) -> None:
    # no saved profile: the switch makes the decoder probe in the middle of the run, which must
    # only touch scratch slots of the KV cache
    monkeypatch.setenv("SPECSCOPE_CACHE", str(tmp_path))
    ids = encode_prompt(cpu_runtime.tokenizer, default_prompt())
    ref = Decoder(cpu_runtime, ids, DecodeSettings(draft="none", max_new_tokens=40)).run()
    s = DecodeSettings(draft="tree", depth=8, width=3, max_new_tokens=40)
    controls: queue.Queue = queue.Queue()
    dec = Decoder(cpu_runtime, ids, s, controls=controls)
    chosen = []
    for i, ev in enumerate(dec.windows()):
        chosen.append((ev.depth, ev.width, ev.reason))
        if i == 1:
            controls.put(dataclasses.replace(s, adaptive=True, depth=6, width=2))
        if i == 6:                                   # and off again: fixed windows from here
            controls.put(dataclasses.replace(s, adaptive=False, depth=4, width=2))
    assert dec.report()["tokens"] == ref["tokens"]
    assert dec.report()["profile"] is not None
    # windows after the switch were priced by the chooser within the new limits
    later = chosen[3:7]
    assert later and all(d <= 6 and w <= 2 for d, w, _ in later)
    assert all(r.startswith(("depth", "plain")) for _, _, r in later)
    after = chosen[8:-1]                             # (the last window may be cut short)
    assert after and all(r == "fixed depth and width" for _, _, r in after), after


def test_near_ties_use_the_runtimes_margin(cpu_runtime, code_edit_prompts):
    """The float32 BLAS runtime is not bit-exact across windows: its near-tie margin is the
    dtype's (1e-4); a runtime whose rows are exact flags nothing (nothing can part from AR).
    With the margin raised past every row's top-2 gap, every row is flagged, and the count a
    run reports moves with it."""
    from engine.io.prompts import encode_prompt
    from engine.model.runtime import TIE_MARGINS
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    rt = cpu_runtime
    assert not rt.exact_rows and rt.tie_margin == TIE_MARGINS["float32"] == 1e-4
    ids = encode_prompt(rt.tokenizer, code_edit_prompts[0]["messages"])
    s = DecodeSettings(draft="lookup", max_new_tokens=12)

    def flags(margin):
        saved, rt.tie_margin = rt.tie_margin, margin
        try:
            evs = list(Decoder(rt, ids, s).windows())
        finally:
            rt.tie_margin = saved
        return [r.near_tie for e in evs for r in e.rows]

    assert all(flags(1e9)) and not any(flags(0.0))
