"""The workbench on the real bundled model (CPU, small settings), offscreen, real widgets."""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys
import time
import warnings

import pytest

from engine.errors import ParameterError
from engine.speculation.events import ACCEPTED, BONUS, CORRECTION, TARGET
from engine.speculation.settings import DecodeSettings

from tests.workbench.conftest import PROMPT, SMALL, TIMEOUT_MS, show, wait_idle, wait_windows


def view_state(win) -> dict:
    return {"tree": win.tree.node_states(),
            "rows": [[win.rows.model.index(r, c).data() for c in range(win.rows.model.columnCount())]
                     for r in range(win.rows.model.rowCount())],
            "output": win.output.plain_text(), "kinds": win.output.kinds_shown(),
            "penalty": win.penalty.state, "stats": win.stats.state,
            "roofline_points": win.roofline.state.get("points")}


def png(path):
    from PySide6.QtGui import QImage
    img = QImage(str(path))
    assert not img.isNull(), path
    return img.convertToFormat(QImage.Format.Format_RGB32)


def colour(img, x: int, y: int) -> str:
    from PySide6.QtGui import QColor
    return QColor(img.pixel(x, y)).name()


def colours(img, rect=None) -> set[str]:
    x0, y0, w, h = rect or (0, 0, img.width(), img.height())
    return {colour(img, x, y) for x in range(x0, x0 + w) for y in range(y0, y0 + h)}


def crop(img, win, widget):
    """`widget`'s rectangle in an image of the whole window `win`."""
    from PySide6.QtCore import QPoint
    at = widget.mapTo(win, QPoint(0, 0))
    return img.copy(at.x(), at.y(), widget.width(), widget.height())


# the tree's path: the accepted nodes, a bonus or a correction token, drawn with the thick pen (in
# exact pixels); the outcome colours the legend names
PATH_COLOURS = {ACCEPTED: "#5bbf7a", BONUS: "#e3b341", CORRECTION: "#6aa7f0"}


def path_colours(seen: set[str]) -> set[str]:
    return {role for role, c in PATH_COLOURS.items() if c in seen}


def expected_path_colours(ev) -> set[str]:
    return ({ACCEPTED} if ev.accepted_path else set()) | ({ev.emitted_kinds[-1]} & {BONUS, CORRECTION})


# ---- no model needed --------------------------------------------------------------------------

def test_engine_imports_without_qt():
    code = ("import importlib, importlib.util, pkgutil, sys, engine\n"
            "mods = [m.name for m in pkgutil.walk_packages(engine.__path__, 'engine.') if 'triton' not in m.name]\n"
            "for m in mods: importlib.import_module(m)\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6', 'pyqtgraph', 'workbench'))\n"
            "assert not bad, bad\n"
            "print(len(mods))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) >= 30        # every engine module was imported


def test_display_detection():
    from workbench.app import display_available
    if sys.platform in ("win32", "darwin"):
        pytest.skip("always a display there")
    assert not display_available({})
    assert display_available({"DISPLAY": ":0"})
    assert display_available({"WAYLAND_DISPLAY": "wayland-0"})
    assert not display_available({"QT_QPA_PLATFORM": "offscreen", "DISPLAY": ":0"})


def test_theory_curve():
    from engine.cost.acceptance import expected_tokens
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)      # 1 + .5 + .25
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.0, 8) == 1.0


def test_invalid_control_shows_parameter_error_inline(qtbot, make_window):
    win = make_window()
    try:
        DecodeSettings(ngram_min=5, ngram_max=4)
    except ParameterError as e:
        expected = str(e)
    with qtbot.assertNotEmitted(win.controls.settings_changed):
        win.controls.ngram_min.setValue(5)
    assert win.controls.error.text() == expected
    assert not win.controls.error.isHidden()
    with qtbot.waitSignal(win.controls.settings_changed) as sig:
        win.controls.ngram_min.setValue(2)
    assert sig.args[0].ngram_min == 2 and win.controls.error.isHidden()


