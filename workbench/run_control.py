"""The main thread's side of the live run: submits it to the window's generator worker as a job
(workbench.jobs.live_run), passes on pause / step / stop / settings, and keeps its own copy of
the run's state.

The worker reports every change by a queued signal tagged with the job's id; this object keeps
the state of the current run (`state`, `paused`) on the main thread and drops whatever a replaced
run (or a sweep or race on the same worker) sends, so the window sees one run at a time and never
reads the worker's attributes across threads. States: idle | starting (submitted, not yet picked
up) | loading | probing | running | paused.
"""

from __future__ import annotations

import queue
from typing import Any

from PySide6.QtCore import QObject, Signal

from engine.speculation.settings import DecodeSettings

from workbench.jobs import ProfileReady, RunStarted, live_run
from workbench.worker import GeneratorWorker, Job, RuntimeSpec


class RunController(QObject):
    state_changed = Signal(str)
    started = Signal(object)        # engine.speculation.events.RunHeader
    window = Signal(object)         # WindowEvent
    finished = Signal(object)       # report dict
    failed = Signal(str, str)       # message, kind (model | parameter | memory | internal)
    runtime_ready = Signal(object)  # dict: model, device, dtype, weights, load_s (host.RuntimeInfo)
    profile_ready = Signal(object)  # the card's cost profile
    progress = Signal(str, float)   # stage, fraction (loading, probing)

    def __init__(self, worker: GeneratorWorker, parent: QObject | None = None):
        super().__init__(parent)
        self.worker = worker
        self.run_id = 0                 # the worker's id of the current run's job (0: none)
        self.state = "idle"
        self.paused = False             # pause asked for (the worker stops at the next window)
        self._controls: queue.Queue[DecodeSettings] = queue.Queue()
        # bound methods of this object (not lambdas): Qt queues the calls onto the main thread
        worker.state_changed.connect(self._on_state)
        worker.noted.connect(self._on_note)
        worker.yielded.connect(self._on_window)
        worker.returned.connect(self._on_finished)
        worker.errored.connect(self._on_failed)
        worker.runtime_ready.connect(self._on_runtime)
        worker.progress.connect(self._on_progress)

    @property
    def busy(self) -> bool:
        return self.state != "idle"

    def start(self, spec: RuntimeSpec, prompt: Any, settings: DecodeSettings, *, probe: bool,
              paused: bool = False, max_windows: int | None = None) -> None:
        """Submit a fresh run (the worker stops the one in progress first)."""
        self.paused = paused
        self._controls = queue.Queue()
        body = live_run(self.worker.host, prompt, settings, self._controls, probe=probe,
                        max_windows=max_windows)
        self.run_id = self.worker.submit(Job(spec, body, kind="run", start_paused=paused))
        self._set("starting")

    def detach(self) -> None:
        """Stop the run and forget it: whatever it still sends is dropped (a replay took over)."""
        self.worker.stop(self.run_id)
        self.run_id = 0
        self.paused = False
        self._set("idle")

    def pause(self) -> None:
        self.paused = True
        self.worker.pause(self.run_id)
        self.state_changed.emit(self.state)         # the Pause action becomes Resume at once

    def resume(self) -> None:
        self.paused = False
        self.worker.resume(self.run_id)
        self.state_changed.emit(self.state)

    def step(self) -> None:
        """One more window, then pause."""
        self.paused = True
        self.worker.step(self.run_id)

    def stop(self) -> None:
        self.worker.stop(self.run_id)

    def send_settings(self, settings: DecodeSettings) -> None:
        """Applied by the decoder at its next window boundary."""
        self._controls.put(settings)

    # ---- from the worker thread, queued: only the current run's get through ------------------
    def _ours(self, job_id: int) -> bool:
        return job_id != 0 and job_id == self.run_id

    def _on_state(self, job_id: int, state: str) -> None:
        if self._ours(job_id):
            self._set(state)

    def _on_note(self, job_id: int, value) -> None:
        if not self._ours(job_id):
            return
        if isinstance(value, RunStarted):
            self.started.emit(value.header)
        elif isinstance(value, ProfileReady):
            self.profile_ready.emit(value.profile)

    def _on_window(self, job_id: int, ev) -> None:
        if self._ours(job_id):
            self.window.emit(ev)

    def _on_finished(self, job_id: int, report) -> None:
        if self._ours(job_id) and report is not None:
            self.finished.emit(report)

    def _on_failed(self, job_id: int, message: str, kind: str) -> None:
        if self._ours(job_id):
            self.failed.emit(message, kind)

    def _on_runtime(self, job_id: int, info) -> None:
        if self._ours(job_id):
            self.runtime_ready.emit(info.to_dict())

    def _on_progress(self, job_id: int, stage: str, frac: float) -> None:
        if self._ours(job_id):
            self.progress.emit(stage, frac)

    def _set(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.state_changed.emit(state)
