"""The window's chrome: the docks the views sit in, the actions (with their keys), the toolbars,
the menus and the status line.

Built once by MainWindow; nothing here knows how a run works, only which window method an action
calls and what the status line shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDockWidget, QLabel, QMainWindow, QProgressBar, QToolBar, QWidget

from workbench import export, theme
from workbench.widgets import column

H, V = Qt.Orientation.Horizontal, Qt.Orientation.Vertical
DOCK_TITLES = {"controls": "Controls", "tree": "Token tree", "rows": "Verify rows",
               "penalty": "Penalty history", "output": "Output", "roofline": "Roofline", "stats": "Stats",
               "sweep": "Sweep", "race": "Race"}
VIEW_MENU = ("tree", "rows", "penalty", "roofline", "stats", "output", "controls", "sweep", "race")

STATE_COLOR = {"running": theme.GREEN, "paused": theme.AMBER, "starting": theme.ACCENT,
               "loading": theme.ACCENT, "probing": theme.ACCENT}

# why a run ended, in words (the decoder's finish_reason, or the worker's when it cut the run)
FINISH_WORDS = {"eos": "end of text", "length": "token limit",
                "stopped": "stopped", "windows": "window limit"}


@dataclass(frozen=True)
class Actions:
    run: QAction
    pause: QAction
    step: QAction
    stop: QAction
    reset: QAction
    open_recording: QAction
    save_recording: QAction
    open_prompt: QAction
    quit: QAction
    previous: QAction
    next: QAction
    live: QAction

    def run_actions(self) -> tuple[QAction, ...]:
        return (self.run, self.pause, self.step, self.stop, self.reset)


class Docks:
    """One dock per view. The central widget is empty and zero-sized, so the docks (all in one
    nested dock area) share the whole window and any of them can be moved or floated."""

    def __init__(self, win: QMainWindow, **widgets: QWidget):
        center = QWidget()
        center.setMaximumSize(0, 0)
        win.setCentralWidget(center)
        win.setDockNestingEnabled(True)
        self.win = win
        self.by_name: dict[str, QDockWidget] = {}
        for name, widget in widgets.items():
            d = QDockWidget(DOCK_TITLES[name], win)
            d.setObjectName(name)
            d.setWidget(widget)
            d.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                          | QDockWidget.DockWidgetFeature.DockWidgetFloatable
                          | QDockWidget.DockWidgetFeature.DockWidgetClosable)
            win.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, d)
            self.by_name[name] = d
        # controls | tree over rows over (penalty | output) | roofline over stats
        for a, b, orientation in (("controls", "tree", H), ("tree", "roofline", H), ("tree", "rows", V),
                                  ("rows", "penalty", V), ("penalty", "output", H), ("roofline", "stats", V)):
            win.splitDockWidget(self.by_name[a], self.by_name[b], orientation)
        # the tuning docks share the stats' place, as tabs behind it
        for name in ("sweep", "race"):
            if name in self.by_name:
                win.tabifyDockWidget(self.by_name["stats"], self.by_name[name])
        self.by_name["stats"].raise_()

    def __getitem__(self, name: str) -> QDockWidget:
        return self.by_name[name]

    def default_sizes(self) -> None:
        """Size the docks to the window (only takes once the window has its geometry)."""
        w, h = self.win.width(), self.win.height()
        for names, sizes, orientation in (
                (("controls", "tree", "roofline"), (250, int(w * 0.50), int(w * 0.33)), H),
                (("tree", "rows", "penalty"), (int(h * 0.27), int(h * 0.31), int(h * 0.32)), V),
                (("penalty", "output"), (int(w * 0.25), int(w * 0.25)), H),
                (("roofline", "stats"), (int(h * 0.36), int(h * 0.54)), V)):
            self.win.resizeDocks([self.by_name[n] for n in names], list(sizes), orientation)


def _action(win: QMainWindow, text: str, icon, keys: list[str], slot, tip: str = "") -> QAction:
    a = QAction(icon, text, win) if icon is not None else QAction(text, win)
    if keys:
        a.setShortcuts([QKeySequence(k) for k in keys])
        a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    a.setToolTip(f"{tip or text} ({', '.join(keys)})" if keys else (tip or text))
    a.triggered.connect(slot)
    win.addAction(a)
    return a


def build_actions(win) -> Actions:
    """The window's actions; `win` is the MainWindow whose methods they call."""
    return Actions(
        run=_action(win, "Run", theme.icon_run(), ["F5", "Ctrl+Return"], win.run_or_resume,
                    "start a run with the prompt and settings shown"),
        pause=_action(win, "Pause", theme.icon_pause(), ["Space"], win.toggle_pause,
                      "pause / resume between windows"),
        step=_action(win, "Step", theme.icon_step(), ["N"], win.step, "run one window"),
        stop=_action(win, "Stop", theme.icon_stop(), ["Esc"], win.stop),
        reset=_action(win, "Reset", theme.icon_reset(), ["Ctrl+R"], win.reset,
                      "clear the views and start again"),
        open_recording=_action(win, "Open recording…", theme.icon_open(), ["Ctrl+O"],
                               win.open_recording_dialog),
        save_recording=_action(win, "Save recording…", theme.icon_save(), ["Ctrl+S"],
                               win.save_recording_dialog),
        open_prompt=_action(win, "Open prompt…", None, ["Ctrl+P"], win.prompt_editor.open_dialog),
        quit=_action(win, "Quit", None, ["Ctrl+Q"], win.close),
        # arrows: Left goes back a window; Right goes forward, and steps the decoder at the end
        previous=_action(win, "Previous window", None, ["Left", ","], lambda: win.scrub(-1)),
        next=_action(win, "Next window / step", None, ["Right", "."], win.next_or_step),
        live=_action(win, "Follow live", None, ["End"], lambda: win.timeline.live.setChecked(True)),
    )


