"""The window's chrome: the docks the views sit in, the actions (with their keys), the toolbars,
the menus and the status line.

Built once by MainWindow; nothing here knows how a run works, only which window method an action
calls and what the status line shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QDockWidget, QLabel, QMainWindow, QProgressBar, QToolBar, QWidget

from engine.cost.baseline import speed_words

from workbench import export, theme
from workbench.widgets import ElidedLabel, column

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
    reset_layout: QAction

    def run_actions(self) -> tuple[QAction, ...]:
        return (self.run, self.pause, self.step, self.stop, self.reset)


NARROW_BELOW = 1200           # window width under which penalty and output share a place
SHORT_BELOW = 820             # window height under which the right column's docks are tabs


class Docks:
    """One dock per view. The central widget is empty and zero-sized, so the docks (all in one
    nested dock area) share the whole window and any of them can be moved or floated.

    The arrangement follows the window's size (`arrange`):
      wide     controls | tree over rows over (penalty | output) | roofline over stats, the
               sweep and race docks as tabs behind the stats
      narrow   (under NARROW_BELOW px wide) penalty and output as tabs of one place
      short    (under SHORT_BELOW px high) roofline, stats, sweep and race as tabs of one column
    so that every dock keeps at least its minimum size. The window re-arranges when its size
    crosses a line, unless the user moved, floated or closed a dock since; View > Reset layout
    arranges afresh either way."""

    def __init__(self, win: QMainWindow, **widgets: QWidget):
        center = QWidget()
        center.setMaximumSize(0, 0)
        win.setCentralWidget(center)
        win.setDockNestingEnabled(True)
        self.win = win
        self.by_name: dict[str, QDockWidget] = {}
        self.mode: tuple[bool, bool] | None = None   # (narrow, short) in place; None: not yet
        self.user_arranged = False             # a dock was moved, floated or closed since
        self._arranging = False
        self.more = None                       # () -> docks made later (workbench.window sets it)
        for name, widget in widgets.items():
            d = QDockWidget(DOCK_TITLES[name], win)
            d.setObjectName(name)
            d.setWidget(widget)
            d.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                          | QDockWidget.DockWidgetFeature.DockWidgetFloatable
                          | QDockWidget.DockWidgetFeature.DockWidgetClosable)
            win.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, d)
            d.topLevelChanged.connect(self._touched)
            d.dockLocationChanged.connect(self._touched)
            d.visibilityChanged.connect(lambda on, d=d: self._closed(d))
            self.by_name[name] = d
        self.arrange((False, False))

    def __getitem__(self, name: str) -> QDockWidget:
        return self.by_name[name]

    def every_dock(self) -> list[QDockWidget]:
        """The view docks in View menu order, then the lesson docks opened so far."""
        return [self.by_name[n] for n in VIEW_MENU] + list(self.extra())

    def extra(self) -> list[QDockWidget]:
        """Docks made later (the lessons'): the window sets `more` to name them."""
        return list(self.more()) if self.more is not None else []

    def _touched(self, *_) -> None:
        if not self._arranging:
            self.user_arranged = True

    def _closed(self, d: QDockWidget) -> None:
        # a closed dock is hidden and not tabbed (a tab behind another is hidden too)
        if not self._arranging and d.isHidden() and not self.win.tabifiedDockWidgets(d):
            self.user_arranged = True

    def arrange(self, mode: tuple[bool, bool], show_all: bool = True) -> None:
        """Put every dock in its place for `mode` = (narrow, short) (show_all: closed docks come
        back too; else a closed dock stays closed)."""
        narrow, short = mode
        win, by = self.win, self.by_name
        self._arranging = True
        try:
            shown = {n: show_all or not d.isHidden() or bool(win.tabifiedDockWidgets(d))
                     for n, d in by.items()}
            for d in by.values():
                d.setFloating(False)
                win.removeDockWidget(d)
            win.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, by["controls"])
            # controls | tree over rows over (penalty | output) | roofline over stats
            splits = [("controls", "tree", H), ("tree", "roofline", H), ("tree", "rows", V),
                      ("rows", "penalty", V)]
            splits += [] if narrow else [("penalty", "output", H)]
            splits += [] if short else [("roofline", "stats", V)]
            for a, b, orientation in splits:
                win.splitDockWidget(by[a], by[b], orientation)
            tabs = ([("penalty", "output")] if narrow else []) + ([("roofline", "stats")] if short else [])
            for a, b in tabs:
                win.tabifyDockWidget(by[a], by[b])
            # the tuning docks are tabs behind the stats
            for name in ("sweep", "race"):
                if name in by:
                    win.tabifyDockWidget(by["stats"], by[name])
            for n, d in by.items():
                d.setVisible(shown[n])
            for d in self.extra():               # the lessons' docks: tabs behind the stats too
                keep = show_all or not d.isHidden() or bool(win.tabifiedDockWidgets(d))
                d.setFloating(False)
                win.removeDockWidget(d)
                win.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, d)
                win.tabifyDockWidget(by["stats"], d)
                d.setVisible(keep)
        finally:
            self._arranging = False
        self.mode = mode
        self.user_arranged = False
        self._raise_front()
        QTimer.singleShot(0, self._raise_front)       # tab bars are made at the next layout

    def _raise_front(self) -> None:
        """The tab shown in front of each group: the stats, and the output."""
        for name in ("stats", "output"):
            d = self.by_name[name]
            if not d.isHidden() or self.win.tabifiedDockWidgets(d):
                d.raise_()

    def default_sizes(self) -> None:
        """Size the docks to the window (only takes once the window has its geometry)."""
        w, h = self.win.width(), self.win.height()
        narrow, short = self.mode
        controls = self.by_name["controls"].widget()
        left = (controls.minimumSizeHint() if narrow else controls.sizeHint()).width()
        rest = max(0, w - left - 16)
        middle = int(rest * (0.58 if narrow else 0.60))
        sizes = [(("controls", "tree", "roofline"), (left, middle, rest - middle), H),
                 (("tree", "rows", "penalty"), (int(h * 0.27), int(h * 0.31), int(h * 0.32)), V)]
        if not narrow:
            sizes.append((("penalty", "output"), (int(middle * 0.45), int(middle * 0.55)), H))
        if not short:
            sizes.append((("roofline", "stats"), (int(h * 0.36), int(h * 0.54)), V))
        for names, size, orientation in sizes:
            self.win.resizeDocks([self.by_name[n] for n in names], list(size), orientation)

    def fit_window(self, reset: bool = False) -> bool:
        """Arrange for the window's size: at once with `reset` (Reset layout; closed docks come
        back), else only when the size crossed NARROW_BELOW or SHORT_BELOW and the user has
        not moved a dock since. True when the docks were arranged."""
        mode = (self.win.width() < NARROW_BELOW, self.win.height() < SHORT_BELOW)
        if not reset and (mode == self.mode or self.user_arranged):
            return False
        self.arrange(mode, show_all=reset)
        self.default_sizes()
        return True


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
                               win.replay.open_dialog),
        save_recording=_action(win, "Save recording…", theme.icon_save(), ["Ctrl+S"],
                               win.replay.save_dialog),
        open_prompt=_action(win, "Open prompt…", None, ["Ctrl+P"], win.prompt_editor.open_dialog),
        quit=_action(win, "Quit", None, ["Ctrl+Q"], win.close),
        # arrows: Left goes back a window; Right goes forward, and steps the decoder at the end
        previous=_action(win, "Previous window", None, ["Left", ","], lambda: win.scrub(-1)),
        next=_action(win, "Next window / step", None, ["Right", "."], win.next_or_step),
        live=_action(win, "Follow live", None, ["End"], lambda: win.timeline.live.setChecked(True)),
        reset_layout=_action(win, "Reset layout", None, [], win.reset_layout,
                             "every dock back in its place for this window size"),
    )


