"""Issue 35's leftovers in the views: the Lesson dock lays its figure, table and text out without
overlap at 1280x720 and its legend keeps off the knee marker; lessons are saved where the command
line saves them; the tree's placeholder and the output tab's source say what is happening; the
sweep's caption names the baseline as the rest of the window does; the stats titles fit at 1024."""

from __future__ import annotations

import os
from pathlib import Path

import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPoint, QRect, QSize

from tests.workbench.conftest import TIMEOUT_MS

SHOTS = os.environ.get("SPECSCOPE_SHOTS")        # a folder: save what the tests look at


def _shot(widget, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        widget.grab().save(str(Path(SHOTS) / f"{name}.png"))


def _settle(qtbot, qapp, win, size) -> None:
    win.resize(*size)
    qtbot.waitUntil(lambda: win.size() == QSize(*size), timeout=5000)
    for _ in range(3):
        qapp.processEvents()
        qtbot.wait(20)


def _rect_in(win, w) -> QRect:
    """Widget `w`'s rectangle in window coordinates."""
    return QRect(w.mapTo(win, QPoint(0, 0)), w.size())


def test_the_lesson_dock_shows_figure_table_and_text_apart_at_1280x720(qtbot, qapp, make_window,
                                                                        lesson_result, tmp_path):
    win = make_window()
    result, _ = lesson_result("knee")
    _settle(qtbot, qapp, win, (1280, 720))
    view = win.lessons.open("knee")
    view.figure.set_result(result)
    _settle(qtbot, qapp, win, (1280, 720))
    assert not win.lessons.docks["knee"].visibleRegion().isEmpty()     # in front of its tab group
    _shot(win, "lesson_knee_1280x720")
    fig = view.figure
    scroll = fig.split.widget(1)              # the table and the text scroll below the plots
    rects = {"plots": _rect_in(win, fig.plots), "text": _rect_in(win, scroll)}
    for k, r in rects.items():
        assert r.height() > 60 and r.width() > 200 and win.rect().contains(r), (k, r)
    assert not rects["plots"].intersects(rects["text"]), rects
    assert rects["plots"].height() >= 180
    table, notes = _rect_in(scroll.widget(), fig.table), _rect_in(scroll.widget(), fig.notes)
    assert not table.intersects(notes) and table.height() > 40 and notes.height() > 40, (table, notes)
    # the legend is under the plot, clear of the knee marker's line and its label
    legend = _rect_in(win, fig.legend)
    assert fig.panels[0].legend is None and fig.legend.isVisible()
    assert legend.top() >= rects["plots"].bottom() and legend.bottom() <= rects["text"].top(), legend
    for s in result.panels[0].series:
        assert not s.x or s.name.split(" (")[0] in fig.legend.text(), s.name
    # the knee markers' labels: apart from each other and inside the plot
    plot = fig.panels[0]
    box = plot.vb.sceneBoundingRect()
    labels = [i.label.sceneBoundingRect() for i in plot.items
              if isinstance(i, pg.InfiniteLine) and i.angle == 90 and i.label is not None]
    assert len(labels) == len([m for m in result.panels[0].marks if m.axis == "x"]) >= 1
    for k, a in enumerate(labels):
        assert box.contains(a), (a, box)
        assert all(not a.intersects(b) for b in labels[k + 1:]), labels


def test_the_dock_saves_lessons_where_the_command_line_does_and_says_so(qtbot, make_window, tmp_path,
                                                                        monkeypatch):
    from specscope.lesson_cmd import add_lesson_args
    import argparse
    parser = argparse.ArgumentParser()
    add_lesson_args(parser)
    cli_out = parser.parse_args(["knee"]).out
    monkeypatch.chdir(tmp_path)
    win = make_window()
    titles = [a.text() for a in win.lessons.actions.values()]
    assert titles and not any("seed" in t for t in titles), titles     # no seed beside the seed field
    view = win.lessons.open("knee", quick=True)
    assert view.folder == tmp_path / cli_out and str(view.folder) in view.status.text()
    with qtbot.waitSignal(view.finished, timeout=TIMEOUT_MS) as done:
        view.start()
    assert done.args[0] is not None
    for ext in ("png", "csv", "md"):
        assert (tmp_path / cli_out / f"knee.{ext}").is_file()
    assert str(tmp_path / cli_out) in view.status.text()
    assert str(tmp_path / cli_out) in win.status.text.full_text()


def test_after_reset_the_empty_tree_says_decoding_restarts(qtbot, qapp, make_window):
    from workbench.views.tree import IDLE_HINT, RUN_HINTS

    def hint_shown(win) -> str:
        from PySide6.QtWidgets import QGraphicsSimpleTextItem
        texts = [i.text() for i in win.tree.scene.items() if isinstance(i, QGraphicsSimpleTextItem)]
        return texts[0] if len(texts) == 1 and win.tree._event is None else ""

    win = make_window()
    assert hint_shown(win) == IDLE_HINT           # nothing started yet: Run starts it
    states = []
    win.run.state_changed.connect(states.append)
    win.reset()                                   # stop, clear, start again
    assert win.run.state != "idle"
    assert hint_shown(win) == RUN_HINTS[win.run.state] != IDLE_HINT
    assert "Run (F5) starts" not in hint_shown(win)
    qtbot.waitUntil(lambda: win.run.state == "idle" and len(win.store) > 0, timeout=TIMEOUT_MS)
    win.run.stop()
    win.presenter.clear()                         # nothing running, nothing shown: Run starts it
    assert hint_shown(win) == IDLE_HINT
    assert states and states[-1] == "idle"


def test_the_prompt_tab_says_edited_prompt_once_typed_into(qtbot, make_window):
    win = make_window(prompt=None)
    editor = win.prompt_editor
    assert "from default prompt" in editor.info.full_text()
    editor.edit.selectAll()
    qtbot.keyClicks(editor.edit, '[{"role": "user", "content": "Write a haiku."}]')    # typed, not loaded
    info = editor.info.full_text()
    assert "from default prompt" not in info and "edited prompt (was: default prompt)" in info
    editor.load_default()                         # back to the bundled prompt: its source again
    assert "from default prompt" in editor.info.full_text() and "edited" not in editor.info.full_text()


def test_the_sweep_caption_names_plain_decoding_with_the_ratios_own_numbers(qtbot, cpu_runtime, tmp_path):
    import re

    from engine.cost.baseline import Baseline
    from engine.io.workloads import load_workload
    from engine.tuning.grid import SweepConfig
    from engine.tuning.sweep import Sweep
    from tests.sweep_helpers import workload_file
    from workbench.cell_export import CellExportDialog
    from workbench.views.heatmap import HeatmapView
    path = workload_file(tmp_path)
    cfg = SweepConfig(workload=str(path), drafts=("lookup",), depths=(3,), widths=(1,), prompts=1,
                      new_tokens=8)
    sweep = Sweep(cpu_runtime, cfg, load_workload(str(path), None, 1))
    for _ in sweep.steps():
        pass
    result = sweep.result
    hm = HeatmapView()
    qtbot.addWidget(hm)
    hm.set_result(result)
    text = hm.caption.text()
    ar = result["ar"]
    assert ar["decode_tok_s"] != ar["tok_s"]          # prefill in one, not the other: they differ
    assert Baseline(ar["decode_tok_s"], "measured").label() in text
    assert " AR" not in text and "x AR" not in text
    best = next(c for c in result["cells"] if c["id"] == result["best"])
    m = re.search(rf"best {re.escape(best['id'])}: ([0-9.]+)x plain decoding, ([0-9.]+) tok/s", text)
    assert m, text
    ratio, tok_s = float(m.group(1)), float(m.group(2))
    assert ratio == round(best["ratio_to_ar"], 2)
    assert tok_s == round(best["decode_tok_s"], 1)      # the decode speed the ratio is of
    # one prompt: the ratio is the cell's decode tok/s over the baseline's
    assert abs(best["decode_tok_s"] / ar["decode_tok_s"] - best["ratio_to_ar"]) < 0.01 * best["ratio_to_ar"]
    dialog = CellExportDialog(result, best["id"])
    qtbot.addWidget(dialog)
    assert dialog.cell.currentText() == f"{best['id']}  ({best['ratio_to_ar']:.2f}x plain decoding)"


@pytest.mark.parametrize("size", [(1024, 768), (1280, 720)])
def test_stats_titles_fit_their_plots(qtbot, qapp, make_window, size):
    from PySide6.QtGui import QFont, QFontMetrics

    from workbench.views.stats import LEGENDS
    win = make_window()
    _settle(qtbot, qapp, win, size)
    win.docks["stats"].show()
    win.docks["stats"].raise_()
    _settle(qtbot, qapp, win, size)
    assert not win.docks["stats"].visibleRegion().isEmpty()
    _shot(win, f"stats_{size[0]}x{size[1]}")
    view = win.stats
    plots = dict(zip(LEGENDS, (view.p_tps, view.p_pass, view.p_depth, view.p_gamma)))
    for title, p in plots.items():
        label = p.titleLabel
        font = QFont(label.item.font())
        font.setPointSizeF(8.5)
        font.setBold(True)
        text_w = QFontMetrics(font).horizontalAdvance(title)
        assert label.item.toPlainText() == title
        assert 0 < text_w <= label.width() <= p.width() + 1, (title, text_w, label.width(), p.width())
        assert label.item.boundingRect().width() <= p.width() + 1, title
