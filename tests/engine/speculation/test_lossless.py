"""Speculation is lossless, end to end through the decoder on the bundled model.

Greedy: for every drafter (lookup, tree) and both penalty settings, the speculative output equals
plain decoding (--draft none) token for token. A difference is tolerated only at a flagged
near-tie (the verify row that emitted the first differing token, or the AR step that emitted it,
has a top-2 margin < 1e-4): batching rows changes float summation order and may flip an exact
tie. This is the representative slice; bench/lossless_matrix.py runs the full matrix.

Sampled: the same seed replays the same tokens, another seed does not, and with penalties and
top-k every emitted token lies in the top-k of the penalized logits at its position (checked both
on the decoder's own rows and against an independent penalty computation over a plain forward).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine.cost.plan import Cause, describe
from engine.speculation.decoder import Decoder
from engine.io.prompts import encode_prompt
from engine.model.runtime import Session, chain
from engine.speculation.sampling import SamplingConfig
from engine.speculation.settings import DecodeSettings

PENALTIES = {
    "off": SamplingConfig(),
    "on": SamplingConfig(repeat_penalty=1.3, presence_penalty=1.5, frequency_penalty=0.5),
}
DRAFTERS = {
    "lookup": {"draft": "lookup", "match": "recent", "depth": 8, "width": 1},
    "tree": {"draft": "tree", "depth": 8, "width": 3},
}
NEW_TOKENS = 48   # 64 until 2026-12-07 (the suite's time: 12 decodes and their references)
WORKLOADS = Path(__file__).resolve().parents[3] / "assets" / "workloads"


@pytest.fixture(scope="module")
def prompts(cpu_runtime, code_edit_prompts) -> dict[str, list[int]]:
    """Two code-edit prompts and one Spec-Bench summarization question (the shortest ones:
    every decode re-runs its prompt's prefill on 2 CPU cores)."""
    code = {p["id"]: p["messages"] for p in code_edit_prompts}
    bench = [json.loads(l) for l in (WORKLOADS / "specbench_questions.jsonl").read_text().splitlines()
             if l.strip()]
    summ = next(q for q in bench if q["question_id"] == 245)
    assert summ["category"] == "summarization"
    msgs = {"textwrap": code["p0_textwrap_dedent"], "posixpath": code["p3_posixpath_expanduser"],
            "summarization": [{"role": "user", "content": summ["turns"][0]}]}
    return {k: encode_prompt(cpu_runtime.tokenizer, m) for k, m in msgs.items()}


@pytest.fixture(scope="module")
def rt(cpu_runtime):
    """The session runtime, with its prefill remembered per prompt: the KV of a prompt's real
    prefill is stored once and copied back when the same prompt is decoded again (every decode
    here starts from one of three prompts; a prefill costs ~2 s on 2 CPU cores). Decode steps,
    verification and commits are untouched."""
    real = Session.prefill
    saved: dict[tuple[int, ...], torch.Tensor] = {}

    def prefill(session: Session, ids: list[int]) -> None:
        cache, key = session.cache, tuple(ids)
        if session.runtime is not cpu_runtime:
            return real(session, ids)
        if cache.length == 0 and key in saved:
            cache.kv[:, :, :, :len(ids)] = saved[key]    # kv: [L, 2, H_kv, C, D]
            cache.advance(len(ids))
            return
        real(session, ids)
        if cache.length == len(ids):
            saved[key] = cache.kv[:, :, :, :len(ids)].clone()

    # One intra-op thread: on a 2-core machine shared with other work, two OpenMP threads
    # spin-wait on each other; the same decodes measured 5x slower with 2 threads than with 1.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(Session, "prefill", prefill)
            yield cpu_runtime
    finally:
        torch.set_num_threads(threads)


def decode(rt, ids: list[int], settings: DecodeSettings):
    """(report, per emitted token: (near-tie flag of its row, the row's top (id, prob)),
    the most draft nodes any window verified)."""
    dec = Decoder(rt, ids, settings, detail=True)
    per_token, most_nodes = [], 0
    for ev in dec.windows():
        most_nodes = max(most_nodes, len(ev.tokens))
        path = [-1] + list(ev.accepted_path)
        for j in range(len(ev.emitted)):
            row = ev.rows[path[j] + 1]      # token j is judged at its parent's row
            if settings.sampling.greedy:
                assert row.target_token == ev.emitted[j], "emitted token is not its row's argmax"
            per_token.append((row.near_tie, [(t, p) for t, _, p in row.top]))
    return dec.report(), per_token, most_nodes


@pytest.fixture(scope="module")
def references(rt, prompts):
    """The plain-decoding reference per (prompt, penalty setting), computed once."""
    cache = {}

    def get(prompt: str, pen: str):
        if (prompt, pen) not in cache:
            s = DecodeSettings(draft="none", max_new_tokens=NEW_TOKENS, sampling=PENALTIES[pen])
            cache[prompt, pen] = decode(rt, prompts[prompt], s)
        return cache[prompt, pen]
    return get


def assert_same_as_reference(spec, ref) -> None:
    (sr, st, _), (ar, at, _) = spec, ref
    if sr["tokens"] == ar["tokens"]:
        return
    k = next((i for i, (a, b) in enumerate(zip(ar["tokens"], sr["tokens"])) if a != b), None)
    assert k is not None, (f"same prefix but different lengths: speculative {len(sr['tokens'])} "
                           f"({sr['finish_reason']}), AR {len(ar['tokens'])} ({ar['finish_reason']})")
    tie = st[k][0] or at[k][0]
    assert tie, (f"speculative output differs from AR at new token {k}: {sr['tokens'][k]} vs "
                 f"{ar['tokens'][k]}, not at a near-tie (rows' top: {st[k][1][:2]} / {at[k][1][:2]})")


# one code-edit prompt (its answer copies the prompt: long accepted drafts) and the
# summarization question (a prose answer, little to copy). posixpath, a second code-edit prompt,
# took the same paths with other tokens (4 decodes and a reference, ~30 s of the suite); it stays
# below (the depth-1 tree, the priced takeover) and in test_history.py (tree d16 w3 on a used
# runtime, token for token)
@pytest.mark.parametrize("drafter", list(DRAFTERS))
@pytest.mark.parametrize("pen", list(PENALTIES))
@pytest.mark.parametrize("prompt", ["textwrap", "summarization"])
def test_greedy_speculation_equals_plain_decoding(rt, prompts, references, prompt, pen, drafter):
    s = DecodeSettings(max_new_tokens=NEW_TOKENS, sampling=PENALTIES[pen], **DRAFTERS[drafter])
    spec = decode(rt, prompts[prompt], s)
    assert spec[0]["proposed_draft_tokens"] > 0, "the drafter never proposed: nothing was tested"
    if pen == "off" and prompt != "summarization":
        # the code-edit answers copy the prompt: drafts must really be accepted there
        assert spec[0]["accepted_draft_tokens"] >= NEW_TOKENS // 4
    assert_same_as_reference(spec, references(prompt, pen))


def test_depth_one_tree_equals_plain_decoding(rt, prompts, references):
    s = DecodeSettings(draft="tree", depth=1, width=3, max_new_tokens=NEW_TOKENS)
    spec = decode(rt, prompts["posixpath"], s)
    assert spec[2] >= 2, "no window had siblings: the depth-1 tree was never a tree"
    assert spec[0]["accepted_draft_tokens"] >= NEW_TOKENS // 4
    assert_same_as_reference(spec, references("posixpath", "off"))


# ---------------------------------------------------------------------------------------------
# sampled


SAMPLED = dict(draft="tree", depth=8, width=3, sampling=SamplingConfig(temperature=0.8, top_p=0.9),
               max_new_tokens=32)


def test_sampled_speculation_replays_with_the_same_seed(rt, prompts):
    ids = prompts["summarization"]
    a = Decoder(rt, ids, DecodeSettings(**SAMPLED, seed=11), detail=False).run()
    b = Decoder(rt, ids, DecodeSettings(**SAMPLED, seed=11), detail=False).run()
    c = Decoder(rt, ids, DecodeSettings(**SAMPLED, seed=12), detail=False).run()
    assert a["tokens"] == b["tokens"]
    assert a["windows"] == b["windows"] and a["accepted_draft_tokens"] == b["accepted_draft_tokens"]
    assert a["tokens"] != c["tokens"]


def reference_penalize(logits: torch.Tensor, history: list[int], repeat: float, presence: float,
                       frequency: float) -> torch.Tensor:
    """llama.cpp's penalties sampler written out: repeat (divide positive logits, multiply
    negative ones, once per distinct token), then frequency (count * f), then presence."""
    out = logits.clone()
    for t, n in Counter(history).items():
        x = out[t]
        x = x / repeat if x > 0 else x * repeat
        out[t] = x - n * frequency - presence
    return out


def test_sampled_speculation_with_penalties_stays_in_top_k(rt, prompts):
    ids = prompts["textwrap"]
    pen = PENALTIES["on"]
    s = DecodeSettings(draft="tree", depth=8, width=3, seed=3, max_new_tokens=32,
                       sampling=replace(pen, temperature=1.0, top_k=5))
    rep, per_token, _ = decode(rt, ids, s)
    toks = rep["tokens"]
    assert len(toks) == len(per_token) >= 16
    # the decoder's own rows: the token has probability > 0 in its row's top-5
    for t, (_, top) in zip(toks, per_token):
        assert t in {i for i, p in top if p > 0}
    # independently: one plain forward over the emitted sequence, penalties recomputed here
    ses = rt.session(len(ids) + len(toks) + 1)
    ses.prefill(ids[:-1])
    seq = ids + toks
    logits = ses.verify(seq[len(ids) - 1:-1], *chain(len(toks))).logits  # [n, V]
    W = s.sampling.penalty_window
    changed = 0
    for k, t in enumerate(toks):
        row = reference_penalize(logits[k], seq[:len(ids) + k][-W:], pen.repeat_penalty,
                                 pen.presence_penalty, pen.frequency_penalty)
        top5 = row.topk(5)
        assert row[t] >= top5.values[-1] - 1e-4, f"token {k} ({t}) is outside the penalized top-5"
        changed += set(top5.indices.tolist()) != set(logits[k].topk(5).indices.tolist())
    assert changed > 0, "the penalties never changed a top-5 set: they were not exercised"


# ---------------------------------------------------------------------------------------------
# model drafters: the target's first layers, a draft model


MODEL_NEW_TOKENS = 24   # short: each draft token costs a draft pass on 2 CPU cores
# the causes of a plain step (engine.cost.plan.Cause)
PLAIN_CAUSES = {Cause.NO_DRAFTER, Cause.LAST_TOKEN, Cause.NO_CONTINUATION, Cause.NO_FIT,
                Cause.NEVER_PAYS, Cause.NOT_BEATING}


@pytest.fixture(scope="module")
def self_draft(loaded_model):
    """The bundled model as its own draft model: a second runtime (own weights and cache)."""
    from engine.model.runtime import Runtime
    return Runtime(loaded_model, "cpu", "float32", weights="dequantized")


def decode_with(rt, ids, settings, draft_runtime=None):
    dec = Decoder(rt, ids, settings, detail=True, draft_runtime=draft_runtime)
    per_token = []
    for ev in dec.windows():
        path = [-1] + list(ev.accepted_path)
        for j in range(len(ev.emitted)):
            row = ev.rows[path[j] + 1]
            assert row.target_token == ev.emitted[j], "emitted token is not its row's argmax"
            per_token.append((row.near_tie, [(t, p) for t, _, p in row.top]))
    return dec.report(), per_token, 0


@pytest.fixture(scope="module")
def short_references(rt, prompts):
    cache = {}

    def get(prompt: str, pen: str):
        if (prompt, pen) not in cache:
            s = DecodeSettings(draft="none", max_new_tokens=MODEL_NEW_TOKENS, sampling=PENALTIES[pen])
            cache[prompt, pen] = decode(rt, prompts[prompt], s)
        return cache[prompt, pen]
    return get


def test_the_model_as_its_own_draft_accepts_every_draft_token(rt, prompts, short_references, self_draft):
    s = DecodeSettings(draft="model", draft_model="(the bundled model)", depth=5, width=1,
                       max_new_tokens=MODEL_NEW_TOKENS)
    spec = decode_with(rt, prompts["summarization"], s, self_draft)
    rep = spec[0]
    assert rep["proposed_draft_tokens"] > 0
    assert rep["accepted_draft_tokens"] == rep["proposed_draft_tokens"]
    # every window drafts 5, accepts 5 and adds a bonus: 6 tokens a pass (the last may be cut)
    assert rep["windows"] == -(-MODEL_NEW_TOKENS // 6)
    assert_same_as_reference(spec, short_references("summarization", "off"))


@pytest.mark.parametrize("drafter, prompt, pen, width", [("early-exit", "textwrap", "off", 1),
                                                         ("early-exit", "summarization", "on", 2),
                                                         ("model", "textwrap", "on", 1),
                                                         ("model", "summarization", "off", 2)])
def test_model_drafts_equal_plain_decoding(rt, prompts, short_references, self_draft, drafter,
                                           prompt, pen, width):
    """Chains (width 1) and trees (width 2: the draft's top 2 at each expanded node)."""
    s = DecodeSettings(draft=drafter, exit_layer=20, draft_model="(the bundled model)", depth=3,
                       width=width, max_new_tokens=MODEL_NEW_TOKENS, sampling=PENALTIES[pen])
    spec = decode_with(rt, prompts[prompt], s, self_draft if drafter == "model" else None)
    assert spec[0]["proposed_draft_tokens"] > 0
    if drafter == "model" and width == 1:   # the same model, penalized the same way
        assert spec[0]["accepted_draft_tokens"] == spec[0]["proposed_draft_tokens"]
    assert_same_as_reference(spec, short_references(prompt, pen))


def test_sampled_model_drafts_replay_with_the_same_seed(rt, prompts):
    ids = prompts["summarization"]
    s = DecodeSettings(draft="early-exit", exit_layer=20, depth=3, width=2, max_new_tokens=10, seed=5,
                       sampling=SamplingConfig(temperature=0.7))
    a = Decoder(rt, ids, s, detail=True)
    events = list(a.windows())
    b = Decoder(rt, ids, s, detail=False).run()
    assert a.report()["tokens"] == b["tokens"]
    rows = [r for ev in events for r in ev.rows if r.node >= 0]
    # real q on every drafted row, and the acceptance probability it implies for a first child
    # (a later sibling is judged against the residual p' left by the rejected ones)
    assert rows and all(r.q is not None and 0 < r.q <= 1 for r in rows)
    first = [r for ev in events for r in ev.rows
             if r.node >= 0 and ev.parents.index(ev.parents[r.node]) == r.node]
    tried = [r for r in first if r.accept_prob is not None]
    assert tried and all(r.accept_prob == pytest.approx(min(1.0, r.p / r.q), rel=1e-5) for r in tried)


# ---------------------------------------------------------------------------------------------
# model drafts priced by the cost model (--adaptive): the chooser picks each window's depth and
# width, or the takeover its drafter, and the output stays plain decoding's


@pytest.fixture(scope="module")
def cheap_exit_profile(rt):
    """This CPU's measured verify curve, with the early exit at 20 layers priced at 1% of a
    step: the card where drafting is nearly free, so the chooser drafts (deep where it pays)."""
    from dataclasses import replace

    from engine.cost.probe import run_probe
    prof = run_probe(rt, context=256, rows=(1, 2, 4, 8, 16), repeats=2, warmup=1, exit_layers=[])
    return replace(prof, extra={**prof.extra, "exit_ms": {"20": 0.01 * prof.ms(1)}, "n_layers": 30})


@pytest.mark.parametrize("prompt, pen, takeover", [("textwrap", "off", False),
                                                   ("summarization", "on", False),
                                                   ("posixpath", "off", True)])
def test_priced_model_drafts_equal_plain_decoding(rt, prompts, short_references, cheap_exit_profile,
                                                  prompt, pen, takeover):
    s = DecodeSettings(draft="early-exit", exit_layer=20, depth=4, width=2, adaptive=True,
                       takeover=takeover, max_new_tokens=MODEL_NEW_TOKENS, sampling=PENALTIES[pen])
    dec = Decoder(rt, prompts[prompt], s, detail=True, profile=cheap_exit_profile)
    events, per_token = [], []
    for ev in dec.windows():
        events.append(ev)
        path = [-1] + list(ev.accepted_path)
        for j in range(len(ev.emitted)):
            row = ev.rows[path[j] + 1]
            assert row.target_token == ev.emitted[j]
            per_token.append((row.near_tie, [(t, p) for t, _, p in row.top]))
    assert_same_as_reference((dec.report(), per_token, 0), short_references(prompt, pen))
    assert dec.draft_cost.one_row_ms == pytest.approx(0.01 * cheap_exit_profile.ms(1))
    drafted = [ev for ev in events if ev.tokens]
    assert drafted and dec.report()["proposed_draft_tokens"] > 0
    assert all(ev.reason == describe(ev.cause, ev.figures) for ev in events)   # words of the cause
    if takeover:      # both drafters priced on one clock, each window says who won and why
        chosen = [ev for ev in events if ev.cause != Cause.LAST_TOKEN]
        assert chosen and all(ev.cause == Cause.PRICED_TAKEOVER and ev.figures["ar_ms"] > 0
                              and ev.figures["kind"] in ("ngram", "model", "plain") for ev in chosen)
        assert {ev.drafter for ev in drafted} >= {"early-exit"}
    else:             # the chooser's own pricing, draft time included
        assert all(ev.cause == Cause.FIRST_TRY or (ev.cause == Cause.PRICED
                                                   and ev.figures["draft_ms"] > 0) for ev in drafted)


def test_a_draft_model_as_dear_as_the_target_is_never_tried(rt, prompts, self_draft, short_references):
    """The bundled model drafting for itself: every draft would be accepted, but k draft passes
    plus a verify pass cost more than the k + 1 plain steps they replace, on any card. Priced,
    it never drafts; the draft's cost comes from its own profile (the same file: the target's)."""
    from engine.cost.probe import profile_path, run_probe
    prof = run_probe(rt, context=256, rows=(1, 2, 4, 8), repeats=2, warmup=1, exit_layers=[])
    prof.save(profile_path(self_draft.device_name, self_draft.model_id, self_draft.dtype_name))
    s = DecodeSettings(draft="model", draft_model="(the bundled model)", depth=3, width=1,
                       adaptive=True, max_new_tokens=8)
    dec = Decoder(rt, prompts["textwrap"], s, detail=False, profile=prof, draft_runtime=self_draft)
    events = list(dec.windows())
    assert dec.report()["tokens"] == short_references("textwrap", "off")[0]["tokens"][:8]
    assert dec.draft_cost.label.startswith("draft model ")
    # priced on the profile it can never pay; on a busy machine the measured plain steps may run
    # slow enough to allow one first try, after which its measured draft time rules it out
    drafted = [ev for ev in events if ev.tokens]
    assert len(drafted) <= 1 and all(ev.cause == Cause.FIRST_TRY for ev in drafted)
    assert all(ev.cause in PLAIN_CAUSES for ev in events if not ev.tokens)