def build_toolbars(win: QMainWindow, acts: Actions, timeline: QWidget, banner: QWidget) -> None:
    """The run toolbar, and under it the timeline and the error banner across the whole window."""
    tb = QToolBar("Run")
    tb.setObjectName("run_toolbar")
    tb.setMovable(False)
    tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
    for a in acts.run_actions():
        tb.addAction(a)
    tb.addSeparator()
    tb.addAction(acts.open_recording)
    tb.addAction(acts.save_recording)
    tb.addWidget(export.ExportButton(win))
    win.addToolBar(Qt.ToolBarArea.TopToolBarArea, tb)
    top = QWidget()
    column(top, timeline, banner, margins=(0, 0, 0, 0))
    win.addToolBarBreak(Qt.ToolBarArea.TopToolBarArea)
    bar = QToolBar("Timeline")
    bar.setObjectName("timeline_bar")
    bar.setMovable(False)
    bar.addWidget(top)
    win.addToolBar(Qt.ToolBarArea.TopToolBarArea, bar)


def build_menus(win: QMainWindow, acts: Actions, docks: Docks) -> None:
    m = win.menuBar()
    f = m.addMenu("&File")
    for a in (acts.open_prompt, acts.open_recording, acts.save_recording):
        f.addAction(a)
    f.addMenu(export.export_menu(win, f))
    f.addSeparator()
    f.addAction(acts.quit)
    r = m.addMenu("&Run")
    for a in acts.run_actions():
        r.addAction(a)
    r.addSeparator()
    for a in (acts.previous, acts.next, acts.live):
        r.addAction(a)
    v = m.addMenu("&View")
    for name in VIEW_MENU:
        v.addAction(docks[name].toggleViewAction())


def update_actions(acts: Actions, state: str, paused: bool, live: bool) -> None:
    """Enable and name the run actions for the run's `state` (see workbench.run_control)."""
    busy = state != "idle"
    resume = paused and busy
    acts.run.setEnabled(not busy or state == "paused")
    acts.run.setText("Resume" if state == "paused" else "Run")
    acts.pause.setEnabled(state in ("running", "paused"))
    acts.pause.setText("Resume" if resume else "Pause")
    acts.pause.setIcon(theme.icon_run() if resume else theme.icon_pause())
    acts.step.setEnabled(live or not busy)
    acts.stop.setEnabled(busy)


class StatusLine:
    """The status bar: a message, a progress bar (loading, then tokens of the run), the model
    and device, and a chip with the run's state."""

    def __init__(self, win: QMainWindow):
        sb = win.statusBar()
        self.text = QLabel("")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.hide()
        self.chip = QLabel("idle")
        self.chip.setObjectName("chip")
        self.source = QLabel("")
        self.source.setObjectName("muted")
        sb.addWidget(self.text, 1)
        sb.addPermanentWidget(self.progress)
        sb.addPermanentWidget(self.source)
        sb.addPermanentWidget(self.chip)

    def say(self, text: str) -> None:
        self.text.setText(text)

    def loading(self, stage: str, frac: float) -> None:
        self.progress.setRange(0, 1000)
        self.progress.setFormat("%p%")
        self.progress.setValue(int(1000 * max(0.0, min(1.0, frac))))
        self.progress.show()
        self.say(stage)

    def tokens(self, done: int, total: int) -> None:
        self.progress.setFormat("%v / %m tokens")
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(done)
        self.progress.show()

    def finished(self, report: dict) -> None:
        reason = report.get("finish_reason")
        self.say(f"done: {report.get('new_tokens', 0)} tokens in {report.get('windows', 0)} windows, "
                 f"{report.get('tok_s', 0):.1f} tok/s, {report.get('tokens_per_pass', 0):.2f} tokens/pass "
                 f"({FINISH_WORDS.get(reason, reason or 'stopped')})")

    def set_state(self, text: str) -> None:
        color = STATE_COLOR.get(text, theme.MUTED)
        self.chip.setText(text)
        self.chip.setStyleSheet(f"color: {color}; border-color: {color};")
