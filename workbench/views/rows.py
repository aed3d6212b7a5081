"""The verify rows of one window as a table: one line per decision of the verify pass.

A line reads left to right as one decision: the token the draft proposed, the target's choice
at that position and its p for the proposal (both from the row of the node's parent: the target
scores a node's token on the row before it), the verdict, and what the window emitted there:
the draft kept, or the target's correction in its place. Row 0 (the root) proposes nothing: it
is the target's distribution after the committed text, the one that judges the depth-1 drafts
(and picks the next token itself when the window drafted nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QVBoxLayout, QWidget

from engine.speculation.events import (ACCEPTED, BONUS, CORRECTION, REJECTED, ROOT, TARGET, VerifyRow,
                                       WindowEvent)

from workbench import theme
from workbench.tokens import fmt_prob, fmt_top, visible
from workbench.views.base import Shown

COLUMNS = ("row", "depth", "proposed", "target picks", "p", "q", "accept", "verdict", "emitted",
           "judged by: target top-5 (after penalties)")
HEADER_TIPS = (
    "the verify row (row i+1 is draft node i)",
    "the node's depth (0: the root)",
    "the token the draft proposed at this position",
    "the target's own choice at this position: the row of the node's parent (row 0 for depth 1)",
    "the target's probability of the proposed token, on the parent's row (after penalties)",
    "the draft model's probability of its token (– : an n-gram draft proposes with certainty)",
    "the probability the verifier accepted it with: min(1, p/q) sampled, 1 or 0 greedy",
    "accepted, rejected, or not reached (below a rejection, or a sibling never tried)",
    "what the window emitted for this position: the draft kept, or the target's token instead",
    "the distribution that judged the proposal: the parent row's top-5")
_NUMERIC = {0, 1, 4, 5, 6}


@dataclass(frozen=True)
class Decision:
    """One line of the table: verify row `row`'s proposal judged by row `judge`'s distribution."""

    row: VerifyRow
    judge: VerifyRow            # the row whose distribution judged the proposal (itself for row 0)
    emitted: str                # "" | "kept" | "kept, then bonus ‘x’" | "‘x’ (correction)" | ...
    emitted_kind: str = ""      # the kind of token emitted instead / after (theme.KIND_COLOR)


def _final(ev: WindowEvent) -> tuple[str, str] | None:
    """(text, kind) of the window's last token when the target, not a draft, produced it."""
    if ev.emitted_kinds and ev.emitted_kinds[-1] in (BONUS, CORRECTION, TARGET):
        return visible(ev.emitted_texts[-1], 16), ev.emitted_kinds[-1]
    return None


def _emitted(ev: WindowEvent, r: VerifyRow, parent: int, last: int) -> tuple[str, str]:
    final = _final(ev)
    if r.outcome == ROOT:
        if not ev.tokens and final and final[1] == TARGET:
            return f"‘{final[0]}’ (target)", TARGET
        return "", ""
    if r.outcome == ACCEPTED:
        if r.node == last and final and final[1] == BONUS:
            return f"kept, then bonus ‘{final[0]}’", BONUS
        return "kept", ""
    if r.outcome == REJECTED:
        if parent == last and final and final[1] == CORRECTION:
            return f"‘{final[0]}’ (correction)", CORRECTION
        return "— (a sibling was kept)", ""
    return "", ""


def decisions(ev: WindowEvent) -> list[Decision]:
    """One decision per verify row of `ev`, in row order."""
    last = ev.accepted_path[-1] if ev.accepted_path else -1
    out = []
    for r in ev.rows:
        parent = ev.parents[r.node] if 0 <= r.node < len(ev.parents) else -1
        judge = ev.rows[parent + 1] if r.outcome != ROOT and parent + 1 < len(ev.rows) else r
        text, kind = _emitted(ev, r, parent, last)
        out.append(Decision(r, judge, text, kind))
    return out


def decision_cells(d: Decision) -> list[str]:
    """The table's text for one decision."""
    r = d.row
    verdict = theme.OUTCOME_LABEL.get(r.outcome, r.outcome)
    marks = []
    if r.penalty is not None and r.penalty.flipped:
        marks.append("⚑")
    if r.near_tie:
        marks.append("≈")
    if marks:
        verdict = f"{verdict} {' '.join(marks)}"
    judged = f"row {d.judge.row}: {fmt_top(d.judge.top)}"
    return [str(r.row), str(r.depth), "—" if r.draft_token is None else visible(r.draft_text, 24),
            visible(d.judge.target_text, 24), fmt_prob(r.p), fmt_prob(r.q), fmt_prob(r.accept_prob),
            verdict, d.emitted, judged]


