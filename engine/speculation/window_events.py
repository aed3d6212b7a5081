"""From one window's verdict to the frozen `WindowEvent` the decoder yields.

Everything here turns tensors and ids into plain values (texts, floats, lists), so the event can
cross threads, go into a JSONL recording and come back unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch

from engine.speculation import events as E
from engine.speculation.settings import DecodeSettings
from engine.speculation.tree import TokenTree
from engine.speculation.verify import draft_q_values

if TYPE_CHECKING:
    from engine.cost.plan import Plan
    from engine.model.runtime import RowScores
    from engine.speculation.verify import VerifyOutcome

TOP_SHOWN = 5   # the target's most likely tokens a row shows


def verify_rows(tree: TokenTree, scores: "RowScores", outcome: "VerifyOutcome",
                text: Callable[[int], str]) -> list[E.VerifyRow]:
    """One VerifyRow per verify row (row 0 = the root, row i + 1 = node i).

    A row's top tokens come from the distribution the verdict used (outcome.probs: p when
    sampled, the softmax of the penalized logits when greedy); on the fast path, where only each
    row's top-k left the device, from its summary (the softmax's normaliser: the same
    probabilities, RowScores), else from those raw scores. Every tensor is read in one batch;
    token texts are the tokenizer's cached ones.
    """
    top_ids, top_vals = _tops(scores, outcome)
    p_draft, q_draft = _draft_pq(tree, scores, outcome)
    rows: list[E.VerifyRow] = []
    for r in range(tree.n_rows):
        node = r - 1
        top = [(i, text(i), v) for i, v in zip(top_ids[r], top_vals[r])]
        dt = tree.tokens[node] if node >= 0 else None
        led = outcome.ledgers[r] if outcome.ledgers else None
        target = outcome.target_tokens[r]
        rows.append(E.VerifyRow(
            row=r, node=node, depth=0 if node < 0 else tree.depths[node],
            draft_token=dt, draft_text="" if dt is None else text(dt),
            target_token=target, target_text=text(target),
            top=top, p=p_draft[r], q=q_draft[r],
            accept_prob=outcome.accept_probs[r], outcome=outcome.row_outcomes[r],
            near_tie=outcome.near_ties[r], penalty=None if led is None else led.to_event(text),
        ))
    return rows


def _tops(scores: "RowScores", outcome: "VerifyOutcome") -> tuple[list[list[int]], list[list[float]]]:
    """Each row's TOP_SHOWN (ids, probabilities): one top-k over every row, one read-out."""
    if outcome.probs is not None:
        pv, pi = outcome.probs.topk(TOP_SHOWN, dim=-1)
    else:
        pv, pi = scores.top_values[:, :TOP_SHOWN], scores.top_ids[:, :TOP_SHOWN]
        if scores.log_norm is not None:
            pv = (pv.float() - scores.log_norm.float().unsqueeze(1)).exp()
    return pi.tolist(), pv.float().tolist()


def _draft_pq(tree: TokenTree, scores: "RowScores",
              outcome: "VerifyOutcome") -> tuple[list[float | None], list[float | None]]:
    """Per row: p of the node's token at its parent row and its q. The verdict's where it has
    them; on the fast path from the pass's summary (exp(logit - log_norm) at the parent row)
    and the tree's q rows."""
    if (len(tree) == 0 or scores.log_norm is None or scores.window_logits is None
            or any(x is not None for x in outcome.p_draft)):
        return outcome.p_draft, outcome.q_draft
    parents = torch.tensor([p + 1 for p in tree.parents])
    nodes = torch.arange(1, tree.n_rows)
    lse = scores.log_norm.float()
    p = (scores.window_logits.float()[parents, nodes] - lse[parents]).exp().tolist()
    return [None] + p, [None] + draft_q_values(tree, tree.q)


def window_event(*, index: int, context: list[int], tree: TokenTree, outcome: "VerifyOutcome",
                 rows: list[E.VerifyRow], emitted: list[int], kinds: list[str],
                 times_s: tuple[float, float, float], plan: "Plan", settings: DecodeSettings,
                 stats: E.WindowStats, finish: str, text: Callable[[int], str],
                 notice: str = "", cycle_ms: float | None = None) -> E.WindowEvent:
    """The event of a window whose `emitted` tokens already stand at the end of `context`.

    times_s: (propose, verify, commit) seconds. The plan says who drafted the window, its shape
    and why (its cause and figures travel with the event, its reason in words too).
    """
    propose_ms, verify_ms, commit_ms = (t * 1e3 for t in times_s)
    root = context[-len(emitted) - 1] if emitted else context[-1]
    return E.WindowEvent(
        index=index, committed_len=len(context) - len(emitted),
        root_token=root, root_text=text(root),
        tokens=list(tree.tokens), texts=[text(t) for t in tree.tokens],
        parents=list(tree.parents), depths=list(tree.depths),
        provenance=list(tree.provenance), rows=rows, accepted_path=list(outcome.accepted),
        emitted=emitted, emitted_texts=[text(t) for t in emitted],
        emitted_kinds=kinds, propose_ms=propose_ms, verify_ms=verify_ms, commit_ms=commit_ms,
        window_ms=propose_ms + verify_ms + commit_ms, stats=stats,
        drafter=plan.drafter, depth=plan.depth, width=plan.width, greedy=settings.sampling.greedy,
        predicted_ms=None if plan.predicted_ms != plan.predicted_ms else plan.predicted_ms,
        reason=plan.reason, cause=plan.cause.value, figures=plan.all_figures(),
        finished=bool(finish), finish_reason=finish,
        settings=settings.to_dict(), notice=notice, cycle_ms=cycle_ms,
    )