def build_toolbars(win: QMainWindow, acts: Actions, timeline: QWidget, banner: QWidget) -> None:
    """The run toolbar, and under it the timeline and the error banner across the whole window."""
    tb = QToolBar("Run")
    tb.setObjectName("run_toolbar")
    tb.setMovable(False)
    tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
    for a in acts.run_actions():
        tb.addAction(a)
    # a button whose text changes (Pause / Resume) is as wide as its widest text, so the
    # buttons after it never shift
    texts = {acts.pause: ("Pause", "Resume")}
    for a, names in texts.items():
        button = tb.widgetForAction(a)
        widths = []
        for name in names:
            a.setText(name)
            widths.append(button.sizeHint().width())
        a.setText(names[0])
        button.setMinimumWidth(max(widths))
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
    v.setObjectName("view_menu")

    def fill() -> None:           # rebuilt each time it opens: lesson docks are made on first use
        v.clear()
        for d in docks.every_dock():
            v.addAction(d.toggleViewAction())
        v.addSeparator()
        v.addAction(acts.reset_layout)
    fill()
    v.aboutToShow.connect(fill)


def update_actions(acts: Actions, state: str, paused: bool, live: bool, blocked: str = "") -> None:
    """Enable and name the run actions for the run's `state` (see workbench.run_control).
    `blocked`: why no run can start (the model did not load): Run and Step off, saying so."""
    busy = state != "idle"
    resume = paused and busy
    acts.run.setEnabled(not busy and not blocked)     # one Resume: the Pause button's (Space)
    for a, tip in ((acts.run, "start a run with the prompt and settings shown (F5, Ctrl+Return)"),
                   (acts.step, "run one window (N)")):
        a.setToolTip(f"the model did not load: {blocked}" if blocked else tip)
    acts.pause.setEnabled(state in ("running", "paused"))
    acts.pause.setText("Resume" if resume else "Pause")
    acts.pause.setIcon(theme.icon_run() if resume else theme.icon_pause())
    acts.step.setEnabled((live or not busy) and not blocked)
    acts.stop.setEnabled(busy)


