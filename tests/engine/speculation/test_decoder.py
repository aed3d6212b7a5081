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
    assert dec.report()["tokens"] == ref["tokens"]
    assert dec.report()["profile"] is not None
    # windows after the switch were priced by the chooser within the new limits
    later = chosen[3:]
    assert later and all(d <= 6 and w <= 2 for d, w, _ in later)
    assert all(r.startswith(("depth", "plain")) for _, _, r in later)
