"""Acceptance: how far down a draft the target agrees, measured and expected.

Expected tokens. A window always emits one token of the target's own (a correction or a bonus),
plus every accepted draft node along the accepted path. With a_d = P(a node at depth d is
accepted | its parent was), a window of depth k emits

    E(k) = 1 + sum_{j=1..k} prod_{i<=j} a_i                              (`path_tokens`)

and with one rate alpha at every depth this is Leviathan et al. 2023's eq. 1,
E = (1 - alpha^(k+1)) / (1 - alpha)                                     (`expected_tokens`).

Measured acceptance by depth (`DepthTally`, what the run report's accept_rate_by_depth and the
workbench's acceptance curve both read): in a window, depth d was tried when a node at depth d
hung below the accepted prefix (d <= accepted length + 1), and accepted when the accepted path
reached it. tried/accepted per depth estimates a_d; their totals give the maximum-likelihood
single rate alpha.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


def expected_tokens(alpha: float, depth: int) -> float:
    """Tokens one window of `depth` drafts emits when each is accepted i.i.d. with prob. alpha:
    (1 - alpha^(depth+1)) / (1 - alpha)  (Leviathan et al., 2023, eq. 1)."""
    if alpha >= 1.0:
        return float(depth + 1)
    return (1.0 - alpha ** (depth + 1)) / (1.0 - alpha)


def fit_acceptance(tokens_per_pass: float, depth: int) -> float:
    """The one acceptance rate a with expected_tokens(a, depth) = tokens_per_pass."""
    t = min(max(tokens_per_pass, 1.0), depth + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, depth) < t else (lo, mid)
    return (lo + hi) / 2


def path_tokens(rates: Sequence[float]) -> list[float]:
    """E(k) for k = 0 .. len(rates): 1 + sum_{j<=k} prod_{i<=j} rates[i] (module docstring)."""
    out, total, run = [1.0], 1.0, 1.0
    for a in rates:
        run *= a
        total += run
        out.append(total)
    return out


def window_depths(parents: Sequence[int], accepted: Sequence[int]) -> tuple[int, int]:
    """(depths tried, depths accepted) of one window: a tree given by each node's parent (-1:
    the root) and its accepted path (node indices, root's child first)."""
    if not parents:
        return 0, 0
    reached = len(accepted)
    last = accepted[-1] if accepted else -1
    return reached + (1 if last in parents else 0), reached


@dataclass
class DepthTally:
    """Tried and accepted counts by depth (index 0 = depth 1) over a run's windows."""

    tried: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)

    def add(self, parents: Sequence[int], accepted_path: Sequence[int]) -> None:
        tried, reached = window_depths(parents, accepted_path)
        while len(self.tried) < tried:
            self.tried.append(0)
            self.accepted.append(0)
        for d in range(tried):
            self.tried[d] += 1
            self.accepted[d] += d < reached

    def rates(self) -> list[float]:
        """a_d, the measured P(accepted at depth d | tried), for d = 1 .. deepest tried."""
        return [a / t if t else 0.0 for a, t in zip(self.accepted, self.tried)]

    @property
    def alpha(self) -> float | None:
        """The single rate that best explains every window (accepted / tried over all depths)."""
        tried = sum(self.tried)
        return sum(self.accepted) / tried if tried else None


# ---------------------------------------------------------------------------------------------
# Learned acceptance per (drafter, width, depth): what the window chooser prices with

PRIOR_TRIALS = 4.0  # the prior's weight, in trials, in the record plain steps relax toward


def _eff(width: int, correlation: float) -> float:
    return 1.0 + (width - 1) * (1.0 - correlation)


def reproject(a: float, w_from: int, w_to: int, correlation: float) -> float:
    """Acceptance of 'any of w_from branches' -> of 'any of w_to branches': the per-try odds
    p = 1 - (1 - a)^(1/e(w_from)) re-projected to 1 - (1 - p)^e(w_to), with
    e(w) = 1 + (w - 1) * (1 - correlation) (engine.cost.chooser's docstring)."""
    if w_from == w_to:
        return a
    a = min(max(a, 0.0), 1.0)
    if a >= 1.0:
        return 1.0
    p = 1.0 - (1.0 - a) ** (1.0 / _eff(w_from, correlation))
    return 1.0 - (1.0 - p) ** _eff(w_to, correlation)


@dataclass
class _Cell:
    value: float
    count: int = 0
    hits: float = 0.0           # accepted / tried at this depth, both fading at each plain step
    trials: float = 0.0


class AcceptanceModel:
    """Per-depth exponential moving averages of a_d for each (drafter, width), with cold-start
    guesses for cells not observed yet (engine.cost.chooser's docstring) and the relaxation of
    plain steps toward each cell's own fading record."""

    def __init__(self, ema: float, prior: float, correlation: float, relax: float) -> None:
        self.ema, self.prior, self.correlation, self.relax = ema, prior, correlation, relax
        self._cells: dict[tuple[str, int, int], _Cell] = {}     # (drafter, width, depth)

    def clear(self) -> None:
        self._cells.clear()

    def observed(self, drafter: str) -> bool:
        """Whether any window of this drafter has been learned from."""
        return any(c.count for (dr, _w, _d), c in self._cells.items() if dr == drafter)

    def acceptance(self, drafter: str, width: int, depth: int) -> float:
        """Estimated P(the window's path continues through depth `depth` | it reached depth-1)."""
        cell = self._cells.get((drafter, width, depth))
        if cell is not None:
            return cell.value
        same_depth = [(c.count, -abs(w - width), w, c.value) for (dr, w, d), c in self._cells.items()
                      if dr == drafter and d == depth]
        if same_depth:
            _, _, w0, a0 = max(same_depth)
            return reproject(a0, w0, width, self.correlation)
        if depth > 1:
            return self.acceptance(drafter, width, depth - 1)
        return reproject(self.prior, 1, width, self.correlation)

    def relax_toward_record(self, drafter: str) -> None:
        """A plain step: every estimate of `drafter` ("none": of every drafter) moves a step
        toward its record, hits / trials shrunk toward the prior by PRIOR_TRIALS pseudo-trials,
        and the record fades by the same factor."""
        for (dr, w, _d), cell in self._cells.items():
            if dr == drafter or drafter == "none":
                prior = reproject(self.prior, 1, w, self.correlation)
                target = (cell.hits + PRIOR_TRIALS * prior) / (cell.trials + PRIOR_TRIALS)
                cell.value += self.relax * (target - cell.value)
                cell.hits *= 1.0 - self.relax
                cell.trials *= 1.0 - self.relax

    def learn(self, drafter: str, depth: int, width: int, accepted_len: int,
              rejected: bool) -> None:
        """A window of `depth` x `width` accepted `accepted_len` nodes and ended on a rejected
        node (`rejected`) or ran to a leaf (which says nothing about the depth below it)."""
        outcomes = [(d, 1.0) for d in range(1, accepted_len + 1)]
        if rejected and accepted_len < depth:
            outcomes.append((accepted_len + 1, 0.0))
        # start new cells from the estimates as they stood before this window
        start = {d: self.acceptance(drafter, width, d) for d, _ in outcomes}
        for d, hit in outcomes:
            cell = self._cells.setdefault((drafter, width, d), _Cell(start[d]))
            cell.value += self.ema * (hit - cell.value)
            cell.count += 1
            cell.hits += hit
            cell.trials += 1.0
