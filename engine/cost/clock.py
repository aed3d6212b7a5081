"""What a window costs on this device: the cost profile, corrected by what windows measured.

    window ms = draft_ms(depth, width) x r + verify_ms(rows) + overhead(rows)

verify_ms comes from the profile (bare verify passes). The overhead is what the measured windows
took above it: for a plain step, an exponential average; for a window, a line a + b x rows
(`_RowLine`: a sampled, penalized or shown window scores every row's logits on the host, a cost
that grows with rows). r, a model drafter's measured draft time over the predicted one, corrects
a draft price taken from a reference or a busy probe after one window (engine.cost.draft_cost).
"""

from __future__ import annotations

import math
from typing import Callable

from engine.cost.profile import CostProfile


class _RowLine:
    """A window's time above the profile as a + b x rows, from exponentially weighted moments
    of the measured windows. b stays 0 until the rows measured spread over at least MIN_SPREAD
    (a slope from one size is a guess)."""

    MIN_SPREAD = 2.0        # rows, standard deviation

    def __init__(self) -> None:
        self.w = self.r = self.g = self.rr = self.rg = 0.0
        self.seen = 0

    def add(self, rows: float, gap: float, ema: float) -> None:
        k = 1.0 - ema
        self.w, self.r, self.g = k * self.w + ema, k * self.r + ema * rows, k * self.g + ema * gap
        self.rr, self.rg = k * self.rr + ema * rows * rows, k * self.rg + ema * rows * gap
        self.seen += 1

    def at(self, rows: float) -> float:
        mr, mg = self.r / self.w, self.g / self.w
        var = self.rr / self.w - mr * mr
        b = (self.rg / self.w - mr * mg) / var if var >= self.MIN_SPREAD ** 2 else 0.0
        b = max(0.0, b)
        return mg + b * (rows - mr)


def valid_ms(ms: float) -> bool:
    return isinstance(ms, (int, float)) and math.isfinite(ms) and ms > 0


class WindowClock:
    """Predicted and measured window times. overhead_ema: weight of the newest measured time in
    the overhead averages and the draft ratio."""

    def __init__(self, profile: CostProfile, overhead_ema: float) -> None:
        self.profile = profile
        self.overhead_ema = overhead_ema
        self._draft_by: dict[str, Callable[[int, int], float]] = {}   # model drafters' draft ms
        self.clear()

    def clear(self) -> None:
        self._draft_ratio: dict[str, float] = {}                      # measured / predicted
        self._plain: float | None = None         # a plain step's ms above the profile
        self._plain_ratio: float | None = None   # (profile + that) / profile
        self._window_gap = _RowLine()            # windows' ms above the profile, by rows

    def register(self, drafter: str, draft_ms: Callable[[int, int], float]) -> None:
        self._draft_by[drafter] = draft_ms

    def drafts(self, drafter: str) -> bool:
        """Whether `drafter` pays draft passes of its own (a model drafter)."""
        return drafter in self._draft_by

    def draft_ms(self, drafter: str, depth: int, width: int) -> float:
        """Predicted draft time of a window (0 for n-gram drafters: their propose time is
        overhead), corrected by what this drafter's windows measured."""
        f = self._draft_by.get(drafter)
        if f is None or depth < 1:
            return 0.0
        return f(depth, width) * self._draft_ratio.get(drafter, 1.0)

    def predicted_ms(self, rows: int) -> float:
        base = self.profile.ms(rows)
        if rows > 1 and not self._window_gap.seen and self._plain_ratio is not None:
            # no window measured yet: a profile measured on a busier (or quieter) machine is off
            # for windows as it is for plain steps, so scale by what plain steps showed (else a
            # pessimistic profile keeps every window out, and none is ever measured)
            return base * self._plain_ratio
        if rows == 1:
            extra = self._plain or 0.0
        else:
            extra = self._window_gap.at(rows) if self._window_gap.seen else 0.0
        # an overhead learned against a pessimistic profile may be negative; never price below 10%
        return max(0.1 * base, base + extra)

    def measured(self, drafter: str, depth: int, width: int, rows: int,
                 measured_ms: float | None, draft_ms: float | None) -> None:
        """One window's wall time (propose + verify + commit), and for a model drafter the
        draft time inside it, which teaches the draft ratio and is taken out of the overhead."""
        drafted = drafter in self._draft_by and depth >= 1 and valid_ms(draft_ms)
        ema = self.overhead_ema
        if drafted:
            predicted = self._draft_by[drafter](depth, width)
            if predicted > 0:
                old_r = self._draft_ratio.get(drafter)
                r = draft_ms / predicted
                self._draft_ratio[drafter] = r if old_r is None else old_r + ema * (r - old_r)
        if measured_ms is None or not math.isfinite(measured_ms) or measured_ms <= 0:
            return
        gap = measured_ms - (draft_ms if drafted else 0.0) - self.profile.ms(rows)
        if rows > 1:
            self._window_gap.add(rows, gap, ema)
            return
        # the first measurement sets the overhead outright; later ones average in
        self._plain = gap if self._plain is None else self._plain + ema * (gap - self._plain)
        one = self.profile.ms(1)
        if one > 0:
            self._plain_ratio = (one + self._plain) / one
