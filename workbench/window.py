"""The main window: docked views over one EventStore, the run controls and the worker.

Windows of the current run arrive on the main thread (workbench.run_control) and are appended to
the store at once; views are redrawn by a ~30 Hz timer from the latest state, so a burst of
windows costs one redraw. The window keeps a list of views and hands each pending one the same
`Shown` (workbench.views.base); workbench.frames decides which are drawn in a frame. The
timeline picks the window every view shows; a recording opened from disk fills the same store.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QApplication, QMainWindow

from engine.errors import ParameterError, SpecscopeError
from engine.speculation.events import WindowEvent
from engine.speculation.settings import USER_DEFAULTS, DecodeSettings

from workbench import chrome, dialogs
from workbench.controls import ControlsPanel
from workbench.frames import FramePacer
from workbench.lessons_dock import Lessons
from workbench.pyside_fix import guard_singletons
from workbench.race_dock import RaceDock
from workbench.recording import load_recording, save_recording
from workbench.run_control import RunController
from workbench.store import EventStore
from workbench.sweep_dock import SweepDock
from workbench.views.base import Shown, interesting_row
from workbench.views.output import OutputDock
from workbench.views.penalty import PenaltyView
from workbench.views.roofline import RooflineView
from workbench.views.rows import VerifyRowsView
from workbench.views.stats import StatsView
from workbench.views.tree import TokenTreeView
from workbench.widgets import Banner, Timeline
from workbench.host import ModelHost, RuntimeSpec
from workbench.worker import GeneratorWorker, release_finished_threads

REDRAW_MS = 33               # at most ~30 frames a second
PLOTS_HZ = 2                 # run-wide plots while streaming (they change slowly)
STREAM_CPU_BUDGET = 0.05     # share of the main thread's time redraws may take while a run streams
MAX_FRAME_GAP_S = 1.0

guard_singletons()        # before any Qt virtual is overridden in Python: see pyside_fix


class MainWindow(QMainWindow):
    rendered = Signal(int)         # every pending view now shows this window index

    def __init__(self, spec: RuntimeSpec = RuntimeSpec(), prompt=None,
                 settings: DecodeSettings | None = None, probe: bool = True, host: ModelHost | None = None):
        """`host`: the model host to run on (one already holding a loaded model: tests,
        benchmarks); a new one by default."""
        super().__init__()
        self.setWindowTitle("specscope")
        self.resize(1640, 1000)
        self.spec = spec
        self.probe = probe
        self.store = EventStore()
        self.mode = "live"                 # live | replay
        self.card_profile = None
        self.runtime_info: dict | None = None
        self.last_report: dict | None = None
        self.last_error: tuple[str, str] | None = None
        self.model_failed = False          # the model could not be loaded (Run and Step wait for another)
        self._selected_row = 0
        self._row_window = -1              # window the selected row belongs to
        self.render_times_ms: list[float] = []

        # one thread runs the live run, a sweep and a race in turn, on one loaded model
        self.host = host or ModelHost()
        self.worker = GeneratorWorker(self.host, self)
        self.run = RunController(self.worker, self)
        self._build_views()
        self.pacer = FramePacer(self.views, cpu_budget=STREAM_CPU_BUDGET, min_gap_s=REDRAW_MS / 1e3,
                                max_gap_s=MAX_FRAME_GAP_S, plots_hz=PLOTS_HZ)
        self.frame_costs_ms = self.pacer.costs_ms
        self.acts = chrome.build_actions(self)
        chrome.build_toolbars(self, self.acts, self.timeline, self.banner)
        chrome.build_menus(self, self.acts, self.docks)
        self.lessons = Lessons(self, self._job_context, self._free_model,
                               lambda m: self.show_error(m, "Lesson"), beside=self.docks["stats"])
        self.lessons.add_menu(self.menuBar())
        self.status = chrome.StatusLine(self)
        self._connect()
        self.controls.set_settings(settings or USER_DEFAULTS)
        if prompt is not None:
            self.prompt_editor.set_prompt(prompt, "command line")
        else:
            self.prompt_editor.load_default()
        from engine.cost.profile import reference_profiles
        self.roofline.set_references(list(reference_profiles().values()))
        self._timer = QTimer(self)
        self._timer.setInterval(REDRAW_MS)
        self._timer.timeout.connect(self._tick)
        self._timer.start()
        app = QApplication.instance()
        if app is not None:         # quitting without closing the window must still end the thread
            app.aboutToQuit.connect(self._shutdown_worker)
        self._update_actions()

    # ---- construction -------------------------------------------------------------------------
    def _build_views(self) -> None:
        self.tree = TokenTreeView()
        self.rows = VerifyRowsView()
        self.penalty = PenaltyView()
        self.roofline = RooflineView()
        self.stats = StatsView()
        self.output_dock = OutputDock()
        self.output = self.output_dock.output
        self.prompt_editor = self.output_dock.prompt
        self.controls = ControlsPanel()
        self.banner = Banner()
        self.timeline = Timeline()
        self.sweep = SweepDock(self.worker, self._job_context, self._free_model)
        self.race = RaceDock(self.worker, self._job_context, self._race_base, self._free_model)
        # in drawing order; every one is handed the same Shown (workbench.views.base)
        self.views = (self.tree, self.rows, self.penalty, self.output, self.roofline, *self.stats.parts)
        self.docks = chrome.Docks(self, controls=self.controls, tree=self.tree, rows=self.rows,
                                  penalty=self.penalty, output=self.output_dock, roofline=self.roofline,
                                  stats=self.stats, sweep=self.sweep, race=self.race)
        self._sized = False

    def showEvent(self, e) -> None:
        super().showEvent(e)
        if not self._sized:          # dock sizes only take once the window has its geometry
            self._sized = True
            self.docks.fit_window(reset=True)

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        if self._sized:              # a size across a line of workbench.chrome.Docks: another arrangement
            QTimer.singleShot(0, self.docks.fit_window)

    def reset_layout(self) -> None:
        """View > Reset layout: every dock back (closed ones too), arranged for this size."""
        self.docks.fit_window(reset=True)

    def _connect(self) -> None:
        r = self.run                       # the current run's signals only
        r.progress.connect(self.status.loading)
        r.runtime_ready.connect(self._on_runtime)
        r.profile_ready.connect(self._on_profile)
        r.started.connect(self._on_run_started)
        r.window.connect(self._on_window)
        r.finished.connect(self._on_finished)
        r.failed.connect(self._on_failed)
        r.state_changed.connect(self._update_actions)
        self.controls.settings_changed.connect(self._on_settings)
        self.sweep.llamacpp.profile_ready.connect(self.roofline.set_engine_profile)
        self.timeline.index_changed.connect(lambda _: self.pacer.mark())
        self.tree.row_selected.connect(self.select_row)
        self.rows.row_selected.connect(self.select_row)
        self.prompt_editor.error.connect(lambda m: self.show_error(m, "Prompt"))
        self.sweep.apply_cell.connect(self.apply_cell)
        self.sweep.race_cells.connect(self.race_cells)
        self.sweep.error.connect(lambda m: self.show_error(m, "Sweep"))
        self.race.error.connect(lambda m: self.show_error(m, "Race"))

    # ---- run control --------------------------------------------------------------------------
    def start_run(self, *, paused: bool = False, max_windows: int | None = None) -> bool:
        """Start a fresh run with the prompt and settings shown; False (and a banner) if invalid."""
        try:
            settings = self.controls.settings()
            prompt = self.prompt_editor.prompt()
        except ParameterError as e:
            self.show_error(str(e), "Cannot start")
            return False
        self.banner.hide()
        self.last_error = None
        if self.mode == "replay":          # said at once: the model may take seconds to load
            self.status.say("replay closed: a live run with the prompt and settings shown starts")
        self.mode = "live"
        self.store.clear()
        self.last_report = None
        self._clear_views()
        self.timeline.live.setChecked(True)
        self.run.start(self.spec, prompt, settings, probe=self.probe, paused=paused,
                       max_windows=max_windows)
        self.status.source.setText(self._source_text())
        return True

    def run_or_resume(self) -> None:
        if self.run.state == "paused":
            self.run.resume()
        elif not self.run.busy:
            self.start_run()

    def toggle_pause(self) -> None:
        if self.run.busy:
            (self.run.resume if self.run.paused else self.run.pause)()

    def step(self) -> None:
        if self.run.busy:
            self.run.step()
        else:
            self.start_run(paused=True)

    def next_or_step(self) -> None:
        if self.timeline.count and self.timeline.value() < self.timeline.count - 1:
            self.scrub(+1)
        elif self.mode == "live" and not self.model_failed:
            self.step()
        elif self.mode == "replay":
            self.status.say("the recording ends here: Run (F5) starts a live run with its settings")

    def scrub(self, delta: int) -> None:
        self.show_window(self.timeline.value() + delta)

    def show_window(self, idx: int) -> None:
        """Move the timeline to window `idx` (clamped) and redraw every view for it now."""
        self._sync_timeline()
        self.timeline.set_value(idx)
        self.render_all()

    def stop(self) -> None:
        self.run.stop()

    def reset(self) -> None:
        self.run.stop()
        self.start_run()

    # ---- sweep and race (they take the model while the live run is stopped) -------------------
    def _job_context(self):
        return self.spec, self.card_profile

    def _free_model(self) -> None:
        self.run.stop()

    def _race_base(self):
        return self.prompt_editor.prompt(), self.controls.settings()

    def apply_cell(self, cell: dict) -> DecodeSettings:
        """Use a sweep cell's drafting settings (sampling and length kept): the live run takes
        them at its next window, and the next run starts with them."""
        from engine.tuning.grid import with_cell
        s = with_cell(self.controls.valid_settings(), cell["settings"])
        self.controls.set_settings(s)
        self._on_settings(s)
        self.status.say(f"applied sweep cell {cell['id']} ({cell['ratio_to_ar']:.2f}x AR in the sweep)"
                        + (": the next window uses it" if self.run.busy else ""))
        return s

    def race_cells(self, a: str, b: str) -> None:
        self.race.set_entrants(a, b)
        self.docks["race"].show()
        self.docks["race"].raise_()
        self.race.start()

    # ---- what the worker reports --------------------------------------------------------------
    def _on_runtime(self, info: dict) -> None:
        self.runtime_info = info
        self.model_failed = False
        act = info.get("activation_dtype", info["dtype"])     # the int4 CPU kernels: bfloat16
        dtype = info["dtype"] if act == info["dtype"] else f"{info['dtype']}, {act} activations"
        self.status.say(f"loaded {info['model']} on {info['device']} ({dtype}; "
                        f"{info['weights']}) in {info['load_s']:.1f} s")
        self.roofline.set_weights(info["weights"])
        self.status.source.setText(self._source_text())

    def _on_profile(self, profile) -> None:
        self.card_profile = profile
        self.roofline.set_card_profile(profile)
        self.stats.set_ar_ms(profile.ms(1) if profile is not None else None)
        self.pacer.mark()

    def _on_run_started(self, header: dict) -> None:
        self.store.header = dict(header)
        if self.card_profile is not None and hasattr(self.card_profile, "to_dict"):
            self.store.header["card_profile"] = self.card_profile.to_dict()
        self.status.tokens(0, header["settings"]["max_new_tokens"])

    def _on_window(self, ev: WindowEvent) -> None:
        self.store.append(ev)              # cheap; the timeline and views catch up at the next frame
        if ev.notice:                      # e.g. a draft model larger than the target
            self.status.say(ev.notice)
        self.pacer.mark()

    def _on_finished(self, report: dict) -> None:
        self.last_report = report
        self.store.report = report
        self.status.finished(report)
        self.pacer.mark()

    def _on_failed(self, message: str, kind: str) -> None:
        self.last_error = (message, kind)
        if kind == "model":
            self.model_failed = True
            self._update_actions()
        title = {"model": "Cannot load the model", "parameter": "Bad setting",
                 "memory": "Out of memory"}.get(kind, "Engine error")
        self.show_error(message, title)
        self.status.progress.hide()

    def _on_settings(self, s: DecodeSettings) -> None:
        if self.run.busy and self.mode == "live":
            self.run.send_settings(s)
            self.status.say("settings sent: they apply at the next window")

    def _update_actions(self, *_) -> None:
        live = self.mode == "live"
        chrome.update_actions(self.acts, self.run.state, self.run.paused, live,
                              blocked=self.last_error[0] if self.model_failed and self.last_error else "")
        self.status.set_state(self.run.state if live else "replay")
        if not self.run.busy and live and self.last_error is None and self.last_report is not None:
            self.status.progress.hide()

    # ---- selection and drawing ----------------------------------------------------------------
    def select_row(self, row: int) -> None:
        """Select verify `row` of the shown window in every view that shows the selection."""
        self._selected_row = row
        self._row_window = self.timeline.value()
        shown = self._shown()
        for v in self.views:
            if v.follows_row:
                v.update_from(shown)

    def _shown(self) -> Shown:
        """The timeline's window with its selected row (a new window opens on interesting_row)."""
        idx = self.timeline.value()
        if not 0 <= idx < len(self.store):
            return Shown(self.store, -1, -1, self.timeline.live.isChecked())
        if self._row_window != idx:
            self._selected_row = interesting_row(self.store[idx])
            self._row_window = idx
        return Shown(self.store, idx, self._selected_row, self.timeline.live.isChecked())

    def _streaming(self) -> bool:
        return (self.run.state not in ("idle", "paused") and self.mode == "live"
                and self.timeline.live.isChecked())

    def _tick(self) -> None:
        """The redraw timer (~30 Hz); workbench.frames.FramePacer decides whether to draw."""
        now, cpu = time.perf_counter(), time.thread_time()
        self.pacer.account(cpu)
        streaming = self._streaming()
        if self.pacer.due(now, streaming) and self.render_now(split=streaming):
            self.pacer.started(now, cpu)

    def _sync_timeline(self) -> None:
        """Give the timeline (and the token progress of a live run) the store's length."""
        if self.timeline.count == len(self.store):
            return
        self.timeline.set_count(len(self.store))
        if self.mode == "live" and len(self.store):
            last = self.store[-1]
            total = (last.settings or {}).get("max_new_tokens") or self.status.progress.maximum()
            self.status.tokens(last.stats.new_tokens, int(total))

    def render_now(self, split: bool = False, force: bool = False) -> bool:
        """Redraw the pending views for the timeline's window; True if anything was drawn.
        With `split` (a run streams) one slot is drawn per call, the window views together or
        one plot (see workbench.frames); with `force` the plots are drawn even if a run streams
        and they were drawn a moment ago. The timeline moves to a new window only in a frame
        that draws the window views too, so they and the timeline always show the same window
        (a plot drawn alone draws the run up to the window they show)."""
        now = time.perf_counter()
        views = self.pacer.take(now, self._streaming() and not force, split)
        if not views:
            return False
        if not split or any(not v.is_plot for v in views):
            self._sync_timeline()
        shown = self._shown()
        for v in views:
            v.update_from(shown)
        self.render_times_ms.append((time.perf_counter() - now) * 1e3)
        if not self.pacer.pending:
            self.rendered.emit(shown.index)
        return True

    def render_all(self) -> None:
        """Redraw every view now (the plots too, however recently they were drawn)."""
        self.pacer.mark()
        self.render_now(force=True)

    def _clear_views(self) -> None:
        self.timeline.set_count(0)
        shown = Shown(self.store, -1)
        for v in self.views:
            v.update_from(shown)

    def show_error(self, message: str, title: str = "Error") -> None:
        self.banner.show_message(message, title)

    def _source_text(self) -> str:
        if self.mode == "replay":
            h = self.store.header
            weights = f" · {h['weights']}" if h.get("weights") else ""
            act = f" · {h['activation_dtype']}" if h.get("activation_dtype") else ""
            return f"replay · {h.get('model', '?')} · {h.get('device', '?')}{weights}{act}"
        info = self.runtime_info
        if info:     # the dtype the matmuls run in (bfloat16 on the int4 CPU kernels)
            act = info.get("activation_dtype", info.get("dtype", ""))
            return f"{info['model']} · {info['device']} · {info['weights']} · {act}"
        return Path(self.spec.model).name if self.spec.model else "bundled SmolLM2-135M-Instruct"

    # ---- recordings ---------------------------------------------------------------------------
    def save_recording(self, path: str | Path) -> Path:
        return save_recording(path, self.store)

    def open_recording(self, path: str | Path) -> bool:
        try:
            store = load_recording(path)
        except SpecscopeError as e:
            self.show_error(str(e), "Cannot open recording")
            return False
        self.run.detach()                 # late events of the live run are dropped
        self.mode = "replay"
        self.store = store
        self.last_report = store.report
        self._clear_views()
        settings = store.header.get("settings")
        if settings:
            try:
                self.controls.set_settings(DecodeSettings.from_dict(settings))
            except (TypeError, ParameterError):
                pass
        prof = store.header.get("card_profile")
        if prof:
            try:
                from engine.cost.profile import CostProfile
                self._on_profile(CostProfile.from_dict(prof))
            except SpecscopeError:
                pass
        self.timeline.live.setChecked(True)
        self.timeline.set_count(len(store))
        self.status.source.setText(self._source_text())
        self.status.say(f"replaying {Path(path).name}: {len(store)} windows")
        self._update_actions()
        self.pacer.mark()
        return True

    def open_recording_dialog(self) -> None:
        path = dialogs.open_file(self, "Open recording", "Recordings (*.jsonl);;All files (*)")
        if path:
            self.open_recording(path)

    def save_recording_dialog(self) -> None:
        path = dialogs.save_file(self, "Save recording", "specscope-session.jsonl", "Recordings (*.jsonl)")
        if path:
            self.save_recording(path)
            self.status.say(f"saved {len(self.store)} windows to {path}")

    # ---- shutdown -----------------------------------------------------------------------------
    def _shutdown_worker(self) -> None:
        self._timer.stop()
        self.lessons.shutdown()
        if not self.worker.shutdown(2000):
            self.worker.wait(3000)
        release_finished_threads()       # garbage collection is automatic again once they ended

    def closeEvent(self, e) -> None:
        self._shutdown_worker()
        app = QApplication.instance()
        if app is not None:
            try:
                app.aboutToQuit.disconnect(self._shutdown_worker)
            except (RuntimeError, TypeError):
                pass
        super().closeEvent(e)
