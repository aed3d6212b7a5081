"""The views read as teaching figures: one decision per verify line, tree colours that match the
legend, plots whose legends name every curve, docks whose parts never overlap (issue 35)."""

from __future__ import annotations

from engine.speculation.events import ACCEPTED, BONUS, CORRECTION, NOT_REACHED, REJECTED, ROOT, TARGET

from tests.workbench.conftest import SMALL, show, wait_idle
from workbench.tokens import fmt_prob, fmt_top, visible


def _run(qtbot, make_window, settings=SMALL):
    win = make_window(settings)
    assert win.start_run()
    wait_idle(qtbot, win)
    assert len(win.store) >= 2, "the run made too few windows to check anything"
    return win


def test_each_verify_line_is_one_decision(qtbot, make_window):
    """Proposed token, the target's pick and p from the parent row, the verdict, and what was
    emitted there (the correction for the rejection that cut the path), all matching the events."""
    win = _run(qtbot, make_window)
    corrections = bonuses = rejected_lines = 0
    for idx, ev in enumerate(win.store.events):
        show(win, idx)
        m = win.rows.model
        assert m.rowCount() == len(ev.rows)
        last = ev.accepted_path[-1] if ev.accepted_path else -1
        for r in ev.rows:
            cell = [m.index(r.row, c).data() for c in range(m.columnCount())]
            parent_row = ev.rows[ev.parents[r.node] + 1] if r.node >= 0 else r
            assert cell[2] == ("—" if r.outcome == ROOT else visible(ev.texts[r.node], 24))
            assert cell[3] == visible(parent_row.target_text, 24)
            assert cell[4] == fmt_prob(r.p)
            assert cell[9] == f"row {parent_row.row}: {fmt_top(parent_row.top)}"
            assert cell[7].split()[0] == {ROOT: "root", ACCEPTED: "accepted", REJECTED: "rejected",
                                          NOT_REACHED: "not"}[r.outcome]
            kind = ev.emitted_kinds[-1]
            if r.outcome == REJECTED and ev.parents[r.node] == last and kind == CORRECTION:
                # greedy: the correction is the parent row's own pick, shown on the same line
                assert cell[8] == f"‘{visible(ev.emitted_texts[-1], 16)}’ (correction)"
                assert ev.emitted[-1] == parent_row.target_token
                corrections += 1
            elif r.outcome == ACCEPTED:
                assert r.node in ev.accepted_path
                tail = f", then bonus ‘{visible(ev.emitted_texts[-1], 16)}’"
                assert cell[8] == "kept" + (tail if r.node == last and kind == BONUS else "")
                bonuses += r.node == last and kind == BONUS
            elif r.outcome == ROOT:
                assert cell[8] == (f"‘{visible(ev.emitted_texts[-1], 16)}’ (target)"
                                   if not ev.tokens and kind == TARGET else "")
            rejected_lines += r.outcome == REJECTED
    assert corrections and rejected_lines, "no correction in the run: the check could not fail"


def _near(img, x: float, y: float, color: str, reach: int = 3) -> float:
    """The smallest colour distance to `color` among the pixels within `reach` of (x, y)."""
    from PySide6.QtGui import QColor
    want = QColor(color)
    best = 1e9
    for dx in range(-reach, reach + 1):
        for dy in range(-reach, reach + 1):
            c = img.pixelColor(int(x) + dx, int(y) + dy)
            best = min(best, abs(c.red() - want.red()) + abs(c.green() - want.green())
                       + abs(c.blue() - want.blue()))
    return best


def _render(scene):
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QColor, QImage, QPainter
    from workbench import theme
    r = scene.itemsBoundingRect().adjusted(-10, -10, 10, 10)
    img = QImage(int(r.width()), int(r.height()), QImage.Format.Format_ARGB32)
    img.fill(QColor(theme.PANEL))
    p = QPainter(img)
    scene.render(p, QRectF(0, 0, r.width(), r.height()), r)
    p.end()
    return img, r


