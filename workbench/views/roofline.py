"""Roofline: verify-pass cost against rows on the attached card, with the live windows on top.

Drawn: the probe's points and fit for this card (accent), the knee where extra rows stop being
nearly free, reference cards to toggle, every window so far as a point (rows used, window ms;
green when it emitted its tokens faster than plain decoding would have, red when slower), and the
break-even line: the cost at which a window emitting the run's average tokens per pass only ties
plain decoding (tokens per pass × one plain step: engine.cost.baseline, measured or probed). Windows under it pay; where the fit crosses it is the
most rows a window can afford at this acceptance.

Curves are rebuilt only when a profile or an overlay changes; a new window only feeds setData.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QLabel, QMenu, QToolButton, QWidget

from engine.cost.baseline import Baseline

from workbench import theme
from workbench.profiles import Curve, curve_from_profile
from workbench.store import EventStore
from workbench.views.base import Shown, baseline_of
from workbench.widgets import ElidedLabel, column, row

ROWS_GRID = np.unique(np.round(np.logspace(0, math.log10(512), 160)).astype(int))
TICKS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
ENGINE_COLOR = "#ff9e64"    # the deployment engine (llama.cpp): apart from the reference palette


class RooflineView(QWidget):
    is_plot = True
    follows_row = False

    def __init__(self, parent=None):
        super().__init__(parent)
        self.card: Curve | None = None
        self.engine: Curve | None = None         # the deployment engine's own curve (llama.cpp)
        self.references: list[Curve] = []
        self._shown_refs: set[str] = set()
        self.normalize = QCheckBox("÷ one-row cost")
        self.normalize.setToolTip("Divide every curve by its own one-row cost, so cards of very "
                                  "different speed compare by shape (the knee)")
        self.normalize.toggled.connect(lambda _: self._rebuild_curves())
        self.refs_button = QToolButton()
        self.refs_button.setText("Reference cards ▾")
        self.refs_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.refs_menu = QMenu(self)
        self.refs_button.setMenu(self.refs_menu)
        self.weights: str | None = None          # the weights the card runs (set_weights)
        self._last_describe: tuple | None = None
        self.info = ElidedLabel("")          # one line, cut with "…" (whole in the tooltip)
        self.info.setObjectName("muted")
        self.plot_widget = pg.PlotWidget()
        self.plot = self.plot_widget.getPlotItem()
        theme.style_plot(self.plot, "", left="ms per pass", bottom="verify rows")
        # rows on a log2 axis, drawn by hand: pyqtgraph's log ticks read 2·10¹
        self.plot.getAxis("bottom").setTicks([[(math.log2(r), str(r)) for r in TICKS]])
        self.plot.hideButtons()
        self.plot.getAxis("left").setWidth(58)      # fixed: no relayout when the scale changes
        self.legend = QLabel("")
        self.legend.setObjectName("muted")
        self.legend.setWordWrap(True)
        self.legend.setFixedHeight(2 * self.legend.fontMetrics().lineSpacing() + 2)   # no plot resize
        column(self, row((self.info, 1), self.refs_button, self.normalize), (self.plot_widget, 1), self.legend)
        # live items, created once
        self._good = pg.ScatterPlotItem(size=6, pen=None, brush=pg.mkBrush(theme.GREEN + "b0"))
        self._bad = pg.ScatterPlotItem(size=6, pen=None, brush=pg.mkBrush(theme.RED + "b0"))
        self._plain = pg.ScatterPlotItem(size=6, pen=None, brush=pg.mkBrush(theme.ACCENT + "b0"))
        self._current = pg.ScatterPlotItem(size=13, brush=None, pen=pg.mkPen(theme.TEXT, width=2))
        self._breakeven = pg.InfiniteLine(angle=0, pen=pg.mkPen(theme.AMBER, width=1.5, style=Qt.PenStyle.DashLine),
                                          label="", labelOpts={"color": theme.AMBER, "position": 0.03,
                                                               "anchors": [(0, 1), (0, 1)]})
        for it in (self._good, self._bad, self._plain, self._current, self._breakeven):
            it.setZValue(10)
            self.plot.addItem(it)
        self._breakeven.hide()
        self.plot.getViewBox().sigYRangeChanged.connect(self._place_breakeven_label)
        self._curve_items: list = []
        self._store: EventStore | None = None
        self._upto = -1
        self.state: dict = {}
        self._rows_extent: float | None = None
        self.set_references([])

    # ---- inputs -------------------------------------------------------------------------------
    def set_weights(self, label: str | None) -> None:
        """The weights the card runs ("Q4_K_M packed, 4.82 GB on the card"): the roofline is theirs."""
        self.weights = label
        self._describe_last()

    def set_card_profile(self, profile) -> None:
        self.card = curve_from_profile(profile, label="this card (probe)")
        self._rebuild_curves()

    def set_engine_profile(self, profile, label: str | None = None) -> None:
        """The engine the user deploys (llama.cpp's llama-bench curve), drawn beside this card's
        with its knee; None removes it."""
        if profile is not None and label is None:
            from engine.cost.llamacpp_bench import llamacpp_label
            label = f"{llamacpp_label(profile)} · {profile.model}"
        self.engine = curve_from_profile(profile, label=label) if profile is not None else None
        if profile is not None:          # its break-even table where the legend names it
            from engine.cost.profile import format_break_even
            self.legend.setToolTip(f"{label}: tokens a window must emit to beat plain decoding"
                                   f"<pre>{format_break_even(profile)}</pre>")
        self._rebuild_curves()

    def set_references(self, profiles: list) -> None:
        self.references = [c for c in (curve_from_profile(p) for p in profiles) if c is not None]
        self.refs_menu.clear()
        for c in self.references:
            act = self.refs_menu.addAction(c.label)
            act.setCheckable(True)
            act.setChecked(c.label in self._shown_refs)
            act.toggled.connect(lambda on, label=c.label: self.toggle_reference(label, on))
        self.refs_button.setEnabled(bool(self.references))
        self._rebuild_curves()

    def toggle_reference(self, label: str, on: bool) -> None:
        (self._shown_refs.add if on else self._shown_refs.discard)(label)
        self._rebuild_curves()

    def update_from(self, shown: Shown) -> None:
        self.show_upto(shown.store, shown.index)

    def show_upto(self, store: EventStore | None, upto: int) -> None:
        self._store, self._upto = store, upto
        self._update_live()

    # ---- drawing ------------------------------------------------------------------------------
    def baseline(self) -> Baseline | None:
        """Plain decoding's speed, as the stats view quotes it (workbench.views.base.baseline_of)."""
        return baseline_of(self._store, self._upto, self.card.one_row_ms() if self.card else None)

    def ar_ms(self) -> float | None:
        b = self.baseline()
        return b.ms if b else None

    def _curves(self) -> list[tuple[Curve, str]]:
        curves = [(self.card, theme.ACCENT)] if self.card else []
        if self.engine is not None:
            curves.append((self.engine, ENGINE_COLOR))
        shown = [c for c in self.references if c.label in self._shown_refs]
        return curves + [(c, theme.OVERLAY_COLORS[i % len(theme.OVERLAY_COLORS)]) for i, c in enumerate(shown)]

    def _rebuild_curves(self) -> None:
        for it in self._curve_items:
            self.plot.removeItem(it)
        self._curve_items = []
        norm = self.normalize.isChecked()
        for c, color in self._curves():
            k = 1.0 / c.one_row_ms() if norm else 1.0
            xs = ROWS_GRID[ROWS_GRID <= c.max_rows]
            ys = np.array([c.ms(int(x)) for x in xs]) * k
            items = [pg.PlotDataItem(np.log2(xs), ys, pen=pg.mkPen(color, width=2))]
            if c.points:
                px = np.array([r for r, _ in c.points])
                py = np.array([m for _, m in c.points]) * k
                items.append(pg.ScatterPlotItem(np.log2(px), py, size=6, brush=pg.mkBrush(theme.PANEL),
                                                pen=pg.mkPen(color, width=1.5)))
            if c.knee:
                items.append(pg.InfiniteLine(pos=math.log2(c.knee), angle=90,
                                             pen=pg.mkPen(color, width=1, style=Qt.PenStyle.DashLine),
                                             label=f"knee {c.knee:.0f}",
                                             labelOpts={"color": color, "position": 0.06}))  # low: the break-even label sits high
            for it in items:
                self.plot.addItem(it)
            self._curve_items += items
        self._update_live()

    def _update_live(self) -> None:
        norm = self.normalize.isChecked()
        ar = self.ar_ms()
        st = self._store
        n_pts, tpp = 0, None
        empty = np.zeros(0)
        good = bad = plain = (empty, empty)
        cur = (empty, empty)
        if st is not None and self._upto >= 0:
            ser = st.series(self._upto)
            rows = np.array(ser["rows"], dtype=float)
            wms = np.array(ser["window_ms"], dtype=float)
            ntok = np.array(ser["window_tokens"], dtype=float)
            n_pts = len(rows)
            k = 1.0 / ar if norm and ar else 1.0
            if n_pts:
                # jitter rows a little so windows of the same size do not hide each other
                x = np.log2(rows) + 0.04 * np.sin(np.arange(n_pts) * 2.39996)
                y = wms * k
                if ar:
                    win = wms < ntok * ar
                    good, bad = (x[win], y[win]), (x[~win], y[~win])
                else:
                    plain = (x, y)
                cur = (x[-1:], y[-1:])
                tpp = float(ntok.sum() / n_pts)
        self._fit_rows(max([rows.max() if n_pts else 1.0] + [c.max_rows for c, _ in self._curves()]))
        self._good.setData(*good)
        self._bad.setData(*bad)
        self._plain.setData(*plain)
        self._current.setData(*cur)
        if ar and tpp:
            self._breakeven.setPos(tpp * ar * (1.0 / ar if norm else 1.0))
            self._breakeven.label.setFormat(f"break-even: {tpp:.2f} tok/pass × {ar:.2f} ms")
            self._breakeven.show()
            self._place_breakeven_label()
        else:
            self._breakeven.hide()
        self._describe(ar, n_pts, tpp)

    def _place_breakeven_label(self, *_) -> None:
        """The break-even label above its line, or below it when the line runs in the top
        quarter of the plot (above, it would be cut off by the plot's edge)."""
        lo, hi = self.plot.getViewBox().viewRange()[1]
        y = self._breakeven.value()
        if self.plot.getViewBox().yInverted():
            lo, hi = hi, lo
        below = hi > lo and (y - lo) / (hi - lo) > 0.75
        anchor = (0, 0) if below else (0, 1)
        label = self._breakeven.label
        if label.anchors[0] != anchor:
            label.anchors = [anchor, anchor]
            label.updatePosition()

    def _fit_rows(self, most: float) -> None:
        """The rows axis from 1 row to the most drawn (16 at least), so its ticks show and the
        jitter between windows of one size stays small. Set only when that extent changes: a
        user's zoom holds until then."""
        hi = math.log2(max(16.0, most))
        if hi != self._rows_extent:
            self._rows_extent = hi
            self.plot.setXRange(-0.25, hi + 0.25, padding=0)

    def _describe_last(self) -> None:
        if self._last_describe is not None:
            self._describe(*self._last_describe)

    def _describe(self, ar: float | None, n_pts: int, tpp: float | None) -> None:
        self._last_describe = (ar, n_pts, tpp)
        parts = []
        if self.card is not None:
            parts.append(f"1 row {self.card.one_row_ms():.2f} ms")
            if self.card.knee:
                parts.append(f"knee ≈ {self.card.knee:.0f} rows")
        else:
            parts.append("no probe of this card yet")
        base = self.baseline()
        if base:
            parts.append(base.label())
        self.info.setText(" · ".join(parts))
        curves = self._curves()
        this_card = f"this card ({self.weights})" if self.weights else "this card"
        keys = [f"<span style='color:{color}'>—</span> {this_card if c is self.card else c.label}"
                for c, color in curves]
        if self.card is None and self.weights:
            keys.append(f"<span style='color:{theme.MUTED}'>weights: {self.weights}</span>")
        keys.append(f"<span style='color:{theme.GREEN}'>●</span>/<span style='color:{theme.RED}'>●</span> "
                    "windows faster / slower than plain decoding" if ar else
                    f"<span style='color:{theme.ACCENT}'>●</span> windows")
        if ar and n_pts:
            keys.append(f"<span style='color:{theme.AMBER}'>- -</span> break-even")
        self.legend.setText(" &nbsp; ".join(keys))
        self.plot.setLabel("left", f"<span style='color:{theme.MUTED}'>"
                                   f"{'× one-row cost' if self.normalize.isChecked() else 'ms per pass'}</span>")
        self.state = {"points": n_pts, "ar_ms": ar, "tokens_per_pass": tpp,
                      "baseline": base.label() if base else None,
                      "card": self.card.label if self.card else None,
                      "engine": self.engine.label if self.engine else None,
                      "references": sorted(self._shown_refs)}