def test_prompt_editor_takes_dropped_files(qtbot, make_window, tmp_path):
    from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
    from PySide6.QtGui import QDragEnterEvent, QDropEvent
    from PySide6.QtWidgets import QApplication
    win = make_window()
    editor = win.prompt_editor
    assert editor.prompt() == PROMPT
    editor.load_default()
    assert isinstance(editor.prompt(), list)                 # the bundled default: chat messages
    raw = tmp_path / "p.txt"
    raw.write_text("def f():\n    return 1\n", encoding="utf-8")
    chat = tmp_path / "c.json"
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}), encoding="utf-8")
    for path, expected in ((raw, "def f():\n    return 1\n"), (chat, [{"role": "user", "content": "hi"}])):
        mime = QMimeData()
        mime.setUrls([QUrl.fromLocalFile(str(path))])
        args = (Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)     # QPoint overload, still current
            enter = QDragEnterEvent(QPoint(5, 5), *args)
        QApplication.sendEvent(editor.edit.viewport(), enter)      # where a real drag lands
        assert enter.isAccepted()
        QApplication.sendEvent(editor.edit.viewport(), QDropEvent(QPointF(5, 5), *args))
        assert editor.prompt() == expected
        assert path.name in editor.info.text()
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]", encoding="utf-8")
    with qtbot.waitSignal(editor.error):
        editor.load_file(str(bad))
    assert "chat messages" in win.banner.message()
    editor.edit.setPlainText("{not json")
    with pytest.raises(ParameterError):
        editor.prompt()
    assert not win.start_run()                               # refused with a banner, no run
    assert "not valid JSON" in win.banner.message() and win.run.state == "idle"


# ---- live runs on the bundled model --------------------------------------------------------------

