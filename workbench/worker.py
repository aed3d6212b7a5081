"""The worker thread: loads the model, probes the roofline and runs the decoder off the UI thread.

One long-lived `SessionWorker` (a QThread) takes requests from a queue, so an engine exception
ends a run, not the worker: the next run reuses the thread and the loaded model. The decoder is a
generator; between two windows the worker checks stop, pause and single steps, and each yielded
`WindowEvent` crosses to the main thread through `window(run_id, event)`, a queued signal.

Everything the main thread learns about a run arrives the same way, state changes included
(`state_changed(run_id, state)`): it keeps its own copy (workbench.run_control) and never reads
the worker's attributes while this thread writes them.

While a worker thread runs, Python's cyclic garbage collector runs on the main thread only
(`collect_on_main_thread`): CPython collects in whichever thread allocates past the threshold, and
a collection started on a worker would destroy the main thread's Qt objects there.
"""

from __future__ import annotations

import gc
import queue
import threading
import time
import traceback
import weakref
from dataclasses import dataclass, replace
from typing import Any, Callable

from PySide6.QtCore import QCoreApplication, QObject, QThread, QTimer, Signal

from engine.errors import ModelLoadError, ParameterError, SpecscopeError
from engine.speculation.settings import DecodeSettings

from workbench import engine_api


@dataclass(frozen=True)
class RuntimeSpec:
    model: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    weights: str = "auto"       # auto | packed | dequantized (quantized GGUF weights)


@dataclass(frozen=True)
class RunRequest:
    run_id: int
    spec: RuntimeSpec
    prompt: Any                     # str (raw text) or list of chat messages
    settings: DecodeSettings
    max_windows: int | None = None  # stop after this many windows (screenshot mode)
    start_paused: bool = False      # wait before the first window (Step from idle)
    probe: bool = False             # measure the roofline of the attached card first


# One loaded model per process, shared by every worker (a Reset or a second window does not load
# it again); the lock keeps two workers from driving it at once.
_RUNTIME: dict[str, Any] = {"spec": None, "rt": None}
_RUNTIME_LOCK = threading.RLock()


def preload_runtime(spec: RuntimeSpec, rt) -> None:
    """Hand an already loaded runtime to every worker (tests and benchmarks load it once)."""
    with _RUNTIME_LOCK:
        _RUNTIME["rt"], _RUNTIME["spec"] = rt, spec


def shared_runtime(spec: RuntimeSpec, progress: Callable[[str, float], None]):
    """The process's one loaded model for `spec`, loaded now if another (or none) is loaded.
    Call it holding _RUNTIME_LOCK: a run, a sweep and a race all drive the same model."""
    if _RUNTIME["rt"] is not None and _RUNTIME["spec"] == spec:
        return _RUNTIME["rt"]
    _RUNTIME["rt"] = _RUNTIME["spec"] = None      # free the old model before loading
    rt = engine_api.open_runtime(spec.model, spec.device, spec.dtype, progress=progress,
                                 weights=spec.weights)
    _RUNTIME["rt"], _RUNTIME["spec"] = rt, spec
    progress("model ready", 1.0)
    return rt


