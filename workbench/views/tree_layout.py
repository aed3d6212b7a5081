"""Where a window's token tree is drawn: one column per depth, one line per leaf.

Children are ordered accepted first, then by match rank, and a parent sits on the line of its
first child, so the accepted path is one straight line along the top. The token the target added
after the path (bonus or correction) gets a pseudo node id of its own (`extra_id`), placed first
among the children of the path's last node.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF
from PySide6.QtGui import QFontMetricsF

from engine.speculation.events import WindowEvent

from workbench.tokens import fmt_prob, visible

NODE_H = 26.0
ROW_GAP = 10.0
COL_GAP = 34.0
PAD_X = 9.0
MIN_NODE_W = 34.0
LABEL_LIMIT = 18


@dataclass(frozen=True)
class TreeLayout:
    """Node ids: -1 the root, 0 .. n-1 the draft nodes, `extra_id` (n) the target's own token."""

    children: dict[int, list[int]]      # in drawing order, top line first
    labels: dict[int, str]
    rects: dict[int, QRectF]
    col_x: list[float]                  # left edge of each depth's column
    extra_id: int


def _children(ev: WindowEvent, extra_parent: int | None) -> dict[int, list[int]]:
    on_path = set(ev.accepted_path)
    children: dict[int, list[int]] = {-1: []}
    for i, p in enumerate(ev.parents):
        children.setdefault(p, []).append(i)

    def rank(i: int) -> tuple:
        prov = ev.provenance[i] if i < len(ev.provenance) else None
        return (0 if i in on_path else 1, prov.match if prov else 0, i)

    for k in children:
        children[k].sort(key=rank)
    if extra_parent is not None:
        children.setdefault(extra_parent, []).insert(0, len(ev.tokens))
    return children


def _lines(children: dict[int, list[int]]) -> dict[int, int]:
    """One line per leaf, in DFS order; a parent shares its first child's line."""
    line: dict[int, int] = {}
    next_line = [0]

    def place(k: int) -> int:
        kids = children.get(k, [])
        if not kids:
            line[k] = next_line[0]
            next_line[0] += 1
            return line[k]
        first = place(kids[0])
        for c in kids[1:]:
            place(c)
        line[k] = first
        return first

    place(-1)
    return line


def layout(ev: WindowEvent, fm: QFontMetricsF, qs: dict[int, float | None],
           extra: tuple[str, str] | None) -> TreeLayout:
    """`qs`: each draft node's draft probability (None: not a model draft), shown beside its
    token; `extra`: workbench.views.tree.extra_token(ev)."""
    n = len(ev.tokens)
    extra_parent = (ev.accepted_path[-1] if ev.accepted_path else -1) if extra is not None else None
    children = _children(ev, extra_parent)
    depth = {-1: 0}
    labels = {-1: visible(ev.root_text, LABEL_LIMIT)}
    for i in range(n):
        depth[i] = ev.depths[i] if i < len(ev.depths) else 1
        labels[i] = visible(ev.texts[i], LABEL_LIMIT)
        if qs[i] is not None:          # a model draft: its q beside the token
            labels[i] += f"  q{fmt_prob(qs[i], 2).lstrip('0')}"
    if extra is not None:
        depth[n] = depth[extra_parent] + 1
        labels[n] = visible(extra[0], LABEL_LIMIT)
    width = {k: max(fm.horizontalAdvance(labels[k]) + 2 * PAD_X, MIN_NODE_W) for k in depth}
    max_depth = max(depth.values())
    col_w = [0.0] * (max_depth + 1)
    for k, d in depth.items():
        col_w[d] = max(col_w[d], width[k])
    col_x = [0.0]
    for d in range(1, max_depth + 1):
        col_x.append(col_x[-1] + col_w[d - 1] + COL_GAP)
    line = _lines(children)
    rects = {k: QRectF(col_x[d], line[k] * (NODE_H + ROW_GAP), width[k], NODE_H) for k, d in depth.items()}
    return TreeLayout(children, labels, rects, col_x, n)
