"""Penalty history of the selected verify row: H_r and each penalized candidate's logit.

Row r is penalized against its own history H_r = the last W tokens of (prompt ‖ output ‖ the draft
path from the root down to row r's node, that node included): what a plain autoregressive sampler
would have seen had that path been accepted (`engine.speculation.verify.row_histories`). In a tree
that path is the node's own ancestors: a sibling branch, or a row listed earlier in the table,
never enters it. The draft-path tokens at the end of H_r are marked apart from committed ones.
Each candidate is drawn as a dumbbell from its logit before penalties (grey) to after (violet).
"""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QScrollArea, QSizePolicy, QSplitter, QTextBrowser, QWidget

from engine.speculation.events import WindowEvent

from workbench import theme
from workbench.tokens import visible
from workbench.views.base import Shown
from workbench.widgets import column, row

MAX_CANDIDATES = 10


def led_flipped(r) -> bool:
    return r.penalty is not None and r.penalty.flipped


class PenaltyView(QWidget):
    is_plot = False
    follows_row = True

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
        self.legend = QLabel(f"<span style='color:{theme.MUTED}'>●</span> logit before penalties "
                             f"&nbsp; <span style='color:{theme.VIOLET}'>●</span> after")
        self.legend.setObjectName("muted")
        self.flips = QLabel("")
        self.flips.setObjectName("muted")
        self.flips.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.flips.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.plot.getAxis("left").setWidth(96)
        # the strip and the plot share the height through a splitter (never drawn over each
        # other); a dock too short for both scrolls instead of squeezing them together
        plot_box = QWidget()
        column(plot_box, (self.plot_widget, 1), row(self.legend, (self.flips, 1)), margins=(0, 0, 0, 0))
        plot_box.setMinimumHeight(120)
        self.plot_box = plot_box
        self.history.setMinimumHeight(4 * self.history.fontMetrics().lineSpacing())
        self.split = QSplitter(Qt.Orientation.Vertical)
        self.split.setChildrenCollapsible(False)
        self.split.addWidget(self.history)
        self.split.addWidget(plot_box)
        self.split.setStretchFactor(0, 2)
        self.split.setStretchFactor(1, 3)
        inner = QWidget()
        column(inner, self.header, (self.split, 1), margins=(0, 0, 0, 0))
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll.setWidget(inner)
        column(self, (self.scroll, 1))
        self._key: tuple | None = None
        self.state: dict = {}
        self.show_row(None, -1)

    def update_from(self, shown: Shown) -> None:
        self.show_row(shown.event, shown.row)

    def show_row(self, ev: WindowEvent | None, row: int) -> None:
        if self._key is not None and self._key[0] is ev and self._key[1] == row:
            return                  # holds the event itself: an id() could be reused by a new one
        self._key = (ev, row)
        flipped_rows = [r.row for r in ev.rows if led_flipped(r)] if ev else []
        self.flips.setText(f"<span style='color:{theme.AMBER}'>⚑ flipped: row"
                           f"{'s' if len(flipped_rows) > 1 else ''} {', '.join(map(str, flipped_rows))}</span>"
                           if flipped_rows else "")
        self.flips.setToolTip("rows of this window whose verdict the penalties changed")
        flips = ""
        if ev is None or not (0 <= row < len(ev.rows)):
            self.header.setText(f"<span style='color:{theme.MUTED}'>select a verify row</span>")
            self._clear("Each verify row is penalized against its own history: the last W tokens of "
                        "prompt and output, then the draft path from the root down to the row's node "
                        "(its own ancestors, never another branch). Pick a row in the tree or the "
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
        path = (f" · <span style='color:{theme.VIOLET}'>its draft path from the root "
                f"({led.n_draft})</span>") if led.n_draft else ""
        intro = (f"<span style='color:{theme.MUTED}'>H<sub>{r.row}</sub>: last {n_hist} tokens · "
                 f"committed</span>{path} &nbsp; ")
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
        self.plot_box.hide()
        self.legend.hide()
        self.history.setHtml(f"<span style='color:{theme.MUTED}'>{html.escape(message)}</span>")
        self._lines.setData([], [])
        self._before.setData([], [])
        self._after.setData([], [])
        self.plot.getAxis("left").setTicks([[]])

    def _draw(self, entries) -> None:
        self.plot_box.show()
        self.legend.show()
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
