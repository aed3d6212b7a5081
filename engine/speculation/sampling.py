"""Sampling math: penalties over a history window, the target distribution, one seeded stream.

The order every verify row goes through (the same order a plain autoregressive sampler uses, so
speculation changes nothing about what is sampled):

    raw logits
      -> penalties against the row's history H_i (llama.cpp's `penalties` sampler):
           repeat      (transformers' RepetitionPenaltyLogitsProcessor: logit > 0 -> logit / r,
                        else logit * r, once per distinct token in H_i)
           frequency   (OpenAI: logit -= count * f)
           presence    (OpenAI: logit -= p if count > 0)
      -> temperature   (logits / T)
      -> top-k         (keep logits >= the k-th largest; ties at the k-th are kept, as transformers)
      -> top-p         (drop the tail whose ascending cumulative mass is <= 1 - top_p, as transformers)
      -> min-p         (drop tokens whose probability < min_p * max probability, as transformers)
      -> softmax       (float32)

This is transformers' `generate` warper order (temperature, top-k, top-p, min-p); llama.cpp's
default chain applies temperature last, which changes top-p/min-p when T != 1. We follow
transformers because it is the outside reference the tests compare against.

Greedy (temperature 0) skips temperature and filtering: the target is a one-hot at the argmax of
the penalized logits (first index on exact ties, as torch.argmax).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from engine.errors import ParameterError

# (token, logit before, logit after) for one distinct history token
LedgerEntry = tuple[int, float, float]


@dataclass(frozen=True)
class SamplingConfig:
    """What turns a row of logits into the distribution the request samples from.

    Validated on construction. A message names the command-line flag that sets the field
    (`top_p` -> "--top-p"), so the command line and the workbench can show it as it is.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_window: int = 64

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise ParameterError(msg)

        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            bad(f"--temperature must be a finite number >= 0 (0 means greedy), got {self.temperature}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            bad(f"--top-k must be an integer >= 0 (0 means off), got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            bad(f"--top-p must be in (0, 1] (1 means off), got {self.top_p}")
        if not 0 <= self.min_p < 1:
            bad(f"--min-p must be in [0, 1) (0 means off), got {self.min_p}")
        if not (self.repeat_penalty > 0 and math.isfinite(self.repeat_penalty)):
            bad(f"--repeat-penalty must be a finite number > 0 (1 means off), got {self.repeat_penalty}")
        for flag, v in (("--presence-penalty", self.presence_penalty),
                        ("--frequency-penalty", self.frequency_penalty)):
            if not (math.isfinite(v) and abs(v) <= 100):
                bad(f"{flag} must be a finite number in [-100, 100] (0 means off), got {v}")
        if isinstance(self.penalty_window, bool) or not isinstance(self.penalty_window, int) \
                or self.penalty_window < 1:
            bad(f"--penalty-window must be an integer >= 1, got {self.penalty_window!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def penalized(self) -> bool:
        return (self.repeat_penalty != 1.0 or self.presence_penalty != 0.0
                or self.frequency_penalty != 0.0)


# ---------------------------------------------------------------------------------------------
# penalties


def penalize_rows(logits: torch.Tensor, histories: Sequence[Sequence[int]],
                  cfg: SamplingConfig) -> tuple[torch.Tensor, list[list[LedgerEntry]]]:
    """Penalize each row of `logits` [R, V] against its own history; returns ([R, V], ledgers).

    `histories[r]` is the window row r is scored against (the caller slices the last
    `cfg.penalty_window` tokens). Only the distinct history tokens change, so the work is a
    gather / scatter of at most R * W entries plus one copy of the logits; counts come from a
    Counter per row (cheaper than a dense [R, V] scatter_add when W << V).

    ledgers[r] lists (token, before, after) per distinct token of histories[r], in order of first
    appearance. With no penalty configured the logits come back unchanged (same tensor) and
    every ledger is empty.
    """
    if logits.dim() != 2:
        raise ValueError(f"penalize_rows wants logits [R, V], got shape {tuple(logits.shape)}")
    if len(histories) != logits.shape[0]:
        raise ValueError(f"{logits.shape[0]} rows of logits but {len(histories)} histories")
    n_rows, vocab = logits.shape
    if not cfg.penalized:
        return logits, [[] for _ in range(n_rows)]
    rows: list[int] = []
    toks: list[int] = []
    counts: list[int] = []
    splits: list[int] = []
    for r, hist in enumerate(histories):
        c = Counter(hist)   # insertion-ordered: first appearance first
        rows.extend([r] * len(c))
        toks.extend(c.keys())
        counts.extend(c.values())
        splits.append(len(c))
    if not toks:
        return logits, [[] for _ in range(n_rows)]
    if min(toks) < 0 or max(toks) >= vocab:
        raise ValueError(f"history token out of range for a vocabulary of {vocab}")
    dev = logits.device
    # np.array from a list of ints is much faster than torch.tensor(list) here (BENCHMARKS.md,
    # "Speculation and tuning timings (moved from code comments)")
    ri = torch.from_numpy(np.array(rows, dtype=np.int64)).to(dev)
    ti = torch.from_numpy(np.array(toks, dtype=np.int64)).to(dev)
    cnt = torch.from_numpy(np.array(counts, dtype=np.float32)).to(dev)
    before = logits[ri, ti].float()
    after = torch.where(before > 0, before / cfg.repeat_penalty, before * cfg.repeat_penalty)
    after = after - cnt * cfg.frequency_penalty - (cnt > 0).float() * cfg.presence_penalty
    out = logits.float().clone() if logits.dtype == torch.float32 else logits.float()
    out[ri, ti] = after
    b_list, a_list = before.tolist(), after.tolist()
    ledgers: list[list[LedgerEntry]] = []
    k = 0
    for n in splits:
        ledgers.append(list(zip(toks[k:k + n], b_list[k:k + n], a_list[k:k + n])))
        k += n
    return out, ledgers


def penalize(logits: torch.Tensor, history: Sequence[int],
             cfg: SamplingConfig) -> tuple[torch.Tensor, list[LedgerEntry]]:
    """One row: `logits` [V] penalized against `history`; returns ([V] float32, ledger)."""
    out, ledgers = penalize_rows(logits.unsqueeze(0), [history], cfg)
    return out[0], ledgers[0]


# ---------------------------------------------------------------------------------------------
# the target distribution


def filter_logits(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Temperature, then top-k, top-p, min-p on [..., V] logits; filtered entries become -inf.

    Each step copies the matching transformers warper, so results agree with
    TemperatureLogitsWarper / TopKLogitsWarper / TopPLogitsWarper / MinPLogitsWarper
    (min_tokens_to_keep=1) bit for bit on the same float32 input.
    """
    scores = logits.float()
    if cfg.temperature != 1.0:
        scores = scores / cfg.temperature
    vocab = scores.shape[-1]
    neg_inf = float("-inf")
    if 0 < cfg.top_k < vocab:
        kth = torch.topk(scores, cfg.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, neg_inf)
    if cfg.top_p < 1.0:
        scores = scores.masked_fill(~_top_p_keep(scores, cfg.top_p), neg_inf)
    if cfg.min_p > 0.0:
        probs = scores.softmax(dim=-1)
        drop = probs < cfg.min_p * probs.amax(dim=-1, keepdim=True)
        drop.scatter_(-1, probs.argmax(dim=-1, keepdim=True), False)
        scores = scores.masked_fill(drop, neg_inf)
    return scores


def _top_p_keep(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus mask [..., V]: keep the tokens whose mass strictly above them is < top_p.

    transformers sorts each row ascending and drops the entries whose ascending cumulative mass
    is <= 1 - top_p: the same set, since that mass is 1 - (mass strictly above). A full sort of
    25 x 49k entries is slow on a CPU (BENCHMARKS.md, "Speculation and tuning timings (moved from
    code comments)"), so we take the top k with a growing k until every row's cut falls inside it
    (LM rows are peaked: k = 64 almost always suffices).
    """
    shape = scores.shape
    vocab = shape[-1]
    probs = scores.reshape(-1, vocab).softmax(dim=-1)
    k = min(64, vocab)
    while True:
        vals, idx = torch.topk(probs, k, dim=-1)
        above = vals.cumsum(dim=-1) - vals
        keep_sorted = above < top_p           # the top token always stays (above = 0)
        if k == vocab or not bool(keep_sorted[:, -1].any()):
            break
        k = min(4 * k, vocab)
    keep = torch.zeros(probs.shape, dtype=torch.bool, device=probs.device)
    keep.scatter_(-1, idx, keep_sorted)
    return keep.reshape(shape)


def target_probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """The distribution p the request samples from, [..., V] float32, rows summing to 1.

    `logits` are already penalized. Greedy: one-hot at the argmax.
    """
    if cfg.greedy:
        idx = logits.argmax(dim=-1, keepdim=True)
        return torch.zeros(logits.shape, dtype=torch.float32, device=logits.device).scatter_(
            -1, idx, 1.0)
    return filter_logits(logits, cfg).softmax(dim=-1)


# ---------------------------------------------------------------------------------------------
# the request's random stream


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Tokens for uniforms `u` [B] (in [0, 1)) under the unnormalised distribution `probs` [V].

    Inverse-CDF sampling in float64: token = first index whose cumulative mass exceeds
    u * total. A zero-probability token is never returned (its cumulative mass equals its
    predecessor's), so filtered tokens stay impossible. Returns long [B].
    """
    cdf = probs.detach().to("cpu", torch.float64).cumsum(0)
    total = cdf[-1]
    if not total > 0:
        raise ValueError("cannot sample from a distribution with no mass")
    idx = torch.searchsorted(cdf, u.to(torch.float64) * total, right=True)
    # u * total can round up to total itself; the last token with mass is then the right answer
    last = int(torch.nonzero(probs.detach().cpu() > 0)[-1])
    return idx.clamp_(max=last)


class Rng:
    """The request's one seeded random stream.

    A CPU torch.Generator, so a seed replays the same tokens whatever device the model runs on.
    Every random decision of a window (accept tests, corrections, bonus draws) takes uniforms
    from here, in the order the verifier makes them.
    """

    def __init__(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 63:
            raise ParameterError(f"seed must be an integer in [0, 2**63), got {seed!r}")
        self.seed = seed
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(seed)

    def uniforms(self, n: int) -> torch.Tensor:
        """n independent uniforms in [0, 1), float64 [n]."""
        return torch.rand(n, generator=self.generator, dtype=torch.float64)

    def uniform(self) -> float:
        return float(self.uniforms(1)[0])

    def categorical(self, probs: torch.Tensor) -> int:
        """One token from `probs` [V] (need not be normalised), by inverse CDF of one uniform."""
        return int(inverse_cdf(probs, self.uniforms(1))[0])
