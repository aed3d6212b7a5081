"""The main window: docked views over one EventStore, the run controls and the worker.

Events arrive from the worker on the main thread and are appended to the store at once; views are
redrawn by a ~30 Hz timer from the latest state (bursts of windows cost one redraw). The timeline
picks the window every view shows; a recording opened from disk fills the same store.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QApplication, QDockWidget, QFileDialog, QLabel, QMainWindow, QProgressBar,
                               QToolBar, QVBoxLayout, QWidget)

from engine.errors import ParameterError, SpecscopeError
from engine.speculation.events import ACCEPTED, REJECTED, WindowEvent
from engine.speculation.settings import DecodeSettings

from workbench import engine_api, export, theme
from workbench.controls import ControlsPanel
from workbench.frames import FramePacer
from workbench.pyside_fix import guard_singletons
from workbench.recording import load_recording, save_recording
from workbench.store import EventStore
from workbench.views.output import OutputDock
from workbench.views.penalty import PenaltyView
from workbench.views.roofline import RooflineView
from workbench.views.rows import VerifyRowsView
from workbench.views.stats import StatsView
from workbench.views.tree import TokenTreeView
from workbench.widgets import Banner, Timeline
from workbench.worker import RunRequest, RuntimeSpec, SessionWorker

REDRAW_MS = 33               # at most ~30 frames a second
PLOTS_HZ = 2                 # run-wide plots while streaming (they change slowly)
STREAM_CPU_BUDGET = 0.05     # share of the main thread's time redraws may take while a run streams
MAX_FRAME_GAP_S = 1.0

guard_singletons()        # before any Qt virtual is overridden in Python: see pyside_fix


def interesting_row(ev: WindowEvent) -> int:
    """The row the penalty view opens on: a flipped verdict, else the first rejection, else the
    deepest accepted draft, else the root row."""
    for r in ev.rows:
        if r.penalty is not None and r.penalty.flipped:
            return r.row
    for r in ev.rows:
        if r.outcome == REJECTED:
            return r.row
    acc = [r.row for r in ev.rows if r.outcome == ACCEPTED]
    return acc[-1] if acc else 0


class MainWindow(QMainWindow):
    rendered = Signal(int)         # the window index every view now shows (tests wait on it)

    def __init__(self, spec: RuntimeSpec = RuntimeSpec(), prompt=None,
                 settings: DecodeSettings | None = None, probe: bool = True):
        super().__init__()
        self.setWindowTitle("specscope")
        self.resize(1640, 1000)
        self.spec = spec
        self.probe = probe
        self.store = EventStore()
        self.mode = "live"                 # live | replay
        self.run_id = 0
        self.card_profile = None
        self.last_report: dict | None = None
        self.last_error: tuple[str, str] | None = None
        self._selected_row = 0
        self._row_window = -1              # window the selected row belongs to
        self.render_times_ms: list[float] = []
        self.pacer = FramePacer(cpu_budget=STREAM_CPU_BUDGET, min_gap_s=REDRAW_MS / 1e3,
                                max_gap_s=MAX_FRAME_GAP_S, plots_hz=PLOTS_HZ)
        self.frame_costs_ms = self.pacer.costs_ms

        self.worker = SessionWorker(self)
        self._build_views()
        self._build_actions()
        self._build_status()
        self._connect()
        self.controls.set_settings(settings or DecodeSettings())
        if prompt is not None:
            self.prompt_editor.set_prompt(prompt, "command line")
        else:
            self.prompt_editor.load_default()
        self.roofline.set_references(engine_api.reference_profiles())
        self._timer = QTimer(self)
        self._timer.setInterval(REDRAW_MS)
        self._timer.timeout.connect(self._tick)
        self._timer.start()
        app = QApplication.instance()
        if app is not None:         # quitting without closing the window must still end the thread
            app.aboutToQuit.connect(self._shutdown_worker)
        self._update_actions("idle")

    # ---- construction -------------------------------------------------------------------------
    def _dock(self, title: str, widget: QWidget, area: Qt.DockWidgetArea, name: str) -> QDockWidget:
        d = QDockWidget(title, self)
        d.setObjectName(name)
        d.setWidget(widget)
        d.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                      | QDockWidget.DockWidgetFeature.DockWidgetFloatable
                      | QDockWidget.DockWidgetFeature.DockWidgetClosable)
        self.addDockWidget(area, d)
        return d

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

        # Every view is a dock; the central widget is empty and zero-sized, so the docks (all in
        # one nested dock area) share the whole window and any of them can be moved or floated.
        center = QWidget()
        center.setMaximumSize(0, 0)
        self.setCentralWidget(center)
        self.setDockNestingEnabled(True)
        L = Qt.DockWidgetArea.LeftDockWidgetArea
        H, V = Qt.Orientation.Horizontal, Qt.Orientation.Vertical
        self.d_controls = self._dock("Controls", self.controls, L, "controls")
        self.d_tree = self._dock("Token tree", self.tree, L, "tree")
        self.d_rows = self._dock("Verify rows", self.rows, L, "rows")
        self.d_penalty = self._dock("Penalty history", self.penalty, L, "penalty")
        self.d_output = self._dock("Output", self.output_dock, L, "output")
        self.d_roofline = self._dock("Roofline", self.roofline, L, "roofline")
        self.d_stats = self._dock("Stats", self.stats, L, "stats")
        self.splitDockWidget(self.d_controls, self.d_tree, H)
        self.splitDockWidget(self.d_tree, self.d_roofline, H)
        self.splitDockWidget(self.d_tree, self.d_rows, V)
        self.splitDockWidget(self.d_rows, self.d_penalty, V)
        self.splitDockWidget(self.d_penalty, self.d_output, H)
        self.splitDockWidget(self.d_roofline, self.d_stats, V)
        self._sized = False

    def showEvent(self, e) -> None:
        super().showEvent(e)
        if not self._sized:          # dock sizes only take once the window has its geometry
            self._sized = True
            self.apply_default_layout()

    def apply_default_layout(self) -> None:
        H, V = Qt.Orientation.Horizontal, Qt.Orientation.Vertical
        w, h = self.width(), self.height()
        self.resizeDocks([self.d_controls, self.d_tree, self.d_roofline],
                         [250, int(w * 0.50), int(w * 0.33)], H)
        self.resizeDocks([self.d_tree, self.d_rows, self.d_penalty],
                         [int(h * 0.27), int(h * 0.31), int(h * 0.32)], V)
        self.resizeDocks([self.d_penalty, self.d_output], [int(w * 0.25), int(w * 0.25)], H)
        self.resizeDocks([self.d_roofline, self.d_stats], [int(h * 0.36), int(h * 0.54)], V)

    def _action(self, text: str, icon, keys: list[str], slot, tip: str = "") -> QAction:
        a = QAction(icon, text, self) if icon is not None else QAction(text, self)
        if keys:
            a.setShortcuts([QKeySequence(k) for k in keys])
            a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        a.setToolTip(f"{tip or text} ({', '.join(keys)})" if keys else (tip or text))
        a.triggered.connect(slot)
        self.addAction(a)
        return a

    def _build_actions(self) -> None:
        self.a_run = self._action("Run", theme.icon_run(), ["F5", "Ctrl+Return"], self.run_or_resume,
                                  "start a run with the prompt and settings shown")
        self.a_pause = self._action("Pause", theme.icon_pause(), ["Space"], self.toggle_pause,
                                    "pause / resume between windows")
        self.a_step = self._action("Step", theme.icon_step(), ["N"], self.step, "run one window")
        self.a_stop = self._action("Stop", theme.icon_stop(), ["Esc"], self.stop)
        self.a_reset = self._action("Reset", theme.icon_reset(), ["Ctrl+R"], self.reset,
                                    "clear the views and start again")
        self.a_open_rec = self._action("Open recording…", theme.icon_open(), ["Ctrl+O"], self._open_recording_dialog)
        self.a_save_rec = self._action("Save recording…", theme.icon_save(), ["Ctrl+S"], self._save_recording_dialog)
        self.a_open_prompt = self._action("Open prompt…", None, ["Ctrl+P"], self.prompt_editor._open_dialog)
        self.a_quit = self._action("Quit", None, ["Ctrl+Q"], self.close)
        # arrows: Left goes back a window; Right goes forward, and steps the decoder at the end
        self.a_prev = self._action("Previous window", None, ["Left", ","], lambda: self.scrub(-1))
        self.a_next = self._action("Next window / step", None, ["Right", "."], self.next_or_step)
        self.a_live = self._action("Follow live", None, ["End"], lambda: self.timeline.live.setChecked(True))

        tb = QToolBar("Run")
        tb.setObjectName("run_toolbar")
        tb.setMovable(False)
        tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        for a in (self.a_run, self.a_pause, self.a_step, self.a_stop, self.a_reset):
            tb.addAction(a)
        tb.addSeparator()
        for a in (self.a_open_rec, self.a_save_rec):
            tb.addAction(a)
        export_btn = export.ExportButton(self)
        tb.addWidget(export_btn)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, tb)
        # the timeline and, under it, the error banner, across the whole window
        top = QWidget()
        top_lay = QVBoxLayout(top)
        top_lay.setContentsMargins(0, 0, 0, 0)
        top_lay.setSpacing(4)
        top_lay.addWidget(self.timeline)
        top_lay.addWidget(self.banner)
        self.addToolBarBreak(Qt.ToolBarArea.TopToolBarArea)
        bar = QToolBar("Timeline")
        bar.setObjectName("timeline_bar")
        bar.setMovable(False)
        bar.addWidget(top)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, bar)

        m = self.menuBar()
        f = m.addMenu("&File")
        for a in (self.a_open_prompt, self.a_open_rec, self.a_save_rec):
            f.addAction(a)
        f.addMenu(export.export_menu(self, f))
        f.addSeparator()
        f.addAction(self.a_quit)
        r = m.addMenu("&Run")
        for a in (self.a_run, self.a_pause, self.a_step, self.a_stop, self.a_reset):
            r.addAction(a)
        r.addSeparator()
        for a in (self.a_prev, self.a_next, self.a_live):
            r.addAction(a)
        v = m.addMenu("&View")
        for d in (self.d_tree, self.d_rows, self.d_penalty, self.d_roofline, self.d_stats,
                  self.d_output, self.d_controls):
            v.addAction(d.toggleViewAction())

    def _build_status(self) -> None:
        sb = self.statusBar()
        self.status_text = QLabel("")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.hide()
        self.state_chip = QLabel("idle")
        self.state_chip.setObjectName("chip")
        self.source_label = QLabel("")
        self.source_label.setObjectName("muted")
        sb.addWidget(self.status_text, 1)
        sb.addPermanentWidget(self.progress)
        sb.addPermanentWidget(self.source_label)
        sb.addPermanentWidget(self.state_chip)

    def _connect(self) -> None:
        w = self.worker
        w.progress.connect(self._on_progress)
        w.runtime_ready.connect(self._on_runtime)
        w.profile_ready.connect(self._on_profile)
        w.run_started.connect(self._on_run_started)
        w.window.connect(self._on_window)
        w.run_finished.connect(self._on_finished)
        w.failed.connect(self._on_failed)
        w.state_changed.connect(self._update_actions)
        self.controls.settings_changed.connect(self._on_settings)
        self.timeline.index_changed.connect(lambda _: self._mark_dirty())
        self.tree.row_selected.connect(self.select_row)
        self.rows.row_selected.connect(self.select_row)
        self.prompt_editor.error.connect(lambda m: self.show_error(m, "Prompt"))

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
        self.mode = "live"
        self.run_id += 1
        self.store.clear()
        self.last_report = None
        self._clear_views()
        self.timeline.live.setChecked(True)
        self.worker.submit(RunRequest(self.run_id, self.spec, prompt, settings, max_windows=max_windows,
                                      start_paused=paused, probe=self.probe))
        self.source_label.setText(self._source_text())
        return True

    def run_or_resume(self) -> None:
        if self.worker.state == "paused":
            self.worker.resume()
        elif self.worker.state == "idle":
            self.start_run()

    def toggle_pause(self) -> None:
        if self.worker.state == "idle":
            return
        if self.worker.paused:
            self.worker.resume()
        else:
            self.worker.pause()
        self._update_actions(self.worker.state)

    def step(self) -> None:
        if self.worker.state == "idle":
            self.start_run(paused=True)
        else:
            self.worker.step()

    def next_or_step(self) -> None:
        if self.timeline.count and self.timeline.value() < self.timeline.count - 1:
            self.scrub(+1)
        elif self.mode == "live":
            self.step()

    def scrub(self, delta: int) -> None:
        self.show_window(self.timeline.value() + delta)

    def show_window(self, idx: int) -> None:
        """Move the timeline to window `idx` (clamped) and redraw every view for it now."""
        if self.timeline.count != len(self.store):
            self.timeline.set_count(len(self.store))
        self.timeline.set_value(idx)
        self._mark_dirty()
        self.render_now()

    def stop(self) -> None:
        self.worker.stop()

    def reset(self) -> None:
        self.worker.stop()
        self.start_run()

    # ---- worker signals -----------------------------------------------------------------------
    def _on_progress(self, stage: str, frac: float) -> None:
        self.progress.show()
        self.progress.setValue(int(1000 * max(0.0, min(1.0, frac))))
        self.progress.setFormat("%p%")
        self.status_text.setText(stage)

    def _on_runtime(self, info: dict) -> None:
        self.runtime_info = info
        self.status_text.setText(f"loaded {info['model']} on {info['device']} ({info['dtype']}) "
                                 f"in {info['load_s']:.1f} s")
        self.source_label.setText(self._source_text())

    def _on_profile(self, profile) -> None:
        self.card_profile = profile
        self.roofline.set_card_profile(profile)
        self.stats.set_ar_ms(profile.ms(1) if profile is not None else None)
        self._mark_dirty()

    def _on_run_started(self, run_id: int, header: dict) -> None:
        if run_id != self.run_id:
            return
        self.store.header = dict(header)
        if self.card_profile is not None and hasattr(self.card_profile, "to_dict"):
            self.store.header["card_profile"] = self.card_profile.to_dict()
        self.progress.setFormat("%v / %m tokens")
        self.progress.setRange(0, header["settings"]["max_new_tokens"])
        self.progress.setValue(0)
        self.progress.show()

    def _on_window(self, run_id: int, ev: WindowEvent) -> None:
        if run_id != self.run_id or self.mode != "live":
            return                         # a late event of a run that was replaced
        self.store.append(ev)              # cheap; the timeline and views catch up at the next frame
        self._mark_dirty()

    def _on_finished(self, run_id: int, report: dict) -> None:
        if run_id != self.run_id:
            return
        self.last_report = report
        self.store.report = report
        self.status_text.setText(
            f"done: {report.get('new_tokens', 0)} tokens in {report.get('windows', 0)} windows, "
            f"{report.get('tok_s', 0):.1f} tok/s, {report.get('tokens_per_pass', 0):.2f} tokens/pass "
            f"({report.get('finish_reason') or 'stopped'})")
        self._mark_dirty()

    def _on_failed(self, run_id: int, message: str, kind: str) -> None:
        self.last_error = (message, kind)
        title = {"model": "Cannot load the model", "parameter": "Bad setting",
                 "memory": "Out of memory"}.get(kind, "Engine error")
        self.show_error(message, title)
        self.progress.hide()

    def _on_settings(self, s: DecodeSettings) -> None:
        if self.worker.state != "idle" and self.mode == "live":
            self.worker.send_settings(s)
            self.status_text.setText("settings sent: they apply at the next window")

    def _update_actions(self, state: str) -> None:
        live = self.mode == "live"
        busy = state != "idle"
        self.a_run.setEnabled(not busy or state == "paused")
        self.a_run.setText("Resume" if state == "paused" else "Run")
        self.a_pause.setEnabled(busy and state in ("running", "paused"))
        self.a_pause.setText("Resume" if self.worker.paused and busy else "Pause")
        self.a_pause.setIcon(theme.icon_run() if self.worker.paused and busy else theme.icon_pause())
        self.a_step.setEnabled(live or not busy)
        self.a_stop.setEnabled(busy)
        color = {"running": theme.GREEN, "paused": theme.AMBER, "loading": theme.ACCENT,
                 "probing": theme.ACCENT}.get(state, theme.MUTED)
        self.state_chip.setText(state if self.mode == "live" else "replay")
        self.state_chip.setStyleSheet(f"color: {color}; border-color: {color};")
        if not busy and self.mode == "live" and self.last_error is None and self.last_report is not None:
            self.progress.hide()

    # ---- selection and drawing ----------------------------------------------------------------
    def select_row(self, row: int) -> None:
        self._selected_row = row
        self._row_window = self.timeline.value()
        self.tree.select_row(row)
        self.rows.select_row(row)
        idx = self.timeline.value()
        self.penalty.show_row(self.store[idx] if 0 <= idx < len(self.store) else None, row)

    def _mark_dirty(self) -> None:
        self.pacer.mark_all()

    def _streaming(self) -> bool:
        return (self.worker.state not in ("idle", "paused") and self.mode == "live"
                and self.timeline.live.isChecked())

    def _tick(self) -> None:
        """The redraw timer (~30 Hz); workbench.frames.FramePacer decides whether to draw."""
        now, cpu = time.perf_counter(), time.thread_time()
        self.pacer.account(cpu)
        streaming = self._streaming()
        if self.pacer.due(now, streaming) and self.render_now(split=streaming):
            self.pacer.started(now, cpu)

    def render_now(self, split: bool = False) -> bool:
        """Redraw the pending view groups for the timeline's window; True if anything was drawn.
        With `split` (a run streams) one group is drawn per call (see workbench.frames)."""
        now = time.perf_counter()
        if self.timeline.count != len(self.store):
            self.timeline.set_count(len(self.store))
            if self.mode == "live" and len(self.store):
                last = self.store[-1]
                self.progress.setMaximum(max(1, int((last.settings or {}).get("max_new_tokens",
                                                                             self.progress.maximum()))))
                self.progress.setValue(last.stats.new_tokens)
        groups = self.pacer.take(now, self._streaming(), split)
        if not groups:
            return False
        idx = self.timeline.value()
        ev = self.store[idx] if 0 <= idx < len(self.store) else None
        if ev is None:
            self._clear_views()
            self.pacer.pending.clear()
        else:
            if self._row_window != idx:
                self._selected_row = interesting_row(ev)
                self._row_window = idx
            for g in groups:
                if g == "tree":
                    self.tree.show_event(ev)
                    self.tree.select_row(self._selected_row)
                elif g == "rows":
                    self.rows.show_event(ev)
                    self.rows.select_row(self._selected_row)
                elif g == "detail":
                    self.penalty.show_row(ev, self._selected_row)
                    self.output.show_upto(self.store, idx, follow=self.timeline.live.isChecked())
                elif g == "roofline":
                    self.roofline.show_upto(self.store, idx)
                else:                                    # stats_top / stats_bottom
                    self.stats.show_upto(self.store, idx, part=g.split("_")[1])
        self.render_times_ms.append((time.perf_counter() - now) * 1e3)
        if not self.pacer.pending:
            self.rendered.emit(idx)
        return True

    def _clear_views(self) -> None:
        self.tree.clear()
        self.rows.show_event(None)
        self.penalty.show_row(None, -1)
        self.output.clear()
        self.roofline.show_upto(self.store, -1)
        self.stats.show_upto(None, -1)
        self.timeline.set_count(0)

    def show_error(self, message: str, title: str = "Error") -> None:
        self.banner.show_message(message, title)

    def _source_text(self) -> str:
        if self.mode == "replay":
            h = self.store.header
            return f"replay · {h.get('model', '?')} · {h.get('device', '?')}"
        info = getattr(self, "runtime_info", None)
        if info:
            return f"{info['model']} · {info['device']} · {info['dtype']}"
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
        self.worker.stop()
        self.run_id += 1                  # late events of the live run are dropped
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
                self._on_profile(engine_api.profile_from_dict(prof))
            except SpecscopeError:
                pass
        self.timeline.live.setChecked(True)
        self.timeline.set_count(len(store))
        self.source_label.setText(self._source_text())
        self.status_text.setText(f"replaying {Path(path).name}: {len(store)} windows")
        self._update_actions(self.worker.state)
        self._mark_dirty()
        return True

    def _open_recording_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open recording", "", "Recordings (*.jsonl);;All files (*)")
        if path:
            self.open_recording(path)

    def _save_recording_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save recording", "specscope-session.jsonl",
                                              "Recordings (*.jsonl)")
        if path:
            self.save_recording(path)
            self.status_text.setText(f"saved {len(self.store)} windows to {path}")

    # ---- shutdown -----------------------------------------------------------------------------
    def _shutdown_worker(self) -> None:
        self._timer.stop()
        if not self.worker.shutdown(2000):
            self.worker.wait(3000)

    def closeEvent(self, e) -> None:
        self._shutdown_worker()
        app = QApplication.instance()
        if app is not None:
            try:
                app.aboutToQuit.disconnect(self._shutdown_worker)
            except (RuntimeError, TypeError):
                pass
        super().closeEvent(e)
