"""Verify a draft tree against the target's logits for every row of one forward pass.

logits: [R, V], row 0 = the root (the last committed token), row i + 1 = node i. Row r's
logits predict the token after row r's token, so node c (a child of row r) is judged at row r.

Penalties: each row is penalized against its own history H_r = the last W tokens of
(context ‖ the draft path from the root down to and including row r's node). That is the history
a plain autoregressive sampler would have at that position if the path were accepted; a sibling
never enters another branch's history.

Greedy: accept the longest root-to-leaf path whose tokens equal the argmax at their parent rows,
then emit the argmax after the last accepted node.

Sampled: speculative rejection sampling (Leviathan et al. 2023, "Fast Inference from Transformers
via Speculative Decoding"; Chen et al. 2023, "Accelerating LLM Decoding with Speculative
Sampling"), extended to sibling candidates as SpecInfer's multi-step speculative sampling (Miao
et al. 2023): at a node, try its children in order. For child x with draft distribution q:

    accept with probability min(1, p'(x) / q(x))
    on rejection:  p' <- norm((p' - q)+)        and try the next sibling
    all rejected:  emit a draw from p'

p' starts as the row's target distribution p. A point-mass draft (no q) is q = δ(x): accept with
p'(x), and the residual is p' with x zeroed and renormalised. After the last accepted node, if it
is a leaf the bonus token is drawn from its row's p. Every emitted token is then distributed
exactly as plain sampling from p would be. Siblings with a q must be independent draws from their
q (duplicates allowed): deduplicating them would bias the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from engine.speculation import events
from engine.speculation.events import PenaltyEntry, PenaltyLedger
from engine.speculation.sampling import LedgerEntry, Rng, SamplingConfig, inverse_cdf, penalize_rows, target_probs
from engine.speculation.tree import TokenTree

NEAR_TIE = 1e-4   # greedy rows whose top-2 logit margin is below this are flagged (default; the
                  # decoder passes its runtime's margin: 0 where rows are exact, else the dtype's)


@dataclass(frozen=True)
class RowLedger:
    """What one verify row was penalized against (H_r) and what it did to each logit."""

    history: list[int]           # the last W tokens the row saw, oldest first
    n_draft: int                 # how many trailing entries of history are draft-path tokens
    entries: list[LedgerEntry]   # (token, before, after) per distinct history token
    flipped: bool = False        # the penalties changed this row's verdict

    def to_event(self, text: Callable[[int], str]) -> PenaltyLedger:
        return PenaltyLedger(history=list(self.history), n_draft=self.n_draft,
                             entries=[PenaltyEntry(t, text(t), b, a) for t, b, a in self.entries],
                             flipped=self.flipped)


@dataclass(frozen=True)
class VerifyOutcome:
    accepted: list[int]              # node indices on the accepted path, root-down
    emitted: list[int]               # accepted node tokens + the bonus/correction (>= 1 token)
    kinds: list[str]                 # events.FROM_DRAFT / BONUS / CORRECTION / TARGET per emitted token
    row_outcomes: list[str]          # per row: ROOT / ACCEPTED / REJECTED / NOT_REACHED
    accept_probs: list[float | None]  # per row: probability the node was accepted with (tried rows)
    p_draft: list[float | None]      # per row: target probability of the node's token at its parent row
    q_draft: list[float | None]      # per row: draft probability of the node's token (None: point mass)
    target_tokens: list[int]         # per row: the token drawn there if one was, else the argmax
    near_ties: list[bool]            # greedy rows whose top-2 penalized-logit margin < NEAR_TIE
    ledgers: list[RowLedger | None]  # per row; None when no penalty is configured
    flipped: list[bool]              # per row: the penalties changed this row's verdict
    probs: torch.Tensor | None       # [R, V] float32: sampled: p; greedy: softmax of the penalized logits

    @property
    def final_row(self) -> int:
        """The row the last emitted token came from (the last accepted node's row, or 0)."""
        return self.accepted[-1] + 1 if self.accepted else 0

    @property
    def keep_rows(self) -> list[int]:
        """Rows whose keys/values the cache keeps: the root and the accepted path."""
        return [0] + [i + 1 for i in self.accepted]


# ---------------------------------------------------------------------------------------------
# histories and penalties


def row_histories(tree: TokenTree, context: Sequence[int],
                  window: int) -> tuple[list[list[int]], list[int]]:
    """(histories, n_draft) per row: H_r = last `window` of (context ‖ path to row r's node).

    `context` is the committed stream, which already ends with the root token; row 0's history
    is its tail. Node i's row adds the path root -> i, node i included (its logits predict the
    token after node i, as an AR step after accepting that path would). n_draft[r] counts the
    trailing draft tokens inside H_r.
    """
    if context and context[-1] != tree.root:
        raise ValueError(f"context must end with the tree's root token {tree.root}, "
                         f"ends with {context[-1]}")
    base = list(context[-window:])
    paths: list[list[int]] = []
    hists = [base]
    n_draft = [0]
    for i, (tok, parent) in enumerate(zip(tree.tokens, tree.parents)):
        path = (paths[parent] if parent >= 0 else []) + [tok]
        paths.append(path)
        hists.append((base + path)[-window:])
        n_draft.append(min(len(path), window))
    return hists, n_draft


@dataclass(frozen=True)
class ScoredRows:
    logits: torch.Tensor            # [R, V] float32 after penalties (the raw logits if none)
    ledgers: list[RowLedger | None]  # per row (None: no penalty configured)


def score_rows(tree: TokenTree, logits: torch.Tensor, context: Sequence[int],
               cfg: SamplingConfig) -> ScoredRows:
    """Penalize every row of `logits` [R, V] against its own history."""
    if logits.dim() != 2 or logits.shape[0] != tree.n_rows:
        raise ValueError(f"verify wants logits [{tree.n_rows}, V] for a tree of {len(tree)} nodes, "
                         f"got {tuple(logits.shape)}")
    if not cfg.penalized:
        return ScoredRows(logits.float(), [None] * tree.n_rows)
    hists, n_draft = row_histories(tree, context, cfg.penalty_window)
    pen, entries = penalize_rows(logits, hists, cfg)
    return ScoredRows(pen, [RowLedger(h, n, e) for h, n, e in zip(hists, n_draft, entries)])


def _with_flips(ledgers: list[RowLedger | None], flipped: list[bool]) -> list[RowLedger | None]:
    return [None if l is None else RowLedger(l.history, l.n_draft, l.entries, f)
            for l, f in zip(ledgers, flipped)]


def _row_outcomes(tree: TokenTree, accepted: list[int], ordered: bool) -> list[str]:
    """Children of accepted-path nodes (the root included) were tested: the accepted one is
    ACCEPTED, the others REJECTED. `ordered` (sampling tries siblings one by one): siblings after
    the accepted child were never tried and stay NOT_REACHED. Greedy compares all siblings with
    the argmax at once, so they are all REJECTED. Nodes below a non-accepted node: NOT_REACHED."""
    out = [events.ROOT] + [events.NOT_REACHED] * len(tree)
    on_path = [-1] + accepted
    for k, node in enumerate(on_path):
        nxt = on_path[k + 1] if k + 1 < len(on_path) else None
        for c in tree.children(node):
            if c == nxt:
                out[c + 1] = events.ACCEPTED
                if ordered:
                    break
            else:
                out[c + 1] = events.REJECTED
    return out


def _final_kind(tree: TokenTree, accepted: list[int]) -> str:
    if len(tree) == 0:
        return events.TARGET
    if accepted and tree.is_leaf(accepted[-1]):
        return events.BONUS
    return events.CORRECTION


def _draft_probs(tree: TokenTree, probs: torch.Tensor,
                 q: Sequence[torch.Tensor | None] | None) -> tuple[list, list]:
    """Per row: p of the node's token at its parent row, and q of it (None: point mass)."""
    if len(tree) == 0:
        return [None], [None]
    parent_rows = torch.tensor([p + 1 for p in tree.parents], device=probs.device)
    toks = torch.tensor(tree.tokens, device=probs.device)
    p_draft = [None] + probs[parent_rows, toks].tolist()
    return p_draft, [None] + draft_q_values(tree, q)


def draft_q_values(tree: TokenTree, q: Sequence[torch.Tensor | None] | None) -> list[float | None]:
    """Per node: q of its token (None: a point-mass draft), gathered in one transfer (a model
    drafter's q rows stay on its device: one sync, not one per node)."""
    out: list[float | None] = [None] * len(tree)
    have = [i for i in range(len(tree)) if q is not None and q[i] is not None]
    if not have:
        return out
    try:
        vals = torch.stack([q[i][tree.tokens[i]] for i in have]).tolist()
    except RuntimeError:                      # rows on different devices: one at a time
        vals = [float(q[i][tree.tokens[i]]) for i in have]
    for i, v in zip(have, vals):
        out[i] = v
    return out


# ---------------------------------------------------------------------------------------------
# greedy


def greedy_path(tree: TokenTree, targets: Sequence[int]) -> list[int]:
    """The longest root-down path whose every node's token is the argmax `targets` of its
    parent's row (siblings never share a token, so at most one child matches)."""
    accepted: list[int] = []
    node = -1
    while True:
        want = targets[node + 1]
        nxt = next((c for c in tree.children(node) if tree.tokens[c] == want), None)
        if nxt is None:
            return accepted
        accepted.append(nxt)
        node = nxt


def _greedy_outcome(tree: TokenTree, targets: list[int], near_ties: list[bool],
                    probs: torch.Tensor | None, p_draft: list, q_draft: list,
                    ledgers: list[RowLedger | None], flipped: list[bool]) -> VerifyOutcome:
    accepted = greedy_path(tree, targets)
    last = accepted[-1] if accepted else -1
    emitted = [tree.tokens[i] for i in accepted] + [targets[last + 1]]
    kinds = [events.FROM_DRAFT] * len(accepted) + [_final_kind(tree, accepted)]
    outcomes = _row_outcomes(tree, accepted, ordered=False)
    accept_probs: list[float | None] = [
        1.0 if o == events.ACCEPTED else 0.0 if o == events.REJECTED else None for o in outcomes]
    return VerifyOutcome(accepted=accepted, emitted=emitted, kinds=kinds, row_outcomes=outcomes,
                         accept_probs=accept_probs, p_draft=p_draft, q_draft=q_draft,
                         target_tokens=targets, near_ties=near_ties, ledgers=ledgers,
                         flipped=flipped, probs=probs)


def verify_greedy(tree: TokenTree, logits: torch.Tensor, context: Sequence[int],
                  cfg: SamplingConfig, tie_margin: float = NEAR_TIE) -> VerifyOutcome:
    """Longest path of argmax matches; temperature and filters are irrelevant at T = 0."""
    scored = score_rows(tree, logits, context, cfg)
    pen = scored.logits
    targets = pen.argmax(dim=-1).tolist()
    top2 = torch.topk(pen, 2, dim=-1).values if pen.shape[-1] > 1 else None
    near_ties = ([False] * tree.n_rows if top2 is None
                 else ((top2[:, 0] - top2[:, 1]) < tie_margin).tolist())
    if cfg.penalized:
        flipped = [a != b for a, b in zip(logits.argmax(dim=-1).tolist(), targets)]
    else:
        flipped = [False] * tree.n_rows
    probs = pen.softmax(dim=-1)
    p_draft, q_draft = _draft_probs(tree, probs, tree.q)
    return _greedy_outcome(tree, targets, near_ties, probs, p_draft, q_draft,
                           _with_flips(scored.ledgers, flipped), flipped)


def verify_greedy_top_k(tree: TokenTree, top_values: torch.Tensor,
                        top_ids: torch.Tensor, tie_margin: float = NEAR_TIE) -> VerifyOutcome:
    """Greedy verification from each row's top-k alone, [R, k] values and ids (k >= 2): the
    GPU fast path when no penalty is set, where the full logits never leave the device. The
    verdict is verify_greedy's (the argmax is the top-1); no probabilities are known."""
    n_rows = tree.n_rows
    if top_ids.dim() != 2 or top_ids.shape[0] != n_rows or top_ids.shape[1] < 2:
        raise ValueError(f"verify wants top-k ids [{n_rows}, k >= 2], got {tuple(top_ids.shape)}")
    targets = top_ids[:, 0].tolist()
    top2 = top_values[:, :2]
    if top2.dtype == torch.float32 and top2.device.type == "cpu":
        # NumPy, the same float32 sums: a window's verdict is host work between two passes
        v = top2.detach().numpy()
        with np.errstate(invalid="ignore", over="ignore"):     # inf rows: as torch, silently
            near_ties = ((v[:, 0] - v[:, 1]) < np.float32(tie_margin)).tolist()
    else:
        near_ties = ((top2[:, 0] - top2[:, 1]) < tie_margin).tolist()
    none: list = [None] * n_rows
    return _greedy_outcome(tree, targets, near_ties, None, none, list(none), list(none),
                           [False] * n_rows)


# ---------------------------------------------------------------------------------------------
# sampled


class TreeRejection:
    """Rejection sampling over one tree, given each row's target distribution p [R, V].

    The walk's state is (node, j): at `node`, its first j children were tried and rejected.
    p'(node, j) depends only on that state, so it is built lazily, once, and shared by every
    trial that reaches it: `run(n, draw)` walks n independent trials at once (the verifier uses
    n = 1; the distribution tests use 200,000 with the same code). `residual` and `acceptance`
    are the two rules of the method; everything else is bookkeeping.
    """

    def __init__(self, tree: TokenTree, p: torch.Tensor,
                 q: Sequence[torch.Tensor | None] | None = None) -> None:
        if p.dim() != 2 or p.shape[0] != tree.n_rows:
            raise ValueError(f"need p [{tree.n_rows}, V], got {tuple(p.shape)}")
        q = q if q is not None else tree.q
        if q is not None and len(q) != len(tree):
            raise ValueError(f"{len(tree)} nodes but {len(q)} draft distributions")
        self.tree = tree
        self.p = p
        self._q = [None if qi is None else qi.detach().to("cpu", torch.float64)
                   for qi in q] if q is not None else [None] * len(tree)
        self._p_prime: dict[tuple[int, int], torch.Tensor] = {}

    # the two rules ------------------------------------------------------------------------------

    def acceptance(self, p_prime: torch.Tensor, q: torch.Tensor | None, x: int) -> float:
        """min(1, p'(x) / q(x)); a point-mass draft has q(x) = 1."""
        if q is None:
            return min(1.0, float(p_prime[x]))
        qx = float(q[x])
        if not qx > 0:
            raise ValueError(f"draft token {x} has probability {qx} under its own draft distribution")
        return min(1.0, float(p_prime[x]) / qx)

    def residual(self, p_prime: torch.Tensor, q: torch.Tensor | None, x: int) -> torch.Tensor:
        """p' after rejecting x: norm((p' - q)+), q = δ(x) for a point-mass draft."""
        if q is None:
            r = p_prime.clone()
            r[x] = 0.0
        else:
            r = (p_prime - q).clamp_min_(0.0)
        total = float(r.sum())
        # No mass left only if p' <= q everywhere, i.e. p' == q: x was then accepted with
        # probability 1 and this branch is unreachable (float rounding aside).
        return r / total if total > 0 else p_prime

    # the walk -------------------------------------------------------------------------------------

    def p_prime(self, node: int, j: int) -> torch.Tensor:
        """The target distribution at `node` after its first j children were rejected, [V] f64."""
        key = (node, j)
        got = self._p_prime.get(key)
        if got is None:
            if j == 0:
                got = self.p[node + 1].detach().to("cpu", torch.float64)
                got = got / got.sum()
            else:
                c = self.tree.children(node)[j - 1]
                got = self.residual(self.p_prime(node, j - 1), self._q[c], self.tree.tokens[c])
            self._p_prime[key] = got
        return got

    def accept_prob(self, node: int, j: int) -> float:
        """Probability the j-th child of `node` is accepted, given the first j were rejected."""
        c = self.tree.children(node)[j]
        return self.acceptance(self.p_prime(node, j), self._q[c], self.tree.tokens[c])

    def run(self, n: int, draw: Callable[[int], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """n independent trials; returns (last accepted node [n] (-1 = none), emitted token [n]).

        `draw(k)` gives k fresh uniforms in [0, 1); every decision (one accept test, or the
        final draw) takes one uniform per trial that reaches it, so with n = 1 the stream is
        consumed exactly in decision order.
        """
        last = torch.full((n,), -2, dtype=torch.long)
        token = torch.full((n,), -1, dtype=torch.long)
        stack: list[tuple[int, int, torch.Tensor]] = [(-1, 0, torch.arange(n))]
        while stack:
            node, j, idx = stack.pop()
            if idx.numel() == 0:
                continue
            u = draw(idx.numel())
            kids = self.tree.children(node)
            if j == len(kids):
                # a leaf (bonus from its own p) or every child rejected (draw from the residual)
                token[idx] = inverse_cdf(self.p_prime(node, j), u)
                last[idx] = node
                continue
            acc = u < self.accept_prob(node, j)
            stack.append((node, j + 1, idx[~acc]))     # rejected: next sibling
            stack.append((kids[j], 0, idx[acc]))       # accepted: descend
        return last, token


def verify_sampled(tree: TokenTree, logits: torch.Tensor, context: Sequence[int],
                   cfg: SamplingConfig, rng: Rng,
                   q: Sequence[torch.Tensor | None] | None = None) -> VerifyOutcome:
    """One window of speculative rejection sampling; all draws come from `rng`.

    q[i] is node i's draft distribution (defaults to tree.q; None = point-mass drafts).
    """
    q = q if q is not None else tree.q
    scored = score_rows(tree, logits, context, cfg)
    p = target_probs(scored.logits, cfg)                       # [R, V]
    walk = TreeRejection(tree, p, q)
    last_t, tok_t = walk.run(1, rng.uniforms)
    last, final = int(last_t[0]), int(tok_t[0])
    accepted = tree.path_to(last)
    emitted = [tree.tokens[i] for i in accepted] + [final]
    kinds = [events.FROM_DRAFT] * len(accepted) + [_final_kind(tree, accepted)]
    outcomes = _row_outcomes(tree, accepted, ordered=True)

    # accept probabilities of the tried nodes, in the order they were tried
    accept_probs: list[float | None] = [None] * tree.n_rows
    for node in [-1] + accepted:
        for j, c in enumerate(tree.children(node)):
            if outcomes[c + 1] == events.NOT_REACHED:
                break
            accept_probs[c + 1] = walk.accept_prob(node, j)

    targets = p.argmax(dim=-1).tolist()
    targets[last + 1] = final
    p_draft, q_draft = _draft_probs(tree, p, q)
    flipped = _sampled_flips(tree, logits, p, q, cfg) if cfg.penalized else [False] * tree.n_rows
    return VerifyOutcome(accepted=accepted, emitted=emitted, kinds=kinds, row_outcomes=outcomes,
                         accept_probs=accept_probs, p_draft=p_draft, q_draft=q_draft,
                         target_tokens=targets, near_ties=[False] * tree.n_rows,
                         ledgers=_with_flips(scored.ledgers, flipped), flipped=flipped, probs=p)


def _sampled_flips(tree: TokenTree, raw_logits: torch.Tensor, p: torch.Tensor,
                   q: Sequence[torch.Tensor | None] | None, cfg: SamplingConfig) -> list[bool]:
    """A sampled row is flipped when the penalties moved its most likely outcome: the top token
    of p changed, or some child's first-try acceptance probability min(1, p(x)/q(x)) crossed 1/2
    (its more likely verdict turned from accept to reject or back)."""
    p_raw = target_probs(raw_logits.float(), cfg)
    flipped = (p_raw.argmax(dim=-1) != p.argmax(dim=-1)).tolist()
    for i, (tok, parent) in enumerate(zip(tree.tokens, tree.parents)):
        qx = 1.0 if q is None or q[i] is None else float(q[i][tok])
        if qx <= 0:
            continue
        before = min(1.0, float(p_raw[parent + 1, tok]) / qx)
        after = min(1.0, float(p[parent + 1, tok]) / qx)
        if (before >= 0.5) != (after >= 0.5):
            flipped[parent + 1] = True
    return flipped
