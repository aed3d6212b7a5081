"""The window, second pass (issue 35): every dock listed in View and on screen without overlap at
three sizes, the lesson docks in Reset layout and never growing the window, the Sweep dock's
Export button opening its dialog, a race saying it stopped the live run, a sweep cell refused
during a replay. Real widgets, the bundled model, offscreen."""

from __future__ import annotations

from dataclasses import replace

import pytest
from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QDockWidget

from tests.workbench.conftest import SMALL, TIMEOUT_MS, wait_idle, wait_windows


def _settle(qtbot, qapp, win, size) -> None:
    win.resize(*size)
    qtbot.waitUntil(lambda: win.size() == QSize(*size), timeout=5000)
    for _ in range(4):
        qapp.processEvents()
        qtbot.wait(20)


def _view_menu(win):
    menu = next(a for a in win.menuBar().actions() if a.text() == "&View").menu()
    menu.aboutToShow.emit()                  # as when the user opens it
    return [a.text() for a in menu.actions() if a.text()]


def _all_docks(win) -> list[QDockWidget]:
    return list(win.docks.every_dock())


def _in_front(d: QDockWidget) -> bool:
    return d.isVisible() and not d.visibleRegion().isEmpty()


def _on_screen(win, d: QDockWidget) -> bool:
    """Open (not closed by the user): in front, or a tab whose group has one in front."""
    return _in_front(d) or any(_in_front(t) for t in win.tabifiedDockWidgets(d))


def _rect(win, d: QDockWidget) -> QRect:
    return QRect(d.mapTo(win, QPoint(0, 0)), d.size())


@pytest.mark.parametrize("size", [(1920, 1080), (1280, 720), (1024, 768)])
def test_every_dock_is_listed_and_on_screen_without_overlap(qtbot, qapp, make_window, size, tmp_path):
    win = make_window()
    win.lessons.open("knee")                 # a lesson dock too (made on first use)
    _settle(qtbot, qapp, win, size)
    win.reset_layout()
    _settle(qtbot, qapp, win, size)
    docks = _all_docks(win)
    assert _view_menu(win) == [d.windowTitle() for d in docks] + ["Reset layout"]
    assert "Lesson: knee" in _view_menu(win)
    for d in docks:
        assert _on_screen(win, d), d.objectName()
    front = [d for d in docks if _in_front(d)]
    for i, a in enumerate(front):
        ra = _rect(win, a)
        assert win.rect().contains(ra), (a.objectName(), ra)
        for b in front[i + 1:]:
            assert not ra.intersects(_rect(win, b)), (a.objectName(), ra, b.objectName(), _rect(win, b))
    win.grab().save(str(tmp_path / f"window-{size[0]}x{size[1]}.png"))


def test_a_lesson_dock_floated_and_put_back_neither_grows_the_window_nor_escapes_reset(qtbot, qapp,
                                                                                      make_window):
    win = make_window()
    _settle(qtbot, qapp, win, (1280, 720))
    win.lessons.open("knee")
    lesson = win.lessons.docks["knee"]
    lesson.setFloating(True)
    _settle(qtbot, qapp, win, (1280, 720))
    lesson.setFloating(False)                # put back: it may ask for more room than there is
    for _ in range(6):
        qapp.processEvents()
        qtbot.wait(30)
    assert (win.width(), win.height()) == (1280, 720)
    lesson.setFloating(True)
    win.reset_layout()
    qapp.processEvents()
    assert not lesson.isFloating()
    assert win.docks["stats"] in win.tabifiedDockWidgets(lesson)      # behind the stats again


def test_the_sweep_docks_export_button_opens_its_dialog(qtbot, make_window, cpu_runtime, tmp_path):
    from engine.io.workloads import load_workload
    from engine.tuning.grid import SweepConfig
    from engine.tuning.sweep import Sweep
    from tests.sweep_helpers import workload_file
    from workbench.cell_export import CellExportDialog
    path = workload_file(tmp_path)
    cfg = SweepConfig(workload=str(path), drafts=("lookup",), depths=(3,), widths=(1,), prompts=1,
                      new_tokens=4)
    sweep = Sweep(cpu_runtime, cfg, load_workload(str(path), None, 1))
    for _ in sweep.steps():
        pass
    win = make_window()
    win.sweep._show(sweep.result)
    win.docks["sweep"].raise_()
    button = win.sweep.export_button
    qtbot.waitUntil(button.isVisible)
    assert button.isEnabled()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: win.sweep.export_open is not None and win.sweep.export_open.isVisible(),
                    timeout=5000)
    dialog = win.sweep.export_open
    assert isinstance(dialog, CellExportDialog) and dialog.text.toPlainText()
    dialog.accept()
    assert not dialog.isVisible()


