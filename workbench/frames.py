"""Frame pacing: when to redraw, and which views, so a live run keeps its CPU. No Qt here.

Views are drawn in groups. A new window marks every group pending. While a run streams:

- frames are spaced by their own cost: a frame that took c seconds of the main thread's CPU
  (its redraw plus the repaint Qt does right after) is followed by at least c / cpu_budget
  seconds without one, never less than min_gap_s (~30 Hz) nor more than max_gap_s;
- one group is drawn per frame, round robin over the window views and one plot slot, so no
  single frame stalls the event loop for long and a stream of windows never starves the plots;
- the run-wide plots are redrawn at most plots_hz (they change slowly).

When nothing streams (paused, finished, scrubbing the timeline, replaying) every pending group
is drawn in the next frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field

VIEW_GROUPS = ("tree", "rows", "detail")
PLOT_GROUPS = ("roofline", "stats_top", "stats_bottom")
GROUPS = VIEW_GROUPS + PLOT_GROUPS


@dataclass
class FramePacer:
    cpu_budget: float = 0.05      # share of the main thread redraws may take while streaming
    min_gap_s: float = 0.033
    max_gap_s: float = 1.0
    plots_hz: float = 2.0
    pending: set[str] = field(default_factory=set)
    costs_ms: list[float] = field(default_factory=list)
    _next_at: float = 0.0
    _started: tuple[float, float] | None = None
    _plots_at: float = -1e9
    _turn: int = 0
    _plot_turn: int = 0

    def mark_all(self) -> None:
        self.pending = set(GROUPS)

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

    def take(self, now: float, streaming: bool, split: bool) -> list[str]:
        """The groups to draw now (removed from pending), in drawing order."""
        groups = [g for g in GROUPS if g in self.pending]
        if streaming and now - self._plots_at < 1.0 / (2 * self.plots_hz):
            groups = [g for g in groups if g not in PLOT_GROUPS]
        if split and groups:
            slots = VIEW_GROUPS + ("plot",)
            plot_order = PLOT_GROUPS[self._plot_turn:] + PLOT_GROUPS[:self._plot_turn]
            plot = next((g for g in plot_order if g in groups), None)
            pick = None
            for k in range(len(slots)):
                slot = slots[(self._turn + k) % len(slots)]
                pick = plot if slot == "plot" else (slot if slot in groups else None)
                if pick is not None:
                    self._turn = (self._turn + k + 1) % len(slots)
                    break
            if pick in PLOT_GROUPS:
                self._plot_turn = (PLOT_GROUPS.index(pick) + 1) % len(PLOT_GROUPS)
            groups = [pick]
        if any(g in PLOT_GROUPS for g in groups):
            self._plots_at = now
        self.pending -= set(groups)
        return groups
