"""The token tree of one window: root (the last committed token) on the left, drafts to the right.

Each branch reads left to right like the text it proposes; the accepted path is one straight line
along the top (workbench.views.tree_layout places the nodes). The token the target added after the
path (bonus or correction) is drawn as a dashed node at the end of it.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFontMetricsF, QImage, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import (QGraphicsItem, QGraphicsPathItem, QGraphicsScene, QGraphicsSimpleTextItem,
                               QGraphicsView, QLabel, QWidget)

from engine.cost.plan import describe
from engine.speculation.events import (ACCEPTED, BONUS, CORRECTION, NOT_REACHED, REJECTED, ROOT, TARGET,
                                       WindowEvent)

from workbench import theme
from workbench.tokens import fmt_prob, visible
from workbench.views.base import Shown
from workbench.views.tree_layout import TreeLayout, layout
from workbench.widgets import ElidedLabel, column

EXTRA = "extra"          # the bonus / correction / target token, not a draft node
MIN_SCALE = 0.9          # below this the labels stop being legible: scroll instead of shrinking
LEGEND = ((ACCEPTED, "accepted"), (REJECTED, "rejected"), (NOT_REACHED, "not reached"),
          (BONUS, "bonus"), (CORRECTION, "correction"))


def legend_entries() -> list[tuple[str, str]]:
    """(colour, text) of every key the legend shows: the outcomes, then the selection ring."""
    return [(theme.OUTCOME_COLOR[role], text) for role, text in LEGEND] + [(theme.SELECT, "selected row")]


def legend_html() -> str:
    keys = [f"<span style='background:{theme.tint(c, theme.NODE_FILL).name()};color:{c}'>&nbsp;■&nbsp;</span>"
            f"&nbsp;{t}" for c, t in legend_entries()[:-1]]
    keys.append(f"<span style='color:{theme.SELECT}'>◯</span>&nbsp;selected row")
    return " &nbsp; ".join(keys)


@dataclass(frozen=True)
class NodeState:
    """What the view shows for one node (read by tests and by replays)."""

    node: int            # draft node index; -1 root; -2 the emitted extra token
    label: str
    role: str            # ROOT | ACCEPTED | REJECTED | NOT_REACHED | BONUS | CORRECTION | TARGET
    color: str           # the border's colour: the legend's colour of `role`
    on_path: bool
    q: float | None = None   # the draft's probability of the node's token (model drafts)
    fill: str = ""       # the fill: `color` mixed into the panel (theme.NODE_FILL)


def node_roles(ev: WindowEvent) -> list[str]:
    """Outcome of every draft node: from the verify rows, else from the accepted path alone."""
    on_path = set(ev.accepted_path)
    roles = []
    for i in range(len(ev.tokens)):
        r = i + 1
        if r < len(ev.rows) and ev.rows[r].node == i:
            roles.append(ev.rows[r].outcome)
        else:
            roles.append(ACCEPTED if i in on_path else NOT_REACHED)
    return roles


def node_q(ev: WindowEvent, i: int) -> float | None:
    """Node i's draft probability q, from its verify row (None: a point-mass n-gram draft)."""
    r = i + 1
    return ev.rows[r].q if r < len(ev.rows) and ev.rows[r].node == i else None


def extra_token(ev: WindowEvent) -> tuple[str, str] | None:
    """(text, kind) of the last emitted token when the target, not the tree, produced it."""
    if ev.emitted_kinds and ev.emitted_kinds[-1] in (BONUS, CORRECTION, TARGET):
        return ev.emitted_texts[-1], ev.emitted_kinds[-1]
    return None