def test_a_race_says_it_stopped_the_live_run(qtbot, make_window):
    win = make_window(replace(SMALL, max_new_tokens=400))
    assert win.start_run()
    wait_windows(qtbot, win, 2)
    win.race.set_entrants("ar", "tree:3:2")
    assert win.race.start()
    assert "live run was stopped" in win.status.text.full_text() and "for the race" in win.status.text.full_text()
    assert "live run was stopped" in win.race.result.full_text()
    qtbot.waitUntil(lambda: win.run.state == "idle", timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: win.last_report is not None, timeout=TIMEOUT_MS)
    assert "stopped for the race" in win.status.text.full_text()
    win.race.stop()
    qtbot.waitUntil(lambda: not win.race.running, timeout=TIMEOUT_MS)
    # control: with no live run a race stops nothing and says nothing of it
    assert win.race.start()
    assert "live run was stopped" not in win.race.result.full_text()
    win.race.stop()
    qtbot.waitUntil(lambda: not win.race.running, timeout=TIMEOUT_MS)


def test_a_sweep_cell_is_refused_during_a_replay(qtbot, make_window, tmp_path):
    win = make_window(replace(SMALL, max_new_tokens=8))
    assert win.start_run()
    wait_idle(qtbot, win)
    win.save_recording(tmp_path / "s.jsonl")
    cell = {"id": "tree:5:1", "settings": {"draft": "tree", "depth": 5, "width": 1}, "ratio_to_ar": 1.5}
    before = win.controls.settings()
    assert win.open_recording(tmp_path / "s.jsonl")
    assert win.apply_cell(cell) is None
    assert win.controls.settings() == before
    assert "not applied" in win.status.text.full_text() and "replay" in win.status.text.full_text()
    # control: live again, the same cell is applied
    assert win.start_run()
    assert win.apply_cell(cell).depth == 5
    win.stop()


def test_a_replay_shows_the_settings_of_the_window_on_screen(qtbot, make_window, tmp_path):
    """Not the recording's first settings: a run changed from depth 3 to depth 6 mid-run shows
    depth 6 on its last window and depth 3 on its first."""
    win = make_window(replace(SMALL, draft="tree", depth=3, width=1, max_new_tokens=400,
                              adaptive=False))
    assert win.start_run()
    wait_windows(qtbot, win, 2)
    win.controls.set_settings(replace(win.controls.settings(), depth=6))
    win.feed.send_settings(win.controls.settings())
    qtbot.waitUntil(lambda: any(ev.settings.get("depth") == 6 for ev in win.store.events),
                    timeout=TIMEOUT_MS)
    wait_windows(qtbot, win, len(win.store) + 1)
    win.stop()
    wait_idle(qtbot, win)
    win.save_recording(tmp_path / "s.jsonl")
    win.controls.set_settings(replace(win.controls.settings(), depth=9))    # what the window had
    assert win.open_recording(tmp_path / "s.jsonl")
    assert win.store[-1].settings["depth"] == 6
    assert win.controls.settings().depth == 6                  # the last window, shown
    win.show_window(0)
    assert win.store[0].settings["depth"] == 3 and win.controls.settings().depth == 3


def test_tok_s_after_pause_step_and_resume_agrees_everywhere(qtbot, make_window, tmp_path):
    """The status bar, the report, the recording and the stats dock give one tok/s after a
    pause, a step, a resume and a stop while paused (the report said 94.9 where the dock said
    23.9: the pause after the last window was taken out of a clock that had already stopped)."""
    import json
    win = make_window(replace(SMALL, draft="lookup", max_new_tokens=400))
    assert win.start_run()
    wait_windows(qtbot, win, 2)
    win.toggle_pause()
    qtbot.waitUntil(lambda: win.run.state == "paused", timeout=TIMEOUT_MS)
    qtbot.wait(700)
    n = len(win.store)
    win.step()
    wait_windows(qtbot, win, n + 1)
    qtbot.wait(700)
    win.toggle_pause()                                   # resume
    wait_windows(qtbot, win, len(win.store) + 2)
    win.toggle_pause()
    qtbot.waitUntil(lambda: win.run.state == "paused", timeout=TIMEOUT_MS)
    qtbot.wait(1500)                                     # held after the last window, then stopped
    win.stop()
    wait_idle(qtbot, win)
    win.render_all()
    last = win.store[-1].stats
    report = win.last_report
    assert report["paused_s"] > 1.0
    assert report["tok_s"] == pytest.approx(last.tok_s, rel=0.02), (report, last)
    assert f"{report['tok_s']:.1f} tok/s incl. prefill" in win.status.text.full_text()
    assert win.stats.state["tok_s"] == pytest.approx(report["tok_s"], rel=0.02)
    # decode tok/s, the pauses taken out too: the tokens after the first window over the time after it
    assert report["decode_tok_s"] == pytest.approx(
        (report["new_tokens"] - report["first_tokens"]) / (report["wall_s"] - report["first_token_s"]),
        rel=0.01)
    assert f"decode {report['decode_tok_s']:.1f} tok/s" in win.status.text.full_text()
    win.save_recording(tmp_path / "s.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    saved = next(x["specscope_report"] for x in lines if isinstance(x, dict) and "specscope_report" in x)
    assert saved["tok_s"] == report["tok_s"] and saved["decode_tok_s"] == report["decode_tok_s"]
