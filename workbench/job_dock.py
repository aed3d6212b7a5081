"""What the Sweep and Race docks share: a job on the window's generator worker (workbench.worker)
and its lifecycle: start (the window stops its live run first), cancel, the job's values, its end
or its failure, each taken only when it is this dock's current job. A dock says what its job is
and what it shows; this class does the rest.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QWidget

from workbench.worker import GeneratorWorker, Job


class JobDock(QWidget):
    error = Signal(str)
    kind = "job"                     # the worker replaces a running job of the same kind

    def __init__(self, worker: GeneratorWorker, context: Callable[[], tuple[Any, Any]],
                 before_job: Callable[[], None], parent=None):
        """context() -> (RuntimeSpec, the card's cost profile or None); before_job() frees the
        model (stops the live run) and says what it stopped ('' or None: nothing)."""
        super().__init__(parent)
        self.worker, self.context, self.before_job = worker, context, before_job
        self.job_id = 0
        self.running = False
        self.freed = ""                  # what before_job stopped, in words ('' when nothing)
        worker.yielded.connect(self._yielded)
        worker.returned.connect(self._returned)
        worker.errored.connect(self._errored)
        worker.progress.connect(self._progressed)

    # ---- what a dock says -------------------------------------------------------------------
    def on_item(self, item) -> None: ...
    def on_done(self, value) -> None: ...
    def on_failed(self, message: str) -> None: ...
    def on_progress(self, stage: str, frac: float) -> None: ...
    def update_buttons(self) -> None: ...

    # ---- the lifecycle ----------------------------------------------------------------------
    def run_job(self, body) -> None:
        """Run `body` (a job body of workbench.jobs) on the window's model."""
        self.freed = self.before_job() or ""
        spec, _ = self.context()
        self.running = True
        self.job_id = self.worker.submit(Job(spec, body, kind=self.kind))
        self.update_buttons()

    def cancel_job(self) -> None:
        if self.running:
            self.worker.stop(self.job_id)

    def shutdown(self) -> None:
        """The window closes: stop the job (the window ends the worker)."""
        self.cancel_job()

    def _ours(self, job_id: int) -> bool:
        return self.running and job_id == self.job_id

    def _yielded(self, job_id: int, item) -> None:
        if self._ours(job_id):
            self.on_item(item)

    def _returned(self, job_id: int, value) -> None:
        if self._ours(job_id):
            self.running = False
            self.on_done(value)
            self.update_buttons()

    def _errored(self, job_id: int, message: str, kind: str) -> None:
        if self._ours(job_id):
            self.running = False
            self.on_failed(message)
            self.error.emit(message)
            self.update_buttons()

    def _progressed(self, job_id: int, stage: str, frac: float) -> None:
        if self._ours(job_id):
            self.on_progress(stage, frac)
