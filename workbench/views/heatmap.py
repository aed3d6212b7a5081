"""The sweep's heat map: ratio to AR of every cell, depths across, one row per drafter and
width (the adaptive row below), the best fixed cell outlined; clicking a cell says which.

Reads only the sweep's result dict (engine.tuning.sweep_file's sweep.json form). Colours
diverge at 1.0x AR: green where the cell beat plain decoding, red where it lost, grey where it
was skipped (the cost profile predicted it to lose) or has not run yet.
"""

from __future__ import annotations

import math
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QGraphicsRectItem, QLabel, QWidget

from workbench import theme
from workbench.widgets import column


def row_key(cell: dict[str, Any]) -> str:
    """The heat-map row a cell sits in."""
    if cell["adaptive"]:
        return f"adaptive {cell['draft']}"
    return f"tree w{cell['width']}" if cell["draft"] == "tree" else cell["draft"]   # chains: lookup, ngram-simple, ...


def ratio_color(ratio: float | None) -> QColor:
    """Green above 1.0x plain decoding, red below (full at 2x / 0.5x), grey for no value."""
    if ratio is None or not math.isfinite(ratio):
        return theme.qcolor(theme.GREY, 90)
    t = max(-1.0, min(1.0, math.log2(max(ratio, 1e-6))))
    base = theme.qcolor(theme.GREEN if t >= 0 else theme.RED)
    panel = theme.qcolor(theme.PANEL_ALT)
    a = 0.25 + 0.75 * abs(t)
    return QColor(int(panel.red() + (base.red() - panel.red()) * a),
                  int(panel.green() + (base.green() - panel.green()) * a),
                  int(panel.blue() + (base.blue() - panel.blue()) * a))


class HeatmapView(QWidget):
    cell_clicked = Signal(object)          # the cell's entry (a dict of sweep.json's cells)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.result: dict[str, Any] | None = None
        self.rows: list[str] = []
        self.depths: list[int] = []
        self.cells: dict[tuple[int, int], dict[str, Any]] = {}   # (column, row) -> cell
        self.plot_widget = pg.PlotWidget()
        self.plot = self.plot_widget.getPlotItem()
        theme.style_plot(self.plot, "", left="", bottom="draft depth")
        self.plot.hideButtons()
        self.plot.setMouseEnabled(False, False)
        self.plot.showGrid(False, False)
        self.plot.getViewBox().invertY(True)
        self.plot.getAxis("left").setWidth(112)
        self.caption = QLabel("no sweep yet: run one, or load a saved sweep.json")
        self.caption.setObjectName("muted")
        self.caption.setWordWrap(True)
        column(self, (self.plot_widget, 1), self.caption)
        self._items: list = []
        self.plot.scene().sigMouseClicked.connect(self._on_click)

    # ---- drawing ------------------------------------------------------------------------
    def set_result(self, result: dict[str, Any] | None) -> None:
        self.result = result
        for it in self._items:
            self.plot.removeItem(it)
        self._items = []
        self.cells = {}
        if not result:
            self.rows, self.depths = [], []
            self.caption.setText("no sweep yet: run one, or load a saved sweep.json")
            return
        cfg = result.get("config", {})
        planned = result.get("planned") or [c["id"] for c in result.get("cells", [])]
        self.depths = sorted(set(cfg.get("depths") or [c["depth"] for c in result["cells"]]))
        self.rows = list(dict.fromkeys(_row_of_id(i) for i in planned))
        done = {c["id"]: c for c in result.get("cells", [])}
        best = result.get("best")
        for cid in planned:
            c = done.get(cid) or _pending(cid)
            x, y = self.depths.index(c["depth"]) if c["depth"] in self.depths else len(self.depths) - 1, \
                self.rows.index(row_key(c))
            self.cells[x, y] = c
            ratio = c.get("ratio_to_ar") if c.get("status") == "done" else None
            rect = QGraphicsRectItem(QRectF(x - 0.47, y - 0.45, 0.94, 0.9))
            rect.setBrush(ratio_color(ratio))
            is_best = cid == best
            rect.setPen(pg.mkPen(theme.AMBER, width=3) if is_best else pg.mkPen(theme.BORDER, width=1))
            self.plot.addItem(rect)
            label = ("skip" if c.get("status") == "skipped" else "…" if ratio is None else f"{ratio:.2f}x")
            if c["adaptive"]:
                label = f"≤d{c['depth']}: {label}"
            text = pg.TextItem(("★ " if is_best else "") + label, color=theme.TEXT, anchor=(0.5, 0.5))
            text.setPos(x, y)
            self.plot.addItem(text)
            self._items += [rect, text]
        self.plot.getAxis("bottom").setTicks([[(i, str(d)) for i, d in enumerate(self.depths)]])
        self.plot.getAxis("left").setTicks([[(i, r) for i, r in enumerate(self.rows)]])
        self.plot.setXRange(-0.5, len(self.depths) - 0.5, padding=0.02)
        self.plot.setYRange(-0.5, len(self.rows) - 0.5, padding=0.02)
        self.caption.setText(caption(result))

    def cell_center(self, cell_id: str) -> QPointF:
        """Where cell `cell_id` sits, in the plot widget's coordinates (for clicks and tests)."""
        for (x, y), c in self.cells.items():
            if c["id"] == cell_id:
                scene = self.plot.getViewBox().mapViewToScene(QPointF(x, y))
                return QPointF(self.plot_widget.mapFromScene(scene))
        raise KeyError(cell_id)

    # ---- clicks -------------------------------------------------------------------------
    def _on_click(self, ev) -> None:
        if ev.button() != Qt.MouseButton.LeftButton:
            return
        p = self.plot.getViewBox().mapSceneToView(ev.scenePos())
        c = self.cells.get((round(p.x()), round(p.y())))
        if c is not None and c.get("status") == "done":
            ev.accept()
            self.cell_clicked.emit(c)


