"""The presenter: what the window's views show, and when they draw it.

It holds the EventStore the views show (a live run's, or a recording's), the timeline that picks
the window, the selected verify row, and the redraw timer. Every `REDRAW_MS` the timer asks
workbench.frames.FramePacer whether a frame is due and which views it draws; each drawn view is
handed the same `Shown` (workbench.views.base). Windows of a live run are appended to the store
at once; the views catch up at the next frame, so a burst of windows costs one redraw.
"""

from __future__ import annotations

import time
from typing import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from workbench.frames import FramePacer
from workbench.store import EventStore
from workbench.views.base import Shown, View, interesting_row

REDRAW_MS = 33               # at most ~30 frames a second
PLOTS_HZ = 2                 # run-wide plots while streaming (they change slowly)
STREAM_CPU_BUDGET = 0.05     # share of the main thread's time redraws may take while a run streams
MAX_FRAME_GAP_S = 1.0


class Presenter(QObject):
    rendered = Signal(int)         # every pending view now shows this window index

    def __init__(self, views: tuple[View, ...], timeline, status, *, running: Callable[[], bool],
                 live: Callable[[], bool], parent: QObject | None = None):
        """`timeline`: workbench.widgets.Timeline; `status`: the window's chrome.StatusLine (a
        live run's token progress); `running()`: a run is decoding (not idle, not paused);
        `live()`: the store is a live run's (not a recording's)."""
        super().__init__(parent)
        self.views = views
        self.timeline = timeline
        self.status = status
        self._running, self._live = running, live
        self.store = EventStore()
        self.pacer = FramePacer(views, cpu_budget=STREAM_CPU_BUDGET, min_gap_s=REDRAW_MS / 1e3,
                                max_gap_s=MAX_FRAME_GAP_S, plots_hz=PLOTS_HZ)
        self.render_times_ms: list[float] = []
        self._selected_row = 0
        self._row_window = -1              # window the selected row belongs to
        self._timer = QTimer(self)
        self._timer.setInterval(REDRAW_MS)
        self._timer.timeout.connect(self._tick)

    def start(self) -> None:
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def mark(self) -> None:
        """Something every view shows changed: all of them draw at the next frame."""
        self.pacer.mark()

    def use(self, store: EventStore) -> None:
        """Show `store` (a recording's) from its first window on; every view cleared first."""
        self.store = store
        self.clear()

    # ---- selection ------------------------------------------------------------------------------
    def select_row(self, row: int) -> None:
        """Select verify `row` of the shown window in every view that shows the selection."""
        self._selected_row = row
        self._row_window = self.timeline.value()
        shown = self.shown()
        for v in self.views:
            if v.follows_row:
                v.update_from(shown)

    def shown(self) -> Shown:
        """The timeline's window with its selected row (a new window opens on interesting_row)."""
        idx = self.timeline.value()
        if not 0 <= idx < len(self.store):
            return Shown(self.store, -1, -1, self.timeline.live.isChecked())
        if self._row_window != idx:
            self._selected_row = interesting_row(self.store[idx])
            self._row_window = idx
        return Shown(self.store, idx, self._selected_row, self.timeline.live.isChecked())

    def show_window(self, idx: int) -> None:
        """Move the timeline to window `idx` (clamped) and redraw every view for it now."""
        self._sync_timeline()
        self.timeline.set_value(idx)
        self.render_all()

    # ---- drawing ----------------------------------------------------------------------------------
    def streaming(self) -> bool:
        return self._running() and self._live() and self.timeline.live.isChecked()

    def _tick(self) -> None:
        """The redraw timer; workbench.frames.FramePacer decides whether to draw."""
        now, cpu = time.perf_counter(), time.thread_time()
        self.pacer.account(cpu)
        streaming = self.streaming()
        if self.pacer.due(now, streaming) and self.render_now(split=streaming):
            self.pacer.started(now, cpu)

    def _sync_timeline(self) -> None:
        """Give the timeline (and the token progress of a live run) the store's length."""
        if self.timeline.count == len(self.store):
            return
        self.timeline.set_count(len(self.store))
        if self._live() and len(self.store):
            last = self.store[-1]
            total = (last.settings or {}).get("max_new_tokens") or self.status.progress.maximum()
            self.status.tokens(last.stats.new_tokens, int(total))

    def render_now(self, split: bool = False, force: bool = False) -> bool:
        """Redraw the pending views for the timeline's window; True if anything was drawn.
        With `split` (a run streams) one slot is drawn per call, the window views together or
        one plot (see workbench.frames); with `force` the plots are drawn even if a run streams
        and they were drawn a moment ago. The timeline moves to a new window only in a frame
        that draws the window views too, so they and the timeline always show the same window
        (a plot drawn alone draws the run up to the window they show)."""
        now = time.perf_counter()
        views = self.pacer.take(now, self.streaming() and not force, split)
        if not views:
            return False
        if not split or any(not v.is_plot for v in views):
            self._sync_timeline()
        shown = self.shown()
        for v in views:
            v.update_from(shown)
        self.render_times_ms.append((time.perf_counter() - now) * 1e3)
        if not self.pacer.pending:
            self.rendered.emit(shown.index)
        return True

    def render_all(self) -> None:
        """Redraw every view now (the plots too, however recently they were drawn)."""
        self.pacer.mark()
        self.render_now(force=True)

    def clear(self) -> None:
        """Every view shows no window (a fresh run, or a recording just opened)."""
        self.timeline.set_count(0)
        shown = Shown(self.store, -1)
        for v in self.views:
            v.update_from(shown)
