"""The sweep on the tiny CI configuration (the bundled model, two prompts, a few tokens): every
cell and field in sweep.json and sweep.csv, resume after a cancel without repeating a finished
cell, the best cell is the highest measured ratio, greedy outputs equal AR's; the skip rule's
prediction."""

from __future__ import annotations

import csv
import json
import threading

import pytest

from sweep_helpers import cpu_like_profile, workload_file

CELL_FIELDS = {"id", "draft", "depth", "width", "adaptive", "ar_floor", "rows", "settings", "status",
               "tok_s", "decode_tok_s", "tokens_per_pass", "ratio_to_ar", "predicted_ratio", "skip_reason", "per_prompt"}
TOP_FIELDS = {"kind", "version", "config", "device", "dtype", "weights", "model", "profile", "prompts",
              "ar", "cells", "planned", "best", "adaptive_vs_best", "skipped", "complete", "sweep_s"}


def _config(path, **kw):
    from engine.tuning.grid import SweepConfig
    return SweepConfig(workload=str(path), drafts=("lookup", "tree"), depths=(2, 4), widths=(2,),
                       new_tokens=kw.pop("new_tokens", 5), skip_margin=kw.pop("skip_margin", 0.0),
                       warmup_tokens=0, **kw)


def _sweep(rt, cfg, previous=None, stop=None):
    from engine.io.workloads import load_workload
    from engine.tuning.sweep import Sweep
    return Sweep(rt, cfg, load_workload(cfg.workload), previous=previous,
                 profile=cpu_like_profile(rt), stop=stop or threading.Event())