class _Node(QGraphicsItem):
    def __init__(self, rect: QRectF, label: str, color: str, fill: QColor, *, bold: bool,
                 dashed: bool, on_path: bool, row: int, on_click):
        super().__init__()
        self._rect, self._label, self._color, self._fill = rect, label, color, fill
        self._bold, self._dashed, self._on_path = bold, dashed, on_path
        self.row = row
        self._on_click = on_click
        self.selected_row = False
        self.setAcceptHoverEvents(True)
        if row >= 0:
            self.setCursor(Qt.CursorShape.PointingHandCursor)

    def boundingRect(self) -> QRectF:
        return self._rect.adjusted(-6, -6, 6, 6)

    def paint(self, p: QPainter, option, widget=None) -> None:
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        if self.selected_row:           # a ring outside the node: its own border keeps its outcome
            p.setPen(QPen(QColor(theme.SELECT), 2.0))
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawRoundedRect(self._rect.adjusted(-4, -4, 4, 4), 8, 8)
        pen = QPen(QColor(self._color), 2.4 if self._on_path else 1.6)
        if self._dashed:
            pen.setStyle(Qt.PenStyle.DashLine)
        p.setPen(pen)
        p.setBrush(QBrush(self._fill))
        p.drawRoundedRect(self._rect, 6, 6)
        f = theme.mono_font(9.5)
        f.setBold(self._bold)
        p.setFont(f)
        p.setPen(QColor(theme.TEXT if self._color != theme.GREY else "#aab1ba"))
        p.drawText(self._rect, Qt.AlignmentFlag.AlignCenter, self._label)

    def mousePressEvent(self, e) -> None:
        if self.row >= 0 and self._on_click:
            self._on_click(self.row)
        super().mousePressEvent(e)


class _Canvas(QGraphicsView):
    def __init__(self, scene: QGraphicsScene):
        super().__init__(scene)
        self.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
        self.setBackgroundBrush(QColor(theme.PANEL))
        self.setFrameShape(QGraphicsView.Shape.NoFrame)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.user_zoomed = False

    def wheelEvent(self, e) -> None:
        if e.modifiers() & Qt.KeyboardModifier.ControlModifier:
            k = 1.15 if e.angleDelta().y() > 0 else 1 / 1.15
            self.scale(k, k)
            self.user_zoomed = True
        else:
            super().wheelEvent(e)

    def fit(self) -> None:
        """Show the whole tree when it fits at a legible scale; otherwise scroll at that scale."""
        if self.user_zoomed:
            return
        r = self.scene().itemsBoundingRect().adjusted(-12, -12, 12, 12)
        self.setSceneRect(r)
        vw, vh = max(1, self.viewport().width()), max(1, self.viewport().height())
        k = max(MIN_SCALE, min(1.25, vw / r.width(), vh / r.height()))
        self.resetTransform()
        self.scale(k, k)

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        self.fit()


IDLE_HINT = "no window yet: Run (F5) starts decoding, Step (N) runs one window"
RUN_HINTS = {"starting": "decoding starts: the first window is on its way",
             "loading": "loading the model: decoding starts when it is ready",
             "probing": "measuring this device: decoding starts when it is done",
             "running": "decoding: the first window is on its way",
             "paused": "paused before the first window: Resume (F5) or Step (N)"}


