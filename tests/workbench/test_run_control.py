"""The run controller (workbench.run_control) over a stand-in worker: no model, no thread; and the
generator worker's signal sequence on the real model (qtbot.waitSignals, order="strict")."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from workbench.host import ModelHost, RuntimeSpec
from workbench.jobs import RunStarted
from workbench.run_control import RunController

from tests.workbench.conftest import SMALL, TIMEOUT_MS


def test_run_controller_keeps_its_own_state_and_drops_replaced_runs(qtbot):
    class Worker(QObject):                # the GeneratorWorker's signals; calls are recorded
        state_changed = Signal(int, str)
        progress = Signal(int, str, float)
        runtime_ready = Signal(int, object)
        noted = Signal(int, object)
        yielded = Signal(int, object)
        returned = Signal(int, object)
        errored = Signal(int, str, str)

        def __init__(self):
            super().__init__()
            self.host = ModelHost()
            self.calls: list = []
            self.ids = 0

        def submit(self, job):
            self.ids += 1
            self.calls.append(("submit", job))
            return self.ids

        def __getattr__(self, name):       # pause, resume, step, stop
            return lambda *a: self.calls.append((name, *a))

    w = Worker()
    run = RunController(w)
    states, windows, reports, headers = [], [], [], []
    run.state_changed.connect(states.append)
    run.window.connect(windows.append)
    run.finished.connect(reports.append)
    run.started.connect(headers.append)
    run.start(RuntimeSpec(), "p", SMALL, probe=False)
    run.start(RuntimeSpec(), "p", SMALL, probe=False, paused=True)        # replaces run 1
    jobs = [c[1] for c in w.calls if c[0] == "submit"]
    assert [j.kind for j in jobs] == ["run", "run"] and jobs[1].start_paused and run.run_id == 2
    assert run.state == "starting" and run.paused
    w.yielded.emit(1, "late window of run 1")
    w.state_changed.emit(1, "idle")                                      # run 1 ending: not ours
    w.returned.emit(1, {"run": 1})
    w.yielded.emit(7, "a sweep's tick")                                  # another job on the worker
    assert run.state == "starting" and windows == [] and reports == []
    w.state_changed.emit(2, "running")
    w.noted.emit(2, RunStarted({"settings": {}}))
    w.yielded.emit(2, "window 0 of run 2")
    w.state_changed.emit(2, "paused")
    assert run.state == "paused" and windows == ["window 0 of run 2"] and headers == [{"settings": {}}]
    run.resume()
    assert not run.paused and ("resume", 2) in w.calls
    run.detach()                                                         # a recording took over
    assert run.state == "idle" and ("stop", 2) in w.calls
    w.yielded.emit(2, "late window of run 2")
    assert windows == ["window 0 of run 2"]
    assert states == ["starting", "running", "paused", "paused", "idle"]


def test_the_workers_signals_come_in_order(qtbot, cpu_spec, cpu_host):
    """A job's life as the main thread hears it: the model, running, its note, each value it
    yields, what it returns, idle; then a stopped job returns what it had; the worker lives on."""
    from workbench.worker import GeneratorWorker, Job, JobStopped

    worker = GeneratorWorker(cpu_host)

    def body(rt, ctx):
        ctx.note(("header", rt.device_name))
        yield 1
        yield 2
        return "done"

    sigs = [worker.runtime_ready, worker.state_changed, worker.noted, worker.yielded, worker.yielded,
            worker.returned, worker.state_changed]
    checks = [lambda _id, info: info.model.endswith(".gguf"),
              lambda _id, s: s == "running", lambda _id, v: v[0] == "header",
              lambda _id, v: v == 1, lambda _id, v: v == 2, lambda _id, v: v == "done",
              lambda _id, s: s == "idle"]
    with qtbot.waitSignals(sigs, order="strict", check_params_cbs=checks, timeout=60_000):
        worker.submit(Job(cpu_spec, body))

    def endless(rt, ctx):
        n = 0
        try:
            while True:
                n += 1
                yield n
        except JobStopped:
            return f"stopped after {n}"

    seen, returned, states = [], [], []
    worker.yielded.connect(lambda _id, v: seen.append(v))
    worker.returned.connect(lambda _id, v: returned.append(v))
    worker.state_changed.connect(lambda _id, s: states.append(s))
    job = worker.submit(Job(cpu_spec, endless, kind="sweep"))
    qtbot.waitUntil(lambda: len(seen) >= 3, timeout=TIMEOUT_MS)
    worker.stop(job)
    qtbot.waitUntil(lambda: bool(returned) and states[-1:] == ["idle"], timeout=TIMEOUT_MS)
    assert returned == [f"stopped after {seen[-1] + 1}"] or returned == [f"stopped after {seen[-1]}"]
    assert worker.isRunning()
    assert worker.shutdown(5000)


def test_a_live_run_reports_in_order(qtbot, cpu_spec, cpu_host):
    """The live run job (workbench.jobs.live_run) on the real model: its header, its windows, its
    report, then idle, in that order."""
    import dataclasses
    import queue

    from tests.sweep_helpers import cpu_like_profile
    from workbench.jobs import ProfileReady, live_run
    from workbench.worker import GeneratorWorker, Job

    cpu_host.profiles[cpu_spec] = profile = cpu_like_profile(cpu_host.rt)     # the card's, known
    worker = GeneratorWorker(cpu_host)
    body = live_run(cpu_host, "def f(x):\n    return x\n\ndef f(x):\n", dataclasses.replace(SMALL, max_new_tokens=6),
                    queue.Queue(), probe=False, max_windows=2)
    with qtbot.waitSignals([worker.runtime_ready, worker.state_changed, worker.noted, worker.noted,
                            worker.yielded, worker.yielded, worker.returned, worker.state_changed],
                           order="strict", timeout=60_000,
                           check_params_cbs=[None, lambda _id, s: s == "running",
                                             lambda _id, v: isinstance(v, ProfileReady) and v.profile is profile,
                                             lambda _id, v: isinstance(v, RunStarted),
                                             lambda _id, ev: ev.index == 0, lambda _id, ev: ev.index == 1,
                                             lambda _id, r: r["finish_reason"] in ("windows", "length", "eos"),
                                             lambda _id, s: s == "idle"]):
        worker.submit(Job(cpu_spec, body))
    assert worker.shutdown(5000)
