"""Run statistics: throughput against plain decoding, tokens per pass, acceptance by depth.

Acceptance by depth is compared with the i.i.d. model of Leviathan et al. (2023): with each draft
accepted with probability α, depth d is reached with probability α^d and a window of γ drafts
emits (1 − α^(γ+1)) / (1 − α) tokens on average. α is fitted to the run (maximum likelihood
over every window's run of accepts and its first reject).
"""

from __future__ import annotations

import html
import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGraphicsItem, QLabel, QWidget

from engine.cost.baseline import Baseline
from engine.speculation.events import BONUS, CORRECTION, TARGET

from workbench import theme
from workbench.store import EventStore
from workbench.views.base import Part, baseline_of
from workbench.widgets import ElidedLabel, column, row

FLOOR_COLOR = {"off": theme.MUTED, "probing": theme.AMBER, "speculating": theme.GREEN,
               "retired": theme.BLUE}


def _title(text: str) -> str:
    return f"<span style='color:{theme.TEXT};font-size:8.5pt;font-weight:bold'>{text}</span>"


def _key(*lines: tuple[tuple[str, str, str], ...]) -> str:
    """A plot's legend: lines of (colour, mark, label) keys, each line short enough for a plot a
    fifth of a 1024-px window wide."""
    return "<br>".join("&nbsp;&nbsp;".join(f"<span style='color:{c}'>{m}</span>&nbsp;{label}"
                                           for c, m, label in line) for line in lines)


# what each plot's curves are, named under the plot (read by tests)
LEGENDS = {
    "throughput": (((theme.ACCENT, "—", "run"), (theme.ACCENT, "·", "each window")),
                   (("#e3b341", "- -", "plain decoding"),)),
    "tokens / window": (((theme.GREEN, "■", "accepted"), (theme.AMBER, "■", "bonus")),
                        ((theme.BLUE, "■", "correction"), (theme.TEXT, "■", "target")),
                        ((theme.TEXT, "—", "running mean"),)),
    "reach by depth": (((theme.GREEN, "●", "run"), (theme.MUTED, "- -", "theory α<sup>d</sup>")),),
    "tokens / pass vs γ": (((theme.GREEN, "●", "run"), (theme.MUTED, "- -", "theory")),
                           ((theme.ACCENT, "┆", "depth set"),)),
}


def _depth_setting(ev) -> int:
    """The draft depth the run asked for (a window near the token limit drafts less)."""
    return int((ev.settings or {}).get("depth", ev.depth))


def _whole_axis(plot, lo: float, hi: float, axis: str = "bottom") -> None:
    """An axis of whole numbers (depths, counts) from `lo` to `hi`, half a step of margin, and
    ticks only on whole numbers, about six of them: never a depth -2 or a γ of 0.5."""
    hi = max(hi, lo + 1)
    step = max(1, math.ceil((hi - lo) / 6))
    (plot.setXRange if axis == "bottom" else plot.setYRange)(lo - 0.5, hi + 0.5, padding=0)
    plot.getAxis(axis).setTickSpacing(major=step, minor=step)


def _shrinkable(label) -> None:
    """A pyqtgraph LabelItem re-imposes its text width as minimum on every resize; a long title
    should be clipped instead of widening the whole dock."""
    base = label.updateMin

    def update_min() -> None:
        base()
        label.setMinimumWidth(0)
    label.updateMin = update_min
    update_min()
    # and cut at its own right edge: a clipped title keeps its first words and never runs
    # over its neighbour's
    label.setText(label.text, justify="left")
    label.setFlag(QGraphicsItem.GraphicsItemFlag.ItemClipsChildrenToShape)


def _title_over_axis(plot) -> None:
    """The title spans the plot's whole width, the left axis's column too (over the view box
    alone a fifth of a 1024-px window cut 'tokens / window' short: issue 35, 9)."""
    plot.layout.removeItem(plot.titleLabel)
    plot.layout.addItem(plot.titleLabel, 0, 0, 1, 3)


