"""Decoder behaviour across settings changes: a switch applied between windows never changes
what greedy decoding emits."""

from __future__ import annotations

import dataclasses
import queue

from engine.cost.plan import Cause, describe
from engine.speculation.decoder import Decoder
from engine.io.prompts import default_prompt, encode_prompt
from engine.speculation.settings import DecodeSettings

# what the chooser says of a window it priced: drafted, or plain because drafting would not pay
PRICED_CAUSES = {Cause.PRICED, Cause.NOT_BEATING, Cause.NEVER_PAYS, Cause.NO_CONTINUATION,
                 Cause.NO_FIT}


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
        chosen.append((ev.depth, ev.width, ev.cause))
        assert ev.reason == describe(ev.cause, ev.figures)      # the words are the cause's
        if i == 1:
            controls.put(dataclasses.replace(s, adaptive=True, depth=6, width=2))
        if i == 6:                                   # and off again: fixed windows from here
            controls.put(dataclasses.replace(s, adaptive=False, depth=4, width=2))
    assert dec.report()["tokens"] == ref["tokens"]
    assert dec.report()["profile"] is not None
    # windows after the switch were priced by the chooser within the new limits
    later = chosen[3:7]
    assert later and all(d <= 6 and w <= 2 for d, w, _ in later)
    assert all(c in PRICED_CAUSES for _, _, c in later), later
    after = chosen[8:-1]                             # (the last window may be cut short)
    assert after and all(c == Cause.FIXED for _, _, c in after), after


def test_near_ties_use_the_runtimes_margin(cpu_runtime, code_edit_prompts):
    """A runtime whose rows are exact (every CPU runtime: layout-invariant attention and
    fixed-shape products) flags nothing: nothing can part from AR. The margin is the dtype's
    only where rows are not exact (a GPU without Triton: TIE_MARGINS). With the margin raised
    past every row's top-2 gap, every row is flagged, and the count a run reports moves with
    it."""
    from engine.io.prompts import encode_prompt
    from engine.model.runtime import TIE_MARGINS
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    rt = cpu_runtime
    assert rt.exact_rows and rt.tie_margin == 0.0 and TIE_MARGINS["float32"] == 1e-4
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


def test_the_report_times_and_rate_agree_with_a_clock_outside(cpu_runtime) -> None:
    """wall_s spans every window (their measured ms add up to no more) and fits in the time
    measured around the whole run; the rate lies between tokens over that outer time and
    tokens over the windows' own time."""
    import time

    ids = cpu_runtime.tokenizer.encode("def add(a, b):\n    return a + b\n\ndef add(a, b):\n")
    dec = Decoder(cpu_runtime, ids, DecodeSettings(draft="lookup", max_new_tokens=10), detail=False)
    t0 = time.perf_counter()
    events = list(dec.windows())
    outside_s = time.perf_counter() - t0
    r = dec.report()
    windows_s = sum(ev.window_ms for ev in events) / 1e3
    assert windows_s <= r["wall_s"] + 1e-4 <= outside_s + 1e-4
    n = r["new_tokens"]
    assert n == sum(len(ev.emitted) for ev in events) >= 1
    assert n / outside_s * 0.999 <= r["tok_s"] <= n / windows_s * 1.001


