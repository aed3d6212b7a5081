"""Frame pacing: when to redraw, and which views, so a live run keeps its CPU. No Qt here.

The pacer holds the window's views in drawing order and knows of each only whether it is a
run-wide plot (`is_plot`, see workbench.views.base). A new window marks every view pending.
While a run streams:

- frames are spaced by their own cost: a frame that took c seconds of the main thread's CPU
  (its redraw plus the repaint Qt does right after) is followed by at least c / cpu_budget
  seconds without one, never less than min_gap_s (~30 Hz) nor more than max_gap_s;
- one slot is drawn per frame, round robin over two: the window views (tree, verify rows,
  penalty history, output) all together, so they always agree on the window they show, and one
  plot, the plots taking turns; so no single frame stalls the event loop for long and a stream
  of windows never starves the plots;
- the plots are redrawn at most plots_hz (they change slowly).

When nothing streams (paused, finished, scrubbing the timeline, replaying) every pending view is
drawn in the next frame.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from workbench.views.base import View


class FramePacer:
    def __init__(self, views: Sequence[View], *, cpu_budget: float = 0.05, min_gap_s: float = 0.033,
                 max_gap_s: float = 1.0, plots_hz: float = 2.0):
        self.views = tuple(views)
        self.cpu_budget, self.min_gap_s, self.max_gap_s, self.plots_hz = cpu_budget, min_gap_s, max_gap_s, plots_hz
        self._plots = [k for k, v in enumerate(self.views) if v.is_plot]
        self._window_views = [k for k, v in enumerate(self.views) if not v.is_plot]
        # the round robin of a streaming frame: the window views together, then one plot
        self._slots: list[str] = ["window", "plot"]
        self.pending: set[int] = set()          # positions in `views`
        self.costs_ms: list[float] = []         # main-thread CPU of every frame drawn
        self._next_at = 0.0
        self._started: tuple[float, float] | None = None
        self._plots_at = -1e9
        self._turn = 0
        self._plot_turn = 0

    def mark(self, views: Iterable[View] | None = None) -> None:
        """Make `views` (default: all) pending."""
        chosen = self.views if views is None else list(views)
        self.pending |= {k for k, v in enumerate(self.views) if any(v is c for c in chosen)}

    def account(self, now_cpu: float) -> None:
        """Close the frame started earlier: its cost sets the earliest start of the next one."""
        if self._started is None:
            return
        t_wall, t_cpu = self._started
        cost = max(0.0, now_cpu - t_cpu)
        self.costs_ms.append(cost * 1e3)
        self._next_at = t_wall + min(self.max_gap_s, max(self.min_gap_s, cost / self.cpu_budget))
        self._started = None

    def due(self, now: float, streaming: bool) -> bool:
        return bool(self.pending) and (not streaming or now >= self._next_at)

    def started(self, now: float, now_cpu: float) -> None:
        self._started = (now, now_cpu)

    def take(self, now: float, streaming: bool, split: bool) -> list[View]:
        """The views to draw now (no longer pending), in drawing order."""
        picked = sorted(self.pending)
        if streaming and now - self._plots_at < 1.0 / (2 * self.plots_hz):
            picked = [k for k in picked if k not in self._plots]
        if split and picked:
            picked = self._next_turn(picked)
        if any(k in self._plots for k in picked):
            self._plots_at = now
        self.pending -= set(picked)
        return [self.views[k] for k in picked]

    def _next_turn(self, candidates: list[int]) -> list[int]:
        """The first slot from this turn on that has a candidate: every pending window view, or
        one plot (the plots take their turns too)."""
        n = len(self._plots)
        plot = next((self._plots[(self._plot_turn + j) % n] for j in range(n)
                     if self._plots[(self._plot_turn + j) % n] in candidates), None)
        windows = [k for k in candidates if k in self._window_views]
        for j in range(len(self._slots)):
            slot = self._slots[(self._turn + j) % len(self._slots)]
            pick = windows if slot == "window" else ([plot] if plot is not None else [])
            if pick:
                self._turn = (self._turn + j + 1) % len(self._slots)
                if slot == "plot":
                    self._plot_turn = (self._plots.index(plot) + 1) % n
                return pick
        raise AssertionError("a candidate is always a window view or a plot")

    def window_views_pending(self) -> bool:
        return any(k in self.pending for k in self._window_views)