def test_live_run_views_match_events(qtbot, make_window, cpu_runtime, tmp_path):
    win = make_window()
    assert win.start_run()
    wait_idle(qtbot, win)
    # the weights the card runs are named where the run and its roofline are described
    label = cpu_runtime.weights_label
    assert label.startswith("Q4_1 as float32") and label in win.status.source.full_text()
    assert win.store.header["weights"] == label and label in win.roofline.legend.text()
    store = win.store
    assert len(store) >= 2
    assert any(ev.tokens for ev in store.events), "the copy-heavy prompt should produce drafts"
    assert store.header["settings"] == SMALL.to_dict()
    # the header is the run's: its prompt, counted as the model counts it, and the model's dtypes
    from engine.io.prompts import encode_prompt
    from engine.speculation.events import RunHeader
    head = RunHeader.from_dict(store.header)
    assert head.prompt == PROMPT and head.prompt_tokens == len(encode_prompt(cpu_runtime.tokenizer, PROMPT))
    from workbench.host import activation_dtype
    assert (head.device, head.dtype, head.activation_dtype) == (cpu_runtime.device_name, "float32",
                                                                 activation_dtype(cpu_runtime))
    assert store.events[0].committed_len == head.prompt_tokens
    from workbench.tokens import visible
    from workbench.views.tree import extra_token
    from workbench.views.tree_layout import LABEL_LIMIT
    for idx, ev in enumerate(store.events):
        show(win, idx)
        states = win.tree.node_states()
        by_node = {s.node: s for s in states}
        # one node per draft token, the root, and the target's own token if it added one; each
        # labelled with its token's text
        extra = extra_token(ev)
        assert len(states) == len(by_node) == 1 + len(ev.tokens) + (extra is not None)
        assert by_node[-1].label == visible(ev.root_text, LABEL_LIMIT)
        assert [by_node[i].label for i in range(len(ev.tokens))] == [visible(t, LABEL_LIMIT) for t in ev.texts]
        if extra is not None:
            assert (by_node[-2].label, by_node[-2].role) == (visible(extra[0], LABEL_LIMIT), extra[1])
        assert by_node[-1].role == "root" and by_node[-1].on_path
        for i in range(len(ev.tokens)):
            s = by_node[i]
            assert s.role == ev.rows[i + 1].outcome
            assert s.color == {"accepted": "#5bbf7a", "rejected": "#e06c6c",
                               "not_reached": "#6e7781"}[s.role]
            assert s.on_path == (i in ev.accepted_path)
        # the accepted nodes are exactly the accepted path
        assert {n for n, s in by_node.items() if n >= 0 and s.role == ACCEPTED} == set(ev.accepted_path)
        # hover: each draft node tells where it was copied from
        tips = {it.row - 1: it.toolTip() for it in win.tree._items if it.row > 0}
        for i, prov in enumerate(ev.provenance):
            assert f"copied from position {prov.position}" in tips[i]
            assert f"match rank {prov.match}" in tips[i] and f"seen {prov.count}×" in tips[i]
        last = ev.emitted_kinds[-1]
        if last in (BONUS, CORRECTION, TARGET):
            assert by_node[-2].role == last
        # the table: one line per verify row, in order
        assert win.rows.model.rowCount() == len(ev.rows) == len(ev.tokens) + 1
        for r, row in enumerate(ev.rows):
            assert win.rows.model.index(r, 0).data() == str(row.row)
            assert win.rows.model.index(r, 1).data() == str(row.depth)
            assert win.rows.model.index(r, 2).data() == ("—" if row.draft_token is None
                                                          else visible(row.draft_text, 24))
            judge = ev.rows[ev.parents[row.node] + 1] if row.node >= 0 else row   # the parent's row
            assert win.rows.model.index(r, 3).data() == visible(judge.target_text, 24)
            assert win.rows.model.index(r, 7).data().startswith(
                {"root": "root", "accepted": "accepted", "rejected": "rejected",
                 "not_reached": "not reached"}[row.outcome])
    # reference cards overlay the roofline on demand
    ref = win.roofline.references[0]
    win.roofline.toggle_reference(ref.label, True)
    assert win.roofline.state["references"] == [ref.label] and ref.label in win.roofline.legend.text()
    win.roofline.toggle_reference(ref.label, False)
    # the output shows every emitted token, colored by kind, and matches the report's text
    show(win, len(store) - 1)
    assert win.output.plain_text() == "".join(t for ev in store.events for t in ev.emitted_texts)
    assert win.output.kinds_shown() == [k for ev in store.events for k in ev.emitted_kinds]
    assert win.last_report["new_tokens"] == sum(len(ev.emitted) for ev in store.events)
    # export: every view as PNG, the rows as CSV (one line per row)
    from workbench import export
    win.select_row(0)                  # the root: no node drawn in the selection colour
    images = {name: png(export.export_png(win, name, tmp_path / f"{name}.png")) for name in export.VIEWS}
    # the whole window: the window at its size, the table and the output in it exactly as their
    # own images, at their places
    whole = images["window"]
    assert (whole.width(), whole.height()) == (win.width(), win.height())
    for name in ("rows", "output"):
        assert crop(whole, win, getattr(win, name)) == images[name], name
    # the tree: the panel's colour around it, the shown window's path in the outcome colours
    tree = images["tree"]                                   # below its header and legend
    tree = tree.copy(0, win.tree.export_top, tree.width(), tree.height() - win.tree.export_top)
    assert colour(tree, 0, 0) == "#22272e"
    assert path_colours(colours(tree)) == expected_path_colours(store[len(store) - 1])
    rows_csv = export.export_csv(win, tmp_path / "rows.csv")
    with rows_csv.open(newline="", encoding="utf-8") as f:
        lines = list(csv.reader(f))
    # the whole run, not only the window shown
    assert len(lines) == 1 + sum(len(ev.rows) for ev in store.events)
    assert [(int(ln[0]), ln[5]) for ln in lines[1:]] == [(ev.index, r.draft_text) for ev in store.events
                                                           for r in ev.rows]

    # a recording replays to the same view state, without a model
    rec = win.save_recording(tmp_path / "session.jsonl")
    live = {}
    for idx in range(len(store)):
        show(win, idx)
        live[idx] = view_state(win)
    from workbench.window import MainWindow
    replay = MainWindow(probe=False)
    qtbot.addWidget(replay)
    replay.show()
    assert replay.open_recording(rec)
    assert replay.store.events == store.events
    assert replay.store.header["settings"] == SMALL.to_dict()
    assert replay.controls.settings() == SMALL
    for idx in reversed(range(len(store))):        # backwards: the output view rebuilds
        show(replay, idx)
        show(win, idx)
        assert view_state(replay) == live[idx]
    replay.close()


