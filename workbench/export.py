"""Export: any plot as PNG (pyqtgraph's ImageExporter), the token tree and the whole window as
PNG (rendered / grabbed), the verify rows of the whole run as CSV."""

from __future__ import annotations

import csv
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMenu, QToolButton

from workbench import dialogs, theme
from workbench.store import EventStore

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
    elif name == "tree":                # the whole tree, under its header and legend
        win.tree.render_image(scale).save(str(path))
    else:
        widget = {"window": win, "rows": win.rows, "output": win.output}[name]
        widget.grab().save(str(path))
    return path


CSV_COLUMNS = ["window", "row", "node", "depth", "draft_token", "draft_text", "target_token",
               "target_text", "p", "q", "accept_prob", "outcome", "near_tie", "penalty_flipped", "top5"]


def rows_csv(store: EventStore, path: str | Path) -> Path:
    """Every verify row of every window of the run, one line each, raw token text (not the
    view's ␣/⏎ display form)."""
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for ev in store.events:
            for r in ev.rows:
                w.writerow([ev.index, r.row, r.node, r.depth,
                            "" if r.draft_token is None else r.draft_token, r.draft_text,
                            r.target_token, r.target_text,
                            "" if r.p is None else r.p, "" if r.q is None else r.q,
                            "" if r.accept_prob is None else r.accept_prob, r.outcome, r.near_tie,
                            bool(r.penalty and r.penalty.flipped),
                            " | ".join(f"{t[0]}:{t[1]!r}:{t[2]:.6f}" for t in r.top)])
    return path


def export_csv(win, path: str | Path) -> Path:
    """The run's verify rows (every window, not only the one shown) as CSV."""
    return rows_csv(win.store, path)


def _ask_png(win, name: str) -> None:
    path = dialogs.save_file(win, f"Export {VIEWS[name]}", f"specscope-{name}.png", "PNG (*.png)")
    if path:
        export_png(win, name, path)
        win.status.say(f"exported {VIEWS[name].lower()} to {path}")


def _ask_csv(win) -> None:
    path = dialogs.save_file(win, "Export the run's verify rows", "specscope-rows.csv", "CSV (*.csv)")
    if path:
        export_csv(win, path)
        rows = sum(len(ev.rows) for ev in win.store.events)
        win.status.say(f"exported {rows} verify rows of {len(win.store)} windows to {path}")


def export_menu(win, parent=None) -> QMenu:
    m = QMenu("Export", parent)
    for name, label in VIEWS.items():
        m.addAction(f"{label} as PNG…", lambda n=name: _ask_png(win, n))
    m.addSeparator()
    m.addAction("Verify rows of the run as CSV…", lambda: _ask_csv(win))
    return m


class ExportButton(QToolButton):
    def __init__(self, win):
        super().__init__(win)
        self.setText("Export ▾")
        self.setIcon(theme.icon_export())
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setMenu(export_menu(win, self))
