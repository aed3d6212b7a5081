"""The run controller (workbench.run_control) over a stand-in worker: no model, no thread."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from workbench.run_control import RunController
from workbench.worker import RuntimeSpec

from tests.workbench.conftest import SMALL


def test_run_controller_keeps_its_own_state_and_drops_replaced_runs(qtbot):
    class Worker(QObject):                # the SessionWorker's signals; calls are recorded
        state_changed = Signal(int, str)
        run_started = Signal(int, object)
        window = Signal(int, object)
        run_finished = Signal(int, object)
        failed = Signal(int, str, str)

        def __init__(self):
            super().__init__()
            self.calls: list = []

        def __getattr__(self, name):       # submit, pause, resume, step, stop, send_settings
            return lambda *a: self.calls.append((name, *a))

    w = Worker()
    run = RunController(w)
    states, windows, reports = [], [], []
    run.state_changed.connect(states.append)
    run.window.connect(windows.append)
    run.finished.connect(reports.append)
    run.start(RuntimeSpec(), "p", SMALL, probe=False)
    run.start(RuntimeSpec(), "p", SMALL, probe=False, paused=True)        # replaces run 1
    assert [c[1].run_id for c in w.calls if c[0] == "submit"] == [1, 2]
    assert run.state == "starting" and run.paused
    w.window.emit(1, "late window of run 1")
    w.state_changed.emit(1, "idle")                                      # run 1 ending: not ours
    w.run_finished.emit(1, {"run": 1})
    assert run.state == "starting" and windows == [] and reports == []
    w.state_changed.emit(2, "running")
    w.window.emit(2, "window 0 of run 2")
    w.state_changed.emit(2, "paused")
    assert run.state == "paused" and windows == ["window 0 of run 2"]
    run.resume()
    assert not run.paused and ("resume",) in w.calls
    run.detach()                                                         # a recording took over
    assert run.state == "idle" and run.run_id == 3
    w.window.emit(2, "late window of run 2")
    assert windows == ["window 0 of run 2"]
    assert states == ["starting", "running", "paused", "paused", "idle"]
