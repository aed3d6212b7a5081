"""What the live run reports, into the window: the model it loaded and the card's cost profile,
its header, its windows and its report into the store the views show, its failure into the
banner. Connected to the window's workbench.run_control.RunController, which lets through the
current run's signals only, on the main thread.
"""

from __future__ import annotations

from dataclasses import replace

from engine.speculation.events import RunHeader, WindowEvent
from engine.speculation.settings import DecodeSettings

# a failed run's banner title, by the kind of failure (workbench.worker)
FAILURE_TITLES = {"model": "Cannot load the model", "parameter": "Bad setting", "memory": "Out of memory"}


class LiveFeed:
    def __init__(self, win):
        """`win`: the workbench.window.MainWindow whose store, state and status line this fills."""
        self.win = win

    def connect(self, run) -> None:
        run.progress.connect(self.win.status.loading)
        run.runtime_ready.connect(self.on_runtime)
        run.profile_ready.connect(self.use_profile)
        run.started.connect(self.on_started)
        run.window.connect(self.on_window)
        run.finished.connect(self.on_finished)
        run.failed.connect(self.on_failed)

    def on_runtime(self, info: dict) -> None:
        win = self.win
        win.runtime_info = info
        win.model_failed = False
        act = info.get("activation_dtype", info["dtype"])     # the int4 CPU kernels: bfloat16
        dtype = info["dtype"] if act == info["dtype"] else f"{info['dtype']}, {act} activations"
        win.status.say(f"loaded {info['model']} on {info['device']} ({dtype}; "
                       f"{info['weights']}) in {info['load_s']:.1f} s")
        win.roofline.set_weights(info["weights"])
        win.status.source.setText(win.replay.source_text())

    def use_profile(self, profile) -> None:
        """The card's cost profile (probed, saved, or a recording's) prices what the views show."""
        win = self.win
        win.card_profile = profile
        win.roofline.set_card_profile(profile)
        win.stats.set_ar_ms(profile.ms(1) if profile is not None else None)
        win.presenter.mark()

    def on_started(self, header: RunHeader) -> None:
        """The header a recording of the run keeps, with the card profile that prices it."""
        win = self.win
        if win.card_profile is not None and hasattr(win.card_profile, "to_dict"):
            header = replace(header, card_profile=win.card_profile.to_dict())
        win.store.header = header.to_dict()
        win.status.tokens(0, header.settings["max_new_tokens"])

    def on_window(self, ev: WindowEvent) -> None:
        win = self.win
        win.store.append(ev)               # cheap; the timeline and views catch up at the next frame
        if ev.notice:                      # e.g. a draft model larger than the target
            win.status.say(ev.notice)
        win.presenter.mark()

    def on_finished(self, report: dict) -> None:
        win = self.win
        win.last_report = report
        win.store.report = report
        win.status.finished(report, win.stopped_for)
        win.presenter.mark()

    def on_failed(self, message: str, kind: str) -> None:
        win = self.win
        win.last_error = (message, kind)
        if kind == "model":
            win.model_failed = True
            win.update_actions()
        win.show_error(message, FAILURE_TITLES.get(kind, "Engine error"))
        win.status.progress.hide()

    def send_settings(self, s: DecodeSettings) -> None:
        """New settings from the controls: a live run takes them at its next window."""
        win = self.win
        if win.run.busy and win.mode == "live":
            win.run.send_settings(s)
            win.status.say("settings sent: they apply at the next window")

    def free_model(self, job: str) -> str:
        """Stop the live run so that a sweep, race or lesson (`job`) can use the model; what was
        stopped, in words, said in the status bar too ('' when no live run was going). Its last
        word then names the job (workbench.chrome.StatusLine.finished)."""
        win = self.win
        if not (win.run.busy and win.mode == "live"):
            return ""
        n = len(win.store)
        win.stopped_for = job
        win.run.stop()
        said = (f"the live run was stopped after {n} window{'' if n == 1 else 's'} for the {job} "
                "(one model, one job at a time): Run (F5) starts it again")
        win.status.say(said)
        return said

    def apply_cell(self, cell: dict) -> DecodeSettings | None:
        """Use a sweep cell's drafting settings (sampling and length kept): the live run takes
        them at its next window, and the next run starts with them. Refused (None, and said)
        while a recording is replayed: its windows were decoded with their own settings."""
        from engine.tuning.grid import with_cell
        win = self.win
        if win.mode == "replay":
            win.status.say(f"sweep cell {cell['id']} not applied: a recording is replayed (its "
                           "windows keep their settings); Run (F5) starts a live run first")
            return None
        s = with_cell(win.controls.valid_settings(), cell["settings"])
        win.controls.set_settings(s)
        self.send_settings(s)
        win.status.say(f"applied sweep cell {cell['id']} ({cell['ratio_to_ar']:.2f}x plain decoding "
                       "in the sweep)" + (": the next window uses it" if win.run.busy else ""))
        return s