def plural(n: int, word: str) -> str:
    """'1 window', '3 windows'."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class StatusLine:
    """The status bar: a message, a progress bar (loading, then tokens of the run), the model
    and device, and a chip with the run's state."""

    def __init__(self, win: QMainWindow):
        sb = win.statusBar()
        self.text = ElidedLabel("")         # cut with "…" (whole in the tooltip), never widening the window
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setMinimumWidth(160)
        self.progress.hide()
        self.chip = QLabel("idle")
        self.chip.setObjectName("chip")
        self.source = ElidedLabel("")
        self.source.setObjectName("muted")
        self.source.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        sb.addWidget(self.text, 3)
        sb.addPermanentWidget(self.progress)
        sb.addPermanentWidget(self.source, 2)
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

    def finished(self, report: dict, stopped_for: str = "") -> None:
        """The run's last word; `stopped_for`: the job (sweep, race, lesson) the window stopped
        it for, said instead of a bare "stopped"."""
        reason = report.get("finish_reason")
        why = FINISH_WORDS.get(reason, reason or "stopped")
        if reason == "stopped" and stopped_for:
            why = f"stopped for the {stopped_for}: Run (F5) starts a new run"
        self.say(f"done: {plural(report.get('new_tokens', 0), 'token')} in "
                 f"{plural(report.get('windows', 0), 'window')}, {speed_words(report)}, "
                 f"{report.get('tokens_per_pass', 0):.2f} tokens/pass ({why})")

    def set_state(self, text: str) -> None:
        color = STATE_COLOR.get(text, theme.MUTED)
        self.chip.setText(text)
        self.chip.setStyleSheet(f"color: {color}; border-color: {color};")


def cap_window(win: QMainWindow, asked) -> None:
    """`win` no larger than the size `asked` (a QSize), nor than its screen's free area (a real
    screen's: the offscreen platform's 800x800 is no screen)."""
    w, h = asked.width(), asked.height()
    screen = win.screen()
    if screen is not None and QGuiApplication.platformName() not in ("offscreen", "minimal"):
        avail = screen.availableGeometry()
        frame = win.frameGeometry().size() - win.size()
        w, h = min(w, avail.width() - frame.width()), min(h, avail.height() - frame.height())
    if win.width() > w or win.height() > h:
        QMainWindow.resize(win, min(win.width(), w), min(win.height(), h))
