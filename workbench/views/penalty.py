"""Penalty history of the selected verify row: H_i and each penalized candidate's logit.

Row i is penalized against H_i = the last W tokens of (prompt ‖ emitted ‖ drafts[0 .. i)), so the
draft-path tokens at the end of H_i are marked apart from committed ones. Each candidate is drawn
as a dumbbell from its logit before penalties (grey) to after (violet).
"""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QTextBrowser, QVBoxLayout, QWidget

from engine.speculation.events import WindowEvent

from workbench import theme
from workbench.tokens import visible

MAX_CANDIDATES = 10


def led_flipped(r) -> bool:
    return r.penalty is not None and r.penalty.flipped


class PenaltyView(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.header = QLabel()
        self.header.setWordWrap(True)
        self.header.setFixedHeight(2 * self.header.fontMetrics().lineSpacing() + 2)   # no plot resize
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.history = QTextBrowser()
        self.history.setOpenLinks(False)
        self.history.setMinimumHeight(48)
        self.plot_widget = pg.PlotWidget()
        self.plot = self.plot_widget.getPlotItem()
        theme.style_plot(self.plot, "", left="", bottom="logit")
        self.plot.hideButtons()
        self.plot.setMenuEnabled(False)
        self.plot.getViewBox().setMouseEnabled(x=False, y=False)
        self.plot.invertY(True)
        self._lines = pg.PlotDataItem(connect="pairs", pen=pg.mkPen(theme.BORDER, width=2))
        self._before = pg.ScatterPlotItem(size=9, brush=pg.mkBrush(theme.MUTED), pen=None)
        self._after = pg.ScatterPlotItem(size=10, brush=pg.mkBrush(theme.VIOLET), pen=None)
        for it in (self._lines, self._before, self._after):
            self.plot.addItem(it)
        legend = QLabel(f"<span style='color:{theme.MUTED}'>●</span> logit before penalties "
                        f"&nbsp; <span style='color:{theme.VIOLET}'>●</span> after")
        legend.setObjectName("muted")
        self.flips = QLabel("")
        self.flips.setObjectName("muted")
        self.flips.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.flips.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        bottom = QHBoxLayout()
        bottom.addWidget(legend)
        bottom.addWidget(self.flips, 1)
        self.history.setMaximumHeight(66)
        self.plot.getAxis("left").setWidth(96)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 6, 8, 6)
        lay.setSpacing(4)
        lay.addWidget(self.header)
        lay.addWidget(self.history)
        lay.addWidget(self.plot_widget, 1)
        lay.addLayout(bottom)
        self._key: tuple | None = None
        self.state: dict = {}
        self.show_row(None, -1)

    def show_row(self, ev: WindowEvent | None, row: int) -> None:
        key = (id(ev), row)
        if key == self._key:
            return
        self._key = key
        flipped_rows = [r.row for r in ev.rows if r.penalty is not None and r.penalty.flipped] if ev else []
        self.flips.setText(f"<span style='color:{theme.AMBER}'>⚑ flipped: row"
                           f"{'s' if len(flipped_rows) > 1 else ''} {', '.join(map(str, flipped_rows))}</span>"
                           if flipped_rows else "")
        self.flips.setToolTip("rows of this window whose verdict the penalties changed")
        flips = ""
        if ev is None or not (0 <= row < len(ev.rows)):
            self.header.setText(f"<span style='color:{theme.MUTED}'>select a verify row</span>")
            self._clear("Each verify row is penalized against its own history H_i: the last W tokens "
                        "of prompt, output and the draft path above it. Pick a row in the tree or the "
                        "table to see it.")
            self.state = {"row": row, "history": [], "n_draft": 0, "entries": [], "flipped": False}
            return
        r = ev.rows[row]
        what = "root row" if r.row == 0 else f"draft <b>{html.escape(visible(r.draft_text))}</b>"
        if led_flipped(r):
            flips = f" · <span style='color:{theme.AMBER}'>⚑ penalties flipped this verdict</span>"
        self.header.setText(f"row {r.row} · depth {r.depth} · {what} · "
                            f"<span style='color:{theme.OUTCOME_COLOR.get(r.outcome, theme.TEXT)}'>"
                            f"{theme.OUTCOME_LABEL.get(r.outcome, r.outcome)}</span>{flips}")
        led = r.penalty
        if led is None:
            settings = ev.settings or {}
            cfg = settings.get("sampling", settings)    # recordings before the nesting: flat
            off = (cfg.get("repeat_penalty", 1.0) == 1.0 and cfg.get("presence_penalty", 0.0) == 0.0
                   and cfg.get("frequency_penalty", 0.0) == 0.0)
            self._clear("penalties are off for this run (repeat 1, presence 0, frequency 0): "
                        "set one in Controls to see each row's history" if off
                        else "no penalty ledger for this row")
            self.state = {"row": row, "history": [], "n_draft": 0, "entries": [], "flipped": False}
            return
        text_of = {e.token: e.text for e in led.entries}
        n_hist = len(led.history)
        chips = []
        for j, tok in enumerate(led.history):
            draft = j >= n_hist - led.n_draft
            t = html.escape(visible(text_of.get(tok, f"#{tok}"), 16))
            color = theme.VIOLET if draft else theme.TEXT
            bg = theme.tint(theme.VIOLET if draft else theme.MUTED, 0.25).name()
            chips.append(f"<span style='background:{bg};color:{color}'>&nbsp;{t}&nbsp;</span>")
        intro = (f"<span style='color:{theme.MUTED}'>H<sub>{r.row}</sub>: last {n_hist} tokens · "
                 f"committed</span> · <span style='color:{theme.VIOLET}'>draft path ({led.n_draft})</span> &nbsp; ")
        self.history.setHtml(f"<div style='font-family:DejaVu Sans Mono;font-size:8.5pt;line-height:150%'>"
                             f"{intro}{' '.join(chips)}</div>")
        # the candidates the penalties moved most, as many as fit legibly (~16 px a line)
        fit = max(3, min(MAX_CANDIDATES, (self.plot_widget.height() - 40) // 16))
        entries = sorted(led.entries, key=lambda e: -abs(e.before - e.after))[:fit]
        self._draw(entries)
        self.state = {"row": row, "history": list(led.history), "n_draft": led.n_draft,
                      "draft_marks": [j >= n_hist - led.n_draft for j in range(n_hist)],
                      "entries": [(e.token, e.before, e.after) for e in led.entries],
                      "drawn": [e.token for e in entries],
                      "flipped": led.flipped}

    def _clear(self, message: str) -> None:
        self.plot_widget.hide()
        self.history.setMaximumHeight(16777215)
        self.history.setHtml(f"<span style='color:{theme.MUTED}'>{html.escape(message)}</span>")
        self._lines.setData([], [])
        self._before.setData([], [])
        self._after.setData([], [])
        self.plot.getAxis("left").setTicks([[]])

    def _draw(self, entries) -> None:
        self.plot_widget.show()
        self.history.setMaximumHeight(66)
        ys = np.arange(len(entries), dtype=float)
        before = np.array([e.before for e in entries], dtype=float)
        after = np.array([e.after for e in entries], dtype=float)
        xs = np.empty(2 * len(entries))
        xs[0::2], xs[1::2] = before, after
        self._lines.setData(xs, np.repeat(ys, 2))
        self._before.setData(before, ys)
        self._after.setData(after, ys)
        self.plot.getAxis("left").setTicks([[(float(y), visible(e.text, 12)) for y, e in zip(ys, entries)]])
        if len(entries):
            lo, hi = float(min(before.min(), after.min())), float(max(before.max(), after.max()))
            pad = max(0.5, 0.08 * (hi - lo))
            self.plot.setXRange(lo - pad, hi + pad, padding=0)
            self.plot.setYRange(-0.7, len(entries) - 0.3, padding=0)
