"""Verification: greedy longest-path acceptance and tree rejection sampling.

The sampled tests are distribution tests: 200,000 trials per case through the verifier's own
walk (`TreeRejection.run`, which `verify_sampled` calls with n = 1; `test_verify_sampled_is_the_walk`
pins that equivalence), a chi-square test of the emitted tokens against the target distribution
computed independently with transformers' logits processors, and control variants with a known
bug that the same test must reject.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from engine.speculation import events
from engine.speculation.events import Provenance
from engine.speculation.sampling import Rng, SamplingConfig, target_probs
from engine.speculation.tree import TokenTree, build_trie
from engine.speculation.verify import (
    TreeRejection,
    row_histories,
    score_rows,
    verify_greedy,
    verify_greedy_top_k,
    verify_sampled,
)

N_TRIALS = 200_000


ALPHA = 1e-3
V = 8
ROOT = 7


# --- an independent reference for the target distribution of one row ---------------------------


def reference_p(logits: torch.Tensor, history: list[int], cfg: SamplingConfig) -> torch.Tensor:
    """transformers' repetition penalty, OpenAI's presence/frequency formula, then the
    temperature / top-k / top-p / min-p warpers and softmax, in float64."""
    s = logits.float().clone()[None]
    if cfg.penalized and history:
        s = RepetitionPenaltyLogitsProcessor(cfg.repeat_penalty)(torch.tensor([history]), s)
        for tok in set(history):
            c = history.count(tok)
            s[0, tok] -= c * cfg.frequency_penalty + cfg.presence_penalty
    if cfg.greedy:
        return torch.nn.functional.one_hot(s[0].argmax(), s.shape[-1]).double()
    ids = torch.zeros((1, 1), dtype=torch.long)
    for warper in ([TemperatureLogitsWarper(cfg.temperature)] if cfg.temperature != 1 else []) + \
                  ([TopKLogitsWarper(cfg.top_k)] if cfg.top_k else []) + \
                  ([TopPLogitsWarper(cfg.top_p)] if cfg.top_p < 1 else []) + \
                  ([MinPLogitsWarper(cfg.min_p)] if cfg.min_p > 0 else []):
        s = warper(ids, s)
    return s[0].double().softmax(-1)


def history_of(tree: TokenTree, node: int, context: list[int], window: int) -> list[int]:
    """H for node's row, re-derived: the context, then the path down to and including node."""
    path = []
    while node >= 0:
        path.insert(0, tree.tokens[node])
        node = tree.parents[node]
    return (context + path)[-window:]


def make_tree(tokens, parents, q=None) -> TokenTree:
    prov = tuple(Provenance(match=0, position=0, source="test") for _ in tokens)
    return TokenTree(ROOT, tuple(tokens), tuple(parents), prov,
                     None if q is None else tuple(q))


