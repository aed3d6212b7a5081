"""One panel of a lesson's figure as SVG: axes in the data's own range (a panel's y_range when
it gives one), readable ticks, series (lines, points, bars), labelled marks, point labels placed
where they overlap nothing already drawn, and the legend under the plot, never over the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.lessons.figure import Panel, Series, fmt
from engine.lessons.svg_canvas import Canvas, box_overlaps, text_width, wrap

TICK_PX, LABEL_PX, TITLE_PX, LEGEND_PX, NOTE_PX = 16, 17, 19, 16, 15
MAX_POINT_LABELS = 12


@dataclass(frozen=True)
class Scale:
    """Data (after the axis's log) to pixels."""
    lo: float
    hi: float
    p0: float
    p1: float

    def __call__(self, v: float) -> float:
        span = (self.hi - self.lo) or 1.0
        return self.p0 + (v - self.lo) / span * (self.p1 - self.p0)


def tx(panel: Panel, v: float, axis: str) -> float:
    """A value on its axis's scale: log2 for log x (row counts), log10 for log y; NaN if <= 0."""
    log = panel.log_x if axis == "x" else panel.log_y
    if not log:
        return float(v)
    if v <= 0:
        return math.nan
    return math.log2(v) if axis == "x" else math.log10(v)


def nice_ticks(lo: float, hi: float, n: int = 6) -> tuple[list[float], float]:
    """Round ticks (1, 2, 5 x 10^k) covering [lo, hi], and their step."""
    span = (hi - lo) or abs(hi) or 1.0
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, v = [], first
    while v <= hi + 1e-9 * span:
        ticks.append(round(v, 12))
        v += step
    return ticks, step


def tick_text(v: float, step: float) -> str:
    if step >= 1 and float(v).is_integer():
        return f"{int(v):,}"
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) + (1 if str(step).rstrip("0").endswith("5") else 0)
    return f"{v:.{decimals}f}"


def bar_width(panel: Panel) -> float:
    xs = sorted({x for s in panel.series if s.style == "bars" for x in s.x})
    gaps = [b - a for a, b in zip(xs, xs[1:]) if b - a > 1e-9]
    return min(0.6, 0.9 * min(gaps)) if gaps else 0.6


def x_range(panel: Panel) -> tuple[float, float]:
    xs = [tx(panel, x, "x") for s in panel.series for x in s.x]
    xs += [tx(panel, m.at, "x") for m in panel.marks if m.axis == "x"] + [x for x, _ in panel.x_ticks]
    xs = [x for x in xs if math.isfinite(x)] or [0.0, 1.0]
    lo, hi = min(xs), max(xs)
    if panel.x_ticks or any(s.style == "bars" for s in panel.series):
        return lo - 0.6, hi + 0.6
    pad = 0.03 * ((hi - lo) or 1.0)
    return lo - pad, hi + pad


def y_range(panel: Panel) -> tuple[float, float]:
    if panel.y_range is not None:
        return panel.y_range
    ys = [tx(panel, y, "y") for s in panel.series for y in s.y]
    ys += [tx(panel, m.at, "y") for m in panel.marks if m.axis == "y"]
    ys = [y for y in ys if math.isfinite(y)] or [0.0, 1.0]
    lo, hi = min(ys), max(ys)
    bars = any(s.style == "bars" for s in panel.series)
    if bars and not panel.log_y:
        lo = min(lo, 0.0)
    span = (hi - lo) or abs(hi) or 1.0
    return (lo if bars and lo == 0 else lo - 0.05 * span), hi + (0.12 if bars else 0.06) * span


def y_ticks(panel: Panel, lo: float, hi: float) -> list[tuple[float, str]]:
    if not panel.log_y:
        ticks, step = nice_ticks(lo, hi)
        return [(t, tick_text(t, step)) for t in ticks if lo - 1e-9 <= t <= hi + 1e-9]
    k0, k1 = math.floor(lo), math.ceil(hi)
    steps = (1, 2, 5) if k1 - k0 <= 3 else (1,)
    out = []
    for k in range(k0, k1 + 1):
        for m in steps:
            v = m * 10 ** k
            if lo - 1e-9 <= math.log10(v) <= hi + 1e-9:
                out.append((math.log10(v), fmt(v) if v >= 0.01 else f"{v:.0e}"))
    return out


def x_ticks(panel: Panel, lo: float, hi: float) -> list[tuple[float, str]]:
    if panel.x_ticks:
        return list(panel.x_ticks)
    if panel.log_x:
        return [(float(k), f"{2 ** k:g}") for k in range(math.ceil(lo), math.floor(hi) + 1)]
    ticks, step = nice_ticks(lo, hi, 8)
    return [(t, tick_text(t, step)) for t in ticks if lo - 1e-9 <= t <= hi + 1e-9]


