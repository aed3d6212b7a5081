"""The generator worker: one thread per window that runs jobs (the live run, a sweep, a race) one
at a time on the window's one model (workbench.host), in the shape of superqt's GeneratorWorker.

A job is a generator function `body(runtime, ctx)`. The worker loads the model the job asks for
(or finds it loaded), then drives the generator: every value it yields crosses to the main thread
as `yielded(job_id, value)` (a queued signal), and between two yields the worker checks stop,
pause and single steps. Asked to stop, it throws `JobStopped` into the generator at its yield: a
job may catch it and return what it has (a run's report, a sweep's partial result). What the job
returns arrives as `returned(job_id, value)` (None: stopped before it returned anything), an
exception as `errored(job_id, message, kind)`, and the worker lives on for the next job.
`ctx.note(value)` sends a value outside the step sequence (a run's header, the card's profile).

Everything the main thread learns arrives by signal, tagged with the job's id; the main thread
keeps its own copy of what it needs (workbench.run_control) and never reads this thread's state.
A job replaces a running or queued job of the same kind (a new run stops the old one); a job of
another kind waits its turn (a sweep waits for the run the window stops first).

While the thread runs, Python's garbage collector runs on the main thread only (main_gc).
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Generator

from PySide6.QtCore import QThread, Signal

from engine.errors import ModelLoadError, ParameterError, SpecscopeError

from workbench.host import ModelHost, RuntimeSpec
from workbench.main_gc import collect_on_main_thread, release_finished_threads

__all__ = ["GeneratorWorker", "Job", "JobContext", "JobStopped", "RuntimeSpec", "describe_error",
           "release_finished_threads"]


class JobStopped(Exception):
    """Thrown into a job's generator at its yield when the job is asked to stop."""


class _Cancelled(Exception):
    """Raised from a progress callback to abandon a load or probe when stop is asked."""


@dataclass(frozen=True)
class Job:
    spec: RuntimeSpec                                   # the model it runs on
    body: Callable[[Any, "JobContext"], Generator]      # body(runtime, ctx): yields, returns a value
    kind: str = "run"                                   # a job replaces one of its own kind
    start_paused: bool = False                          # wait before the first step (Step from idle)


class _Control:
    """One job's stop flag and pause / step requests (guarded by the worker's condition)."""

    def __init__(self, paused: bool) -> None:
        self.stop = threading.Event()
        self.paused = paused
        self.steps = 1 if paused else 0


class JobContext:
    """What a running job sees of the worker."""

    def __init__(self, worker: "GeneratorWorker", job_id: int, control: _Control) -> None:
        self._worker, self.job_id, self.stop = worker, job_id, control.stop
        self.paused_s = 0.0        # time the job was held paused since its first yield

    def progress(self, stage: str, frac: float) -> None:
        """Report a slow step (load, probe); abandons it by raising when stop is asked."""
        if self.stop.is_set():
            raise _Cancelled()
        self._worker.progress.emit(self.job_id, stage, float(frac))

    def state(self, state: str) -> None:
        self._worker._set_state(state)

    def note(self, value: Any) -> None:
        """Send `value` to the main thread now, outside the step sequence (no pause, no step)."""
        self._worker.noted.emit(self.job_id, value)


def describe_error(e: BaseException) -> tuple[str, str]:
    """(message for the banner, kind): kind is model | parameter | memory | internal."""
    if isinstance(e, ModelLoadError):
        return str(e), "model"
    if isinstance(e, (ParameterError, SpecscopeError)):
        return str(e), "parameter"
    name = type(e).__name__
    if isinstance(e, MemoryError) or "OutOfMemory" in name:
        return ("out of memory: lower --depth × --width, shorten the prompt or --max-new-tokens, "
                f"or use a smaller --dtype ({name}: {str(e).splitlines()[0] if str(e) else ''})",
                "memory")
    return f"internal error: {name}: {e} (the traceback is on stderr)", "internal"


