"""Export a sweep cell from the window: its settings as our command line, llama.cpp server flags
or vLLM's speculative_config (engine.tuning.export, what `specscope export` prints), to copy or
save. The notes say where the other engine differs from what the sweep measured."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (QApplication, QComboBox, QDialog, QFormLayout, QLabel, QPlainTextEdit,
                               QPushButton)

from workbench import dialogs, theme
from workbench.widgets import column, row

# format -> (label, file suffix of a saved export)
FORMATS = {"cli": ("specscope command line", ".sh"), "llamacpp": ("llama.cpp server flags", ".txt"),
           "vllm": ("vLLM speculative_config (JSON)", ".json")}


class CellExportDialog(QDialog):
    def __init__(self, result: dict[str, Any], cell_id: str | None = None, parent=None):
        from engine.tuning.sweep_file import measured
        super().__init__(parent)
        self.setWindowTitle("Export a sweep cell")
        self.result = result
        self.cells = sorted(measured(result, None), key=lambda c: -c["ratio_to_ar"])
        self.cell = QComboBox()
        for c in self.cells:
            self.cell.addItem(f"{c['id']}  ({c['ratio_to_ar']:.2f}x plain decoding)", c["id"])
        if cell_id is not None and self.cell.findData(cell_id) >= 0:
            self.cell.setCurrentIndex(self.cell.findData(cell_id))
        self.format = QComboBox()
        for key, (label, _) in FORMATS.items():
            self.format.addItem(label, key)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setFont(theme.mono_font(9.5))
        self.notes = QLabel("")
        self.notes.setObjectName("muted")
        self.notes.setWordWrap(True)
        copy = QPushButton("Copy")
        copy.clicked.connect(self.copy)
        save = QPushButton("Save…")
        save.clicked.connect(self._save_dialog)
        close = QPushButton("Close")
        close.clicked.connect(self.accept)
        form = QFormLayout()
        form.addRow("cell", self.cell)
        form.addRow("for", self.format)
        column(self, form, (self.text, 1), self.notes, row(1, copy, save, close))
        self.resize(640, 320)
        self.cell.currentIndexChanged.connect(self.refresh)
        self.format.currentIndexChanged.connect(self.refresh)
        self.refresh()

    def choose(self, cell_id: str, fmt: str) -> None:
        self.cell.setCurrentIndex(self.cell.findData(cell_id))
        self.format.setCurrentIndex(self.format.findData(fmt))

    def refresh(self) -> None:
        from engine.tuning.export import export_cell
        if not self.cells:
            self.text.setPlainText("")
            self.notes.setText("no measured cell yet: run or resume the sweep first")
            return
        cell = self.cells[max(0, self.cell.currentIndex())]
        ex = export_cell(cell, self.result, self.format.currentData())
        self.text.setPlainText(ex.text)
        self.notes.setText("\n".join(f"note: {n}" for n in ex.notes))

    def copy(self) -> None:
        QApplication.clipboard().setText(self.text.toPlainText())

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.text.toPlainText().rstrip("\n") + "\n")

    def _save_dialog(self) -> None:
        fmt = self.format.currentData()
        name = f"specscope-{self.cell.currentData().replace(':', '-')}-{fmt}{FORMATS[fmt][1]}"
        path = dialogs.save_file(self, "Save the export", name, "All files (*)")
        if path:
            self.save(path)
