"""The Sweep dock: run a sweep (engine.tuning.sweep) on a background thread, watch the heat map
fill in, cancel, resume, load a saved sweep.json, apply a cell to the live session, race two.

The sweep is a job (workbench.jobs.sweep_job) on the window's generator worker, after the live
run the window stops first (workbench.job_dock has the lifecycle). Every finished cell is saved to the folder's sweep.json, so Cancel
leaves a valid partial sweep and Run on the same folder and settings resumes it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QComboBox, QFormLayout, QLabel, QLineEdit, QProgressBar, QPushButton,
                               QScrollArea, QSpinBox, QTabWidget)

from engine.errors import SpecscopeError
from engine.tuning.eta import eta_text

from workbench import dialogs
from workbench.job_dock import JobDock
from workbench.jobs import SweepTick, sweep_job
from workbench.llamacpp_panel import LlamaCppPanel
from workbench.views.heatmap import HeatmapView
from workbench.widgets import ElidedLabel, column, row
from workbench.worker import GeneratorWorker

WORKLOADS = ("code-edit", "specbench", "specbench:summarization,rag", "specbench:qa,translation")


class SweepDock(JobDock):
    apply_cell = Signal(object)          # a cell of sweep.json: use its settings in the session
    race_cells = Signal(str, str)        # two cell ids to race
    kind = "sweep"

    def __init__(self, worker: GeneratorWorker, context: Callable[[], tuple[Any, Any]],
                 before_job: Callable[[], None], parent=None):
        """context() -> (RuntimeSpec, the card's cost profile or None); before_job() frees the
        model (stops the live run)."""
        super().__init__(worker, context, before_job, parent)
        self.result: dict[str, Any] | None = None
        form = self._build_form()
        self._build_buttons()
        self.chosen: str | None = None       # the cell clicked last (what Export offers first)
        self.export_open = None              # the export dialog last opened by the button
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setFormat("idle")
        self.bar.setValue(0)                  # at -1 (no value yet) the bar hides its text
        self.bar.setMinimumWidth(80)
        self.status = ElidedLabel("")        # one line: a long folder path never takes the
        self.status.setObjectName("muted")    # heat map's height (the whole text in its tooltip)
        self.heatmap = HeatmapView()
        self.heatmap.cell_clicked.connect(self._clicked)
        # the deployment engine: llama.cpp's own curve, the sweep priced on it, the command
        self.llamacpp = LlamaCppPanel(lambda: self.result)
        # the heat map and the llama.cpp panel share the dock's lower part as tabs; the panel
        # scrolls, so its many rows never set the dock's (and the window's) least height
        scroll = QScrollArea()
        scroll.setWidget(self.llamacpp)
        scroll.setWidgetResizable(True)
        self.views = QTabWidget()
        self.views.setDocumentMode(True)
        self.views.addTab(self.heatmap, "heat map")
        self.views.addTab(scroll, "llama.cpp")
        # two lines of buttons, the progress bar beside the status line: a third button or the
        # bar on a line of buttons would set the dock's (and so the window's) least width past
        # what a 1024-pixel window has for it
        column(self, form, row(self.run_button, self.cancel_button, self.load_button, 1),
               row(self.apply_button, self.race_button, self.export_button, 1),
               row((self.bar, 2), (self.status, 3)), (self.views, 1))
        self.workload.currentTextChanged.connect(lambda _: self._default_folder())
        self._default_folder()
        self._enable()

    def _build_form(self) -> QFormLayout:
        """The sweep's inputs: workload, drafters, depths and widths, prompts, tokens, folder."""
        self.workload = QComboBox()
        self.workload.setEditable(True)
        self.workload.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.workload.setMinimumContentsLength(10)
        self.workload.addItems(list(WORKLOADS))
        self.workload.setToolTip("code-edit, specbench[:CATEGORY,...] or a .jsonl prompt file")
        pick = QPushButton("File…")
        pick.clicked.connect(self._pick_workload)
        self.drafts = QLineEdit("lookup,tree")
        self.depths = QLineEdit("2,4,8,16")
        self.widths = QLineEdit("1,2,3")
        self.prompts = QSpinBox()
        self.prompts.setRange(0, 480)
        self.prompts.setValue(2)
        self.prompts.setSpecialValueText("all")
        self.new_tokens = QSpinBox()
        self.new_tokens.setRange(1, 4096)
        self.new_tokens.setValue(64)
        self.folder = QLineEdit("")
        self.folder.setToolTip("sweep.json and sweep.csv go here; a sweep already there with the "
                               "same workload and lengths is resumed")
        form = QFormLayout()
        form.addRow("workload", row((self.workload, 1), pick))
        form.addRow("drafters", self.drafts)
        form.addRow("depths", row((self.depths, 1), QLabel("widths"), (self.widths, 1)))
        form.addRow("prompts", row((self.prompts, 1), QLabel("tokens"), (self.new_tokens, 1)))
        form.addRow("folder", self.folder)
        return form

    def _build_buttons(self) -> None:
        self.run_button = QPushButton("Run / resume")
        self.run_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.load_button = QPushButton("Load…")
        self.load_button.clicked.connect(self._load_dialog)
        self.apply_button = QPushButton("Apply best")
        self.apply_button.clicked.connect(self._apply_best)
        self.race_button = QPushButton("Race best two")
        self.race_button.clicked.connect(self._race_best)
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip("a cell (the one clicked last, else the best) as our command "
                                      "line, llama.cpp server flags or vLLM's speculative_config")
        # clicked(bool) would land its `checked` in export_dialog's `show`: call it without
        self.export_button.clicked.connect(lambda: self.export_dialog())

    # ---- settings -------------------------------------------------------------------------
    def config(self):
        from engine.tuning.grid import SweepConfig, parse_ints
        return SweepConfig(workload=self.workload.currentText().strip(),
                           drafts=tuple(x.strip() for x in self.drafts.text().split(",") if x.strip()),
                           depths=parse_ints("depths", self.depths.text()),
                           widths=parse_ints("widths", self.widths.text()),
                           prompts=self.prompts.value() or None, new_tokens=self.new_tokens.value())

    def _default_folder(self) -> None:
        from engine.cost.probe import cache_dir
        slug = re.sub(r"[^A-Za-z0-9]+", "-", Path(self.workload.currentText()).stem).strip("-")
        self.folder.setText(str(cache_dir() / "sweeps" / (slug or "sweep")))

    def _pick_workload(self) -> None:
        path = dialogs.open_file(self, "Prompt file", "Prompts (*.jsonl);;All files (*)")
        if path:
            self.workload.setCurrentText(path)

    # ---- running --------------------------------------------------------------------------
    def start(self) -> bool:
        """Run the sweep the form describes, resuming the folder's sweep.json when it matches."""
        from engine.tuning.sweep_file import load_sweep
        if self.running:
            return False
        try:
            cfg = self.config()
            out = Path(self.folder.text()).expanduser()
            previous = load_sweep(out) if (out / "sweep.json").is_file() else None
        except SpecscopeError as e:
            self.error.emit(str(e))
            return False
        _, profile = self.context()
        self.bar.setValue(0)
        self.bar.setFormat("starting…")
        self.status.setText(f"resuming {out / 'sweep.json'}" if previous else f"sweeping into {out}")
        self.run_job(sweep_job(cfg, out, previous, profile))
        if self.freed:
            self.status.setText(f"{self.status.text()}; the live run was stopped for it")
        return True

    def cancel(self) -> None:
        """Stop after the window in progress; the cells finished so far stay saved."""
        if self.running:
            self.cancel_job()
            self.bar.setFormat("cancelling…")

    def load(self, path: str | Path) -> bool:
        """Show a saved sweep.json (or its folder); Run resumes it if it is incomplete."""
        from engine.tuning.sweep_file import load_sweep
        try:
            res = load_sweep(path)
        except SpecscopeError as e:
            self.error.emit(str(e))
            return False
        p = Path(path)
        self.folder.setText(str(p if p.is_dir() else p.parent))
        cfg = res.get("config", {})
        self.workload.blockSignals(True)
        self.workload.setCurrentText(str(cfg.get("workload", "code-edit")))
        self.workload.blockSignals(False)
        self.drafts.setText(",".join(cfg.get("drafts", ["lookup", "tree"])))
        self.depths.setText(",".join(map(str, cfg.get("depths", [2, 4, 8, 16]))))
        self.widths.setText(",".join(map(str, cfg.get("widths", [1, 2, 3]))))
        self.prompts.setValue(cfg.get("prompts") or 0)
        self.new_tokens.setValue(int(cfg.get("new_tokens", 128)))
        self._show(res)
        self.bar.setValue(1000 if res.get("complete") else int(1000 * len(res["cells"]) / max(1, len(res.get("planned", [])))))
        self.bar.setFormat("complete" if res.get("complete") else "incomplete: Run resumes it")
        return True

    def _load_dialog(self) -> None:
        path = dialogs.open_file(self, "Open sweep", "Sweeps (sweep.json *.json)", self.folder.text())
        if path:
            self.load(path)

    def _show(self, res: dict[str, Any]) -> None:
        self.result = res
        self.heatmap.set_result(res)
        self._enable()

    # ---- from the thread ----------------------------------------------------------------
    def on_item(self, tick: SweepTick) -> None:
        self.bar.setValue(int(1000 * tick.done / max(1, tick.total)))
        self.bar.setFormat(f"%p% · {tick.done}/{tick.total} · {eta_text(tick.eta_s)}")
        self.status.setText(tick.message)
        self._show(tick.result)

    def on_progress(self, stage: str, frac: float) -> None:
        self.bar.setValue(int(1000 * frac))
        self.bar.setFormat(f"{stage} %p%")

    def on_done(self, value) -> None:
        if value is not None:
            self._show(value["result"])
        res = self.result or {}
        if value is None or value["cancelled"]:
            self.bar.setFormat("cancelled: Run resumes it")
            self.status.setText(f"cancelled; {len(res.get('cells', []))} cells saved in "
                                f"{self.folder.text()}")
        else:
            self.bar.setValue(1000)
            self.bar.setFormat("complete")
            self.status.setText(f"done in {res.get('sweep_s', 0):.0f} s of decoding; saved in "
                                f"{self.folder.text()}")

    def on_failed(self, message: str) -> None:
        self.bar.setFormat("failed")

    # ---- the answer -----------------------------------------------------------------------
    def best_two(self) -> list[dict[str, Any]]:
        from engine.tuning.sweep_file import measured
        cells = measured(self.result or {}, None)
        return sorted(cells, key=lambda c: -c["ratio_to_ar"])[:2]

    def _apply_best(self) -> None:
        from engine.tuning.sweep_file import best_cell
        c = best_cell(self.result or {})
        if c is not None:
            self.apply_cell.emit(c)

    def _clicked(self, cell: dict) -> None:
        self.chosen = cell["id"]
        self.apply_cell.emit(cell)

    def export_dialog(self, show: bool = True):
        """The export dialog for the cell clicked last (else the best); shown unless `show` is
        off (tests)."""
        from workbench.cell_export import CellExportDialog
        best = self.best_two()
        dialog = CellExportDialog(self.result or {}, self.chosen or (best[0]["id"] if best else None), self)
        if show:
            dialog.open()            # window-modal, not blocking: the dock's job runs on
            self.export_open = dialog
        return dialog

    def _race_best(self) -> None:
        two = self.best_two()
        if len(two) == 2:
            self.race_cells.emit(two[0]["id"], two[1]["id"])

    def update_buttons(self) -> None:
        self._enable()

    def _enable(self) -> None:
        self.run_button.setEnabled(not self.running)
        self.cancel_button.setEnabled(self.running)
        self.load_button.setEnabled(not self.running)
        has = bool(self.result and self.result.get("best"))
        self.apply_button.setEnabled(has)
        self.race_button.setEnabled(len(self.best_two()) == 2)
        self.export_button.setEnabled(bool(self.best_two()))
