"""Background jobs that drive the model outside a live run: a sweep, a race.

A `JobWorker` is the worker pattern of workbench.worker for one job at a time: a QThread that
takes the process's one model (shared_runtime, under the same lock a live run holds, so the two
never drive it at once), calls the job with (runtime, stop flag, emit, progress), and sends
each emitted value to the main thread through a queued signal tagged with the job's id. The job
is plain engine code; it sees only the stop flag.
"""

from __future__ import annotations

import threading
import traceback
from typing import Any, Callable

from PySide6.QtCore import QThread, Signal

from engine.errors import SpecscopeError

from workbench.worker import (_RUNTIME_LOCK, RuntimeSpec, collect_on_main_thread, describe_error,
                              shared_runtime)

# job(runtime, stop, emit, progress) -> final value
Job = Callable[[Any, threading.Event, Callable[[Any], None], Callable[[str, float], None]], Any]


class _Cancelled(Exception):
    pass


class JobWorker(QThread):
    item = Signal(int, object)            # job id, a value the job emitted
    done = Signal(int, object)            # job id, the job's return value (None: cancelled early)
    failed = Signal(int, str, str)        # job id, message, kind (see describe_error)
    progress = Signal(int, str, float)    # job id, stage, fraction (model load, probe)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.stop_flag = threading.Event()
        self._job: tuple[int, RuntimeSpec, Job] | None = None

    def start_job(self, job_id: int, spec: RuntimeSpec, job: Job) -> None:
        """Run `job` on this thread; the previous job must have ended (wait())."""
        if self.isRunning():
            raise RuntimeError("a job is still running: cancel it and wait first")
        self.stop_flag.clear()
        self._job = (job_id, spec, job)
        collect_on_main_thread(self)     # Qt objects must not be collected on this thread
        self.start()

    def cancel(self) -> None:
        self.stop_flag.set()

    def run(self) -> None:
        job_id, spec, job = self._job

        def progress(stage: str, frac: float) -> None:
            if self.stop_flag.is_set():
                raise _Cancelled()
            self.progress.emit(job_id, stage, float(frac))

        try:
            while not _RUNTIME_LOCK.acquire(timeout=0.1):
                if self.stop_flag.is_set():
                    raise _Cancelled()
            try:
                rt = shared_runtime(spec, progress)
                value = job(rt, self.stop_flag, lambda v: self.item.emit(job_id, v), progress)
            finally:
                _RUNTIME_LOCK.release()
            self.done.emit(job_id, value)
        except _Cancelled:
            self.done.emit(job_id, None)
        except BaseException as e:       # noqa: BLE001 - a failed job must reach the window
            if not isinstance(e, SpecscopeError):
                traceback.print_exc()
            msg, kind = describe_error(e)
            self.failed.emit(job_id, msg, kind)