def test_tree_colours_are_the_legends(qtbot, make_window, tmp_path):
    """Rejected and accepted nodes are drawn in the legend's colours (border and a visible fill),
    the selected row's ring in a colour of its own (not the correction blue), and the exported
    PNG carries the header and the legend."""
    from PySide6.QtGui import QColor, QImage
    from workbench import theme
    from workbench.export import export_png
    from workbench.views.tree import legend_entries, legend_html
    win = _run(qtbot, make_window)
    legend = dict((text, color) for color, text in legend_entries())
    assert legend["selected row"] not in (theme.BLUE, theme.ACCENT, *theme.OUTCOME_COLOR.values())
    for color, text in legend_entries():
        assert color in legend_html() and text in legend_html()
    rej = next((i, r.node) for i, ev in enumerate(win.store.events) for r in ev.rows if r.outcome == REJECTED)
    acc = next((i, ev.accepted_path[0]) for i, ev in enumerate(win.store.events) if ev.accepted_path)
    for (idx, node), role in ((rej, "rejected"), (acc, "accepted")):
        show(win, idx)
        win.tree.select_row(node + 1 if role == "rejected" else 0)    # row 0: no ring is drawn
        img, r = _render(win.tree.scene)
        item = next(it for it in win.tree._items if it.row == node + 1)
        state = next(s for s in win.tree.node_states() if s.node == node)
        rect = item._rect.translated(-r.left(), -r.top())
        assert state.color == legend[role]
        assert _near(img, rect.left(), rect.center().y(), legend[role]) < 40      # border
        fill = img.pixelColor(int(rect.left() + 4), int(rect.top() + 5))
        assert fill.name() == state.fill == theme.tint(legend[role], theme.NODE_FILL).name()
        turn = abs(fill.hsvHue() - QColor(legend[role]).hsvHue())
        assert min(turn, 360 - turn) < 20 and fill.hsvSaturation() > 60   # red reads red, not brown
        ring = _near(img, rect.left() - 4, rect.center().y(), legend["selected row"])
        assert (ring < 40) == (role == "rejected")                              # only the selected row
        assert _near(img, rect.left(), rect.center().y(), theme.BLUE, 1) > 60
    out = export_png(win, "tree", tmp_path / "tree.png", scale=1.0)
    png = QImage(str(out))
    assert png.height() > r.height() + 30 and png.width() >= r.width() - 20
    head = [png.pixelColor(x, y) for x in range(0, png.width(), 2) for y in range(2, 24)]
    assert any(c.lightness() > 150 for c in head), "no header text in the exported tree"
    keys = 0
    for color, _ in legend_entries():
        keys += any(_near(png, x, y, color, 0) < 30 for x in range(0, min(png.width(), 700), 2)
                    for y in range(24, 50, 2))
    assert keys == len(legend_entries()), "the exported tree lacks legend swatches"


def test_deep_tree_scrolls_instead_of_shrinking(qtbot, make_window):
    """A depth-16 window keeps legible labels (scale at least MIN_SCALE) and scrolls sideways."""
    from engine.speculation.settings import DecodeSettings
    from workbench.views.tree import MIN_SCALE
    win = _run(qtbot, make_window, DecodeSettings(draft="tree", depth=16, width=1, max_new_tokens=40))
    idx = max(range(len(win.store)), key=lambda i: max(win.store[i].depths or [0]))
    assert max(win.store[idx].depths) >= 8, "no deep window: the check could not fail"
    win.resize(1280, 720)
    show(win, idx)
    qtbot.wait(50)
    canvas = win.tree.canvas
    canvas.fit()
    assert canvas.transform().m11() >= MIN_SCALE
    wide = canvas.sceneRect().width() * canvas.transform().m11() > canvas.viewport().width()
    assert wide == canvas.horizontalScrollBar().isVisible()