def test_penalty_view_shows_history(qtbot, make_window):
    settings = dataclasses.replace(
        SMALL.with_sampling(repeat_penalty=1.3, presence_penalty=0.5, penalty_window=32, temperature=0.7),
        max_new_tokens=10, seed=3)
    win = make_window(settings, prompt=None)            # the bundled prompt: its trees branch
    assert win.start_run()
    wait_idle(qtbot, win)
    # the deepest verify row of the run: its history ends with its draft path
    idx, row = max(((i, r) for i, e in enumerate(win.store.events) for r in e.rows), key=lambda t: t[1].depth)
    ev = win.store[idx]
    show(win, idx)
    led = row.penalty
    assert led is not None and led.history and led.entries
    win.select_row(row.row)
    st = win.penalty.state
    assert st["row"] == row.row
    assert st["history"] == led.history and st["n_draft"] == led.n_draft
    assert st["entries"] == [(e.token, e.before, e.after) for e in led.entries]
    n = len(led.history)
    assert st["draft_marks"] == [False] * (n - led.n_draft) + [True] * led.n_draft
    assert led.n_draft == row.depth > 0                 # H_r ends with the row's own draft path
    assert "its draft path from the root" in win.penalty.history.toPlainText()
    # in a tree that path is the row's own ancestors, never a sibling branch: checked on every row,
    # at least one of them off the first branch, where "every earlier row" would differ
    off_first_branch = 0
    for e in win.store.events:
        for r in e.rows[1:]:
            path, k = [], r.node
            while k >= 0:
                path.append(e.tokens[k])
                k = e.parents[k]
            path.reverse()
            h = r.penalty
            assert h.n_draft == len(path) and h.history[len(h.history) - h.n_draft:] == path
            off_first_branch += path != e.tokens[:r.node + 1]
    assert off_first_branch, "no row off the first branch: the check cannot tell ancestors from earlier rows"
    # sampled: tried rows carry their acceptance probability into the table
    for r in ev.rows:
        if r.accept_prob is not None:
            assert win.rows.model.index(r.row, 6).data() != "–"
    # a penalized candidate is drawn at its before and after logits
    xs, ys = win.penalty._after.getData()
    drawn = st["drawn"]
    assert len(xs) == len(drawn) >= min(3, len(led.entries))
    moved = sorted((abs(e.before - e.after) for e in led.entries), reverse=True)
    by_token = {e.token: abs(e.before - e.after) for e in led.entries}
    assert sorted((by_token[t] for t in drawn), reverse=True) == moved[:len(drawn)]   # the most moved
    assert sorted(xs) == sorted(e.after for e in led.entries if e.token in drawn)
    # without penalties the view says so instead of drawing
    plain = make_window()
    plain.store.append(dataclasses.replace(ev, rows=[dataclasses.replace(r, penalty=None) for r in ev.rows],
                                           settings=SMALL.to_dict()))
    show(plain, 0)
    plain.select_row(1)
    assert "penalties are off" in plain.penalty.history.toPlainText()


def test_control_change_applies_at_next_window(qtbot, make_window):
    win = make_window(dataclasses.replace(SMALL, max_new_tokens=40))
    win.step()                                   # from idle: start paused, run one window
    wait_windows(qtbot, win, 1)
    assert win.store[0].depth == 3 and win.store[0].width == 2
    qtbot.waitUntil(lambda: win.run.state == "paused", timeout=TIMEOUT_MS)
    with qtbot.waitSignal(win.controls.settings_changed):
        win.controls.depth.setValue(2)
    with qtbot.waitSignal(win.controls.settings_changed):
        win.controls.width.setValue(1)
    win.step()
    wait_windows(qtbot, win, 2)
    ev = win.store[1]
    assert (ev.depth, ev.width) == (2, 1)
    assert max(ev.depths, default=0) <= 2
    assert sum(1 for p in ev.parents if p == -1) <= 1          # width 1: one branch
    win.stop()
    wait_idle(qtbot, win)