class TokenTreeView(QWidget):
    """The shown window's tree; clicking a node emits `row_selected(row)`."""

    row_selected = Signal(int)
    is_plot = False
    follows_row = True

    def __init__(self, parent=None):
        super().__init__(parent)
        self.scene = QGraphicsScene(self)
        self.canvas = _Canvas(self.scene)
        self.summary = ElidedLabel("no window yet")   # one line; cut with "…", whole in the tooltip
        legend = QLabel(legend_html())
        legend.setObjectName("muted")
        legend.setWordWrap(True)
        legend.setFont(theme.ui_font(8.5))
        column(self, self.summary, legend, (self.canvas, 1), margins=(8, 6, 8, 4))
        self._items: list[_Node] = []
        self._states: list[NodeState] = []
        self._event: WindowEvent | None = None
        self._selected_row = -1
        self.export_top = 0
        self._hint = IDLE_HINT
        self.clear()

    # ---- public -----------------------------------------------------------------------------
    def update_from(self, shown: Shown) -> None:
        self.show_event(shown.event)
        self.select_row(shown.row)

    def node_states(self) -> list[NodeState]:
        return list(self._states)

    def select_row(self, row: int) -> None:
        self._selected_row = row
        for it in self._items:
            it.selected_row = it.row == row and row > 0
            it.update()

    def set_run_state(self, state: str) -> None:
        """The live run's state (workbench.run_control): the empty tree's hint says what is
        happening (after Reset decoding restarts; it no longer says Run starts it)."""
        self._hint = RUN_HINTS.get(state, IDLE_HINT)
        if self._event is None:
            self.clear()

    def hint(self) -> str:
        return self._hint

    def clear(self, message: str | None = None) -> None:
        message = message or self._hint
        self.scene.clear()
        self._items, self._states, self._event = [], [], None
        self.summary.setText("")
        hint = QGraphicsSimpleTextItem(message)
        hint.setBrush(QColor(theme.MUTED))
        hint.setFont(theme.ui_font(10))
        self.scene.addItem(hint)
        self.canvas.fit()

    def show_event(self, ev: WindowEvent | None) -> None:
        if ev is self._event:
            return                      # None: the hint clear() drew is already shown
        if ev is None:
            self.clear()
            return
        self._event = ev
        self.scene.clear()
        self._items, self._states = [], []
        self._build(ev)
        self.canvas.fit()
        n, acc = len(ev.tokens), len(ev.accepted_path)
        extra = extra_token(ev)
        tail = f" + {extra[1]}" if extra and extra[1] != TARGET else ""
        self.summary.setText(
            f"window {ev.index} · {ev.drafter} · {n} draft node{'s' if n != 1 else ''} "
            f"({len(ev.rows) or n + 1} row{'s' if (len(ev.rows) or n + 1) != 1 else ''}) · "
            f"accepted {acc}{tail} → {len(ev.emitted)} token"
            f"{'s' if len(ev.emitted) != 1 else ''}" + plain_why(ev))
        self.summary.setToolTip(ev.reason or "")

    def render_image(self, scale: float = 2.0) -> QImage:
        """The whole tree (not only what the dock shows) under a header (the window's summary)
        and the legend, for export."""
        r = self.scene.itemsBoundingRect().adjusted(-16, -16, 16, 16)
        head_f, key_f = theme.ui_font(10), theme.ui_font(9)
        head_h, key_h = QFontMetricsF(head_f).height() + 8, QFontMetricsF(key_f).height() + 10
        head = self.summary.full_text()
        keys = legend_entries()
        key_w = sum(QFontMetricsF(key_f).horizontalAdvance(t) + 40 for _, t in keys)
        w = max(r.width(), key_w + 24, QFontMetricsF(head_f).horizontalAdvance(head) + 24)
        img = QImage(int(w * scale), int((r.height() + head_h + key_h + 8) * scale), QImage.Format.Format_ARGB32)
        img.fill(QColor(theme.PANEL))
        p = QPainter(img)
        p.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
        p.scale(scale, scale)
        p.setFont(head_f)
        p.setPen(QColor(theme.TEXT))
        p.drawText(QRectF(12, 4, w - 24, head_h), Qt.AlignmentFlag.AlignVCenter, head)
        p.setFont(key_f)
        x, y = 12.0, head_h + 4
        for i, (color, text) in enumerate(keys):
            box = QRectF(x, y + key_h / 2 - 6, 12, 12)
            p.setPen(QPen(QColor(color), 1.6))
            p.setBrush(Qt.BrushStyle.NoBrush if i == len(keys) - 1 else QBrush(theme.tint(color, theme.NODE_FILL)))
            p.drawRoundedRect(box, 3, 3)
            p.setPen(QColor(theme.MUTED))
            adv = QFontMetricsF(key_f).horizontalAdvance(text)
            p.drawText(QRectF(x + 18, y, adv + 4, key_h), Qt.AlignmentFlag.AlignVCenter, text)
            x += adv + 40
        self.scene.render(p, QRectF(0, head_h + key_h + 8, r.width(), r.height()), r)
        p.end()
        self.export_top = int((head_h + key_h + 8) * scale)    # where the tree starts in the image
        return img

    # ---- layout -----------------------------------------------------------------------------
    def _build(self, ev: WindowEvent) -> None:
        qs = {i: node_q(ev, i) for i in range(len(ev.tokens))}
        extra = extra_token(ev)
        lay = layout(ev, QFontMetricsF(theme.mono_font(9.5)), qs, extra)
        for d, x in enumerate(lay.col_x):                  # depth captions above the columns
            cap = QGraphicsSimpleTextItem("root" if d == 0 else f"d{d}")
            cap.setBrush(QColor(theme.MUTED))
            cap.setFont(theme.ui_font(8))
            cap.setPos(x + 2, -20)
            self.scene.addItem(cap)
        self._edges(ev, lay, extra)                        # first, so nodes paint over them
        self._nodes(ev, lay, qs, extra)
        self.select_row(self._selected_row)

    def _edges(self, ev: WindowEvent, lay: TreeLayout, extra: tuple[str, str] | None) -> None:
        on_path = set(ev.accepted_path)
        for parent, kids in lay.children.items():
            for c in kids:
                a, b = lay.rects[parent], lay.rects[c]
                path = QPainterPath(QPointF(a.right(), a.center().y()))
                mx = (a.right() + b.left()) / 2
                path.cubicTo(QPointF(mx, a.center().y()), QPointF(mx, b.center().y()),
                             QPointF(b.left(), b.center().y()))
                hot = (c in on_path and (parent == -1 or parent in on_path)) or c == lay.extra_id
                if c == lay.extra_id:
                    color = theme.OUTCOME_COLOR.get(extra[1], theme.TEXT)
                else:
                    color = theme.GREEN if hot else theme.BORDER
                pen = QPen(QColor(color), 2.2 if hot else 1.2)
                if c == lay.extra_id:
                    pen.setStyle(Qt.PenStyle.DashLine)
                item = QGraphicsPathItem(path)
                item.setPen(pen)
                self.scene.addItem(item)

    def _nodes(self, ev: WindowEvent, lay: TreeLayout, qs: dict[int, float | None],
               extra: tuple[str, str] | None) -> None:
        on_path = set(ev.accepted_path)

        def add(k: int, role: str, color: str, *, bold=False, dashed=False, path=False, row=-1, tip="", q=None):
            fill = theme.tint(color, theme.NODE_FILL)
            it = _Node(lay.rects[k], lay.labels[k], color, fill, bold=bold, dashed=dashed, on_path=path,
                       row=row, on_click=self.row_selected.emit)
            it.setToolTip(tip)
            self.scene.addItem(it)
            self._items.append(it)
            node_id = -1 if k == -1 else (-2 if k == lay.extra_id else k)
            self._states.append(NodeState(node_id, lay.labels[k], role, color, path, q, fill.name()))

        add(-1, ROOT, theme.TEXT, bold=True, path=True, row=0, tip=self._root_tip(ev))
        for i, role in enumerate(node_roles(ev)):
            add(i, role, theme.OUTCOME_COLOR.get(role, theme.GREY), path=i in on_path,
                row=i + 1, tip=self._node_tip(ev, i, role), q=qs[i])
        if extra is not None:
            kind = extra[1]
            add(lay.extra_id, kind, theme.OUTCOME_COLOR.get(kind, theme.TEXT), dashed=True, path=True,
                tip=f"<b>{html.escape(visible(extra[0]))}</b><br>{theme.KIND_LABEL.get(kind, kind)}: "
                    "the target's own token at the end of the accepted path")

    @staticmethod
    def _root_tip(ev: WindowEvent) -> str:
        return (f"<b>{html.escape(visible(ev.root_text))}</b> (id {ev.root_token})<br>"
                f"root: the last committed token, row 0<br>position {ev.committed_len - 1}")

    @staticmethod
    def _node_tip(ev: WindowEvent, i: int, role: str) -> str:
        lines = [f"<b>{html.escape(visible(ev.texts[i]))}</b> (id {ev.tokens[i]})",
                 f"node {i} · row {i + 1} · depth {ev.depths[i] if i < len(ev.depths) else '?'}",
                 f"<span style='color:{theme.OUTCOME_COLOR.get(role, theme.GREY)}'>"
                 f"{theme.OUTCOME_LABEL.get(role, role)}</span>"]
        if i < len(ev.provenance):
            pv = ev.provenance[i]
            if pv.position < 0:
                lines.append(f"drafted by {pv.source}")
            else:
                lines.append(f"match rank {pv.match} · copied from position {pv.position} · "
                             f"seen {pv.count}× · {pv.source}")
        r = i + 1
        if r < len(ev.rows):
            row = ev.rows[r]
            lines.append(f"p {fmt_prob(row.p)} · q {fmt_prob(row.q)} · accept {fmt_prob(row.accept_prob)}")
            if row.penalty is not None and row.penalty.flipped:
                lines.append(f"<span style='color:{theme.AMBER}'>⚑ penalties flipped this verdict</span>")
        return "<br>".join(lines)


def plain_why(ev: WindowEvent) -> str:
    """For a window that drafted nothing, why, in a few words (its cause's brief words, without
    the figures in brackets): ' · plain: no early-exit window can pay on this device'. A
    recording made before windows carried their cause says nothing here (the tooltip keeps the
    whole reason)."""
    if ev.tokens or not ev.cause:
        return ""
    return f" · {describe(ev.cause, ev.figures, brief=True)}"