def _row_of_id(cid: str) -> str:
    return row_key(_pending(cid))


def _pending(cid: str) -> dict[str, Any]:
    """A cell not run yet, from its id (`tree:8:3`, `adaptive:tree:16:3`)."""
    parts = cid.split(":")
    adaptive = parts[0] == "adaptive"
    draft, depth, width = parts[-3], int(parts[-2]), int(parts[-1])
    return {"id": cid, "draft": draft, "depth": depth, "width": width, "adaptive": adaptive,
            "status": "pending", "ratio_to_ar": None}


def baseline_of(result: dict[str, Any]):
    """The sweep's plain-decoding baseline (engine.cost.baseline): its AR runs' decode tok/s
    (prefill excluded, what every cell's ratio divides by); None when there is none."""
    from engine.cost.baseline import Baseline
    tok_s = (result.get("ar") or {}).get("decode_tok_s")
    return Baseline(tok_s, "measured") if tok_s else None


def caption(result: dict[str, Any]) -> str:
    """One line under the map: best cell, the baseline, adaptive against the best, skipped cells.
    Tok/s are decode tok/s (prefill excluded), the numbers the ratios are of."""
    ar = result.get("ar") or {}
    best = next((c for c in result.get("cells", []) if c["id"] == result.get("best")), None)
    parts = [f"{result.get('device', '?')}, {len(result.get('prompts', []))} prompts × "
             f"{result.get('config', {}).get('new_tokens', '?')} tokens"]
    base = baseline_of(result)
    if base is not None:
        parts.append(base.label() + (f" (after the cells: {ar['drift']:.2f}x)"
                                     if ar.get("drift") is not None else ""))
    if best:
        tok_s = best.get("decode_tok_s") or best["tok_s"]
        parts.append(f"best {best['id']}: {best['ratio_to_ar']:.2f}x plain decoding, {tok_s:.1f} tok/s, "
                     f"{best['tokens_per_pass']:.2f} tok/pass")
    for cid, r in (result.get("adaptive_vs_best") or {}).items():
        parts.append(f"{cid.split(':')[1]} adaptive {r:.2f} of best")
    parts.append(f"{result.get('skipped', 0)} skipped")
    if not result.get("complete"):
        parts.append("incomplete: Run resumes it")
    parts.append("click a cell to use its settings")
    return " · ".join(parts)