def test_pause_step_resume_by_keyboard(qtbot, qapp, make_window):
    from PySide6.QtCore import Qt
    win = make_window(dataclasses.replace(SMALL, draft="lookup", max_new_tokens=60))
    win.activateWindow()
    qtbot.waitUntil(lambda: qapp.activeWindow() is win)
    assert win.start_run()
    wait_windows(qtbot, win, 1)
    qtbot.keyClick(win, Qt.Key.Key_Space)                     # pause
    qtbot.waitUntil(lambda: win.run.state == "paused", timeout=TIMEOUT_MS)
    qtbot.wait(300)                              # let the last queued window land
    n = len(win.store)
    qtbot.wait(1200)
    assert len(win.store) == n                   # paused: nothing new
    qtbot.keyClick(win, Qt.Key.Key_N)                         # step
    wait_windows(qtbot, win, n + 1)
    qtbot.waitUntil(lambda: win.run.state == "paused", timeout=TIMEOUT_MS)
    qtbot.wait(1000)
    assert len(win.store) == n + 1               # exactly one window per step
    qtbot.keyClick(win, Qt.Key.Key_Space)                     # resume
    wait_windows(qtbot, win, n + 2)
    assert win.run.state in ("running", "idle")
    qtbot.keyClick(win, Qt.Key.Key_Escape)                    # stop
    wait_idle(qtbot, win)
    assert win.last_report["finish_reason"] in ("stopped", "length", "eos")


def test_close_mid_run_stops_the_worker(qtbot, make_window):
    win = make_window(dataclasses.replace(SMALL, max_new_tokens=400))
    assert win.start_run()
    wait_windows(qtbot, win, 1)
    assert win.worker.isRunning() and win.run.state in ("running", "paused")
    t0 = time.perf_counter()
    win.close()
    assert time.perf_counter() - t0 < 2.0
    assert win.worker.isFinished() and not win.worker.isRunning()


def test_garbage_is_collected_on_the_main_thread_only(qtbot, cpu_spec, cpu_host):
    """CPython collects cyclic garbage in whichever thread allocates past the threshold; a
    collection on a worker destroyed the main thread's Qt objects there (the segfaults and hangs
    of test_screenshot_command while the worker loaded the model). Workers must never collect."""
    import gc
    import threading

    from workbench.worker import GeneratorWorker, Job
    on_main = []

    def watch(phase, info):
        if phase == "start":
            on_main.append(threading.current_thread() is threading.main_thread())

    def body(rt, ctx):               # as many tracked objects as a model load's tokenizer builds
        return len([(i,) for i in range(300_000)])
        yield                        # a generator function, as every job is

    worker = GeneratorWorker(cpu_host)
    done = []
    worker.returned.connect(lambda _id, value: done.append(value))
    was = gc.isenabled()
    gc.callbacks.append(watch)
    try:
        worker.submit(Job(cpu_spec, body))
        qtbot.waitUntil(lambda: bool(done), timeout=TIMEOUT_MS)
        assert worker.shutdown(5000)
        qtbot.waitUntil(lambda: gc.isenabled() == was, timeout=5000)   # automatic again after
    finally:
        gc.callbacks.remove(watch)
    assert done == [300_000]
    assert on_main and all(on_main), on_main     # collected, and on the main thread only


