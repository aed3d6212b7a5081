"""The main thread's side of the worker: starts runs, passes on pause / step / stop / settings,
and keeps its own copy of the run's state.

The worker thread reports every change by a queued signal tagged with its run id; this object
keeps the state of the current run (`state`, `paused`) on the main thread and drops whatever a
replaced run still sends, so the window sees one run at a time and never reads the worker's
attributes across threads. States: idle | starting (submitted, not yet picked up) | loading |
probing | running | paused.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal

from engine.speculation.settings import DecodeSettings

from workbench.worker import RunRequest, RuntimeSpec, SessionWorker


class RunController(QObject):
    state_changed = Signal(str)
    started = Signal(object)        # header dict (settings, model, device, prompt)
    window = Signal(object)         # WindowEvent
    finished = Signal(object)       # report dict
    failed = Signal(str, str)       # message, kind (model | parameter | memory | internal)

    def __init__(self, worker: SessionWorker, parent: QObject | None = None):
        super().__init__(parent)
        self.worker = worker
        self.run_id = 0
        self.state = "idle"
        self.paused = False             # pause asked for (the worker stops at the next window)
        # bound methods of this object (not lambdas): Qt queues the calls onto the main thread
        worker.state_changed.connect(self._on_state)
        worker.run_started.connect(self._on_started)
        worker.window.connect(self._on_window)
        worker.run_finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)

    @property
    def busy(self) -> bool:
        return self.state != "idle"

    def start(self, spec: RuntimeSpec, prompt: Any, settings: DecodeSettings, *, probe: bool,
              paused: bool = False, max_windows: int | None = None) -> None:
        """Submit a fresh run (the worker stops the one in progress first)."""
        self.run_id += 1
        self.paused = paused
        self._set("starting")
        self.worker.submit(RunRequest(self.run_id, spec, prompt, settings, max_windows=max_windows,
                                      start_paused=paused, probe=probe))

    def detach(self) -> None:
        """Stop the run and forget it: whatever it still sends is dropped (a replay took over)."""
        self.worker.stop()
        self.run_id += 1
        self.paused = False
        self._set("idle")

    def pause(self) -> None:
        self.paused = True
        self.worker.pause()
        self.state_changed.emit(self.state)         # the Pause action becomes Resume at once

    def resume(self) -> None:
        self.paused = False
        self.worker.resume()
        self.state_changed.emit(self.state)

    def step(self) -> None:
        """One more window, then pause."""
        self.paused = True
        self.worker.step()

    def stop(self) -> None:
        self.worker.stop()

    def send_settings(self, settings: DecodeSettings) -> None:
        self.worker.send_settings(settings)

    # ---- from the worker thread, queued: only the current run's get through ------------------
    def _on_state(self, run_id: int, state: str) -> None:
        if run_id == self.run_id:
            self._set(state)

    def _on_started(self, run_id: int, header: dict) -> None:
        if run_id == self.run_id:
            self.started.emit(header)

    def _on_window(self, run_id: int, ev) -> None:
        if run_id == self.run_id:
            self.window.emit(ev)

    def _on_finished(self, run_id: int, report: dict) -> None:
        if run_id == self.run_id:
            self.finished.emit(report)

    def _on_failed(self, run_id: int, message: str, kind: str) -> None:
        if run_id == self.run_id:
            self.failed.emit(message, kind)

    def _set(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.state_changed.emit(state)
