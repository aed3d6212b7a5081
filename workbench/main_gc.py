"""Python's cyclic garbage collector on the main thread only, while a workbench thread runs.

CPython collects in whichever thread allocates past the threshold, and a collection started on a
worker would destroy the main thread's Qt objects there (see _MainThreadGC).
"""

from __future__ import annotations

import gc
import weakref

from PySide6.QtCore import QCoreApplication, QObject, QThread, QTimer


class _MainThreadGC(QObject):
    """Automatic garbage collection off while a workbench thread may run; this main-thread timer
    collects instead, by the interpreter's own thresholds (as pyqtgraph.util.GarbageCollector).

    CPython's cyclic collector runs in the thread whose allocation crosses the threshold, and
    collects every thread's garbage there. A worker allocates a lot (a model load builds the
    tokenizer's merges: BENCHMARKS.md, "Workbench timings (moved from code comments)"; a run,
    objects every window), so a collection often starts on the worker, and
    the garbage it frees includes Qt wrappers the main thread left in reference cycles (pyqtgraph
    items, closed windows and their docks): their C++ objects were then destroyed on the worker
    thread while the main thread, which runs whenever the collection lets go of the GIL, painted
    and handled events: a segfault or a deadlock (tests/workbench, test_screenshot_command).
    With collection on the main thread, every Qt wrapper dies on the thread its object lives on.
    """

    INTERVAL_MS = 200

    def __init__(self):
        super().__init__()
        self._threads: list[weakref.ref] = []
        self._was_enabled = True
        self._timer = QTimer(self)
        self._timer.setInterval(self.INTERVAL_MS)
        self._timer.timeout.connect(self._tick)

    def hold(self, thread: QThread) -> None:
        """Keep automatic collection off until `thread` (about to be started) has finished."""
        if not self._threads:
            self._was_enabled = gc.isenabled()
            gc.disable()
            self._timer.start()
        if all(r() is not thread for r in self._threads):
            self._threads.append(weakref.ref(thread))

    def release_finished(self) -> None:
        """Forget the threads that have finished; with none left, collection is automatic again."""
        live = []
        for r in self._threads:
            t = r()
            try:
                if t is not None and not t.isFinished():     # running, or about to start
                    live.append(r)
            except RuntimeError:                             # its C++ object is gone
                pass
        self._threads = live
        if not live and self._timer.isActive():
            self._timer.stop()
            if self._was_enabled:
                gc.enable()

    def _tick(self) -> None:
        c0, c1, c2 = gc.get_count()
        t0, t1, t2 = gc.get_threshold()
        if t0 and c0 > t0:
            gc.collect(2 if c2 > t2 else 1 if c1 > t1 else 0)
        self.release_finished()


_GC: _MainThreadGC | None = None


def collect_on_main_thread(thread: QThread) -> None:
    """Call on the main thread just before starting `thread`: until it finishes, garbage is
    collected on the main thread only (see _MainThreadGC)."""
    global _GC
    app = QCoreApplication.instance()
    if app is None or QThread.currentThread() != app.thread():
        return                  # no event loop to collect on (and no widgets to protect)
    if _GC is None:
        _GC = _MainThreadGC()
    _GC.hold(thread)


def release_finished_threads() -> None:
    """Automatic collection back on at once if no held thread still runs (after a shutdown)."""
    if _GC is not None:
        _GC.release_finished()