def test_screenshot_command(qtbot, cpu_spec, tmp_path, capsys, monkeypatch):
    import workbench.app
    from specscope.cli import main
    shown = []
    real = workbench.app.run_offscreen

    def keep_the_window(app, win, *args, **kwargs):      # the real run_offscreen; the window kept
        shown.append(win)
        return real(app, win, *args, **kwargs)
    monkeypatch.setattr(workbench.app, "run_offscreen", keep_the_window)
    prompt = tmp_path / "p.txt"
    prompt.write_text(PROMPT, encoding="utf-8")
    shot = tmp_path / "shot.png"
    code = main(["--screenshot", str(shot), "--windows", "2", "--device", "cpu", "--dtype", "float32",
                 "--prompt-file", str(prompt), "--no-probe"])
    assert code == 0
    assert f"saved {shot} (2 windows)" in capsys.readouterr().err      # the run reached the window
    (win,) = shown
    img = png(shot)
    assert (img.width(), img.height()) == (1640, 1000)
    assert len(win.store) == 2
    # the shot shows the table and the output where they are, as they draw themselves
    for view in (win.rows, win.output):
        assert crop(img, win, view) == view.grab().toImage().convertToFormat(img.format())
    # and the last window's tree in its place, its path in the outcome colours
    canvas = win.tree.canvas.viewport()
    at = canvas.mapTo(win, canvas.rect().topLeft())
    seen = colours(img, (at.x(), at.y(), canvas.width(), canvas.height()))
    assert path_colours(seen) == expected_path_colours(win.store[1]) != set()


def test_offscreen_run_draws_every_view_before_the_shot(qtbot, qapp, make_window, tmp_path):
    """The shot is taken right after the run ends: the plots must be drawn by then too (the
    frame pacer holds plots back while a run streams; the final render must not)."""
    from workbench.app import run_offscreen
    win = make_window()
    assert run_offscreen(qapp, win, str(tmp_path / "s.png"), 3) == 0
    assert len(win.store) == 3
    assert "no windows yet" not in win.stats.headline.text()
    # every plot shows the last window: the run's three windows, the decoder's own counts
    last = win.store[2].stats
    st = win.stats.state
    assert st["windows"] == 3 and st["tok_s"] == last.tok_s
    assert win.roofline.state["points"] == 3
    assert win.roofline.state["tokens_per_pass"] == pytest.approx(last.tokens_per_pass)
    # the ratio to plain decoding is decode against decode: the run's own rate counts its prefill,
    # and the headline says which is which, as the race's lanes do
    assert st["decode_tok_s"] > st["tok_s"] > 0
    head = win.stats.headline.text()
    assert head.startswith(f"<b>decode {st['decode_tok_s']:.1f} tok/s</b> · ")
    assert f" · {st['tok_s']:.1f} tok/s incl. prefill · " in head
    if st["ar_tok_s"]:
        assert f"{st['decode_tok_s'] / st['ar_tok_s']:.2f}×</b> {st['baseline']} · " in head


def test_render_all_draws_the_plots_while_a_run_streams(qtbot, make_window):
    """The case that left a shot's stats empty: a run still streaming and the plots drawn a
    moment ago, so the pacer holds them back; render_all draws them regardless."""
    win = make_window(dataclasses.replace(SMALL, max_new_tokens=400))
    assert win.start_run()
    wait_windows(qtbot, win, 2)
    assert win.run.state == "running"          # streaming: the pacer spaces the plots out
    for _ in range(2):                         # the second right after the first drew the plots
        win.render_all()
        assert not win.presenter.pacer.pending
        assert win.stats.state["windows"] == win.roofline.state["points"] == len(win.store)
    win.stop()
    wait_idle(qtbot, win)


def test_bad_model_shows_banner_and_worker_survives(qtbot, make_window, cpu_spec, cpu_runtime, tmp_path):
    from workbench.host import RuntimeSpec
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    win = make_window(spec=RuntimeSpec(str(bad), "cpu", "float32"))
    assert win.start_run()
    qtbot.waitUntil(lambda: win.last_error is not None, timeout=TIMEOUT_MS)
    message, kind = win.last_error
    assert kind == "model"
    assert "broken.gguf" in win.banner.message()
    qtbot.waitUntil(lambda: win.run.state == "idle")
    # nothing to run until another model: Run and Step are off and say why
    assert not win.acts.run.isEnabled() and not win.acts.step.isEnabled()
    assert "broken.gguf" in win.acts.run.toolTip()
    win.host.preload(cpu_spec, cpu_runtime)      # the failed load freed the host's model
    win.spec = cpu_spec
    assert win.start_run()                       # the same worker thread runs again
    wait_windows(qtbot, win, 1)
    assert win.banner.isHidden()
    win.stop()
    wait_idle(qtbot, win)
