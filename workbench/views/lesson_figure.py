"""A lesson's figure: its panels drawn with pyqtgraph, the write-up's numbers beside this
device's, the reason they differ and the caption, in the window's lesson docks; and the handout
PNG (`render_png`): engine.lessons.svg's figure drawn by Qt, the same as NAME.svg.

It draws any engine.lessons.figure.LessonResult: series are lines, points or bars (grouped by
their x offsets), marks are labelled lines, colors are roles mapped onto the theme.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QSizePolicy, QSplitter, QWidget

from engine.lessons.figure import LessonResult, Panel, Series, fmt

from workbench import theme
from workbench.widgets import column, row

COLORS = {"card": theme.ACCENT, "reference": theme.OVERLAY_COLORS[1], "reference2": theme.OVERLAY_COLORS[0],
          "good": theme.GREEN, "bad": theme.RED, "neutral": theme.GREY, "warn": theme.AMBER,
          "info": theme.BLUE, "text": theme.TEXT}
MAX_POINT_LABELS = 12        # more labels than this in one series would hide the points


def color(role: str) -> str:
    return COLORS.get(role, theme.TEXT)


class LessonFigure(QWidget):
    """Title, the panels side by side, then the comparison table with the reason and caption."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.result: LessonResult | None = None
        self.title = QLabel("")
        self.title.setStyleSheet(f"color: {theme.TEXT}; font-size: 13pt; font-weight: bold;")
        self.title.setWordWrap(True)
        self.claim = QLabel("")
        self.claim.setObjectName("muted")
        self.claim.setWordWrap(True)
        self.claim.setTextFormat(Qt.TextFormat.PlainText)
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setBackground(theme.PANEL)
        self.plots.setMinimumHeight(180)
        self.table = QLabel("")
        self.table.setWordWrap(True)
        self.table.setTextFormat(Qt.TextFormat.RichText)
        self.table.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.table.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.notes = QLabel("")
        self.notes.setWordWrap(True)
        self.notes.setTextFormat(Qt.TextFormat.RichText)
        self.notes.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.notes.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.legend = QLabel("")
        self.legend.setObjectName("lesson-legend")
        self.legend.setWordWrap(True)
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.split = _figure_over_text(self.plots, self.legend, self.claim, self.table, self.notes)
        column(self, self.title, (self.split, 1), margins=(10, 8, 10, 8), spacing=6)
        self.panels: list = []

    def clear(self) -> None:
        self.result = None
        self.plots.clear()
        self.panels = []
        for w in (self.title, self.claim, self.legend, self.table, self.notes):
            w.setText("")

    def set_result(self, result: LessonResult) -> None:
        self.clear()
        self.result = result
        self.title.setText(f"Lesson {result.name}: {result.title}")
        self.claim.setText(f"The write-up ({result.source}): {result.claim}")
        for i, panel in enumerate(result.panels):
            plot = self.plots.addPlot(row=0, col=i)
            draw_panel(plot, panel, overlay_legend=False)
            self.panels.append(plot)
        self.legend.setText(legend_html(result))
        self.table.setText(comparison_html(result))
        self.notes.setText(
            f"<p style='color:{theme.TEXT}'><b>Why they differ.</b> {html.escape(result.why)}</p>"
            f"<p style='color:{theme.MUTED}'>{html.escape(result.caption)}</p>"
            f"<p style='color:{theme.MUTED}'>{html.escape(result.device)} · {html.escape(result.model)} · "
            f"{html.escape(result.budget)}</p>")


def _figure_over_text(plots: QWidget, legend: QLabel, claim: QLabel, table: QLabel,
                      notes: QLabel) -> QSplitter:
    """The plots and their legend above; the claim, the table and "Why they differ" below in a scroll area: a vertical
    splitter with least heights, so a short dock scrolls the text instead of drawing it over the
    figure (issue 35, 4)."""
    text = QWidget()
    text.setObjectName("lesson-text")
    column(text, claim, row((table, 5), (notes, 4)), margins=(0, 0, 0, 0), spacing=4)
    scroll = QScrollArea()
    scroll.setWidget(text)
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)   # a narrow dock scrolls the table
    scroll.setMinimumHeight(90)
    top = QWidget()
    column(top, (plots, 1), legend, margins=(0, 0, 0, 4), spacing=2)
    split = QSplitter(Qt.Orientation.Vertical)
    split.addWidget(top)
    split.addWidget(scroll)
    split.setChildrenCollapsible(False)
    split.setStretchFactor(0, 3)
    split.setStretchFactor(1, 2)
    return split


