"""The window as people meet it (issue 25): small screens, Reset layout, keys with a number field
focused, a timeline click, buttons that stay put, labels that never widen their docks."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QSize, Qt
from PySide6.QtWidgets import QDockWidget

from tests.workbench.conftest import TIMEOUT_MS, wait_windows


def _settle(qtbot, qapp, win, size) -> None:
    win.resize(*size)
    qtbot.waitUntil(lambda: win.size() == QSize(*size), timeout=5000)
    for _ in range(3):            # the arrangement follows the resize at the next turn of the loop
        qapp.processEvents()
        qtbot.wait(20)


def _in_front(win, d: QDockWidget) -> bool:
    """A dock on screen: shown and not a tab behind another."""
    return d.isVisible() and not d.visibleRegion().isEmpty()


@pytest.mark.parametrize("size", [(1280, 720), (1024, 768)])
def test_docks_fit_small_windows_and_keep_their_least_size(qtbot, qapp, make_window, size):
    win = make_window()
    _settle(qtbot, qapp, win, size)
    assert (win.width(), win.height()) == size          # the window did not grow past the screen
    shown = [d for d in win.docks.by_name.values() if _in_front(win, d)]
    assert {"controls", "tree", "rows"} <= {d.objectName() for d in shown}
    for d in shown:
        hint = d.minimumSizeHint()
        assert d.width() >= hint.width() and d.height() >= hint.height(), (d.objectName(), d.size(), hint)
        top_left = d.mapTo(win, QPoint(0, 0))
        assert win.rect().contains(top_left) and win.rect().contains(top_left + QPoint(d.width() - 1, d.height() - 1)), \
            (d.objectName(), top_left, d.size())
    # every input of the Controls panel is whole inside its dock (the panel scrolls vertically only)
    panel = win.controls
    view = panel.viewport()
    for w in (panel.depth, panel.width, panel.ngram_max, panel.match, panel.top_p, panel.presence_penalty,
              panel.penalty_window, panel.max_new_tokens, panel.takeover):
        right = w.mapTo(view, QPoint(w.width(), 0)).x()
        assert 0 < right <= view.width(), (w, right, view.width())
    assert win.docks.mode == (size[0] < 1200, size[1] < 820)


def test_reset_layout_brings_every_dock_back_and_the_wide_layout_returns(qtbot, qapp, make_window):
    win = make_window()
    _settle(qtbot, qapp, win, (1024, 768))
    assert win.docks.mode == (True, True)
    _settle(qtbot, qapp, win, (1640, 1000))
    assert win.docks.mode == (False, False)                        # back to the default size: the default layout
    assert win.docks["penalty"].width() < win.docks["rows"].width()   # penalty beside output again
    win.docks["penalty"].close()
    win.docks["roofline"].setFloating(True)
    assert win.docks.user_arranged
    _settle(qtbot, qapp, win, (1024, 768))
    assert win.docks.mode == (False, False)              # the user's arrangement is left alone
    reset = next(a for a in win.menuBar().actions() if a.text() == "&View").menu().actions()[-1]
    assert reset.text() == "Reset layout"
    reset.trigger()
    qapp.processEvents()
    assert win.docks.mode == (True, True) and not win.docks["roofline"].isFloating()
    assert win.docks["penalty"].isVisible() or win.tabifiedDockWidgets(win.docks["penalty"])


def test_space_and_n_work_with_a_spin_box_focused(qtbot, qapp, make_window):
    import dataclasses

    from tests.workbench.conftest import SMALL
    win = make_window(dataclasses.replace(SMALL, draft="lookup", max_new_tokens=200))
    win.activateWindow()
    qtbot.waitUntil(lambda: qapp.activeWindow() is win)
    assert win.start_run()
    wait_windows(qtbot, win, 1)
    box = win.controls.depth
    box.setFocus()
    qtbot.waitUntil(lambda: box.hasFocus() or box.lineEdit().hasFocus())
    before = box.value()
    qtbot.keyClick(box.lineEdit(), Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: win.run.state == "paused", timeout=TIMEOUT_MS)
    qtbot.wait(300)
    n = len(win.store)
    qtbot.keyClick(box.lineEdit(), Qt.Key.Key_N)                 # one more window
    wait_windows(qtbot, win, n + 1)
    assert box.value() == before and "n" not in box.lineEdit().text().lower()
    qtbot.keyClick(box.lineEdit(), Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: win.run.state == "idle", timeout=TIMEOUT_MS)


def test_a_click_on_the_timeline_jumps_to_that_window(qtbot, qapp, make_window):
    tl = make_window().timeline
    tl.set_count(100)
    tl.set_value(0)
    s = tl.slider
    x = s.width() * 3 // 4
    qtbot.mouseClick(s, Qt.MouseButton.LeftButton, pos=QPoint(x, s.height() // 2))
    assert abs(tl.value() - s.value_at(x)) == 0 and 65 <= tl.value() <= 85, tl.value()   # not 10


def test_one_resume_button_and_the_toolbar_does_not_shift(qtbot, qapp, make_window):
    from PySide6.QtWidgets import QToolBar

    from workbench import chrome
    win = make_window()
    bar = next(t for t in win.findChildren(QToolBar) if t.objectName() == "run_toolbar")
    buttons = [bar.widgetForAction(a) for a in win.acts.run_actions()] + [bar.widgetForAction(win.acts.save_recording)]

    def layout():
        qapp.processEvents()
        return [b.geometry().x() for b in buttons]

    idle = layout()
    for state, paused in (("running", False), ("paused", True), ("idle", False)):
        chrome.update_actions(win.acts, state, paused, True)
        assert layout() == idle, state
        texts = [a.text() for a in win.acts.run_actions()]
        assert texts.count("Resume") == (1 if state == "paused" else 0), texts


def test_long_texts_elide_instead_of_widening(qtbot, qapp, make_window):
    win = make_window()
    _settle(qtbot, qapp, win, (1280, 720))
    race = win.docks["race"]
    before = race.minimumSizeHint().width()
    long = "A won: " + "a very long verdict " * 20
    win.race.result.setText(long)
    win.status.say(long)
    win.status.source.setText(long)
    qapp.processEvents()
    assert race.minimumSizeHint().width() == before
    assert win.width() == 1280
    for label in (win.race.result, win.status.text, win.status.source):
        assert label.is_elided() and label.toolTip().startswith(long)


def test_heat_map_depth_axis_has_no_scale_suffix(qtbot, make_window):
    win = make_window()
    result = {"config": {"depths": [2, 4], "widths": [1]}, "planned": ["lookup:2:1", "lookup:4:1"],
              "cells": [], "device": "cpu", "prompts": []}
    win.sweep.heatmap.set_result(result)
    axis = win.sweep.heatmap.plot.getAxis("bottom")
    axis.setRange(-0.0005, 0.0005)                      # a range pyqtgraph would scale by 1000
    assert "x0.001" not in axis.labelString() and "draft depth" in axis.labelString()


def test_every_view_shows_the_timelines_window_while_streaming(qtbot, make_window):
    """The tree, the verify rows, the penalty history, the output and the timeline agree on one
    window after every frame of a live run (frames drawn one view at a time used to leave them
    a few windows apart until the run paused)."""
    import dataclasses

    from tests.workbench.conftest import SMALL, wait_idle
    win = make_window(dataclasses.replace(SMALL, draft="lookup", depth=4, max_new_tokens=80))
    checked, split_frames = [], []
    draw = win.presenter.render_now

    def render_and_check(split=False, force=False):
        drawn = draw(split=split, force=force)
        if drawn and split:
            split_frames.append(True)
        if drawn and win.tree._event is not None:     # after every frame, not only the last
            ev = win.store[win.timeline.value()]
            assert win.tree._event is ev
            assert win.rows._event is ev
            assert win.penalty._key[0] is ev
            assert win.output._shown == win.timeline.value()
            assert win.tree.summary.full_text().startswith(f"window {ev.index} ")
            checked.append(ev.index)
        return drawn

    win.presenter.render_now = render_and_check
    assert win.start_run()
    wait_idle(qtbot, win)
    assert win.last_error is None
    assert len(checked) >= 3 and split_frames, (checked, len(win.store))


def test_tok_s_leaves_paused_time_out(qtbot, make_window):
    """A pause is not decoding time: the windows after it, the headline and the report count only
    the time the decoder ran (13.6 tok/s fell to 2.3 after a pause)."""
    import dataclasses
    import time

    from tests.workbench.conftest import SMALL, wait_idle
    win = make_window(dataclasses.replace(SMALL, draft="lookup", max_new_tokens=400))
    assert win.start_run()
    wait_windows(qtbot, win, 2)
    win.toggle_pause()
    qtbot.waitUntil(lambda: win.run.state == "paused", timeout=TIMEOUT_MS)
    qtbot.wait(200)                               # the window in flight lands
    before = win.store[-1]
    t0 = time.perf_counter()
    qtbot.wait(1500)
    held = time.perf_counter() - t0
    win.toggle_pause()
    wait_windows(qtbot, win, before.index + 3)
    after = win.store[before.index + 1]
    assert after.stats.elapsed_s - before.stats.elapsed_s < held - 0.5, (before.stats, after.stats, held)
    assert after.stats.tok_s == pytest.approx(after.stats.new_tokens / after.stats.elapsed_s)
    win.stop()
    wait_idle(qtbot, win)
    report = win.last_report
    assert report["paused_s"] >= held - 0.1
    assert report["tok_s"] == pytest.approx(report["new_tokens"] / report["wall_s"], rel=1e-3)
    win.render_all()
    assert win.stats.state["tok_s"] == win.store[-1].stats.tok_s
    assert f"{win.store[-1].stats.tok_s:.1f} tok/s incl. prefill" in win.stats.headline.text()


@pytest.mark.parametrize("what", ["missing", "text"])
def test_a_path_that_is_no_model_is_one_line_and_exit_2(tmp_path, what):
    """`specscope --model X`: one line on stderr and a non-zero exit, not a window with a banner
    that exits 0."""
    import os
    import subprocess
    import sys
    path = tmp_path / "nonexistent.gguf"
    if what == "text":
        path = tmp_path / "notes.gguf"
        path.write_text("hello, this is a text file\n")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    out = subprocess.run([sys.executable, "-m", "specscope.cli", "--model", str(path)], capture_output=True,
                         text=True, timeout=300, env=env, cwd=tmp_path)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip() and "propagateSizeHints" not in ln]
    assert out.returncode == 2, out
    assert len(lines) == 1 and lines[0].startswith("specscope: error: "), lines
    assert str(path) in lines[0] and "b'" not in lines[0]
    assert not (tmp_path / "specscope-screenshot.png").exists()      # no window was opened


def test_save_dialogs_open_at_home_then_where_the_user_last_saved(qtbot, make_window, tmp_path, monkeypatch):
    """Not in the folder the program started from (often the source tree)."""
    from pathlib import Path

    from PySide6.QtCore import QCoreApplication
    from PySide6.QtWidgets import QFileDialog

    from workbench import dialogs, export
    QCoreApplication.instance().setProperty(dialogs._KEY, None)
    win = make_window()
    asked = []

    def fake_save(parent, title, start, filters):     # the native dialog blocks: answer for the user
        asked.append(Path(start))
        return str(tmp_path / "out" / Path(start).name), filters

    (tmp_path / "out").mkdir()
    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(fake_save))
    monkeypatch.chdir(tmp_path)
    win.acts.save_recording.trigger()
    export._ask_csv(win)
    assert asked[0] == Path.home() / "specscope-session.jsonl"
    assert asked[1] == tmp_path / "out" / "specscope-rows.csv"          # where the last save went
    assert (tmp_path / "out" / "specscope-rows.csv").is_file()


def test_a_sweep_cell_exports_for_us_llama_cpp_and_vllm(qtbot, make_window, cpu_runtime, tmp_path):
    import json
    import shlex

    from engine.io.workloads import load_workload
    from engine.tuning.export import export_cell
    from engine.tuning.grid import SweepConfig
    from engine.tuning.sweep import Sweep
    from tests.sweep_helpers import workload_file
    path = workload_file(tmp_path)
    cfg = SweepConfig(workload=str(path), drafts=("lookup",), depths=(3,), widths=(1,), prompts=1,
                      new_tokens=6)
    sweep = Sweep(cpu_runtime, cfg, load_workload(str(path), None, 1))
    for _ in sweep.steps():
        pass
    win = make_window()
    win.sweep._show(sweep.result)
    assert win.sweep.export_button.isEnabled()
    cell = max((c for c in sweep.result["cells"] if c.get("status") == "done"), key=lambda c: c["ratio_to_ar"])
    dialog = win.sweep.export_dialog(show=False)
    for fmt in ("cli", "llamacpp", "vllm"):
        dialog.choose(cell["id"], fmt)
        expected = export_cell(cell, sweep.result, fmt)
        assert dialog.text.toPlainText() == expected.text          # what `specscope export` prints
        assert all(n in dialog.notes.text() for n in expected.notes)
    # vLLM: the whole `vllm serve MODEL --speculative-config '{...}'` line, the JSON its last word
    words = shlex.split(dialog.text.toPlainText())
    assert words[:2] == ["vllm", "serve"] and words[-2] == "--speculative-config"
    spec = json.loads(words[-1])
    assert spec["num_speculative_tokens"] >= 1
    dialog.copy()
    from PySide6.QtWidgets import QApplication
    assert QApplication.clipboard().text() == dialog.text.toPlainText()
    dialog.save(str(tmp_path / "vllm.sh"))
    saved = shlex.split((tmp_path / "vllm.sh").read_text())
    assert saved == words and json.loads(saved[-1]) == spec


def test_run_and_step_during_a_replay_say_what_they_do(qtbot, make_window, tmp_path):
    import dataclasses

    from tests.workbench.conftest import SMALL, wait_idle
    win = make_window(dataclasses.replace(SMALL, max_new_tokens=6))
    assert win.start_run()
    wait_idle(qtbot, win)
    rec = win.save_recording(tmp_path / "r.jsonl")
    assert win.open_recording(rec) and win.mode == "replay"
    win.show_window(len(win.store) - 1)
    win.acts.next.trigger()                      # N / Right at the end of a recording
    assert "recording ends here" in win.status.text.full_text()
    assert win.acts.run.isEnabled()
    win.acts.run.trigger()
    assert win.mode == "live" and win.run.state != "idle"
    assert "live run" in win.status.text.full_text() and win.status.chip.text() != "replay"
    wait_idle(qtbot, win)
    assert win.last_error is None and len(win.store) >= 1 and win.last_report is not None


def test_early_exit_drafts_a_chain_as_the_readme_says(qtbot, make_window):
    """Switching to a model drafter makes it a chain (width 1; wider is a tree on purpose), and
    the tree view draws one node per depth; back to the n-gram tree, the tree's width."""
    import dataclasses

    from tests.workbench.conftest import SMALL, wait_idle
    win = make_window(dataclasses.replace(SMALL, width=3, max_new_tokens=10))
    c = win.controls
    c.exit_layer.setValue(20)
    c.adaptive.setChecked(False)
    with qtbot.waitSignal(c.settings_changed) as sig:
        c.draft.setCurrentText("early-exit")
    assert sig.args[0].width == 1 and c.width.value() == 1
    assert win.start_run()
    wait_idle(qtbot, win)
    drafted = [ev for ev in win.store.events if ev.tokens]
    assert drafted and all(ev.drafter == "early-exit" for ev in drafted)
    for ev in drafted:
        assert list(ev.parents) == list(range(-1, len(ev.tokens) - 1))       # a chain
        win.show_window(ev.index)
        columns = [it.boundingRect().center().x() for it in win.tree._items if it.row > 0]
        assert len(columns) == len(ev.tokens) == len(set(columns))          # one draft node a depth
    c.draft.setCurrentText("tree")
    assert c.width.value() == 3