class GeneratorWorker(QThread):
    state_changed = Signal(int, str)      # job id, loading | probing | running | paused | idle
    progress = Signal(int, str, float)    # job id, stage, fraction in [0, 1]
    runtime_ready = Signal(int, object)   # job id, workbench.host.RuntimeInfo
    noted = Signal(int, object)           # job id, a value sent with ctx.note
    yielded = Signal(int, object)         # job id, a value the job yielded
    returned = Signal(int, object)        # job id, what the job returned (None: stopped early)
    errored = Signal(int, str, str)       # job id, message, kind (see describe_error)

    def __init__(self, host: ModelHost | None = None, parent=None):
        super().__init__(parent)
        self.host = host or ModelHost()
        self._cond = threading.Condition()
        self._queue: list[tuple[int, Job, _Control]] = []
        self._current: tuple[int, Job, _Control] | None = None
        self._next_id = 0
        self._closing = False
        self._state = "idle"
        self._job_id = 0
        self._waited_s = 0.0

    # ---- called from the main thread ------------------------------------------------------
    def submit(self, job: Job) -> int:
        """Queue `job` and return its id; a running or queued job of its kind is stopped."""
        with self._cond:
            self._next_id += 1
            job_id = self._next_id
            dropped = [q for q in self._queue if q[1].kind == job.kind]
            self._queue = [q for q in self._queue if q[1].kind != job.kind] + [(job_id, job, _Control(job.start_paused))]
            if self._current is not None and self._current[1].kind == job.kind:
                self._current[2].stop.set()
            self._cond.notify_all()
        for old_id, _, _ in dropped:           # never started: said to have ended at once
            self.returned.emit(old_id, None)
            self.state_changed.emit(old_id, "idle")
        if not self.isRunning():
            collect_on_main_thread(self)
            self.start()
        return job_id

    def _control(self, job_id: int) -> _Control | None:
        for q in ([self._current] if self._current else []) + self._queue:
            if q[0] == job_id:
                return q[2]
        return None

    def _with(self, job_id: int, change: Callable[[_Control], None]) -> None:
        with self._cond:
            c = self._control(job_id)
            if c is not None:
                change(c)
            self._cond.notify_all()

    def pause(self, job_id: int) -> None:
        self._with(job_id, lambda c: (setattr(c, "paused", True), setattr(c, "steps", 0)))

    def resume(self, job_id: int) -> None:
        self._with(job_id, lambda c: (setattr(c, "paused", False), setattr(c, "steps", 0)))

    def step(self, job_id: int) -> None:
        """Exactly one more step (one yield) of the job, then pause."""
        self._with(job_id, lambda c: (setattr(c, "paused", True), setattr(c, "steps", c.steps + 1)))

    def stop(self, job_id: int) -> None:
        self._with(job_id, lambda c: c.stop.set())

    def shutdown(self, timeout_ms: int = 2000) -> bool:
        """Stop every job and end the thread; True when it ended within the timeout."""
        with self._cond:
            self._closing = True
            for q in ([self._current] if self._current else []) + self._queue:
                q[2].stop.set()
            self._cond.notify_all()
        ended = self.wait(timeout_ms)
        release_finished_threads()
        return ended

    # ---- the thread -----------------------------------------------------------------------
    def run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait(0.25)
                if self._closing:
                    dropped, self._queue = self._queue, []
                else:
                    self._current = self._queue.pop(0)
                    dropped = []
            for job_id, _, _ in dropped:
                self.returned.emit(job_id, None)
                self.state_changed.emit(job_id, "idle")
            if self._closing:
                return
            job_id, job, control = self._current
            self._job_id, self._state = job_id, "idle"
            try:
                self.returned.emit(job_id, self._execute(job_id, job, control))
            except _Cancelled:
                self.returned.emit(job_id, None)
            except BaseException as e:       # noqa: BLE001 - the worker must survive any job
                if not isinstance(e, SpecscopeError):
                    traceback.print_exc()
                msg, kind = describe_error(e)
                self.errored.emit(job_id, msg, kind)
            finally:
                with self._cond:
                    self._current = None
                self._state = "idle"         # always said, so a job's last word is "idle"
                self.state_changed.emit(job_id, "idle")

    def _set_state(self, state: str) -> None:
        if state != self._state:
            self._state = state
            self.state_changed.emit(self._job_id, state)

    def _execute(self, job_id: int, job: Job, control: _Control) -> Any:
        ctx = JobContext(self, job_id, control)
        if control.stop.is_set():
            return None
        if not self.host.loaded(job.spec):
            self._set_state("loading")
        rt, info = self.host.runtime(job.spec, ctx.progress)
        self.runtime_ready.emit(job_id, info)
        gen = job.body(rt, ctx)
        first = True
        try:
            while True:
                go = self._gate(control)
                if not first:
                    ctx.paused_s += self._waited_s
                if not go:
                    try:
                        gen.throw(JobStopped())
                    except StopIteration as e:      # the job returned what it had
                        return e.value
                    except JobStopped:
                        return None
                    return None                     # it yielded again: stopped all the same
                if not first or self._state in ("idle", "paused"):
                    self._set_state("running")   # (a first step may be loading or probing still)
                try:
                    item = next(gen)
                except StopIteration as e:
                    return e.value
                first = False
                self.yielded.emit(job_id, item)
        finally:
            gen.close()

    def _gate(self, c: _Control) -> bool:
        """Block while paused (unless a step is owed); False when stop was asked."""
        with self._cond:
            t0 = time.perf_counter()
            while c.paused and c.steps == 0 and not c.stop.is_set():
                self._set_state("paused")
                self._cond.wait(0.25)
            self._waited_s = time.perf_counter() - t0
            if c.stop.is_set():
                return False
            if c.paused:
                c.steps -= 1
            return True