def fixed_logits(rows: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(rows, V, generator=torch.Generator().manual_seed(seed)) * scale


# --- the trial runner ----------------------------------------------------------------------------


def run_trials(tree, logits, context, cfg, n=N_TRIALS, seed=0, walker=TreeRejection, q=None):
    """n independent windows through the verifier's scoring and walk; (last node, token)."""
    scored = score_rows(tree, logits, context, cfg)
    p = target_probs(scored.logits, cfg)
    return walker(tree, p, q).run(n, Rng(seed).uniforms)


def first_two(tree: TokenTree, last: torch.Tensor, tok: torch.Tensor):
    """The first and second emitted tokens of each trial (-1: the window emitted only one)."""
    tokens = torch.tensor(list(tree.tokens) + [-1])
    anc1 = torch.tensor([tree.path_to(i)[0] for i in range(len(tree))] + [-1])
    anc2 = torch.tensor([(tree.path_to(i) + [-1])[1] for i in range(len(tree))] + [-1])
    depth = torch.tensor(list(tree.depths) + [0])
    li = torch.where(last < 0, len(tree), last)              # -1 -> the sentinel slot
    first = torch.where(last < 0, tok, tokens[anc1[li]])
    second = torch.where(last < 0, -1, torch.where(depth[li] == 1, tok, tokens[anc2[li]]))
    return first, second


def chi2_pvalue(samples: torch.Tensor, probs: torch.Tensor) -> float:
    """Chi-square of samples (categories 0..len(probs)-1) against probs. Zero-probability
    categories must never occur and are left out; categories expected fewer than 20 times are
    pooled into one bin (the chi-square approximation needs no tiny expected counts)."""
    counts = torch.bincount(samples, minlength=len(probs)).double()
    zero = probs <= 0
    assert counts[zero].sum() == 0, f"impossible categories drawn: {counts[zero].tolist()}"
    counts, probs = counts[~zero], probs[~zero].double()
    expected = probs / probs.sum() * counts.sum()
    rare = expected < 20
    if rare.any():
        counts = torch.cat([counts[~rare], counts[rare].sum()[None]])
        expected = torch.cat([expected[~rare], expected[rare].sum()[None]])
    assert len(expected) >= 3 and expected.min() > 5
    return float(chisquare(counts.numpy(), expected.numpy()).pvalue)


def first_token_pvalue(tree, logits, context, cfg, **kw) -> float:
    last, tok = run_trials(tree, logits, context, cfg, **kw)
    first, _ = first_two(tree, last, tok)
    return chi2_pvalue(first, reference_p(logits[0], context[-cfg.penalty_window:], cfg))


def joint_pvalue(tree, logits, context, cfg, **kw) -> float:
    """The joint of the first two emitted tokens where it is defined in one window: after a
    root child c, the second token is the target's choice at c's row, p(. | c); after a
    correction at the root the window ends, so that category is (t1, none)."""
    last, tok = run_trials(tree, logits, context, cfg, **kw)
    first, second = first_two(tree, last, tok)
    w = cfg.penalty_window
    p0 = reference_p(logits[0], context[-w:], cfg)
    joint = torch.zeros(V, V + 1, dtype=torch.float64)        # column 0: no second token
    children = {tree.tokens[c]: c for c in tree.children(-1)}
    for t1 in range(V):
        if t1 in children:
            c = children[t1]
            joint[t1, 1:] = p0[t1] * reference_p(logits[c + 1], history_of(tree, c, context, w), cfg)
        else:
            joint[t1, 0] = p0[t1]
    return chi2_pvalue(first * (V + 1) + second + 1, joint.flatten())


# --- control walkers: one known bug each ---------------------------------------------------------


class ReplaceFromP(TreeRejection):
    """Bug: after a rejection, draw from p instead of the residual norm((p' - q)+)."""

    def residual(self, p_prime, q, x):
        return p_prime


class NoRenormalise(TreeRejection):
    """Bug: zero the rejected sibling but do not renormalise, so the next sibling is accepted
    with its original p(x) instead of p(x) / (1 - p(rejected))."""

    def residual(self, p_prime, q, x):
        r = p_prime.clone()
        r[x] = 0.0
        return r


# --- the sampled cases ---------------------------------------------------------------------------

CTX = [1, 2, 3, 1, ROOT]
PLAIN = SamplingConfig(temperature=1.0)


def test_point_mass_single_draft():
    logits = fixed_logits(2, seed=1)
    tree = make_tree([2], [-1])
    assert first_token_pvalue(tree, logits, CTX, PLAIN) > ALPHA


def test_several_siblings_and_the_unnormalised_control():
    logits = fixed_logits(4, seed=2)
    tree = make_tree([1, 5, 2], [-1, -1, -1])   # p = 0.31, 0.39, 0.03
    assert first_token_pvalue(tree, logits, CTX, PLAIN) > ALPHA
    assert first_token_pvalue(tree, logits, CTX, PLAIN, walker=NoRenormalise) < ALPHA


def q_draft_pvalue(walker, n_siblings: int) -> float:
    """Siblings drawn independently from their own q (duplicates allowed), then verified."""
    logits = fixed_logits(1 + n_siblings, seed=3, scale=1.5)
    qs = [torch.softmax(torch.randn(V, generator=torch.Generator().manual_seed(10 + i)) * 1.5, -1)
          for i in range(n_siblings)]
    g = torch.Generator().manual_seed(4)
    drafts = torch.stack([torch.multinomial(q, N_TRIALS, replacement=True, generator=g)
                          for q in qs], dim=1)                 # [N, siblings]: the drafter's draws
    firsts = []
    for k, combo in enumerate(torch.unique(drafts, dim=0).tolist()):
        n = int((drafts == torch.tensor(combo)).all(dim=1).sum())
        tree = make_tree(combo, [-1] * n_siblings, q=qs)
        last, tok = run_trials(tree, logits, CTX, PLAIN, n=n, seed=100 + k, walker=walker)
        firsts.append(first_two(tree, last, tok)[0])
    return chi2_pvalue(torch.cat(firsts), reference_p(logits[0], CTX, PLAIN))


def test_q_draft_single_and_siblings_and_the_replace_from_p_control():
    assert q_draft_pvalue(TreeRejection, 1) > ALPHA
    assert q_draft_pvalue(TreeRejection, 2) > ALPHA
    assert q_draft_pvalue(ReplaceFromP, 1) < ALPHA
    assert q_draft_pvalue(ReplaceFromP, 2) < ALPHA


class WrongChildQ(TreeRejection):
    """Bug: a node below depth 1 is judged against its parent's q instead of its own."""

    def __init__(self, tree, p, q=None):
        super().__init__(tree, p, q)
        self._q = [qi if par < 0 else self._q[par] for qi, par in zip(self._q, tree.parents)]


def model_draft_pvalues(walker, parents: list[int], q_scale: float = 1.5) -> tuple[float, float]:
    """A model draft: every node drawn from its own q (as model_drafters does, one q per node;
    siblings independently, duplicates allowed), over 200,000 windows grouped by what was drafted.

    Returns the p-values of (the first emitted token against p at the root row; the second
    token, given the depth-1 node c the window continued through, against p at c's row).
    """
    n_nodes = len(parents)
    logits = fixed_logits(1 + n_nodes, seed=21, scale=1.5)
    qs = [torch.softmax(torch.randn(V, generator=torch.Generator().manual_seed(30 + i)) * q_scale, -1)
          for i in range(n_nodes)]
    g = torch.Generator().manual_seed(5)
    drafts = torch.stack([torch.multinomial(q, N_TRIALS, replacement=True, generator=g)
                          for q in qs], dim=1)                   # [N, nodes]
    p = target_probs(logits, PLAIN).double()                      # [R, V]: no penalties here
    firsts, seconds = [], []
    combos, inverse = torch.unique(drafts, dim=0, return_inverse=True)
    for k, combo in enumerate(combos.tolist()):
        n = int((inverse == k).sum())
        tree = make_tree(combo, parents, q=qs)
        last, tok = run_trials(tree, logits, CTX, PLAIN, n=n, seed=200 + k, walker=walker)
        first, second = first_two(tree, last, tok)
        firsts.append(first)
        # which depth-1 node the window went through (-1: it stopped at the root)
        through = torch.tensor([(tree.path_to(i) + [-1])[0] for i in range(len(tree))] + [-1])
        c = through[torch.where(last < 0, len(tree), last)]
        seconds.append(torch.stack([c[c >= 0], second[c >= 0]], dim=1))
    first_p = chi2_pvalue(torch.cat(firsts), p[0])
    pairs = torch.cat(seconds)                                    # [M, 2]: (node, token)
    counts = torch.bincount(pairs[:, 0], minlength=n_nodes).double()
    expected = counts[:, None] * p[1:]                            # node c is judged at row c + 1
    return first_p, chi2_pvalue(pairs[:, 0] * V + pairs[:, 1], expected.flatten())


def test_model_drafted_chain_with_real_q_and_its_controls():
    first, second = model_draft_pvalues(TreeRejection, [-1, 0])
    assert first > ALPHA and second > ALPHA
    assert model_draft_pvalues(ReplaceFromP, [-1, 0])[0] < ALPHA
    assert model_draft_pvalues(WrongChildQ, [-1, 0])[1] < ALPHA


def test_model_drafted_tree_with_real_q_and_its_controls():
    tree = [-1, -1, 0, 1]                     # two root children, each with one child
    # peaked drafts: fewer distinct trees to group the 200,000 windows by
    first, second = model_draft_pvalues(TreeRejection, tree, q_scale=3.0)
    assert first > ALPHA and second > ALPHA
    assert model_draft_pvalues(WrongChildQ, tree, q_scale=3.0)[1] < ALPHA


def test_penalties_on_every_row():
    """Siblings at the root and a grandchild: every row is penalized against its own path, so
    the second token must follow the penalized AR distribution given the first."""
    cfg = SamplingConfig(temperature=1.0, repeat_penalty=1.6, presence_penalty=0.4,
                         frequency_penalty=0.3, penalty_window=6)
    context = [3, 3, 5, 1, 3, 5, 0, ROOT]
    logits = fixed_logits(5, seed=5, scale=1.2)
    tree = make_tree([3, 5, 0, 1], [-1, -1, 0, 1])     # root -> 3 -> 0, root -> 5 -> 1
    assert first_token_pvalue(tree, logits, context, cfg) > ALPHA
    assert joint_pvalue(tree, logits, context, cfg) > ALPHA
    # the penalties really moved the distribution (else this case would test nothing new)
    assert (reference_p(logits[0], context[-6:], cfg) - reference_p(logits[0], [], PLAIN)).abs().max() > 0.05


def test_top_k_top_p_min_p():
    cfg = SamplingConfig(temperature=0.7, top_k=6, top_p=0.9, min_p=0.05)
    logits = fixed_logits(4, seed=6, scale=1.5)
    p0 = reference_p(logits[0], CTX, cfg)
    dead = int(torch.nonzero(p0 == 0)[0])               # a filtered token, drafted anyway
    live = [int(t) for t in torch.argsort(p0, descending=True)[:2]]
    tree = make_tree([dead, live[1], live[0]], [-1, -1, -1])
    last, tok = run_trials(tree, logits, CTX, cfg)
    first, _ = first_two(tree, last, tok)
    assert not (first == dead).any()
    assert chi2_pvalue(first, p0) > ALPHA
    assert (p0 > 0).sum() < V - 1                       # the filters removed something


def test_depth_two_paths_joint():
    logits = fixed_logits(5, seed=7)
    tree = make_tree([2, 4, 1, 6], [-1, 0, 0, -1])     # root -> 2 -> {4, 1}, root -> 6
    assert first_token_pvalue(tree, logits, CTX, PLAIN) > ALPHA
    assert joint_pvalue(tree, logits, CTX, PLAIN) > ALPHA
    # a deeper chain (root -> 5 -> 3 -> 0): the first two tokens still follow p
    logits = fixed_logits(4, seed=8)
    chain = make_tree([5, 3, 0], [-1, 0, 1])
    assert joint_pvalue(chain, logits, CTX, PLAIN) > ALPHA


def test_verify_sampled_end_to_end():
    """verify_sampled itself, window by window (fewer trials: each call is a full window)."""
    cfg = SamplingConfig(temperature=0.9, repeat_penalty=1.3, presence_penalty=0.2, top_p=0.95)
    logits = fixed_logits(4, seed=9, scale=1.3)
    tree = make_tree([3, 0, 6], [-1, 0, -1])
    rng = Rng(11)
    firsts = [verify_sampled(tree, logits, CTX, cfg, rng).emitted[0] for _ in range(4000)]
    assert chi2_pvalue(torch.tensor(firsts), reference_p(logits[0], CTX, cfg)) > ALPHA


def test_verify_sampled_is_the_walk_and_replays():
    cfg = SamplingConfig(temperature=1.0, frequency_penalty=0.5)
    logits = fixed_logits(5, seed=12)
    tree = make_tree([2, 4, 1, 6], [-1, 0, 0, -1])
    p = target_probs(score_rows(tree, logits, CTX, cfg).logits, cfg)
    for seed in range(200):
        out = verify_sampled(tree, logits, CTX, cfg, Rng(seed))
        last, tok = TreeRejection(tree, p).run(1, Rng(seed).uniforms)
        assert out.accepted == tree.path_to(int(last[0]))
        assert out.emitted[-1] == int(tok[0])
        again = verify_sampled(tree, logits, CTX, cfg, Rng(seed))
        assert (again.emitted, again.kinds, again.row_outcomes, again.accept_probs) == \
               (out.emitted, out.kinds, out.row_outcomes, out.accept_probs)


def test_sampled_outcome_fields():
    logits = torch.full((3, V), -5.0)
    logits[0, 2] = 5.0      # the root row all but certainly wants 2
    logits[1, 4] = 5.0      # node 0 (token 2) row wants 4
    tree = make_tree([2, 6], [-1, 0])   # root -> 2 -> 6: 6 is rejected at row 1
    out = verify_sampled(tree, logits, CTX, PLAIN, Rng(0))
    assert out.accepted == [0] and out.emitted == [2, 4]
    assert out.kinds == [events.FROM_DRAFT, events.CORRECTION]
    assert out.row_outcomes == [events.ROOT, events.ACCEPTED, events.REJECTED]
    assert out.target_tokens == [2, 4, int(out.probs[2].argmax())]
    assert out.accept_probs[0] is None and out.accept_probs[1] > 0.99 and out.accept_probs[2] < 0.01
    assert out.p_draft[1] == pytest.approx(out.accept_probs[1]) and out.q_draft == [None] * 3
    assert out.final_row == 1 and out.keep_rows == [0, 1]
    torch.testing.assert_close(out.probs.sum(-1), torch.ones(3))


# --- greedy --------------------------------------------------------------------------------------

greedy_cfgs = st.sampled_from([
    SamplingConfig(),
    SamplingConfig(repeat_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.2, penalty_window=4),
])


@settings(max_examples=150, deadline=None)
@given(conts=st.lists(st.lists(st.integers(0, V - 1), min_size=1, max_size=5), min_size=0, max_size=5),
       budget=st.integers(1, 16), cfg=greedy_cfgs, seed=st.integers(0, 2**16), plant=st.floats(0, 1))
def test_greedy_accepts_the_longest_matching_path(conts, budget, cfg, seed, plant):
    prov = Provenance(0, 0, "test")
    tree = build_trie(ROOT, [(c, prov) for c in conts], budget)
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(tree.n_rows, V, generator=g)
    # plant argmaxes on draft children so that long paths get accepted often
    for r in range(tree.n_rows):
        kids = tree.children(r - 1)
        if kids and torch.rand(1, generator=g).item() < plant:
            logits[r, tree.tokens[kids[int(torch.randint(len(kids), (1,), generator=g))]]] += 6.0
    context = [0, 5, 5, ROOT]
    out = verify_greedy(tree, logits, context, cfg)
    # brute force over every node: the path matches if each token is its parent row's argmax
    w = cfg.penalty_window
    target = [int(reference_p(logits[r], history_of(tree, r - 1, context, w), cfg).argmax())
              for r in range(tree.n_rows)]
    matching = [i for i in range(len(tree))
                if all(tree.tokens[j] == target[tree.parents[j] + 1] for j in tree.path_to(i))]
    best = max(matching, key=lambda i: tree.depths[i], default=-1)
    assert out.accepted == tree.path_to(best)
    assert out.emitted == tree.path_tokens(best) + [target[best + 1]]
    assert out.target_tokens == target
    last_kind = (events.TARGET if len(tree) == 0 else
                 events.BONUS if best >= 0 and tree.is_leaf(best) else events.CORRECTION)
    assert out.kinds == [events.FROM_DRAFT] * len(out.accepted) + [last_kind]
    tested = {c for n in [-1] + out.accepted for c in tree.children(n)}
    for i in range(len(tree)):
        want = (events.ACCEPTED if i in out.accepted else
                events.REJECTED if i in tested else events.NOT_REACHED)
        assert out.row_outcomes[i + 1] == want
        assert out.accept_probs[i + 1] == {events.ACCEPTED: 1.0, events.REJECTED: 0.0}.get(want)


@settings(max_examples=100, deadline=None)
@given(conts=st.lists(st.lists(st.integers(0, V - 1), min_size=1, max_size=5), min_size=0, max_size=5),
       budget=st.integers(1, 16), seed=st.integers(0, 2**16))
def test_greedy_from_the_top_k_alone_gives_the_same_verdict(conts, budget, seed):
    """The GPU fast path sees only each row's top-5 scores: same path, tokens, kinds, outcomes
    and near-tie flags as the full logits, and no probabilities."""
    tree = build_trie(ROOT, [(c, Provenance(0, 0, "test")) for c in conts], budget)
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(tree.n_rows, V, generator=g)
    for r in range(tree.n_rows):               # plant matches so that paths get accepted
        kids = tree.children(r - 1)
        if kids and torch.rand(1, generator=g).item() < 0.7:
            logits[r, tree.tokens[kids[0]]] += 6.0
    logits[0, 1] = logits[0].max() + 1.0       # a near tie on the root row
    logits[0, 0] = logits[0, 1] + 5e-5
    full = verify_greedy(tree, logits, [0, ROOT], SamplingConfig())
    top = logits.topk(5, dim=-1)
    fast = verify_greedy_top_k(tree, top.values, top.indices)
    for f in ("accepted", "emitted", "kinds", "row_outcomes", "accept_probs", "target_tokens",
              "near_ties", "flipped"):
        assert getattr(fast, f) == getattr(full, f), f
    assert fast.near_ties[0] and fast.probs is None and fast.p_draft == [None] * tree.n_rows


def test_greedy_empty_tree_is_one_target_token():
    logits = torch.tensor([[0.0, 1.0, 3.0, 2.0, 0, 0, 0, 0]])
    out = verify_greedy(TokenTree.empty(ROOT), logits, CTX, SamplingConfig())
    assert out.emitted == [2] and out.kinds == [events.TARGET] and out.accepted == []
    assert out.row_outcomes == [events.ROOT] and out.ledgers == [None]


def test_greedy_near_ties_and_flips():
    logits = torch.zeros(2, V)
    logits[0, 1], logits[0, 2] = 2.0, 2.0 - 5e-5      # near tie at the root row
    logits[1, 3], logits[1, 4] = 3.0, 2.5            # node row: 3 wins unless penalized
    tree = make_tree([1], [-1])
    cfg = SamplingConfig(presence_penalty=1.0)
    out = verify_greedy(tree, logits, [0, 3, ROOT], cfg)
    assert out.near_ties == [True, False]
    assert out.emitted == [1, 4]                      # 3 is in the history: penalized below 4
    assert out.flipped == [False, True]
    assert out.ledgers[1].flipped and not out.ledgers[0].flipped
    assert out.ledgers[1].history == [0, 3, ROOT, 1] and out.ledgers[1].n_draft == 1
    ev = out.ledgers[1].to_event(lambda t: f"<{t}>")
    assert ev.entries[1].text == "<3>" and ev.entries[1].after == ev.entries[1].before - 1.0


def test_sampled_flips():
    logits = torch.zeros(2, V)
    logits[0, 1] = 2.0                               # the root row: 1 on top either way
    logits[1, 3], logits[1, 4] = 3.0, 2.5            # node row: 3 is the top token unless penalized
    tree = make_tree([1], [-1])
    cfg = SamplingConfig(temperature=1.0, presence_penalty=1.0)
    out = verify_sampled(tree, logits, [0, 3, ROOT], cfg, Rng(0))
    assert out.flipped == [False, True] and out.ledgers[1].flipped
    out = verify_sampled(tree, logits, [0, 3, ROOT], PLAIN, Rng(0))
    assert out.flipped == [False, False] and out.ledgers == [None, None]


def test_sibling_histories_never_mix():
    tree = make_tree([1, 2, 3, 4], [-1, 0, -1, 2])     # root -> 1 -> 2, root -> 3 -> 4
    hists, n_draft = row_histories(tree, [9, 9, ROOT], window=64)
    assert hists == [[9, 9, ROOT], [9, 9, ROOT, 1], [9, 9, ROOT, 1, 2],
                     [9, 9, ROOT, 3], [9, 9, ROOT, 3, 4]]
    assert n_draft == [0, 1, 2, 1, 2]
    hists, n_draft = row_histories(tree, [9, 9, ROOT], window=2)
    assert hists[2] == [1, 2] and n_draft[2] == 2 and hists[0] == [9, ROOT]
