"""The Sweep and Race docks with real widgets and the bundled model: the sweep runs on its
thread, cancels and resumes without repeating a cell, the heat map draws every cell with the best
marked, a click applies the cell's settings (the next window of the live run uses them); the race
shows two outputs growing to the finish line and stops cleanly."""

from __future__ import annotations

import json
from dataclasses import replace

from PySide6.QtCore import Qt

from tests.workbench.conftest import SMALL, TIMEOUT_MS, wait_windows
from sweep_helpers import cpu_like_profile, workload_file


def _form(dock, tmp_path) -> None:
    dock.workload.setCurrentText(str(workload_file(tmp_path)))
    dock.drafts.setText("lookup,tree")
    dock.depths.setText("2,5")
    dock.widths.setText("2")
    dock.prompts.setValue(1)
    dock.new_tokens.setValue(4)
    dock.folder.setText(str(tmp_path / "sweep"))


def test_sweep_dock_cancels_resumes_draws_and_a_click_applies_the_cell(qtbot, make_window, cpu_runtime,
                                                                        tmp_path):
    win = make_window(settings=replace(SMALL, max_new_tokens=400))
    win.card_profile = cpu_like_profile(cpu_runtime)    # as if loaded from the card's saved profile
    dock = win.sweep
    _form(dock, tmp_path)
    ticks = []
    dock.worker.yielded.connect(lambda _id, t: ticks.append(t.message) if _id == dock.job_id else None)
    assert dock.start()
    qtbot.waitUntil(lambda: len(ticks) >= 2 or not dock.running, timeout=TIMEOUT_MS)
    dock.cancel()
    qtbot.waitUntil(lambda: not dock.running, timeout=TIMEOUT_MS)
    saved = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    first = [c["id"] for c in saved["cells"]]
    assert not saved["complete"] and "Run resumes" in dock.bar.format()
    assert len(first) >= 1 and win.last_error is None

    ticks.clear()
    assert dock.start()                          # resumes the folder's sweep
    qtbot.waitUntil(lambda: not dock.running, timeout=TIMEOUT_MS)
    res = dock.result
    assert res["complete"] and dock.bar.format() == "complete"
    assert [c["id"] for c in res["cells"]] == res["planned"]
    # nothing redone: not plain decoding, not the cells finished before the cancel
    assert not any(m.startswith(tuple(first)) or m.startswith("plain decoding") for m in ticks)

    # the heat map: one coloured cell per planned cell, the best one starred
    hm = dock.heatmap
    assert {c["id"] for c in hm.cells.values()} == set(res["planned"])
    stars = [it for it in hm._items if hasattr(it, "textItem") and it.textItem.toPlainText().startswith("★")]
    assert len(stars) == 1 and res["best"] in hm.caption.text()

    # a live run; clicking a cell sends its settings: the next windows are built with them
    target = next(c for c in res["cells"] if c["depth"] == 5 and not c["adaptive"]
                  and c["status"] == "done")
    assert win.start_run()
    wait_windows(qtbot, win, 2)
    win.docks["sweep"].raise_()                  # in front, as for a user's click
    qtbot.waitUntil(lambda: hm.plot_widget.height() > 100)
    qtbot.mouseClick(hm.plot_widget.viewport(), Qt.MouseButton.LeftButton,
                     pos=hm.cell_center(target["id"]).toPoint())
    s = win.controls.settings()
    assert (s.draft, s.depth, s.width) == (target["draft"], 5, target["width"])
    assert s.max_new_tokens == 400 and s.sampling == SMALL.sampling        # kept
    n = len(win.store)
    qtbot.waitUntil(lambda: any(ev.settings.get("depth") == 5 for ev in win.store.events[n:]),
                    timeout=TIMEOUT_MS)
    ev = next(ev for ev in win.store.events[n:] if ev.settings.get("depth") == 5)
    assert ev.drafter == target["draft"] and ev.settings["width"] == target["width"]
    win.stop()


def test_loading_a_saved_sweep_and_a_bad_file(qtbot, make_window, cpu_runtime, tmp_path):
    from engine.io.workloads import load_workload
    from engine.tuning.grid import SweepConfig
    from engine.tuning.sweep import Sweep
    from engine.tuning.sweep_file import save_sweep

    win = make_window()
    bad = tmp_path / "bad" / "sweep.json"
    bad.parent.mkdir()
    bad.write_text("[]")
    assert not win.sweep.load(bad)
    assert "a sweep file must be a JSON object, not a list" in win.banner.message()
    # a sweep saved before any cell ran: every planned cell drawn, pending; the form takes its config
    path = workload_file(tmp_path)
    cfg = SweepConfig(workload=str(path), drafts=("tree",), depths=(3, 6), widths=(1, 2), new_tokens=9)
    save_sweep(Sweep(cpu_runtime, cfg, load_workload(str(path))).result, tmp_path / "saved")
    assert win.sweep.load(tmp_path / "saved" / "sweep.json")
    hm = win.sweep.heatmap
    assert len(hm.cells) == 5 and hm.rows == ["tree w1", "tree w2", "adaptive tree"]
    assert "incomplete" in hm.caption.text() and win.sweep.new_tokens.value() == 9
    assert win.sweep.depths.text() == "3,6" and not win.sweep.apply_button.isEnabled()


def test_race_shows_two_outputs_to_the_finish_line_and_stops_cleanly(qtbot, make_window):
    win = make_window(settings=replace(SMALL, max_new_tokens=10))
    race = win.race
    race.set_entrants("ar", "tree:4:2")
    with qtbot.waitSignal(race.finished, timeout=TIMEOUT_MS) as done:
        assert race.start()
    report = done.args[0]
    a, b = race.lanes
    assert report["winner"] in (0, 1) and "won" in race.result.full_text()
    assert [s["new_tokens"] for s in report["sides"]] == [10, 10]
    # greedy: both settings write the same text, token for token
    assert a.output.toPlainText() and a.output.toPlainText() == b.output.toPlainText()
    assert a.line.value() == b.line.value() == 10 and "tok/s" in b.stats.text()
    # the tree took no more passes than plain decoding for the same tokens
    assert report["sides"][1]["windows"] <= report["sides"][0]["windows"] == 10

    # stopped mid-race: the thread ends, the model is free for the live session again
    win.controls.set_settings(replace(SMALL, max_new_tokens=400))
    with qtbot.waitSignal(race.finished, timeout=TIMEOUT_MS):
        assert race.start()
        qtbot.waitUntil(lambda: bool(a.output.toPlainText()), timeout=TIMEOUT_MS)
        race.stop()
    assert not race.running and "stopped" in race.result.full_text()
    assert race.start_button.isEnabled() and not race.stop_button.isEnabled()
    assert win.start_run()
    wait_windows(qtbot, win, 1)
    win.stop()
