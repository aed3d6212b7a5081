"""Export: any plot as PNG (pyqtgraph's ImageExporter), the token tree and the whole window as
PNG (rendered / grabbed), the verify rows as CSV."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QFileDialog, QMenu, QToolButton

from workbench import theme

# name -> label; the order of the export menu
VIEWS = {"window": "Whole window", "tree": "Token tree", "roofline": "Roofline", "stats": "Stats",
         "penalty": "Penalty history", "rows": "Verify rows (table image)", "output": "Output"}


def export_png(win, name: str, path: str | Path, scale: float = 2.0) -> Path:
    """Write view `name` of MainWindow `win` as a PNG and return the path."""
    import pyqtgraph.exporters as pge

    path = Path(path)
    if name in ("roofline", "stats", "penalty"):
        item = {"roofline": lambda: win.roofline.plot, "stats": lambda: win.stats.glw.ci,
                "penalty": lambda: win.penalty.plot}[name]()
        ex = pge.ImageExporter(item)
        ex.parameters()["width"] = int(item.boundingRect().width() * scale)
        ex.export(str(path))
    elif name == "tree":
        scene = win.tree.scene
        r = scene.itemsBoundingRect().adjusted(-16, -16, 16, 16)
        img = QImage(int(r.width() * scale), int(r.height() * scale), QImage.Format.Format_ARGB32)
        img.fill(QColor(theme.PANEL))
        p = QPainter(img)
        p.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
        scene.render(p, QRectF(0, 0, img.width(), img.height()), r)
        p.end()
        img.save(str(path))
    else:
        widget = {"window": win, "rows": win.rows, "output": win.output}[name]
        widget.grab().save(str(path))
    return path


def export_csv(win, path: str | Path) -> Path:
    return win.rows.export_csv(path)


def _ask_png(win, name: str) -> None:
    path, _ = QFileDialog.getSaveFileName(win, f"Export {VIEWS[name]}", f"specscope-{name}.png", "PNG (*.png)")
    if path:
        export_png(win, name, path)
        win.status.say(f"exported {VIEWS[name].lower()} to {path}")


def _ask_csv(win) -> None:
    path, _ = QFileDialog.getSaveFileName(win, "Export verify rows", "specscope-rows.csv", "CSV (*.csv)")
    if path:
        export_csv(win, path)
        win.status.say(f"exported the verify rows to {path}")


def export_menu(win, parent=None) -> QMenu:
    m = QMenu("Export", parent)
    for name, label in VIEWS.items():
        m.addAction(f"{label} as PNG…", lambda n=name: _ask_png(win, n))
    m.addSeparator()
    m.addAction("Verify rows as CSV…", lambda: _ask_csv(win))
    return m


class ExportButton(QToolButton):
    def __init__(self, win):
        super().__init__(win)
        self.setText("Export ▾")
        self.setIcon(theme.icon_export())
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setMenu(export_menu(win, self))