def test_sweep_writes_every_cell_and_field_and_resumes_after_a_cancel(cpu_runtime, tmp_path,
                                                                      capsys) -> None:
    from engine.tuning.sweep import SweepCancelled
    from engine.tuning.sweep_file import load_sweep, save_sweep

    cfg = _config(workload_file(tmp_path))
    out = tmp_path / "out"
    stop = threading.Event()
    first = _sweep(cpu_runtime, cfg, stop=stop)
    seen, said = [], []
    with pytest.raises(SweepCancelled):
        for step in first.steps():
            save_sweep(step.result, out)
            seen.append(step.cell)
            said.append(step.message)
            if len(seen) == 3:          # AR and two cells, then cancel (as the dock's button does)
                stop.set()
    # the progress names plain decoding as every view does (engine.cost.baseline): its decode
    # tok/s with the source, each cell's ratio decode against decode, the prefill's tok/s said so
    assert said[0].startswith("plain decoding ") and " tok/s (measured) · " in said[0], said[0]
    assert all("x plain decoding) · " in m and " tok/s incl. prefill · " in m for m in said[1:]), said
    assert not any(" AR" in m or m.startswith("AR") for m in said), said
    partial = load_sweep(out)           # still a valid file, holding what finished
    assert [c["id"] for c in partial["cells"]] == seen[1:] and partial["complete"] is False
    kept = {c["id"]: c for c in partial["cells"]}

    second = _sweep(cpu_runtime, cfg, previous=partial)
    resumed = []
    for step in second.steps():
        save_sweep(step.result, out)
        resumed.append(step.cell)
    planned = ["lookup:2:1", "lookup:4:1", "tree:2:2", "tree:4:2", "adaptive:lookup:4:1",
               "adaptive:tree:4:2"]
    # nothing finished runs again: not AR, not the two cells
    assert resumed == [c for c in planned if c not in kept]
    res = json.loads((out / "sweep.json").read_text())
    assert TOP_FIELDS <= set(res) and res["complete"] is True and res["skipped"] == 0
    assert [c["id"] for c in res["cells"]] == planned == res["planned"]
    for cid, c in kept.items():                      # the finished cells are kept as they were
        assert next(x for x in res["cells"] if x["id"] == cid) == c
    assert res["ar"]["tok_s"] > 0 and len(res["ar"]["per_prompt"]) == 2 and res["ar"]["drift"] > 0
    assert all(x["decode_tok_s_end"] > 0 for x in res["ar"]["per_prompt"])
    for c in res["cells"]:
        assert CELL_FIELDS <= set(c), c["id"]
        assert c["status"] == "done" and c["tok_s"] > 0 and c["tokens_per_pass"] >= 1
        assert len(c["per_prompt"]) == 2
        # lossless: greedy speculation changes the cost of a token, never the token
        assert all(p["identical_to_ar"] for p in c["per_prompt"]), c["id"]
        # the cell's ratio is the median of its per-prompt ratios to AR on the same prompt
        ratios = sorted(p["decode_tok_s"] / a["decode_tok_s"]
                        for p, a in zip(c["per_prompt"], res["ar"]["per_prompt"]))
        assert c["ratio_to_ar"] == pytest.approx(sum(ratios) / 2, rel=1e-3)
        assert c["settings"]["draft"] == c["draft"] and c["settings"]["depth"] == c["depth"]
        assert c["settings"]["adaptive"] == c["adaptive"] == c["ar_floor"]
    # the drafted cells really drafted: on a copy prompt some cell takes >1 token a pass
    assert max(c["tokens_per_pass"] for c in res["cells"]) > 1.0
    fixed = [c for c in res["cells"] if not c["adaptive"]]
    assert res["best"] == max(fixed, key=lambda c: c["ratio_to_ar"])["id"]
    assert set(res["adaptive_vs_best"]) == {"adaptive:lookup:4:1", "adaptive:tree:4:2"}
    with (out / "sweep.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["id"] for r in rows] == ["ar", *planned]
    assert all(r["tok_s"] and r["ratio_to_ar"] for r in rows)
    # `specscope sweep`'s table: the same baseline and words, no "AR"
    from engine.cost.baseline import Baseline
    from specscope.sweep_cmd import _print_summary
    capsys.readouterr()
    _print_summary(res)
    text = capsys.readouterr().out
    first_line = text.splitlines()[0]
    assert first_line.startswith(f"baseline: {Baseline(res['ar']['decode_tok_s'], 'measured').label()} · "
                                 f"{res['ar']['tok_s']:.1f} tok/s incl. prefill · "), first_line
    assert "x plain" in text and "plain decoding after the cells ran at" in text
    assert " AR" not in text and "AR:" not in text


def test_a_resume_with_other_settings_is_refused_in_one_line(cpu_runtime, tmp_path) -> None:
    from engine.errors import ParameterError
    from engine.io.workloads import load_workload
    from engine.tuning.sweep import Sweep

    path = workload_file(tmp_path)
    old = {"kind": "specscope-sweep", "version": 1, "config": {**_config(path).identity(), "new_tokens": 99},
           "cells": [], "device": cpu_runtime.device_name, "dtype": cpu_runtime.dtype_name,
           "model": {"name": cpu_runtime.model_id}}
    with pytest.raises(ParameterError, match="new_tokens 99.*another --out"):
        Sweep(cpu_runtime, _config(path), load_workload(str(path)), previous=old)


def test_the_skip_rule_predicts_from_the_shallower_neighbour(cpu_runtime) -> None:
    import math

    from engine.cost.acceptance import expected_tokens, fit_acceptance
    from engine.cost.profile import profile_from_points
    from engine.tuning.grid import Cell
    from engine.tuning.sweep import predict_ratio

    # Leviathan's E by hand: 1 + a + a^2 + ... ; and its inverse at depth 2, the quadratic's root
    assert expected_tokens(0.6, 4) == pytest.approx(1 + 0.6 + 0.36 + 0.216 + 0.1296)
    assert expected_tokens(1.0, 3) == 4.0
    assert fit_acceptance(2.3056, 4) == pytest.approx(0.6, abs=1e-6)
    root = (-1 + math.sqrt(1 + 4 * 0.1)) / 2                 # 1 + a + a^2 = 1.1
    assert fit_acceptance(1.1, 2) == pytest.approx(root, abs=1e-9)
    # on a card where a pass of r rows costs r one-row passes, a neighbour at 1.1 tokens of 3
    # rows running 1.05x AR predicts depth 16 (17 rows) at 1.05 x (3 / 1.1) x E16 / 17
    linear = profile_from_points([(r, 10.0 * r) for r in (1, 2, 4, 8, 16, 32, 64)], id="linear",
                                 device="d", model="m", dtype="float32", context=512, source="tests")
    e16 = sum(root ** j for j in range(17))
    weak1 = {"depth": 2, "rows": 3, "tokens_per_pass": 1.1, "ratio_to_ar": 1.05}
    assert predict_ratio(weak1, Cell("lookup", 16, 1), linear) == pytest.approx(
        1.05 * 3 / 1.1 * e16 / 17, rel=1e-6)
    prof = cpu_like_profile(cpu_runtime)
    # a neighbour that took 1.1 tokens a pass at depth 2 (acceptance ~0.1): depth 16 buys nothing
    # and costs 17 rows, so it is predicted to lose; one that took 2.9 of 3 predicts a deeper win
    weak = {"depth": 2, "rows": 3, "tokens_per_pass": 1.1, "ratio_to_ar": 1.05}
    strong = {"depth": 2, "rows": 3, "tokens_per_pass": 2.9, "ratio_to_ar": 2.6}
    deep = Cell("lookup", 16, 1)
    assert predict_ratio(weak, deep, prof) < 0.9
    assert predict_ratio(strong, deep, prof) > strong["ratio_to_ar"]


def test_a_sweep_skips_the_cells_predicted_to_lose_and_says_how_many(cpu_runtime, tmp_path) -> None:
    from engine.cost.profile import profile_from_points
    from engine.io.workloads import load_workload
    from engine.tuning.grid import SweepConfig
    from engine.tuning.sweep import Sweep

    path = workload_file(tmp_path)
    cfg = SweepConfig(workload=str(path), drafts=("lookup",), depths=(2, 4), widths=(1,),
                      new_tokens=6, adaptive=False, skip_margin=0.3, warmup_tokens=0)
    prompts = load_workload(str(path))
    # a card where every row costs a full pass, and a saved sweep whose lookup:2:1 took 1.1
    # tokens a pass: depth 4 is predicted at ~0.6x AR, below the best (1.0x) by more than 30%
    steep = profile_from_points([(r, 10.0 * r) for r in (1, 2, 4, 8, 16, 32, 64)], id="steep",
                                device=cpu_runtime.device_name, model=cpu_runtime.model_id,
                                dtype=cpu_runtime.dtype_name, context=512, source="tests")
    head = Sweep(cpu_runtime, cfg, prompts, profile=steep).result
    ar = [{"prompt": p.id, "tok_s": 10.0, "decode_tok_s": 12.0, "tokens_per_pass": 1.0,
           "new_tokens": 6, "wall_s": 0.6, "tokens": []} for p in prompts]
    near = {"id": "lookup:2:1", "draft": "lookup", "depth": 2, "width": 1, "adaptive": False,
            "ar_floor": False, "rows": 3, "settings": {}, "status": "done", "tok_s": 10.0,
            "tokens_per_pass": 1.1, "ratio_to_ar": 1.0, "predicted_ratio": None,
            "skip_reason": None, "per_prompt": []}
    previous = {**head, "ar": {"tok_s": 10.0, "tokens_per_pass": 1.0, "per_prompt": ar},
                "cells": [near]}
    sweep = Sweep(cpu_runtime, cfg, prompts, previous=previous, profile=steep)
    steps = list(sweep.steps())
    assert [s.cell for s in steps] == ["lookup:4:1"]
    res = steps[-1].result
    skipped = res["cells"][-1]
    assert res["skipped"] == 1 and res["complete"] and res["best"] == "lookup:2:1"
    assert skipped["status"] == "skipped" and skipped["tok_s"] is None
    assert skipped["predicted_ratio"] == pytest.approx(0.6, abs=0.05)
    assert "lookup:2:1" in skipped["skip_reason"] and "x plain decoding" in skipped["skip_reason"]
    assert steps[-1].message == (f"lookup:4:1: skipped (predicted {skipped['predicted_ratio']:.2f}x "
                                 "plain decoding)")
    # margin 0: the same cell is measured, not skipped
    from dataclasses import replace
    sweep = Sweep(cpu_runtime, replace(cfg, skip_margin=0.0), prompts, previous=previous, profile=steep)
    assert [s.result["cells"][-1]["status"] for s in sweep.steps()] == ["done"]