class _MainThreadGC(QObject):
    """Automatic garbage collection off while a workbench thread may run; this main-thread timer
    collects instead, by the interpreter's own thresholds (as pyqtgraph.util.GarbageCollector).

    CPython's cyclic collector runs in the thread whose allocation crosses the threshold, and
    collects every thread's garbage there. A worker allocates a lot (a model load builds ~50,000
    merge tuples; a run, objects every window), so a collection often starts on the worker, and
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


class _Cancelled(Exception):
    """Raised from a progress callback to abandon a load or probe when stop is requested."""


def describe_error(e: BaseException) -> tuple[str, str]:
    """(message for the banner, kind): kind is model | parameter | memory | internal."""
    if isinstance(e, ModelLoadError):
        return str(e), "model"
    if isinstance(e, ParameterError):
        return str(e), "parameter"
    if isinstance(e, SpecscopeError):
        return str(e), "parameter"
    name = type(e).__name__
    if isinstance(e, MemoryError) or "OutOfMemory" in name:
        return ("out of memory: lower --depth × --width, shorten the prompt or --max-new-tokens, "
                f"or use a smaller --dtype ({name}: {str(e).splitlines()[0] if str(e) else ''})",
                "memory")
    return f"internal error: {name}: {e} (the traceback is on stderr)", "internal"


class SessionWorker(QThread):
    progress = Signal(str, float)        # stage, fraction in [0, 1]
    runtime_ready = Signal(object)       # dict: model, device, dtype, weights, load_s
    profile_ready = Signal(object)       # the attached card's cost profile
    run_started = Signal(int, object)    # run_id, header dict (settings, model, device, prompt)
    window = Signal(int, object)         # run_id, WindowEvent
    run_finished = Signal(int, object)   # run_id, report dict
    failed = Signal(int, str, str)       # run_id, message, kind
    state_changed = Signal(int, str)     # run_id, idle | loading | probing | running | paused

    def __init__(self, parent=None):
        super().__init__(parent)
        self._requests: queue.Queue[RunRequest | None] = queue.Queue()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._paused = False
        self._steps = 0
        self._controls: queue.Queue[DecodeSettings] = queue.Queue()
        self._profiles: dict[RuntimeSpec, Any] = {}
        self._state = "idle"             # this thread's; the main thread is told by state_changed
        self._run_id = 0

    # ---- called from the main thread ------------------------------------------------------
    def submit(self, req: RunRequest) -> None:
        """Queue a run; any run in progress is stopped first."""
        with self._cond:
            self._stop.set()
            self._paused = req.start_paused
            self._steps = 1 if req.start_paused else 0
            self._cond.notify_all()
        self._requests.put(req)
        if not self.isRunning():
            collect_on_main_thread(self)
            self.start()

    def pause(self) -> None:
        with self._cond:
            self._paused, self._steps = True, 0
            self._cond.notify_all()

    def resume(self) -> None:
        with self._cond:
            self._paused, self._steps = False, 0
            self._cond.notify_all()

    def step(self) -> None:
        """Run exactly one more window, then pause."""
        with self._cond:
            self._paused = True
            self._steps += 1
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stop.set()
            self._cond.notify_all()

    def send_settings(self, settings: DecodeSettings) -> None:
        """Applied by the decoder at its next window boundary."""
        self._controls.put(settings)

    def shutdown(self, timeout_ms: int = 2000) -> bool:
        """Stop the run and end the thread; True when it ended within the timeout."""
        self.stop()
        self._requests.put(None)
        ended = self.wait(timeout_ms)
        release_finished_threads()
        return ended

    # ---- the thread -----------------------------------------------------------------------
    def run(self) -> None:
        while True:
            req = self._requests.get()
            if req is None:
                return
            if not self._requests.empty():   # a newer request superseded this one
                continue
            self._stop.clear()
            self._run_id = req.run_id
            self._controls = queue.Queue()
            try:
                while not _RUNTIME_LOCK.acquire(timeout=0.1):
                    if self._stop.is_set():
                        raise _Cancelled()
                try:
                    self._execute(req)
                finally:
                    _RUNTIME_LOCK.release()
            except _Cancelled:
                pass
            except BaseException as e:       # noqa: BLE001 - the worker must survive any run
                if not isinstance(e, SpecscopeError):
                    traceback.print_exc()
                msg, kind = describe_error(e)
                self.failed.emit(req.run_id, msg, kind)
            finally:
                self._state = "idle"         # always said, so the run's last word is "idle"
                self.state_changed.emit(req.run_id, "idle")

    def _set_state(self, state: str) -> None:
        if state != self._state:
            self._state = state
            self.state_changed.emit(self._run_id, state)

    def _progress(self, stage: str, frac: float) -> None:
        if self._stop.is_set():
            raise _Cancelled()
        self.progress.emit(stage, float(frac))

    def _runtime(self, spec: RuntimeSpec):
        t0 = time.perf_counter()
        if _RUNTIME["rt"] is None or _RUNTIME["spec"] != spec:
            self._set_state("loading")
        rt = shared_runtime(spec, self._progress)
        self.runtime_ready.emit({"model": engine_api.model_name(rt), "device": rt.device_name,
                                 "dtype": rt.dtype_name, "weights": rt.weights_label,
                                 "activation_dtype": getattr(rt, "activation_dtype", rt.dtype_name),
                                 "load_s": time.perf_counter() - t0})
        return rt

    def _execute(self, req: RunRequest) -> None:
        rt = self._runtime(req.spec)
        if req.spec not in self._profiles:
            if req.probe:
                self._set_state("probing")
            profile = engine_api.card_profile(rt, progress=self._progress, probe=req.probe)
            if profile is not None:
                self._profiles[req.spec] = profile
        if req.spec in self._profiles:
            self.profile_ready.emit(self._profiles[req.spec])
        profile = self._profiles.get(req.spec)
        settings = req.settings
        if settings.adaptive and settings.draft != "none" and profile is None and not req.probe:
            # adaptive prices windows on the card's cost profile; with none saved and probing
            # off (--no-probe) this run keeps the fixed depth and width, and says so
            settings = replace(settings, adaptive=False)
            self.progress.emit("adaptive off for this run: no saved cost profile for this card "
                               "and probing is off", 1.0)
        ids = engine_api.encode_prompt(rt, req.prompt)
        dec = engine_api.Decoder(rt, ids, settings, controls=self._controls, stop=self._stop)
        self.run_started.emit(req.run_id, {
            "settings": settings.to_dict(), "model": engine_api.model_name(rt),
            "device": rt.device_name, "dtype": rt.dtype_name, "weights": rt.weights_label,
            "activation_dtype": getattr(rt, "activation_dtype", rt.dtype_name),
            "prompt": req.prompt, "prompt_tokens": len(ids)})
        gen = dec.windows()
        n = 0
        cut = ""
        try:
            while True:
                if not self._gate():
                    cut = "stopped"
                    break
                self._set_state("running")
                try:
                    ev = next(gen)
                except StopIteration:
                    break
                n += 1
                self.window.emit(req.run_id, ev)
                if req.max_windows is not None and n >= req.max_windows:
                    cut = "windows"
                    break
        finally:
            gen.close()
        report = dec.report()
        if cut and not report.get("finish_reason"):
            report["finish_reason"] = cut        # the worker, not the decoder, ended the run
        self.run_finished.emit(req.run_id, report)

    def _gate(self) -> bool:
        """Block while paused (unless a step is owed); False when stop was requested."""
        with self._cond:
            while self._paused and self._steps == 0 and not self._stop.is_set():
                self._set_state("paused")
                self._cond.wait(0.25)
            if self._stop.is_set():
                return False
            if self._paused:
                self._steps -= 1
            return True