def test_the_typed_report_keeps_the_json_keys_and_round_trips(cpu_runtime) -> None:
    """The report is a RunReport; its dict has the keys `generate --json` always printed, in
    that order, and comes back unchanged through from_dict (extra keys, such as a sweep's,
    are ignored); the header a recording starts with round-trips too."""
    import json

    from engine.speculation.events import RunHeader, RunReport

    ids = cpu_runtime.tokenizer.encode("one two three one two")
    dec = Decoder(cpu_runtime, ids, DecodeSettings(draft="lookup", max_new_tokens=4), detail=False)
    report = dec.run()
    assert list(report) == [
        "text", "tokens", "new_tokens", "prompt_tokens", "windows", "forward_passes",
        "proposed_draft_tokens", "accepted_draft_tokens", "tokens_per_pass", "accept_rate_by_depth",
        "tok_s", "wall_s", "load_s", "finish_reason", "retired", "ar_windows", "ar_floor", "profile",
        "device", "dtype", "activation_dtype", "weights", "weight_format", "weight_bytes", "model",
        "config", "first_token_s", "first_tokens", "decode_tok_s", "baseline"]
    back = RunReport.from_dict(json.loads(json.dumps({**report, "decode_tok_s_end": 1.0})))
    assert back.to_dict() == report and back == dec.run_report()
    # a report saved before the decode speed and the baseline existed reads them as absent
    old = RunReport.from_dict({k: v for k, v in report.items()
                               if k not in ("first_token_s", "first_tokens", "decode_tok_s", "baseline")})
    assert old.decode_tok_s is None and old.baseline is None and old.first_token_s is None
    drafted = {**report, "draft_ms": 3.5, "draft_ms_per_token": None}
    assert RunReport.from_dict(drafted).to_dict() == drafted
    head = dec.run_header(prompt="one two three one two")
    assert RunHeader.from_dict(json.loads(json.dumps(head.to_dict()))) == head
    assert head.prompt_tokens == len(ids) and head.settings["draft"] == "lookup"
    assert RunHeader.from_dict({"settings": {"draft": "tree"}, "future": 1}).model == ""


def test_switching_drafters_mid_run_rebuilds_through_the_factory(cpu_runtime) -> None:
    """n-gram tree -> early exit (a model drafter begins on the run's session) -> lookup, between
    windows: greedy output unchanged, each window names the drafter that drafted it."""
    ids = cpu_runtime.tokenizer.encode("def area(w, h):\n    return w * h\n\n\ndef area(w, h):\n")
    ref = Decoder(cpu_runtime, ids, DecodeSettings(draft="none", max_new_tokens=16)).run()
    s = DecodeSettings(draft="tree", depth=4, width=2, max_new_tokens=16)
    controls: queue.Queue = queue.Queue()
    dec = Decoder(cpu_runtime, ids, s, controls=controls, detail=False)
    seen = []
    for i, ev in enumerate(dec.windows()):
        seen.append(ev.drafter)
        if i == 0:
            controls.put(dataclasses.replace(s, draft="early-exit", exit_layer=6, depth=2, width=1))
        if i == 2:
            controls.put(dataclasses.replace(s, draft="lookup"))
    assert dec.report()["tokens"] == ref["tokens"]
    assert seen[0] == "tree" and seen[1:3] == ["early-exit"] * 2 and set(seen[3:]) <= {"lookup"}


def test_on_verify_sees_each_windows_tree_and_raw_logits(cpu_runtime) -> None:
    """The observer hook: called once per window before its event, with the tree the event
    shows (q rows included, for the early exit at T 0.7) and the target's raw logits of that
    pass, from which the event's p and q per row are read back."""
    import pytest

    from engine.speculation.sampling import SamplingConfig, target_probs
    cfg = SamplingConfig(temperature=0.7)
    ids = cpu_runtime.tokenizer.encode("Once upon a time, a lighthouse keeper")
    seen: list = []
    dec = Decoder(cpu_runtime, ids, DecodeSettings(draft="early-exit", exit_layer=6, depth=3,
                                                   sampling=cfg, seed=3, max_new_tokens=12),
                  on_verify=lambda tree, scores: seen.append((tree, scores)))
    events = []
    for ev in dec.windows():
        assert len(seen) == len(events) + 1           # called before this window's event
        events.append(ev)
    drafted = 0
    for ev, (tree, scores) in zip(events, seen, strict=True):
        assert list(tree.tokens) == ev.tokens and tree.root == ev.root_token
        assert scores.logits is not None and scores.logits.shape[0] == len(ev.rows) == 1 + len(ev.tokens)
        p = target_probs(scores.logits.float(), cfg)  # no penalties: the raw logits give p
        for i, tok in enumerate(tree.tokens):
            row = ev.rows[i + 1]
            if row.accept_prob is None:               # below a rejection: never tested
                continue
            drafted += 1
            assert row.q == pytest.approx(float(tree.q[i][tok]), rel=1e-5)
            parent_row = tree.parents[i] + 1               # a node is drawn from its parent's row
            assert row.p == pytest.approx(float(p[parent_row, tok]), rel=1e-4, abs=1e-9)
    assert drafted > 0
