"""What a verify pass sends back to the host (`RowScores`), and how it is made on the device
and read on the host: the top k alone (the fast path), with the rows' summary (the workbench's
detail), a queued plain step's (engine.model.plain_queue), and the top k ranked as a screened
CPU head ranks it. engine.model.runtime runs the passes and re-exports these names."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.model.graphs import TOPK, GraphBucket, top_k


@dataclass
class RowScores:
    """What one verify pass returns to the host.

    logits: [R, V] float32 on CPU, or None on the fast path (greedy, no penalties), where only
    the top-k of each row travels: top_values / top_ids [R, TOPK].

    With a `summary` (the window's per-row detail on the fast path), also, computed where the
    logits are and brought over with the top k in one transfer:
    log_norm: [R] float32, each row's log of the softmax's normaliser (logsumexp of its logits
      over the whole vocabulary): a row's probability of token t is exp(logit(t) - log_norm);
    window_logits: [R, R] float32, row r's logit of the window's own token c (tokens[c]): a
      drafted token's logit at its parent's row.
    """

    logits: torch.Tensor | None
    top_values: torch.Tensor
    top_ids: torch.Tensor
    log_norm: torch.Tensor | None = None
    window_logits: torch.Tensor | None = None


def summarize(logits: torch.Tensor, tokens: torch.Tensor, top_values: torch.Tensor,
              top_ids: torch.Tensor) -> RowScores:
    """The fast path's RowScores with a summary (see RowScores) from a pass's logits [R, V] and
    the window's tokens [R], both on the pass's device, and the top k already taken: one
    batched reduction there, one device -> host transfer (ids travel as float32, exact below
    2^24; a larger vocabulary sends them apart)."""
    return summary_scores(summary_device(logits, tokens, top_values, top_ids).cpu(),
                          top_ids.shape[1], top_ids.cpu() if _ids_apart(logits) else None)


def _ids_apart(logits: torch.Tensor) -> bool:
    """Whether a vocabulary's ids do not all fit float32 exactly (above 2^24)."""
    return logits.shape[-1] > 1 << 24


def summary_device(logits: torch.Tensor, tokens: torch.Tensor, top_values: torch.Tensor,
                   top_ids: torch.Tensor) -> torch.Tensor:
    """summarize's one tensor to send, on the pass's device: [R, k + 1 + R (+ k)], each row's
    top-k values, log normaliser, logits of the window's tokens (and top-k ids, below 2^24)."""
    lg = logits.float()
    lse = torch.logsumexp(lg, dim=-1, keepdim=True)                     # [R, 1]
    cross = lg.index_select(1, tokens)                                  # [R, R]
    ids = [] if _ids_apart(lg) else [top_ids.float()]
    return torch.cat([top_values.float(), lse, cross] + ids, 1)


def summary_scores(host: torch.Tensor, k: int, ids: torch.Tensor | None = None) -> RowScores:
    """RowScores from summary_device's tensor on the host (`ids`: the top-k ids sent apart)."""
    R = host.shape[0]
    ids = host[:, k + 1 + R:].long() if ids is None else ids
    return RowScores(None, host[:, :k], ids, host[:, k], host[:, k + 1:k + 1 + R])


def read_step(summary: bool):
    """What a queued plain step sends to the host (engine.model.plain_queue.Read): its top-k,
    with the summary where the run shows its rows; ids as float32 (exact: a vocabulary is at
    most 2^22, engine.model.config)."""
    def read(g: GraphBucket):
        if summary:
            return (summary_device(g.logits[:1], g.packed[:1], g.top_values[:1], g.top_ids[:1]),
                    lambda h: summary_scores(h, TOPK))
        return g.top[:1], top_scores
    return read


def top_scores(host: torch.Tensor) -> RowScores:
    """RowScores from a bucket's `top` rows on the host (GraphBucket: [R, 2 TOPK], the top k's
    values, then its ids as float32)."""
    return RowScores(None, host[:, :TOPK], host[:, TOPK:].long())


def head_top(model, logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's top k of a pass's whole `logits`, ranked as `forward(top=k)` ranks it: a
    screened head's ties to the lower id (top_lower_id), else graphs.top_k (as the pass without
    a summary takes it), so a pass gives the same verdict whether or not it sums up its rows."""
    screened = (getattr(model, "fused", None) is None
                and getattr(getattr(model, "lm_head", None), "screened", False))
    return top_lower_id(logits, k) if screened else top_k(logits, k)


def top_lower_id(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's top k of `logits` [R, V] with ties to the lower id, as the screened CPU head
    ranks them (engine.weights.cpu_fast.cpu_int8_blocks_top): a pass that needs the whole
    logits of a screened head ranks its top k as a screened pass would, so the verdict is the
    same whether or not the logits were asked for."""
    extra = logits.shape[-1] > k
    vals, ids = logits.topk(k + extra, dim=-1)
    # a value equal to the k-th just outside the k: topk may have taken a higher id of equals
    # there; such a row is redone below from every id at or above the k-th value, ascending
    over = vals[:, k] == vals[:, k - 1] if extra else torch.zeros(len(vals), dtype=torch.bool)
    vals, ids = vals[:, :k], ids[:, :k]
    ids, order = ids.sort(dim=-1)                       # equal values: the lower id first
    vals, order2 = vals.gather(-1, order).sort(dim=-1, descending=True, stable=True)
    ids = ids.gather(-1, order2)
    for r in over.nonzero().flatten().tolist():
        cand = (logits[r] >= vals[r, -1]).nonzero().flatten()
        v, o = logits[r, cand].sort(descending=True, stable=True)
        vals[r], ids[r] = v[:k], cand[o[:k]]
    return vals, ids
