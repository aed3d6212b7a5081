"""The window's recordings: saving the session shown, and replaying one from disk.

A replay takes the window over from its live run: the run is detached (whatever it still sends
is dropped), the recording's store is shown in its place, its settings fill the controls and its
card profile the roofline; the window's mode is "replay" until a live run starts again
(`leave`). No model is needed to replay.
"""

from __future__ import annotations

from pathlib import Path

from engine.errors import ParameterError, SpecscopeError
from engine.speculation.settings import DecodeSettings

from workbench import dialogs
from workbench.recording import load_recording, save_recording


class ReplayController:
    def __init__(self, win):
        """`win`: the workbench.window.MainWindow whose store, controls and status this fills."""
        self.win = win

    @property
    def active(self) -> bool:
        return self.win.mode == "replay"

    def save(self, path: str | Path) -> Path:
        return save_recording(path, self.win.store)

    def open(self, path: str | Path) -> bool:
        """Replay the recording at `path`; False (and a banner) if it cannot be read."""
        win = self.win
        try:
            store = load_recording(path)
        except SpecscopeError as e:
            win.show_error(str(e), "Cannot open recording")
            return False
        win.run.detach()                  # late events of the live run are dropped
        win.mode = "replay"
        win.presenter.use(store)
        win.last_report = store.report
        self._take_settings(store.header)
        win.timeline.live.setChecked(True)
        win.timeline.set_count(len(store))
        self.follow(win.timeline.value())
        win.status.source.setText(self.source_text())
        win.status.say(f"replaying {Path(path).name}: {len(store)} windows")
        win.update_actions()
        win.presenter.mark()
        return True

    def _take_settings(self, header: dict) -> None:
        """The recording's settings into the controls and its card profile into the roofline,
        where they are valid (a recording that lacks them keeps what the window shows)."""
        settings = header.get("settings")
        if settings:
            try:
                self.win.controls.set_settings(DecodeSettings.from_dict(settings))
            except (TypeError, ParameterError):
                pass
        prof = header.get("card_profile")
        if prof:
            try:
                from engine.cost.profile import CostProfile
                self.win.feed.use_profile(CostProfile.from_dict(prof))
            except SpecscopeError:
                pass

    def follow(self, idx: int) -> None:
        """The controls show the settings window `idx` of the recording was decoded with (the
        run's first settings, changed where the user changed them mid-run), not the first's."""
        store = self.win.store
        if not self.active or not 0 <= idx < len(store):
            return
        settings = {**(store.header.get("settings") or {}), **(store[idx].settings or {})}
        try:
            self.win.controls.set_settings(DecodeSettings.from_dict(settings))
        except (TypeError, ParameterError):
            pass

    def leave(self) -> None:
        """A live run takes over (said at once: the model may take a while to load)."""
        if self.active:
            self.win.status.say("replay closed: a live run with the prompt and settings shown starts")
        self.win.mode = "live"

    def source_text(self) -> str:
        """What the status line names as the source: the recording's model and device, or the
        live run's loaded model (before one is loaded: the model asked for)."""
        win = self.win
        if self.active:
            h = win.store.header
            weights = f" · {h['weights']}" if h.get("weights") else ""
            act = f" · {h['activation_dtype']}" if h.get("activation_dtype") else ""
            return f"replay · {h.get('model', '?')} · {h.get('device', '?')}{weights}{act}"
        info = win.runtime_info
        if info:     # the dtype the matmuls run in (bfloat16 on the int4 CPU kernels)
            act = info.get("activation_dtype", info.get("dtype", ""))
            return f"{info['model']} · {info['device']} · {info['weights']} · {act}"
        return Path(win.spec.model).name if win.spec.model else "bundled SmolLM2-135M-Instruct"

    def open_dialog(self) -> None:
        path = dialogs.open_file(self.win, "Open recording", "Recordings (*.jsonl);;All files (*)")
        if path:
            self.open(path)

    def save_dialog(self) -> None:
        path = dialogs.save_file(self.win, "Save recording", "specscope-session.jsonl", "Recordings (*.jsonl)")
        if path:
            self.save(path)
            self.win.status.say(f"saved {len(self.win.store)} windows to {path}")