class StatsView(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.headline = QLabel("")
        self.headline.setTextFormat(Qt.TextFormat.RichText)
        self.headline.setWordWrap(True)
        # a fixed height, changed only when the text needs another line or frees one (_fit):
        # text growing by a word must not resize (and so re-lay-out and repaint) the four plots
        self.headline.setFixedHeight(2 * self.headline.fontMetrics().lineSpacing() + 4)
        self.floor = QLabel("")
        self.floor.setObjectName("chip")
        # which drafter the shown window used (and why: the tooltip), its draft vs verify time
        self.drafter = ElidedLabel("")
        self.drafter.setObjectName("chip")
        self._build_plots()
        self._build_curves()
        # the headline has the whole width (it wraps); the chips sit on a line of their own
        column(self, self.headline, row((self.drafter, 1), self.floor), (self.glw, 1))
        self.ar_ms: float | None = None
        self.state: dict = {}
        self._empty = False
        self.show_upto(None, -1)
        # drawn as two parts, so a live frame repaints two plots, not four
        self.parts = (Part(lambda s: self.show_upto(s.store, s.index, part="top")),
                      Part(lambda s: self.show_upto(s.store, s.index, part="bottom")))

    def _build_plots(self) -> None:
        self.glw = pg.GraphicsLayoutWidget()
        self.glw.ci.setSpacing(4)
        self.keys: dict[str, pg.LabelItem] = {}
        plots = []
        for i, (title, left, bottom) in enumerate((
                ("throughput", "tok/s", "seconds"), ("tokens / window", "tokens", "window"),
                ("reach by depth", "P(reach d)", "draft depth d"),
                ("tokens / pass vs γ", "tokens / pass", "draft depth γ"))):
            r, c = 2 * (i // 2), i % 2
            p = self.glw.addPlot(row=r, col=c)
            theme.style_plot(p, "", left, bottom)
            p.setTitle(_title(title))
            _title_over_axis(p)
            # the legend under the plot, not in it: inside plots this small it would cover the data
            key = pg.LabelItem(_key(*LEGENDS[title]), size="8pt", color=theme.MUTED, justify="left")
            self.glw.addItem(key, row=r + 1, col=c)
            key.setFixedHeight(46)             # three lines at most
            self.keys[title] = key
            for label in (p.titleLabel, key):
                _shrinkable(label)
            # fixed axis sizes: a tick label growing by a digit must not relayout the plots
            # (a relayout regenerates every axis: what that costs a frame is in BENCHMARKS.md,
            # "Workbench timings (moved from code comments)")
            p.getAxis("left").setWidth(52)
            p.getAxis("bottom").setHeight(36)
            p.hideButtons()
            p.setMenuEnabled(False)
            plots.append(p)
        self.p_tps, self.p_pass, self.p_depth, self.p_gamma = plots
        _whole_axis(self.p_depth, 1, 8)
        _whole_axis(self.p_gamma, 0, 8)
        _whole_axis(self.p_pass, 0, 4, axis="left")
        self.p_pass.setToolTip("each bar: accepted drafts (green) plus the target's own token "
                               "(amber bonus, blue correction, white a plain step); white line: running mean")
        self.p_depth.setToolTip("the share of windows whose accepted path reaches depth d "
                                "(dots, this run) against α^d (dashes)")
        self.p_gamma.setToolTip("expected tokens per pass if drafts stopped at depth γ: measured "
                                "1 + Σ P(path reaches d ≤ γ), theory (1 − α^(γ+1)) / (1 − α)")

    def _build_curves(self) -> None:
        # curves are created once and fed with setData (pyqtgraph's fast path)
        self.c_tps = self.p_tps.plot([], [], pen=pg.mkPen(theme.ACCENT, width=2))
        self.c_tps_win = self.p_tps.plot([], [], pen=None, symbol="o", symbolSize=3,
                                         symbolBrush=theme.ACCENT + "50", symbolPen=None)
        self.c_ar = self.p_tps.plot([], [], pen=pg.mkPen(theme.AMBER, width=1.5, style=Qt.PenStyle.DashLine))
        # one bar item per color: per-bar brushes defeat pyqtgraph's drawing cache
        self.b_acc = pg.BarGraphItem(x=[], height=[], width=0.8, brush=theme.GREEN, pen=None)
        self.b_extra = {k: pg.BarGraphItem(x=[], y0=[], height=[], width=0.8, pen=None,
                                           brush=theme.OUTCOME_COLOR.get(k, theme.TEXT))
                        for k in (BONUS, CORRECTION, TARGET)}
        self.p_pass.addItem(self.b_acc)
        for b in self.b_extra.values():
            self.p_pass.addItem(b)
        self.c_mean = self.p_pass.plot([], [], pen=pg.mkPen(theme.TEXT, width=1.5))
        self.c_reach = self.p_depth.plot([], [], pen=pg.mkPen(theme.GREEN, width=2), symbol="o",
                                         symbolSize=6, symbolBrush=theme.GREEN, symbolPen=None)
        self.c_alpha = self.p_depth.plot([], [], pen=pg.mkPen(theme.MUTED, width=1.5, style=Qt.PenStyle.DashLine),
                                        )
        self.c_meas_g = self.p_gamma.plot([], [], pen=pg.mkPen(theme.GREEN, width=2), symbol="o",
                                          symbolSize=6, symbolBrush=theme.GREEN, symbolPen=None)
        self.c_theo_g = self.p_gamma.plot([], [], pen=pg.mkPen(theme.MUTED, width=1.5, style=Qt.PenStyle.DashLine),
                                         )
        self.m_gamma = pg.InfiniteLine(angle=90, pen=pg.mkPen(theme.ACCENT, width=1, style=Qt.PenStyle.DotLine))
        self.p_gamma.addItem(self.m_gamma)
        self.m_window = pg.InfiniteLine(angle=90, pen=pg.mkPen(theme.TEXT + "80", width=1))
        self.p_pass.addItem(self.m_window)
        self.p_depth.setYRange(0, 1.05, padding=0)

    def resizeEvent(self, e) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(e)
        self._fit_headline()

    def _fit_headline(self) -> None:
        """The headline as tall as its wrapped text (never cut), changed only when the line count
        does."""
        two = 2 * self.headline.fontMetrics().lineSpacing() + 4
        h = max(two, self.headline.heightForWidth(max(1, self.headline.width())))
        if h != self.headline.height():
            self.headline.setFixedHeight(h)

    def set_ar_ms(self, ms: float | None) -> None:
        self.ar_ms = ms

    def show_upto(self, store: EventStore | None, upto: int, part: str = "all") -> None:
        """Draw the run through window `upto`. `part` "top" (throughput, tokens per window) or
        "bottom" (acceptance by depth) redraws half, so a live frame repaints two plots, not four."""
        if store is None or upto < 0 or not len(store):
            if self._empty:
                return                  # already showing the empty state: no repaint
            for c in (self.c_tps, self.c_tps_win, self.c_ar, self.c_mean, self.c_reach, self.c_alpha,
                      self.c_meas_g, self.c_theo_g):
                c.setData([], [])
            self.b_acc.setOpts(x=[], height=[])
            for b in self.b_extra.values():
                b.setOpts(x=[], y0=[], height=[])
            self.m_window.hide()
            self.m_gamma.hide()
            self.p_tps.setRange(xRange=(0, 10), yRange=(0, 10), padding=0.02)
            self.p_pass.setXRange(0, 20, padding=0.02)
            _whole_axis(self.p_pass, 0, 4, axis="left")
            _whole_axis(self.p_depth, 1, 8)
            _whole_axis(self.p_gamma, 0, 8)
            self.p_gamma.setYRange(0, 4, padding=0)
            self._empty = True
            self.headline.setText(f"<span style='color:{theme.MUTED}'>no windows yet</span>")
            self._fit_headline()
            self.floor.setText("AR floor: off")
            self.drafter.setText("")
            self.drafter.setToolTip("")
            self.state = {}
            return
        if self._empty:
            self.p_tps.enableAutoRange()
            self.p_pass.enableAutoRange(x=True, y=False)
            self._empty = False
        ev = store[upto]
        acc = store.acceptance(upto)
        # plain decoding's speed, as the roofline quotes it: the run's plain steps (same host
        # overheads as its windows), else the probe's one-row pass (engine.cost.baseline)
        base = baseline_of(store, upto, self.ar_ms)
        if part in ("all", "top"):
            self._draw_top(store, upto, ev, base.tok_s if base else None)
        if part in ("all", "bottom"):
            self._draw_bottom(ev, acc)
        self._describe(ev, acc, base, upto, store.decode_tok_s(upto), store.near_tie_windows(upto))
        self._describe_drafter(store, upto, ev)

    def _describe_drafter(self, store: EventStore, upto: int, ev) -> None:
        """The window's drafter and its draft vs verify time; the run's means in the tooltip."""
        drafted = [e for e in store.events[: upto + 1] if e.tokens]
        draft_ms = sum(e.propose_ms for e in drafted) / len(drafted) if drafted else 0.0
        verify_ms = sum(e.verify_ms for e in drafted) / len(drafted) if drafted else 0.0
        self.drafter.setText(f"{ev.drafter} · draft {ev.propose_ms:.1f} / verify "
                             f"{ev.verify_ms:.1f} ms")
        self.drafter.setToolTip(
            f"window {ev.index}: {html.escape(ev.reason or ev.drafter)}<br>"
            f"drafted windows so far: draft {draft_ms:.1f} ms, verify {verify_ms:.1f} ms a window")
        self.state.update(drafter=ev.drafter, reason=ev.reason, draft_ms=draft_ms,
                          verify_ms=verify_ms)

    def _draw_top(self, store: EventStore, upto: int, ev, ar_tps: float | None) -> None:
        ser = store.series(upto)
        # throughput
        t = np.array(ser["elapsed_s"])
        self.c_tps.setData(t, np.array(ser["tok_s"]))
        self.c_tps_win.setData(t, np.array(ser["window_tok_s"]))
        self.c_ar.setData([0, max(t[-1], 1e-3)] if ar_tps else [], [ar_tps, ar_tps] if ar_tps else [])
        # tokens per pass: accepted drafts (green) plus the target's own token on top
        idx = np.array(ser["index"], dtype=float)
        evs = store.events[: upto + 1]
        per = np.array(ser["window_tokens"], dtype=float)
        kinds = np.array([e.emitted_kinds[-1] if e.emitted_kinds else TARGET for e in evs])
        drafted = np.array([sum(1 for k in e.emitted_kinds if k not in (BONUS, CORRECTION, TARGET))
                            for e in evs], dtype=float)
        self.b_acc.setOpts(x=idx, height=drafted)
        for k, bar in self.b_extra.items():
            m = kinds == k
            bar.setOpts(x=idx[m], y0=drafted[m], height=(per - drafted)[m])
        self.c_mean.setData(idx, np.cumsum(per) / np.arange(1, len(per) + 1))
        _whole_axis(self.p_pass, 0, float(per.max()) if len(per) else 4.0, axis="left")
        self.m_window.setPos(ev.index)
        self.m_window.show()

    def _draw_bottom(self, ev, acc) -> None:
        """Acceptance by depth against the i.i.d. model."""
        if acc.depths:
            d = np.array(acc.depths, dtype=float)
            self.c_reach.setData(d, np.array(acc.reach))
            self.c_alpha.setData(d, (acc.alpha or 0.0) ** d)
            g = np.arange(len(acc.measured_tokens), dtype=float)
            self.c_meas_g.setData(g, np.array(acc.measured_tokens))
            self.c_theo_g.setData(g, np.array(acc.theory_tokens) if acc.theory_tokens else [])
            if not acc.theory_tokens:
                self.c_theo_g.setData([], [])
            self.m_gamma.setPos(min(_depth_setting(ev), len(g) - 1))
            self.m_gamma.show()
            _whole_axis(self.p_depth, 1, max(_depth_setting(ev), d.max()))
            _whole_axis(self.p_gamma, 0, max(_depth_setting(ev), g.max()))
            top = max([1.0, *acc.measured_tokens, *(acc.theory_tokens or [])])
            self.p_gamma.setYRange(0, top * 1.1, padding=0)
        else:
            for c in (self.c_reach, self.c_alpha, self.c_meas_g, self.c_theo_g):
                c.setData([], [])
            self.m_gamma.hide()

    def _describe(self, ev, acc, base: Baseline | None, upto: int, decode_tps: float | None,
                  ties: int = 0) -> None:
        """The headline, worded as the race's lanes: the run's decode tok/s (prefill excluded) and,
        decode against decode, its speed over plain decoding's (Baseline.label(), with its source;
        the prefill is the same for both and would only dilute the ratio), then its tok/s with the
        prefill in, said so; and how many windows held a near tie (a row whose choice was within
        rounding noise: where rows are not bit-exact, the one place speculation may part from plain
        decoding)."""
        st = ev.stats
        ar_tps = base.tok_s if base else None
        prefill = f"{st.tok_s:.1f} tok/s incl. prefill"
        if not decode_tps:                  # the first window only: nothing after it to time
            speed = f"<b>{prefill}</b>"
        else:
            speed = f"<b>decode {decode_tps:.1f} tok/s</b>"
            if base:
                speed += (f" · <b style='color:{theme.GREEN if decode_tps >= ar_tps else theme.RED}'>"
                          f"{decode_tps / ar_tps:.2f}×</b> {base.label()}")
            speed += f" · {prefill}"
        alpha = ""
        if acc.alpha is not None and acc.theory_tokens:
            g = min(_depth_setting(ev), len(acc.theory_tokens) - 1)
            alpha = (f"<br>α = {acc.alpha:.2f}: (1−α<sup>γ+1</sup>)/(1−α) = {acc.theory_tokens[g]:.2f} "
                     f"at γ = {g}")             # a line of its own: never broken mid-formula
        self.headline.setText(
            f"{speed} · <b>{st.tokens_per_pass:.2f}</b> tokens/pass "
            f"({st.new_tokens} in {st.forward_passes})"
            + (f" · <span style='color:{theme.AMBER}'>≈ {ties} near-tie window{'s' * (ties != 1)}</span>"
               if ties else "") + alpha)
        self._fit_headline()
        state = st.ar_floor or "off"
        self.floor.setText(f"AR floor: {state}")
        self.floor.setStyleSheet(f"color: {FLOOR_COLOR.get(state, theme.TEXT)};"
                                 f"border-color: {FLOOR_COLOR.get(state, theme.BORDER)};")
        self.state = {"windows": upto + 1, "alpha": acc.alpha, "reach": acc.reach,
                      "ar_tok_s": ar_tps, "baseline": base.label() if base else None, "tok_s": st.tok_s, "decode_tok_s": decode_tps, "near_tie_windows": ties, "ar_floor": state}
