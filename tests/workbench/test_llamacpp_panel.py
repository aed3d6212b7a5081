"""Targeting llama.cpp from the window: the sweep dock's llama.cpp panel probes llama-bench on its
thread (a stand-in script printing a real captured llama-bench JSON and its progress lines),
draws llama.cpp's curve on the roofline beside this card's, prices the loaded sweep on it (the
same answer as `specscope export --price-with`) and copies the command; a missing binary is one
line in the panel."""

from __future__ import annotations

import json
import shlex
import stat
from pathlib import Path

from PySide6.QtGui import QGuiApplication

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp"


def _bench_json() -> Path:
    return FIX / "llama-bench_cpu-t1_smollm2-q4_1_d1024.json"


def _fake_llama_bench(tmp_path: Path) -> Path:
    records = json.loads(_bench_json().read_text())["records"]   # this CPU's fixture (provenance-wrapped)
    (tmp_path / "records.json").write_text(json.dumps(records))
    b = tmp_path / "llama-bench"
    b.write_text("#!/bin/sh\n"
                 "echo 'llama-bench: benchmark 1/2: starting' >&2\n"
                 "echo 'llama-bench: benchmark 2/2: starting' >&2\n"
                 f"cat '{tmp_path / 'records.json'}'\n")
    b.chmod(b.stat().st_mode | stat.S_IEXEC)
    return b


def test_probe_overlay_price_and_copy(qtbot, make_window, tmp_path):
    from engine.tuning.llamacpp_price import price_sweep
    from engine.cost.llamacpp_bench import load_llama_bench_json
    win = make_window()
    sweep = json.loads((FIX / "sweep_cpu_code-edit.json").read_text())
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    assert win.sweep.load(tmp_path / "sweep.json")
    panel = win.sweep.llamacpp
    panel.binary.setText(str(tmp_path / "missing" / "llama-bench"))
    assert not panel.probe()
    assert "no llama-bench at" in panel.bar.format()
    panel.binary.setText(str(_fake_llama_bench(tmp_path)))
    with qtbot.waitSignal(panel.profile_ready, timeout=30_000):
        assert panel.probe()
    assert win.roofline.state["engine"].startswith("llama.cpp")
    beat = "tokens to beat plain decoding"
    assert "llama.cpp" in win.roofline.legend.text() and beat in win.roofline.legend.toolTip()
    assert beat in panel.table_text and beat in panel.summary.toolTip() and " AR" not in panel.table_text
    assert "16 rows" in panel.summary.text()
    assert panel.price()
    expected = price_sweep(sweep, load_llama_bench_json(_bench_json()))
    if expected.chosen is not None:
        assert shlex.split(panel.command.text())[3:] == expected.chosen.config.flags()
        assert f"{expected.chosen.ratio:.2f}x" in panel.answer.text()
    else:
        assert panel.command.text().startswith("plain decoding: no speculative configuration pays")
    panel.copy()
    assert QGuiApplication.clipboard().text() == panel.command.text()
    # the measured extra cost of a drafted row on this CPU (bench/llamacpp_spec.py): nothing pays
    panel.overhead.setValue(0.51)
    assert panel.price()
    assert panel.command.text() == "plain decoding: no speculative configuration pays on this card"
    assert "x plain" in panel.answer.text() or "plain" in panel.answer.text()


def _calibrated_profile(tmp_path: Path) -> Path:
    """The CPU fixture's llama-bench curve with the loop calibration fitted on the recorded
    llama-speculative-simple runs (as `roofline --engine llamacpp` keeps it), saved."""
    from engine.cost.llamacpp_bench import load_llama_bench_json
    from engine.tuning.llamacpp_loop import fit_loop, parse_loop_output, with_calibration
    rec = json.loads((FIX / "speculative-simple_cpu_smollm2.json").read_text())
    runs = [parse_loop_output(r["stderr"], r["prompt"], r["setting"]) for r in rec["runs"]]
    prof = load_llama_bench_json(_bench_json())
    path = tmp_path / "llamacpp-profile.json"
    with_calibration(prof, fit_loop(runs, prof)).save(path)
    return path


def test_prices_with_the_profiles_loop_calibration_by_default(qtbot, make_window, tmp_path):
    """A calibrated profile prices like `specscope export --price-with` (window and row costs),
    the panel says so; a row cost typed in the box overrides it, as --row-overhead does."""
    import argparse
    from engine.cost.llamacpp_bench import load_llama_bench_json
    from engine.tuning.llamacpp_loop import profile_calibration
    from engine.tuning.llamacpp_price import price_sweep
    from specscope.export_llamacpp import priced_llamacpp
    win = make_window()
    sweep = json.loads((FIX / "sweep_cpu_code-edit.json").read_text())
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    assert win.sweep.load(tmp_path / "sweep.json")
    panel = win.sweep.llamacpp
    path = _calibrated_profile(tmp_path)
    cal = profile_calibration(load_llama_bench_json(path))
    assert cal is not None and cal.row_overhead + cal.window_overhead > 0
    assert panel.load(path)
    assert panel.overhead.value() == round(cal.row_overhead, 2)
    assert panel.source.text().startswith("calibrated on llama.cpp's loop")
    assert f"+{cal.window_overhead:.2f}" in panel.source.text()
    assert panel.price()
    expected = price_sweep(sweep, load_llama_bench_json(path), row_overhead=cal.row_overhead,
                           window_overhead=cal.window_overhead)
    assert [(q.config, q.tok_s) for q in panel.pricing.ranked] == [(q.config, q.tok_s) for q in expected.ranked]
    exported, _, _ = priced_llamacpp(argparse.Namespace(price_with=str(path), row_overhead=None), sweep)
    assert panel.command.text() == exported
    assert "calibrated on llama.cpp's loop" in panel.answer.toolTip()
    # a row cost typed in the box: that alone, no window cost
    panel.overhead.setValue(0.05)
    assert "set by hand" in panel.source.text()
    assert panel.price()
    by_hand = price_sweep(sweep, load_llama_bench_json(path), row_overhead=0.05)
    assert [(q.config, q.tok_s) for q in panel.pricing.ranked] == [(q.config, q.tok_s) for q in by_hand.ranked]
    # a profile without a calibration (a raw llama-bench JSON): the pass alone, and the panel says how to measure it
    assert panel.load(_bench_json())
    assert panel.overhead.value() == 0.0
    assert panel.source.text() == "no calibration: roofline --engine llamacpp measures it"
    assert panel.price()
    plain = price_sweep(sweep, load_llama_bench_json(_bench_json()))
    assert [(q.config, q.tok_s) for q in panel.pricing.ranked] == [(q.config, q.tok_s) for q in plain.ranked]
