"""The window's per-row detail (issue 33 (d)): a greedy run without penalties verifies on the fast
path with detail on too, its rows built from the pass's summary (RowScores.log_norm and
window_logits) instead of the whole logits. Detail never changes a token, and the rows carry the
values the old way computed from the whole logits (a run with an observer still takes that way:
Decoder's on_verify)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from engine.model.runtime import Runtime, chain, top_lower_id
from engine.speculation.decoder import Decoder
from engine.speculation.sampling import SamplingConfig, target_probs
from engine.speculation.settings import DecodeSettings

PLAIN = DecodeSettings(draft="none", adaptive=False, ar_floor=False, max_new_tokens=14)
TREE = DecodeSettings(draft="tree", depth=8, width=3, adaptive=False, ar_floor=False,
                      max_new_tokens=24)
EARLY = DecodeSettings(draft="early-exit", exit_layer=6, depth=3, width=2, adaptive=False,
                       ar_floor=False, max_new_tokens=12)
PROMPT = ("def area(r):\n    return 3.14159 * r * r\n\ndef perimeter(r):\n    return 2 * 3.14159 * r"
          "\n\n# the same two functions again:\ndef area(r):\n")


@pytest.fixture(scope="module")
def ids(cpu_runtime):
    return cpu_runtime.tokenizer.encode(PROMPT)


@pytest.fixture(scope="module")
def graph_runtime(loaded_model):
    """The graph-bucket path (on a CPU the buckets run eagerly, as on a GPU they replay)."""
    return Runtime(loaded_model, "cpu", "float32", graphs=True)


@pytest.fixture(scope="module")
def screened_runtime(loaded_model):
    """The fast CPU path: int4 layers, a screened Q8_0 LM head (AVX-512 only)."""
    rt = Runtime(loaded_model, "cpu", "auto", weights="packed")
    if not rt.model.lm_head.screened:
        pytest.skip("no screened LM head on this CPU")
    return rt


def run(rt, ids, s, detail, observe=False):
    seen: list = []
    dec = Decoder(rt, ids, s, detail=detail,
                  on_verify=(lambda tree, scores: seen.append(scores)) if observe else None)
    events = list(dec.windows())
    return dec, events, seen


def same_rows(new, old, rel=2e-5) -> None:
    """The rows of two events of the same window: equal, probabilities to float rounding."""
    assert len(new.rows) == len(old.rows) > 0
    for a, b in zip(new.rows, old.rows):
        assert (a.row, a.node, a.depth, a.draft_token, a.draft_text, a.target_token,
                a.target_text, a.accept_prob, a.outcome, a.near_tie, a.penalty) == \
               (b.row, b.node, b.depth, b.draft_token, b.draft_text, b.target_token,
                b.target_text, b.accept_prob, b.outcome, b.near_tie, b.penalty)
        assert [t[:2] for t in a.top] == [t[:2] for t in b.top]
        assert [t[2] for t in a.top] == pytest.approx([t[2] for t in b.top], rel=rel, abs=1e-9)
        assert (a.p is None) == (b.p is None) and (a.q is None) == (b.q is None)
        if a.p is not None:
            assert a.p == pytest.approx(b.p, rel=rel, abs=1e-9)
        assert a.q == b.q


@pytest.mark.parametrize("s", [PLAIN, TREE, EARLY], ids=["plain", "tree d8 w3", "early-exit"])
def test_detail_never_changes_a_token_and_shows_what_the_logits_give(cpu_runtime, ids, s) -> None:
    off, _, _ = run(cpu_runtime, ids, s, detail=False)
    on, events, _ = run(cpu_runtime, ids, s, detail=True)
    old, old_events, logits = run(cpu_runtime, ids, s, detail=True, observe=True)
    assert on.new_tokens == off.new_tokens == old.new_tokens
    assert len(on.new_tokens) == s.max_new_tokens
    if s.draft == "tree":
        assert on.run_stats.accepted > 0                  # it did speculate
    assert all(sc.logits is not None for sc in logits)    # the old way: the whole logits
    assert len(events) == len(old_events)
    for ev, ref, sc in zip(events, old_events, logits):
        assert ev.tokens == ref.tokens and ev.emitted == ref.emitted
        same_rows(ev, ref)
        # and straight from the pass's logits: the softmax's top 5 and each node's p
        probs = sc.logits.float().softmax(dim=-1)
        for r in ev.rows:
            top = probs[r.row].topk(5)
            assert [t[0] for t in r.top] == top.indices.tolist()
            assert [t[2] for t in r.top] == pytest.approx(top.values.tolist(), rel=2e-5)
            if r.node >= 0:
                parent = ev.parents[r.node] + 1
                assert r.p == pytest.approx(float(probs[parent, r.draft_token]), rel=2e-5, abs=1e-9)
    if s.draft == "early-exit":                           # greedy drafts keep their q (shown)
        assert any(r.q is not None for ev in events for r in ev.rows)


def detail_agrees(rt, ids, s) -> None:
    """Detail off, on, and on with an observer (the whole logits, the old way): the same
    tokens, and the same rows with detail on as the old way."""
    off, _, _ = run(rt, ids, s, detail=False)
    on, events, _ = run(rt, ids, s, detail=True)
    old, old_events, _ = run(rt, ids, s, detail=True, observe=True)
    assert on.new_tokens == off.new_tokens == old.new_tokens
    for ev, ref in zip(events, old_events, strict=True):
        same_rows(ev, ref)


def test_the_graph_path_gives_the_same_rows(graph_runtime, ids) -> None:
    detail_agrees(graph_runtime, ids, TREE)


def test_a_screened_head_decodes_the_same_with_detail(screened_runtime, ids) -> None:
    """Detail takes the head's whole logits (the normaliser needs them); their top 5 rank as
    the screen ranks them, so the verdict is the one without detail."""
    for s in (PLAIN, TREE):
        detail_agrees(screened_runtime, ids, s)


@pytest.mark.parametrize("which", ["eager", "graph", "screened"])
def test_a_summary_pass_is_the_logits_summed_up(request, ids, which) -> None:
    rt = request.getfixturevalue({"eager": "cpu_runtime", "graph": "graph_runtime",
                                  "screened": "screened_runtime"}[which])
    ses = rt.session(len(ids) + 16, spare=16)
    try:
        ses.prefill(ids[:-1])
        toks = [ids[-1], 13, 7, ids[-1], 300]
        depths, anc = [0, 1, 1, 2, 3], torch.eye(5, dtype=torch.bool)
        anc[:, 0] = True
        anc[3, 1] = anc[4, 1] = anc[4, 3] = True
        full = ses.verify(toks, depths, anc, need_logits=True)
        fast = ses.verify(toks, depths, anc, need_logits=False)
        summ = ses.verify(toks, depths, anc, need_logits=False, summary=True)
        assert summ.logits is None and fast.logits is None
        assert torch.equal(summ.top_ids, fast.top_ids)              # the verdict's input
        assert torch.equal(summ.top_values, fast.top_values)
        lg = full.logits.float()
        assert torch.allclose(summ.log_norm, torch.logsumexp(lg, dim=-1), rtol=1e-6, atol=1e-5)
        assert torch.equal(summ.window_logits, lg[:, toks])
        vals, _ = top_lower_id(lg, 5)
        assert torch.equal(summ.top_values, vals)
    finally:
        ses.close()


def test_top_lower_id_ranks_ties_to_the_lower_id() -> None:
    g = torch.Generator().manual_seed(3)
    for _ in range(200):
        x = torch.randint(0, 5, (6, 30), generator=g).float()
        vals, ids = top_lower_id(x, 5)
        want_v, want_i = torch.sort(x, dim=1, descending=True, stable=True)
        assert torch.equal(vals, want_v[:, :5]) and torch.equal(ids, want_i[:, :5])


def test_sampled_rows_show_p_from_the_logits(cpu_runtime, ids) -> None:
    """Sampling keeps the whole logits; its rows (read out in one batch now) still show the top
    5 of p and each tried node's p."""
    cfg = SamplingConfig(temperature=0.8)
    s = replace(TREE, sampling=cfg, seed=5, max_new_tokens=12)
    seen: list = []
    dec = Decoder(cpu_runtime, ids, s, detail=True,
                  on_verify=lambda tree, scores: seen.append(scores))
    for ev, sc in zip(dec.windows(), seen):
        p = target_probs(sc.logits.float(), cfg)
        for r in ev.rows:
            top = p[r.row].topk(5)
            assert [t[0] for t in r.top] == top.indices.tolist()
            assert [t[2] for t in r.top] == pytest.approx(top.values.tolist(), rel=1e-6)
            if r.node >= 0:
                assert r.p == pytest.approx(float(p[ev.parents[r.node] + 1, r.draft_token]),
                                            rel=1e-6, abs=1e-12)


def test_the_pass_without_a_summary_is_unchanged(cpu_runtime, ids) -> None:
    ses = cpu_runtime.session(len(ids) + 4)
    try:
        ses.prefill(ids[:-1])
        sc = ses.verify([ids[-1]], *chain(1), need_logits=False)
        assert sc.log_norm is None and sc.window_logits is None
    finally:
        ses.close()