def test_stats_axes_and_legends(qtbot, make_window):
    """An empty stats view shows depth from 1 and γ from 0 on whole-number ticks; every plot's
    legend names each of its curves; the stats and the roofline quote one baseline."""
    from workbench.views.stats import LEGENDS, StatsView
    view = StatsView()
    qtbot.addWidget(view)
    view.resize(420, 500)
    view.show()
    for plot, lo in ((view.p_depth, 1), (view.p_gamma, 0)):
        (x0, x1), _ = plot.getViewBox().viewRange()
        assert x0 == lo - 0.5 and x1 > lo + 1
        ticks = [v for _, vals in plot.getAxis("bottom").tickValues(x0, x1, 200) for v in vals]
        assert ticks and all(float(v).is_integer() and v >= lo for v in ticks), ticks
    assert view.p_gamma.getViewBox().viewRange()[1][0] == 0
    keys = {t: view.keys[t].text for t in LEGENDS}
    for title, words in (("throughput", ("run", "each window", "plain decoding")),
                         ("tokens / window", ("accepted", "bonus", "correction", "target", "running mean")),
                         ("reach by depth", ("run", "theory")), ("tokens / pass vs γ", ("run", "theory"))):
        assert all(w in keys[title] for w in words), (title, keys[title])
    win = _run(qtbot, make_window)
    win.render_all()
    label = win.stats.state["baseline"]
    assert label and label.startswith("plain decoding ") and label.endswith(("(measured)", "(probe)"))
    assert label == win.roofline.state["baseline"] and label in win.roofline.info.full_text()
    assert label in win.stats.headline.text()


def test_penalty_strip_and_plot_do_not_overlap(qtbot, make_window):
    """At 1280x720 and 1024x768 the history strip and the dumbbell plot, mapped to the window,
    share no pixel, and the strip shows several lines."""
    from PySide6.QtCore import QPoint, QRect
    from engine.speculation.settings import DecodeSettings
    settings = DecodeSettings.from_dict({"draft": "tree", "depth": 3, "width": 2, "max_new_tokens": 12,
                                         "repeat_penalty": 1.3})
    win = _run(qtbot, make_window, settings)
    idx = next(i for i, ev in enumerate(win.store.events) if len(ev.rows) > 1)
    for size in ((1280, 720), (1024, 768)):
        win.resize(*size)
        show(win, idx)
        win.penalty.show_row(win.store[idx], 1)
        qtbot.wait(100)
        pv = win.penalty
        assert pv.plot_widget.isVisible() and pv.history.isVisible()

        def at(w):
            return QRect(w.mapTo(win, QPoint(0, 0)), w.size())
        assert not at(pv.history).intersects(at(pv.plot_widget)), size
        assert pv.history.height() >= 3 * pv.history.fontMetrics().lineSpacing()
        assert pv.plot_widget.height() >= 80


def test_verify_rows_headers_fit_their_columns(qtbot):
    """Each column but the last (which stretches) is at least as wide as its header's text in
    the header's own font: fixed widths clipped "depth" and "accept" under the offscreen font."""
    from workbench.views.rows import COLUMNS, VerifyRowsView
    view = VerifyRowsView()
    qtbot.addWidget(view)
    h = view.table.horizontalHeader()
    fm = h.fontMetrics()
    for c, text in enumerate(COLUMNS[:-1]):
        assert h.sectionSize(c) >= fm.horizontalAdvance(text) + 12, (text, h.sectionSize(c))


def test_verify_rows_last_header_shows_its_start_when_cut(qtbot):
    """The stretched last column is narrower than its header's text in a narrow dock: the text
    is left-aligned and cut at the right ("judged by…"). Centred (before), its first words fell
    off the left edge ("arget top-5 (afte"), seen in a screenshot."""
    from PySide6.QtCore import Qt
    from workbench.views.rows import COLUMNS, VerifyRowsView
    view = VerifyRowsView()
    qtbot.addWidget(view)
    h = view.table.horizontalHeader()
    last = len(COLUMNS) - 1
    align = Qt.AlignmentFlag(view.model.headerData(last, Qt.Orientation.Horizontal,
                                                   Qt.ItemDataRole.TextAlignmentRole))
    assert align & Qt.AlignmentFlag.AlignLeft and not align & Qt.AlignmentFlag.AlignHCenter
    assert h.textElideMode() == Qt.TextElideMode.ElideRight
    assert h.sectionSize(last) < h.fontMetrics().horizontalAdvance(COLUMNS[last])  # it is cut
