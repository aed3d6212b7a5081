"""The main window: docked views over one EventStore, the run controls and the worker.

Windows of the current run arrive on the main thread (workbench.run_control) and are appended to
the store at once; workbench.presenter draws the views from the latest state at its next frame,
for the window the timeline picks. A recording opened from disk (workbench.replay) fills the
presenter with its own store instead.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSize, QTimer, Signal
from PySide6.QtWidgets import QApplication, QMainWindow

from engine.errors import ParameterError
from engine.speculation.settings import USER_DEFAULTS, DecodeSettings

from workbench import chrome
from workbench.controls import ControlsPanel
from workbench.lessons_dock import Lessons
from workbench.live_feed import LiveFeed
from workbench.pyside_fix import guard_singletons
from workbench.presenter import Presenter
from workbench.race_dock import RaceDock
from workbench.replay import ReplayController
from workbench.run_control import RunController
from workbench.store import EventStore
from workbench.sweep_dock import SweepDock
from workbench.views.output import OutputDock
from workbench.views.penalty import PenaltyView
from workbench.views.roofline import RooflineView
from workbench.views.rows import VerifyRowsView
from workbench.views.stats import StatsView
from workbench.views.tree import TokenTreeView
from workbench.widgets import Banner, Timeline
from workbench.host import ModelHost, RuntimeSpec
from workbench.worker import GeneratorWorker, release_finished_threads

guard_singletons()        # before any Qt virtual is overridden in Python: see pyside_fix


class MainWindow(QMainWindow):
    rendered = Signal(int)         # every pending view now shows this window index

    def __init__(self, spec: RuntimeSpec = RuntimeSpec(), prompt=None,
                 settings: DecodeSettings | None = None, probe: bool = True, host: ModelHost | None = None):
        """`host`: the model host to run on (one already holding a loaded model: tests,
        benchmarks); a new one by default."""
        super().__init__()
        self.setWindowTitle("specscope")
        self._asked = QSize(1640, 1000)
        self._sized = False
        self.resize(1640, 1000)
        self.spec = spec
        self.probe = probe
        self.mode = "live"                 # live | replay (workbench.replay)
        self.card_profile = None
        self.runtime_info: dict | None = None
        self.last_report: dict | None = None
        self.last_error: tuple[str, str] | None = None
        self.model_failed = False          # the model could not be loaded (Run and Step wait for another)
        self.stopped_for = ""              # the job (sweep, race, lesson) the live run was stopped for

        # one thread runs the live run, a sweep and a race in turn, on one loaded model
        self.host = host or ModelHost()
        self.worker = GeneratorWorker(self.host, self)
        self.run = RunController(self.worker, self)
        self.replay = ReplayController(self)
        self.feed = LiveFeed(self)
        self._build_views()
        self.acts = chrome.build_actions(self)
        chrome.build_toolbars(self, self.acts, self.timeline, self.banner)
        chrome.build_menus(self, self.acts, self.docks)
        self.lessons = Lessons(self, self._job_context, lambda: self._free_model("lesson"),
                               lambda m: self.show_error(m, "Lesson"), beside=self.docks["stats"])
        self.lessons.add_menu(self.menuBar())
        self.docks.more = lambda: self.lessons.docks.values()    # in View, and in Reset layout
        self.status = chrome.StatusLine(self)
        self.presenter = Presenter(self.views, self.timeline, self.status, parent=self,
                                   running=lambda: self.run.state not in ("idle", "paused"),
                                   live=lambda: self.mode == "live")
        self.frame_costs_ms = self.presenter.pacer.costs_ms
        self.render_times_ms = self.presenter.render_times_ms
        self._connect()
        self.controls.set_settings(settings or USER_DEFAULTS)
        if prompt is not None:
            self.prompt_editor.set_prompt(prompt, "command line")
        else:
            self.prompt_editor.load_default()
        from engine.cost.profile import reference_profiles
        self.roofline.set_references(list(reference_profiles().values()))
        self.presenter.start()
        app = QApplication.instance()
        if app is not None:         # quitting without closing the window must still end the thread
            app.aboutToQuit.connect(self._shutdown_worker)
        self.update_actions()

    @property
    def store(self) -> EventStore:
        """The windows shown: the live run's, or the recording's being replayed."""
        return self.presenter.store

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
        self.sweep = SweepDock(self.worker, self._job_context, lambda: self._free_model("sweep"))
        self.race = RaceDock(self.worker, self._job_context, self._race_base,
                             lambda: self._free_model("race"))
        # in drawing order; every one is handed the same Shown (workbench.views.base)
        self.views = (self.tree, self.rows, self.penalty, self.output, self.roofline, *self.stats.parts)
        self.docks = chrome.Docks(self, controls=self.controls, tree=self.tree, rows=self.rows,
                                  penalty=self.penalty, output=self.output_dock, roofline=self.roofline,
                                  stats=self.stats, sweep=self.sweep, race=self.race)

    def resize(self, *size) -> None:
        """A size asked for (--size, a test): kept when a dock put back would grow the window."""
        super().resize(*size)
        self._asked = QSize(size[0], size[1]) if len(size) == 2 else QSize(size[0])

    def showEvent(self, e) -> None:
        super().showEvent(e)
        if not self._sized:          # dock sizes only take once the window has its geometry
            self._sized = True
            chrome.cap_window(self, self._asked)
            self.docks.fit_window(reset=True)

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        if e.spontaneous():          # the user (or the window manager) sized it
            self._asked = e.size()
        elif self._sized and (e.size().height() > self._asked.height()
                              or e.size().width() > self._asked.width()):
            # grown on its own (a floated dock put back asked for room): back to the size asked,
            # never past the screen (it grew to 1301 px tall on a 1080 px screen)
            QTimer.singleShot(0, lambda: chrome.cap_window(self, self._asked))
        if self._sized:              # a size across a line of workbench.chrome.Docks: another arrangement
            QTimer.singleShot(0, self.docks.fit_window)

    def reset_layout(self) -> None:
        """View > Reset layout: every dock back (closed ones too), arranged for this size."""
        self.docks.fit_window(reset=True)

    def _connect(self) -> None:
        self.feed.connect(self.run)        # the current run's signals only
        self.run.state_changed.connect(self.update_actions)
        self.run.state_changed.connect(self.tree.set_run_state)     # the empty tree's hint
        self.presenter.rendered.connect(self.rendered)
        self.controls.settings_changed.connect(self.feed.send_settings)
        self.sweep.llamacpp.profile_ready.connect(self.roofline.set_engine_profile)
        self.timeline.index_changed.connect(lambda i: (self.presenter.mark(), self.replay.follow(i)))
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
        self.stopped_for = ""
        self.replay.leave()
        self.store.clear()
        self.last_report = None
        self.presenter.clear()
        self.timeline.live.setChecked(True)
        self.run.start(self.spec, prompt, settings, probe=self.probe, paused=paused,
                       max_windows=max_windows)
        self.status.source.setText(self.replay.source_text())
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
        self.presenter.show_window(idx)

    def stop(self) -> None:
        self.run.stop()

    def reset(self) -> None:
        self.run.stop()
        self.start_run()

    # ---- sweep and race (they take the model while the live run is stopped) -------------------
    def _job_context(self):
        return self.spec, self.card_profile

    def _free_model(self, job: str = "job") -> str:
        return self.feed.free_model(job)

    def _race_base(self):
        return self.prompt_editor.prompt(), self.controls.settings()

    def apply_cell(self, cell: dict) -> DecodeSettings | None:
        return self.feed.apply_cell(cell)

    def race_cells(self, a: str, b: str) -> None:
        self.race.set_entrants(a, b)
        self.docks["race"].show()
        self.docks["race"].raise_()
        self.race.start()

    def update_actions(self, *_) -> None:
        live = self.mode == "live"
        chrome.update_actions(self.acts, self.run.state, self.run.paused, live,
                              blocked=self.last_error[0] if self.model_failed and self.last_error else "")
        self.status.set_state(self.run.state if live else "replay")
        if not self.run.busy and live and self.last_error is None and self.last_report is not None:
            self.status.progress.hide()

    # ---- selection and drawing (workbench.presenter) ----------------------------------------
    def select_row(self, row: int) -> None:
        """Select verify `row` of the shown window in every view that shows the selection."""
        self.presenter.select_row(row)

    def render_all(self) -> None:
        """Redraw every view now (the plots too, however recently they were drawn)."""
        self.presenter.render_all()

    def show_error(self, message: str, title: str = "Error") -> None:
        self.banner.show_message(message, title)

    # ---- recordings (workbench.replay) --------------------------------------------------------
    def save_recording(self, path: str | Path) -> Path:
        return self.replay.save(path)

    def open_recording(self, path: str | Path) -> bool:
        return self.replay.open(path)

    # ---- shutdown -----------------------------------------------------------------------------
    def _shutdown_worker(self) -> None:
        self.presenter.stop()
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