def comparison_html(result: LessonResult) -> str:
    head = (f"<tr><th align='left' style='color:{theme.MUTED}'>quantity</th>"
            f"<th align='left' style='color:{theme.OVERLAY_COLORS[1]}'>the write-up</th>"
            f"<th align='left' style='color:{theme.ACCENT}'>{html.escape(result.here_long)}</th></tr>")
    rows = "".join(
        f"<tr><td style='color:{theme.MUTED}'>{html.escape(c.quantity)}</td>"
        f"<td>{html.escape(c.shown('write_up'))}</td><td><b>{html.escape(c.shown('here'))}</b></td></tr>"
        for c in result.comparisons)
    return f"<table cellspacing='0' cellpadding='3' style='color:{theme.TEXT}'>{head}{rows}</table>"


def _x(panel: Panel, xs) -> np.ndarray:
    a = np.asarray(xs, dtype=float)
    return np.log2(a) if panel.log_x else a


def _bar_width(panel: Panel) -> float:
    bars = [s for s in panel.series if s.style == "bars"]
    if not bars:
        return 0.6
    xs = sorted({x for s in bars for x in s.x})
    gaps = [b - a for a, b in zip(xs, xs[1:]) if b - a > 1e-9]
    return 0.9 * (min(gaps) if gaps else 1.0)


SWATCH = {"bars": "\u25a0", "points": "\u25cf", "linepoints": "\u2500\u25cf\u2500"}


def legend_html(result: LessonResult) -> str:
    """Every drawn series once, as a coloured swatch and its name: a wrapping line under the
    plots (over a plot it hid the knee's marker: issue 35, 4)."""
    seen, parts = set(), []
    for panel in result.panels:
        for s in panel.series:
            if not s.x or s.name in seen:
                continue
            seen.add(s.name)
            mark = SWATCH.get(s.style, "\u254c\u254c" if s.dashed else "\u2501\u2501")
            parts.append(f"<span style='color:{color(s.color)}'>{mark}</span>&nbsp;{html.escape(s.name)}")
    return f"<span style='color:{theme.TEXT}'>{' &nbsp;&nbsp; '.join(parts)}</span>"