def legend_rows(panel: Panel, width: float) -> list[list[tuple[Series, list[str], float]]]:
    """The legend laid out in rows under the plot: (series, wrapped text, entry width) each."""
    rows: list[list[tuple[Series, list[str], float]]] = [[]]
    used = 0.0
    for s in panel.series:
        text = wrap(s.name, LEGEND_PX, width - 40)
        w = 40 + max(text_width(t, LEGEND_PX) for t in text) + 24
        if rows[-1] and used + w > width:
            rows.append([])
            used = 0.0
        rows[-1].append((s, text, w))
        used += w
    return [r for r in rows if r]


def legend_height(panel: Panel, width: float) -> float:
    return sum(max(len(t) for _, t, _ in row) * LEGEND_PX * 1.3 + 6 for row in legend_rows(panel, width))


def swatch(c: Canvas, s: Series, x: float, y: float) -> None:
    col = c.pal.color(s.color)
    if s.style == "bars":
        c.rect(x, y - 11, 26, 14, col, opacity=0.85)
    elif s.style == "points":
        c.circle(x + 13, y - 5, 6, col, c.pal.bg)
    else:
        c.line(x, y - 5, x + 28, y - 5, col, 3, "8 5" if s.dashed else None)
        if s.style == "linepoints":
            c.circle(x + 14, y - 5, 4.5, col)


def draw_legend(c: Canvas, panel: Panel, x: float, y: float, width: float) -> float:
    for row in legend_rows(panel, width):
        cx = x
        for s, text, w in row:
            swatch(c, s, cx, y + LEGEND_PX)
            c.lines(cx + 36, y + LEGEND_PX, text, LEGEND_PX)
            cx += w
        y += max(len(t) for _, t, _ in row) * LEGEND_PX * 1.3 + 6
    return y


@dataclass
class Plot:
    """A panel's plot box on the canvas, its scales, and the boxes taken by what is drawn in it
    (marks' labels, points, point labels) so that later labels avoid them."""
    c: Canvas
    panel: Panel
    sx: Scale
    sy: Scale
    taken: list[tuple[float, float, float, float]]

    @property
    def box(self) -> tuple[float, float, float, float]:
        return self.sx.p0, self.sy.p1, self.sx.p1, self.sy.p0

    def xy(self, x: float, y: float) -> tuple[float, float] | None:
        u, v = tx(self.panel, x, "x"), tx(self.panel, y, "y")
        if not (math.isfinite(u) and math.isfinite(v)):
            return None
        top, bottom = self.sy.p1, self.sy.p0
        return self.sx(u), min(bottom, max(top, self.sy(v)))

    def place(self, x: float, y: float, text: str, color: str, spots) -> bool:
        """Write `text` at the first of `spots` ((dx, dy, anchor) from (x, y)) that stays inside
        the plot and overlaps nothing taken; False when none is free (the label is left out:
        it is in the CSV)."""
        w, h = text_width(text, NOTE_PX), NOTE_PX * 1.15
        x0, y0, x1, y1 = self.box
        for dx, dy, anchor in spots:
            left = x + dx - (w if anchor == "end" else w / 2 if anchor == "middle" else 0)
            b = (left, y + dy - h * 0.85, left + w, y + dy + h * 0.15)
            if b[0] < x0 or b[2] > x1 or b[1] < y0 or b[3] > y1:
                continue
            if any(box_overlaps(b, t) for t in self.taken):
                continue
            self.taken.append(b)
            self.c.text(x + dx, y + dy, text, NOTE_PX, color, anchor=anchor)
            return True
        return False


POINT_SPOTS = [(10, -10, "start"), (10, 22, "start"), (-10, -10, "end"), (-10, 22, "end"),
               (0, -14, "middle"), (0, 28, "middle")] + [(10, -10 - 20 * k, "start") for k in range(1, 5)] \
    + [(10, 22 + 20 * k, "start") for k in range(1, 5)]
BAR_SPOTS = [(0, -7, "middle"), (0, -27, "middle"), (0, -47, "middle")]


def draw_series(p: Plot, s: Series, width: float) -> None:
    col = p.c.pal.color(s.color)
    pts = [p.xy(x, y) for x, y in zip(s.x, s.y)]
    if s.style == "bars":
        base = p.sy(max(p.sy.lo, 0.0)) if not p.panel.log_y else p.sy.p0
        half = (p.sx(width) - p.sx(0)) / 2
        for q in pts:
            if q is not None:
                p.c.rect(q[0] - half, min(q[1], base), 2 * half, abs(base - q[1]), col, opacity=0.85)
        return
    if s.style != "points":
        run: list[tuple[float, float]] = []
        for q in pts + [None]:
            if q is None:
                p.c.polyline(run, col, 3, "9 6" if s.dashed else None)
                run = []
            else:
                run.append(q)
    if s.style in ("points", "linepoints"):
        r = 7 if s.style == "points" else 4.5
        for q in pts:
            if q is not None:
                p.c.circle(q[0], q[1], r, col, p.c.pal.bg if s.style == "points" else None)
                p.taken.append((q[0] - r, q[1] - r, q[0] + r, q[1] + r))


