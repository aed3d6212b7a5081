"""The Lessons menu and a dock per lesson: run it on the attached device (progress, cancel), show
its figure with the write-up's numbers beside this card's, save NAME.png / .csv / .md.

A lesson is a job on the window's generator worker (workbench.job_dock, as the sweep and the
race are), so the window stops its live run first. The measuring is engine code (engine.lessons); the
figure is drawn here, on the main thread, and saved from the widget that shows it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QDockWidget, QLabel, QMainWindow, QProgressBar, QPushButton

from engine.lessons import NAMES

from workbench.job_dock import JobDock
from workbench.views.lesson_figure import LessonFigure, render_png
from workbench.widgets import column, row

TITLES = {"knee": "Knee: a verify pass costs one decode step up to the knee",
          "budget": "Budget: linear d8, linear d24 or a tree in one pass",
          "acceptance": "Acceptance: tokens per pass against α and γ",
          "row-cost": "Row cost: a + b·rows, break-even, the depth it buys",
          "penalties": "Penalties on every verify row",
          "rejection": "Rejection sampling and its failing control",
          "ar-floor": "The AR floor's decision"}


def default_folder() -> Path:
    """./lessons, as `specscope lesson --out` defaults (specscope.lesson_cmd), made absolute so
    the dock can say where its files went."""
    return Path.cwd() / "lessons"


def lesson_job(name: str, quick: bool):
    """The job body (workbench.jobs' shape): engine code only; a cancelled lesson returns None."""
    def body(rt, ctx):
        from engine.lessons.runner import run_lesson
        from engine.lessons.runs import Budget, LessonCancelled
        try:
            return run_lesson(name, rt, Budget.quick_budget() if quick else Budget(), ctx.stop,
                              ctx.progress)
        except LessonCancelled:
            return None
        yield                           # a generator job that yields nothing
    return body


class LessonView(JobDock):
    """One lesson: Run / Cancel, progress, the figure, where its files went."""

    finished = Signal(object)            # the LessonResult, or None when cancelled
    kind = "lesson"

    def __init__(self, name: str, worker, context: Callable[[], tuple[Any, Any]],
                 before_job: Callable[[], None], folder: Path | None = None, parent=None):
        super().__init__(worker, context, before_job, parent)
        self.name = name
        self.folder = folder or default_folder()
        self.result = None
        self.saved: list[Path] = []
        self.run_button = QPushButton("Run on this device")
        self.run_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.quick = QCheckBox("quick")
        self.quick.setToolTip("the test budget: one short prompt, a few tokens, a short probe")
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setMinimumWidth(30)        # the dock fits beside the others at 1024 px wide
        self.bar.setFormat("not run yet")
        self.status = QLabel(f"saves {name}.png, {name}.csv and {name}.md in {self.folder}")
        self.status.setObjectName("muted")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.figure = LessonFigure()
        column(self, row(self.run_button, self.cancel_button, self.quick, (self.bar, 1)), self.status,
               (self.figure, 1))
        self.update_buttons()

    def start(self) -> bool:
        if self.running:
            return False
        self.bar.setValue(0)
        self.bar.setFormat("starting…")
        self.run_job(lesson_job(self.name, self.quick.isChecked()))
        return True

    def cancel(self) -> None:
        if self.running:
            self.cancel_job()
            self.bar.setFormat("cancelling…")

    def on_progress(self, stage: str, frac: float) -> None:
        self.bar.setValue(int(1000 * frac))
        self.bar.setFormat(f"{stage[:80]}  %p%")

    def on_done(self, result) -> None:
        if result is None:
            self.bar.setFormat("cancelled: nothing saved")
        else:
            self.result = result
            self.figure.set_result(result)
            try:
                self.saved = [*result.save_text(self.folder),
                              render_png(result, self.folder / f"{self.name}.png")]
                self.status.setText(f"saved in {self.folder}: " + ", ".join(p.name for p in self.saved))
            except OSError as e:
                self.error.emit(f"could not save the lesson in {self.folder}: {e}")
            self.bar.setValue(1000)
            self.bar.setFormat("done")
        self.finished.emit(result)

    def on_failed(self, message: str) -> None:
        self.bar.setFormat("failed")
        self.finished.emit(None)

    def update_buttons(self) -> None:
        self.run_button.setEnabled(not self.running)
        self.cancel_button.setEnabled(self.running)
        self.quick.setEnabled(not self.running)


class Lessons:
    """The Lessons menu of a MainWindow and the lesson docks it opens (made on first use,
    tabbed behind the stats)."""

    def __init__(self, win: QMainWindow, context, before_job, show_error: Callable[[str], None],
                 beside: QDockWidget | None = None):
        self.win, self.context, self.before_job, self.show_error = win, context, before_job, show_error
        self.beside = beside
        self.views: dict[str, LessonView] = {}
        self.docks: dict[str, QDockWidget] = {}
        self.actions = {}

    def add_menu(self, menubar) -> None:
        m = menubar.addMenu("&Lessons")
        for name in NAMES:
            self.actions[name] = m.addAction(TITLES[name], lambda n=name: self.open(n, run=True))

    def open(self, name: str, run: bool = False, quick: bool = False) -> LessonView:
        """Show lesson `name`'s dock (made on first use); `run`: start measuring."""
        view = self.views.get(name)
        if view is None:
            view = LessonView(name, self.win.worker, self.context, self.before_job)
            view.error.connect(lambda m: self.show_error(m))
            view.finished.connect(lambda r, v=view: self._say_saved(v, r))
            dock = QDockWidget(f"Lesson: {name}", self.win)
            dock.setObjectName(f"lesson-{name}")
            dock.setWidget(view)
            self.win.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
            if self.beside is not None:
                self.win.tabifyDockWidget(self.beside, dock)
            self.views[name], self.docks[name] = view, dock
        view.quick.setChecked(view.quick.isChecked() or quick)
        self.docks[name].show()
        self.docks[name].raise_()
        if run:
            view.start()
        return view

    def _say_saved(self, view: LessonView, result) -> None:
        """The status line names the folder the lesson's files went to."""
        status = getattr(self.win, "status", None)
        if status is not None and result is not None and view.saved:
            status.say(f"lesson {view.name} saved in {view.folder}")

    def shutdown(self) -> None:
        for v in self.views.values():
            v.shutdown()