def draw_panel(plot, panel: Panel, overlay_legend: bool = True) -> None:
    """`panel` drawn into `plot`, with a legend over it unless the caller shows one
    (LessonFigure: legend_html under the plots)."""
    theme.style_plot(plot, html.escape(panel.title), left=html.escape(panel.y_label),
                     bottom=html.escape(panel.x_label))
    plot.hideButtons()
    plot.setMenuEnabled(False)
    legend = (plot.addLegend(offset=(8, 6), labelTextColor=theme.TEXT, labelTextSize="8pt",
                             brush=pg.mkBrush(theme.PANEL + "d8")) if overlay_legend else None)
    width = _bar_width(panel)
    for s in panel.series:
        _draw_series(plot, panel, s, width)
    _draw_marks(plot, panel)
    for side in ("left", "bottom"):
        plot.getAxis(side).enableAutoSIPrefix(False)
    axis = plot.getAxis("bottom")
    if panel.x_ticks:
        axis.setTicks([[(x, t) for x, t in panel.x_ticks]])
    elif panel.log_x:
        xs = [x for s in panel.series for x in s.x if x > 0] or [1.0]
        lo, hi = math.floor(math.log2(min(xs))), math.ceil(math.log2(max(xs)))
        axis.setTicks([[(float(k), f"{2 ** k:g}") for k in range(lo, hi + 1)]])
    if panel.log_y:
        ys = [y for s in panel.series for y in s.y if y > 0] or [1.0]
        lo, hi = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
        steps = (1, 2, 5) if hi - lo <= 3 else (1,)
        stride = max(1, (hi - lo + 1) // 8)
        ticks = [(math.log10(m * 10 ** k), fmt(m * 10 ** k) if m * 10 ** k >= 0.01 else f"{m * 10 ** k:.0e}")
                 for k in range(lo, hi + 1, stride) for m in steps if min(ys) / 1.5 <= m * 10 ** k <= max(ys) * 1.5]
        plot.getAxis("left").setTicks([ticks])
    if panel.y_range is not None:
        plot.setYRange(*panel.y_range, padding=0.02)
    else:
        _headroom(plot, panel)
    if legend is not None:
        legend.setZValue(20)


def _mark_label_opts(panel: Panel, at: float, nth: int, c: str) -> dict:
    """Where an x mark's label goes: staggered down the line (two knees' labels do not share a
    row), and anchored at the line's place across the data (a line 30% of the way across holds
    its label 30% of the way along it), so a label narrower than the plot is never cut."""
    xs = [float(v) for s in panel.series for v in _x(panel, s.x)] or [at]
    lo, hi = min(xs), max(xs)
    f = min(1.0, max(0.0, (at - lo) / (hi - lo))) if hi > lo else 0.5
    return {"color": c, "position": 0.86 - 0.17 * (nth % 4), "anchors": [(f, 0.5), (f, 0.5)]}


def _draw_marks(plot, panel: Panel) -> None:
    nth = 0
    for m in panel.marks:
        at = math.log2(m.at) if (m.axis == "x" and panel.log_x) else m.at
        if m.axis == "y" and panel.log_y:
            at = math.log10(m.at) if m.at > 0 else 0.0
        if m.axis == "x":
            opts = _mark_label_opts(panel, at, nth, color(m.color))
            nth += 1
        else:
            opts = {"color": color(m.color), "position": 0.97, "anchors": [(1, 1), (1, 1)]}
        line = pg.InfiniteLine(pos=at, angle=90 if m.axis == "x" else 0,
                               pen=pg.mkPen(color(m.color), width=1.2, style=Qt.PenStyle.DashLine),
                               label=m.label, labelOpts=opts)      # plain text, not rich
        plot.addItem(line)


def _headroom(plot, panel: Panel) -> None:
    """The y range of the data (and y marks) with room above it for the legend."""
    ys = [y for s in panel.series for y in s.y] + [m.at for m in panel.marks if m.axis == "y"]
    if panel.log_y:
        ys = [math.log10(y) for y in ys if y > 0]
    ys = [y for y in ys if math.isfinite(y)]
    if not ys:
        return
    lo, hi = min(ys), max(ys)
    if any(s.style == "bars" for s in panel.series):
        lo = min(lo, 0.0)
    span = (hi - lo) or abs(hi) or 1.0
    plot.setYRange(lo - 0.04 * span, hi + 0.4 * span, padding=0)


def _draw_series(plot, panel: Panel, s: Series, width: float) -> None:
    if not s.x:
        return
    c = color(s.color)
    name = html.escape(s.name)          # legend labels are rich text: '<' would cut them short
    x = _x(panel, s.x)
    y = np.asarray(s.y, dtype=float)
    if panel.log_y:
        y = np.log10(np.where(y > 0, y, np.nan))
    if s.style == "bars":
        item = pg.BarGraphItem(x=x, height=y, width=width, brush=pg.mkBrush(c + "d0"), pen=pg.mkPen(c),
                               name=name)
        plot.addItem(item)
    elif s.style == "points":
        item = pg.ScatterPlotItem(x, y, size=9, brush=pg.mkBrush(c + "e0"), pen=pg.mkPen(theme.PANEL, width=0.8),
                                  name=name)
        plot.addItem(item)
    else:
        pen = pg.mkPen(c, width=2.2, style=Qt.PenStyle.DashLine if s.dashed else Qt.PenStyle.SolidLine)
        kw = {"symbol": "o", "symbolSize": 6, "symbolBrush": c, "symbolPen": None} if s.style == "linepoints" else {}
        plot.plot(x, y, pen=pen, name=name, **kw)
    labelled = [(xi, yi, t) for xi, yi, t in zip(x, y, s.labels) if t] if s.labels else []
    for xi, yi, t in labelled[:MAX_POINT_LABELS]:
        text = pg.TextItem(t, color=c, anchor=(0.5, 1.15) if s.style == "bars" else (0, 1.1))
        text.setFont(theme.ui_font(7.5))
        text.setPos(float(xi), float(yi))
        plot.addItem(text)


def svg_to_png(svg: str, path: str | Path, scale: float = 1.0) -> Path:
    """An SVG document drawn into a PNG by Qt (a QGuiApplication must exist; no widget is shown)."""
    from PySide6.QtCore import QByteArray, QRectF
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer
    renderer = QSvgRenderer(QByteArray(svg.encode("utf-8")))
    if not renderer.isValid():
        raise ValueError("the lesson's SVG does not parse")
    size = renderer.defaultSize()
    img = QImage(int(size.width() * scale), int(size.height() * scale), QImage.Format.Format_ARGB32)
    img.fill(Qt.GlobalColor.white)
    painter = QPainter(img)
    painter.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
    renderer.render(painter, QRectF(0, 0, img.width(), img.height()))
    painter.end()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not img.save(str(path)):
        raise OSError(f"could not write {path}")
    return path


def render_png(result: LessonResult, path: str | Path, theme_name: str = "light") -> Path:
    """The lesson's handout figure (engine.lessons.svg, light by default) as a PNG, drawn
    offscreen: the same figure as NAME.svg. A QApplication must exist (the command line makes
    one with the offscreen platform)."""
    from PySide6.QtGui import QGuiApplication

    from engine.lessons.svg import render_svg
    if QGuiApplication.instance() is None:
        raise RuntimeError("render_png needs a QGuiApplication")
    return svg_to_png(render_svg(result, theme_name), path)


__all__ = ["LessonFigure", "render_png", "svg_to_png", "fmt"]
