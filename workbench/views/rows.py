"""The verify rows of one window as a table: one line per row of the verify pass."""

from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QVBoxLayout, QWidget

from engine.speculation.events import ROOT, VerifyRow, WindowEvent

from workbench import theme
from workbench.tokens import fmt_prob, fmt_top, visible
from workbench.views.base import Shown

COLUMNS = ("row", "depth", "draft", "target", "p", "q", "accept", "outcome", "top-5 (after penalties)")
_NUMERIC = {0, 1, 4, 5, 6}


def row_cells(r: VerifyRow) -> list[str]:
    """The table's text for one row (also what CSV export writes, with whitespace made visible)."""
    outcome = theme.OUTCOME_LABEL.get(r.outcome, r.outcome)
    marks = []
    if r.penalty is not None and r.penalty.flipped:
        marks.append("⚑")
    if r.near_tie:
        marks.append("≈")
    if marks:
        outcome = f"{outcome} {' '.join(marks)}"
    return [str(r.row), str(r.depth), "" if r.draft_token is None else visible(r.draft_text, 24),
            visible(r.target_text, 24), fmt_prob(r.p), fmt_prob(r.q), fmt_prob(r.accept_prob),
            outcome, fmt_top(r.top)]


class RowsModel(QAbstractTableModel):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._rows: list[VerifyRow] = []
        self._cells: list[list[str]] = []

    def set_rows(self, rows: list[VerifyRow]) -> None:
        self.beginResetModel()
        self._rows = list(rows)
        self._cells = [row_cells(r) for r in rows]
        self.endResetModel()

    def rows(self) -> list[VerifyRow]:
        return list(self._rows)

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent=QModelIndex()) -> int:
        return len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def data(self, index: QModelIndex, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        r, c = index.row(), index.column()
        row = self._rows[r]
        if role == Qt.ItemDataRole.DisplayRole:
            return self._cells[r][c]
        if role == Qt.ItemDataRole.ForegroundRole:
            if c == 7 or (c == 2 and row.outcome != ROOT):
                return QColor(theme.OUTCOME_COLOR.get(row.outcome, theme.TEXT))
            if c in (0, 1, 8):
                return QColor(theme.MUTED)
        if role == Qt.ItemDataRole.FontRole and c in (2, 3, 8):
            return theme.mono_font(9)
        if role == Qt.ItemDataRole.TextAlignmentRole:
            if c in (0, 1):
                return int(Qt.AlignmentFlag.AlignCenter)
            if c in _NUMERIC:
                return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            return int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole:
            tip = "<br>".join(f"{visible(t[1])} ({t[0]}): {t[2]:.4f}" for t in row.top)
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
        return None


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
        for c, w in enumerate((36, 50, 104, 104, 54, 46, 56, 100)):
            h.resizeSection(c, w)
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
        self.model.set_rows(ev.rows if ev else [])
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