class RowsModel(QAbstractTableModel):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._lines: list[Decision] = []
        self._cells: list[list[str]] = []

    def set_event(self, ev: WindowEvent | None) -> None:
        self.beginResetModel()
        self._lines = decisions(ev) if ev is not None else []
        self._cells = [decision_cells(d) for d in self._lines]
        self.endResetModel()

    def rows(self) -> list[VerifyRow]:
        return [d.row for d in self._lines]

    def decisions(self) -> list[Decision]:
        return list(self._lines)

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._lines)

    def columnCount(self, parent=QModelIndex()) -> int:
        return len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        if role == Qt.ItemDataRole.ToolTipRole:
            return HEADER_TIPS[section]
        if role == Qt.ItemDataRole.TextAlignmentRole and section == len(COLUMNS) - 1:
            # the stretched last column: its text starts at its left edge and is cut at the
            # right ("…"), where centred it lost its first letters ("arget top-5 (afte")
            return int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        return None

    def data(self, index: QModelIndex, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        r, c = index.row(), index.column()
        d = self._lines[r]
        if role == Qt.ItemDataRole.DisplayRole:
            return self._cells[r][c]
        if role == Qt.ItemDataRole.ForegroundRole:
            return self._color(d, c)
        if role == Qt.ItemDataRole.FontRole and c in (2, 3, 8, 9):
            return theme.mono_font(9)
        if role == Qt.ItemDataRole.TextAlignmentRole:
            if c in (0, 1):
                return int(Qt.AlignmentFlag.AlignCenter)
            if c in _NUMERIC:
                return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            return int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole:
            return _tip(d)
        return None

    @staticmethod
    def _color(d: Decision, c: int) -> QColor | None:
        if c == 7 or (c == 2 and d.row.outcome != ROOT):
            return QColor(theme.OUTCOME_COLOR.get(d.row.outcome, theme.TEXT))
        if c == 8 and d.emitted_kind:
            return QColor(theme.KIND_COLOR.get(d.emitted_kind, theme.TEXT))
        if c in (0, 1, 9) or (c == 8 and d.emitted.startswith("—")):
            return QColor(theme.MUTED)
        return None


def _tip(d: Decision) -> str:
    row = d.row
    head = ("row 0: the target's distribution after the committed text" if row.outcome == ROOT else
            f"‘{visible(row.draft_text)}’ proposed, judged by row {d.judge.row}'s distribution")
    tip = head + "<br>" + "<br>".join(f"{visible(t[1])} ({t[0]}): {t[2]:.4f}" for t in d.judge.top)
    if row.penalty is not None and row.penalty.flipped:
        tip += f"<br><span style='color:{theme.AMBER}'>⚑ penalties flipped this verdict</span>"
    if row.near_tie:
        tip += ("<br>≈ near tie: the top-2 margin is within this dtype's rounding noise; where "
                "rows are not bit-exact (see the stats view) another pass could pick the other")
    if row.q is not None:
        tip += f"<br>q = {row.q:.4f}: the draft model's probability of its token"
        if row.accept_prob is not None:
            tip += (f"<br>accepted with probability {row.accept_prob:.4f} "
                    "(sampled: min(1, p′/q); greedy: 1 if it is the argmax, else 0)")
    return tip


class VerifyRowsView(QWidget):
    """The shown window's verify rows; selecting a line emits `row_selected(row)`."""

    row_selected = Signal(int)
    is_plot = False
    follows_row = True

    def __init__(self, parent=None):
        super().__init__(parent)
        self.model = RowsModel(self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setAlternatingRowColors(True)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.table.setShowGrid(False)
        self.table.setWordWrap(False)
        h = self.table.horizontalHeader()
        h.setHighlightSections(False)
        h.setStretchLastSection(True)
        h.setTextElideMode(Qt.TextElideMode.ElideRight)
        # at least each header's own text (the font decides: a fixed width clipped "depth"
        # and "accept" under the offscreen platform's font)
        fm = h.fontMetrics()
        for c, w in enumerate((36, 46, 96, 96, 50, 46, 52, 84, 150)):
            h.resizeSection(c, max(w, fm.horizontalAdvance(COLUMNS[c]) + 18))
        h.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.table)
        self.table.selectionModel().currentRowChanged.connect(self._on_current)
        self._event: WindowEvent | None = None
        self._quiet = False

    def update_from(self, shown: Shown) -> None:
        self.show_event(shown.event)
        self.select_row(shown.row)

    def show_event(self, ev: WindowEvent | None) -> None:
        if ev is self._event:
            return
        self._event = ev
        current = self.selected_row()
        self._quiet = True
        self.model.set_event(ev)
        self._quiet = False
        if ev is not None and ev.rows:
            self.select_row(min(max(current, 0), len(ev.rows) - 1))

    def selected_row(self) -> int:
        idx = self.table.selectionModel().currentIndex()
        return idx.row() if idx.isValid() else -1

    def select_row(self, row: int) -> None:
        if 0 <= row < self.model.rowCount():
            self._quiet = True
            self.table.selectRow(row)
            self._quiet = False

    def _on_current(self, cur: QModelIndex, _prev: QModelIndex) -> None:
        if cur.isValid() and not self._quiet:
            self.row_selected.emit(cur.row())
