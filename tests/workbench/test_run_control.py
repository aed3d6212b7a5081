"""The run controller (workbench.run_control) over the real generator worker, and the worker's
signal sequence, on the real model (qtbot.waitSignals, order="strict")."""

from __future__ import annotations

import dataclasses

from workbench.jobs import RunStarted
from workbench.run_control import RunController

from tests.workbench.conftest import SMALL, TIMEOUT_MS


def test_run_controller_keeps_its_own_state_and_drops_replaced_runs(qtbot, cpu_spec, cpu_host):
    """Run 1 streams, then run 2 replaces it, started paused (Step from idle: one window, then
    paused): nothing of run 1 reaches the controller after that (the worker still sends its end),
    every window after is run 2's, one per step; detached, the controller hears nothing more."""
    from engine.io.prompts import encode_prompt
    from workbench.worker import GeneratorWorker

    worker = GeneratorWorker(cpu_host)
    run = RunController(worker)
    states, windows, reports, headers = [], [], [], []
    run.state_changed.connect(states.append)
    run.window.connect(windows.append)
    run.finished.connect(reports.append)
    run.started.connect(headers.append)
    said = []                                       # what the worker itself sends: (job, state)
    worker.state_changed.connect(lambda job, state: said.append((job, state)))
    returned = []
    worker.returned.connect(lambda job, report: returned.append(job))
    long = dataclasses.replace(SMALL, max_new_tokens=400)
    first, second = "def f(x):\n    return x\n\n" * 3, "def g(y):\n    return y + 1\n\n" * 4

    run.start(cpu_spec, first, long, probe=False)
    run_1 = run.run_id
    assert run.state == "starting" and not run.paused
    qtbot.waitUntil(lambda: len(windows) >= 1, timeout=TIMEOUT_MS)            # run 1 streams
    assert run.state == "running" and len(headers) == 1
    run.start(cpu_spec, second, long, probe=False, paused=True)                # replaces run 1
    run_2 = run.run_id
    assert run_2 != run_1 and run.state == "starting" and run.paused
    n_1 = len(windows)
    qtbot.waitUntil(lambda: run_1 in returned and len(windows) == n_1 + 1 and run.state == "paused",
                    timeout=TIMEOUT_MS)
    qtbot.wait(300)
    # run 1 ended (the worker sent its report): none of it came through, only run 2's first window
    assert len(windows) == n_1 + 1 and reports == [] and len(headers) == 2
    prompt_2 = len(encode_prompt(cpu_host.rt.tokenizer, second))
    assert windows[-1].index == 0 and windows[-1].committed_len == prompt_2
    run.step()
    qtbot.waitUntil(lambda: len(windows) == n_1 + 2 and (run_2, "paused") in said[-1:], timeout=TIMEOUT_MS)
    qtbot.wait(300)
    assert len(windows) == n_1 + 2 and windows[-1].index == 1        # one window a step
    run.resume()
    assert not run.paused
    qtbot.waitUntil(lambda: len(windows) >= n_1 + 3, timeout=TIMEOUT_MS)
    assert run.state == "running"
    assert [e.index for e in windows[n_1:]] == list(range(len(windows) - n_1))
    run.detach()                                                         # a recording took over
    assert run.state == "idle" and run.run_id == 0
    n_2 = len(windows)
    qtbot.waitUntil(lambda: run_2 in returned and (run_2, "idle") in said, timeout=TIMEOUT_MS)
    qtbot.wait(300)
    assert len(windows) == n_2 and reports == []
    assert states[0] == "starting" and states[-1] == "idle" and states.count("idle") == 1
    assert worker.shutdown(5000)


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

    from engine.io.prompts import encode_prompt
    from engine.speculation.events import RunHeader
    from workbench.host import activation_dtype

    cpu_host.profiles[cpu_spec] = profile = cpu_like_profile(cpu_host.rt)     # the card's, known
    worker = GeneratorWorker(cpu_host)
    prompt, settings = "def f(x):\n    return x\n\ndef f(x):\n", dataclasses.replace(SMALL, max_new_tokens=6)
    rt = cpu_host.rt
    header = RunHeader(settings.to_dict(), "SmolLM2-135M-Instruct.Q4_1.gguf", rt.device_name, rt.dtype_name,
                       rt.weights_label, prompt, len(encode_prompt(rt.tokenizer, prompt)),
                       activation_dtype=activation_dtype(rt))
    body = live_run(cpu_host, prompt, settings, queue.Queue(), probe=False, max_windows=2)
    with qtbot.waitSignals([worker.runtime_ready, worker.state_changed, worker.noted, worker.noted,
                            worker.yielded, worker.yielded, worker.returned, worker.state_changed],
                           order="strict", timeout=60_000,
                           check_params_cbs=[None, lambda _id, s: s == "running",
                                             lambda _id, v: isinstance(v, ProfileReady) and v.profile is profile,
                                             lambda _id, v: isinstance(v, RunStarted) and v.header == header,
                                             lambda _id, ev: ev.index == 0, lambda _id, ev: ev.index == 1,
                                             lambda _id, r: r["finish_reason"] in ("windows", "length", "eos"),
                                             lambda _id, s: s == "idle"]):
        worker.submit(Job(cpu_spec, body))
    assert worker.shutdown(5000)


def test_the_final_report_takes_the_workers_reason_and_leaves_pauses_out(cpu_runtime):
    """workbench.jobs.final_report on a real decoder's report: the decoder's finish_reason kept,
    else the worker's cut; the paused time out of wall_s and tok_s, and said as paused_s."""
    from engine.io.prompts import encode_prompt
    from engine.speculation.decoder import Decoder
    from workbench.jobs import final_report

    dec = Decoder(cpu_runtime, encode_prompt(cpu_runtime.tokenizer, "def f(x):\n    return x\n\n" * 2),
                  dataclasses.replace(SMALL, max_new_tokens=40))
    gen = dec.windows()
    next(gen)                                 # one window, then the worker cuts the run
    gen.close()
    rep = dec.run_report()
    assert rep.finish_reason == "" and rep.wall_s > 0
    as_is = final_report(rep, 0.0, "")
    assert as_is == rep.to_dict()
    cut = final_report(rep, 0.0, "windows")
    assert cut == {**rep.to_dict(), "finish_reason": "windows"}
    paused_s = rep.wall_s / 2
    held = final_report(rep, paused_s, "stopped")
    wall = round(rep.wall_s - paused_s, 4)
    assert list(held) == list(rep.to_dict()) + ["paused_s"]
    assert held == {**rep.to_dict(), "finish_reason": "stopped", "wall_s": wall, "paused_s": round(paused_s, 4),
                    "tok_s": round(rep.new_tokens / (rep.wall_s - paused_s), 3)}
    done = dataclasses.replace(rep, finish_reason="length")
    assert final_report(done, 0.0, "stopped")["finish_reason"] == "length"     # the decoder's word first