def draw_labels(p: Plot, s: Series) -> None:
    ticks = dict(p.panel.x_ticks)
    shown = 0
    for x, y, t in zip(s.x, s.y, s.labels):
        q = p.xy(x, y)
        if not t or q is None or shown >= MAX_POINT_LABELS or ticks.get(x) == t:
            continue
        shown += p.place(q[0], q[1], t, p.c.pal.color(s.color), BAR_SPOTS if s.style == "bars" else POINT_SPOTS)


def draw_marks(p: Plot) -> None:
    x0, y0, x1, y1 = p.box
    k = 0
    for m in p.panel.marks:
        col = p.c.pal.color(m.color)
        v = tx(p.panel, m.at, m.axis)
        if not math.isfinite(v):
            continue
        if m.axis == "x":
            u = p.sx(v)
            p.c.line(u, y0, u, y1, col, 2, "7 5")
            spots = [(8, 22 + 22 * j, "start") for j in range(k, k + 6)] + \
                    [(-8, 22 + 22 * j, "end") for j in range(k, k + 6)]
            p.place(u, y0, m.label, col, spots)
            k += 1
        else:
            w = p.sy(v)
            p.c.line(x0, w, x1, w, col, 2, "7 5")
            p.place(x1, w, m.label, col, [(-8, -8, "end"), (-8, 22, "end"), (8 - (x1 - x0), -8, "start")])


def x_tick_lines(panel: Panel, ticks: list[tuple[float, str]], plot_w: float, lo: float, hi: float) -> list[list[str]]:
    """Each x tick's label as lines: categorical labels wrap to their share of the axis."""
    if not panel.x_ticks:
        return [[t] for _, t in ticks]
    room = plot_w / max(1.0, hi - lo) * 0.95
    return [wrap(t, TICK_PX, room)[:3] for _, t in ticks]


def draw_axes(p: Plot, ticks_x, lines_x, ticks_y) -> float:
    """Grid, ticks and their labels; returns the y under the x tick labels."""
    c, pal = p.c, p.c.pal
    x0, y0, x1, y1 = p.box
    for v, t in ticks_y:
        w = p.sy(v)
        c.line(x0, w, x1, w, pal.grid, 1)
        c.text(x0 - 8, w + TICK_PX * 0.35, t, TICK_PX, pal.muted, anchor="end")
    below = y1
    for (v, _), lines in zip(ticks_x, lines_x):
        u = p.sx(v)
        if not p.panel.x_ticks:
            c.line(u, y0, u, y1, pal.grid, 1)
        c.line(u, y1, u, y1 + 5, pal.axis, 1.5)
        for i, ln in enumerate(lines):
            c.text(u, y1 + 8 + TICK_PX * (1 + 1.2 * i), ln, TICK_PX, pal.muted, anchor="middle")
        below = max(below, y1 + 8 + TICK_PX * (1 + 1.2 * (len(lines) - 1)) + 6)
    c.line(x0, y1, x1, y1, pal.axis, 1.5)
    c.line(x0, y0, x0, y1, pal.axis, 1.5)
    return below


def draw_panel(c: Canvas, panel: Panel, x: float, y: float, w: float, plot_h: float) -> float:
    """The panel in the column (x, w) from y down: title, plot, axis labels, legend. Returns
    the y under it."""
    y = c.lines(x, y + TITLE_PX, wrap(panel.title, TITLE_PX, w, bold=True), TITLE_PX, bold=True) + 4
    xlo, xhi = x_range(panel)
    ylo, yhi = y_range(panel)
    ty = y_ticks(panel, ylo, yhi)
    left = max((text_width(t, TICK_PX) for _, t in ty), default=20) + 16 + LABEL_PX * 1.6
    sx = Scale(xlo, xhi, x + left, x + w - 12)
    sy = Scale(ylo, yhi, y + plot_h, y)
    p = Plot(c, panel, sx, sy, [])
    tx_ = x_ticks(panel, xlo, xhi)
    below = draw_axes(p, tx_, x_tick_lines(panel, tx_, sx.p1 - sx.p0, xlo, xhi), ty)
    c.text(x + LABEL_PX, y + plot_h / 2, panel.y_label, LABEL_PX, c.pal.text, anchor="middle", rotate=True)
    width = bar_width(panel)
    for s in panel.series:
        draw_series(p, s, width)
    draw_marks(p)
    for s in panel.series:
        if s.labels:
            draw_labels(p, s)
    if panel.x_label:
        below += LABEL_PX * 1.2
        c.text((sx.p0 + sx.p1) / 2, below, panel.x_label, LABEL_PX, c.pal.text, anchor="middle")
    return draw_legend(c, panel, sx.p0, below + 12, x + w - sx.p0)
