"""`specscope bench`: options; the statistics, identity checks and report over scripted rows with
known timings; and one tiny real run (ours + transformers, one prompt, 16 tokens) whose JSON must
carry every field, with llama.cpp skipped when it is not installed. Workloads: tests/engine/io/test_workloads.py."""

from __future__ import annotations

import importlib.util
import json
import time

import pytest

from specscope.bench import BenchConfig, config_from_args, run_benchmark
from specscope.bench_report import render_markdown, write_results
from specscope.peers import Row, Sample, open_rows
from specscope.cli import build_parser
from engine.errors import ParameterError
from engine.io.workloads import load_workload
from engine.model.device import one_torch_thread

TOP_KEYS = {"date", "config", "machine", "device", "dtype", "model", "prompts", "rows",
            "identity_checks", "goals", "skipped", "bench_s", "load_s", "adaptive_profile",
            "plot", "plot_note"}
ROW_KEYS = {"engine", "label", "params", "tok_s", "decode_tok_s", "first_token_s",
            "tokens_per_pass", "per_repeat", "per_prompt", "samples", "notes", "speedup"}
SAMPLE_KEYS = {"repeat", "prompt", "new_tokens", "wall_s", "tok_s", "first_token_s",
               "decode_tok_s", "forward_passes", "tokens_per_pass", "tokens"}


def test_options_parse_and_validate():
    a = build_parser().parse_args(["bench", "--peers", "transformers,llamacpp", "--ours", "ar,tree",
                                   "--new-tokens", "32", "--workload", "specbench:rag"])
    cfg = config_from_args(a)
    assert cfg.peers == ("transformers", "llamacpp") and cfg.ours == ("ar", "tree")
    assert cfg.new_tokens == 32 and cfg.workload == "specbench:rag"
    assert config_from_args(build_parser().parse_args(["bench", "--peers", "none"])).peers == ()
    with pytest.raises(ParameterError, match="--peers"):
        BenchConfig(peers=("vllm",))
    with pytest.raises(ParameterError, match="ar"):
        BenchConfig(ours=("tree",))
    with pytest.raises(ParameterError, match="--repeats"):
        BenchConfig(repeats=0)


def _scripted_row(name: str, walls: list[list[float]], passes: int, tokens=None) -> Row:
    """A row whose run on prompt p in repeat r takes walls[r][p] seconds for 4 new tokens."""
    calls: dict[tuple[int, ...], int] = {}
    order: list[tuple[int, ...]] = []

    def run(ids: list[int], n: int) -> Sample:
        key = tuple(ids)
        if key not in order:
            order.append(key)
        rep, p = calls.get(key, 0), order.index(key)
        calls[key] = rep + 1
        toks = (tokens or {}).get((rep, p), [1, 2, 3, 4])
        return Sample(list(toks), walls[rep][p], passes, first_token_s=0.05)

    return Row(name, "specscope", name, {}, run)


def test_repeats_aggregate_to_known_medians_spreads_and_paired_speedups(cpu_runtime):
    prompts = load_workload("code-edit", limit=2)
    cfg = BenchConfig(prompts=2, repeats=3, warmup_tokens=0, peers=(), ours=("ar", "tree"))
    # per repeat, 8 tokens over the two prompts' wall times: ar 20, 10, 40 tok/s; tree 40, 40, 20
    ar = _scripted_row("ours-ar", [[0.2, 0.2], [0.4, 0.4], [0.1, 0.1]], passes=4)
    tree = _scripted_row("ours-tree", [[0.1, 0.1], [0.1, 0.1], [0.2, 0.2]], passes=2,
                         tokens={(1, 1): [1, 2, 9, 4]})       # repeat 1, prompt 1 differs at 2
    result = run_benchmark(cfg, cpu_runtime, [ar, tree], prompts)
    rows = result["rows"]
    assert rows["ours-ar"]["tok_s"] == {"median": 20.0, "min": 10.0, "max": 40.0, "n": 3}
    assert rows["ours-tree"]["tok_s"] == {"median": 40.0, "min": 20.0, "max": 40.0, "n": 3}
    assert [r["tok_s"] for r in rows["ours-ar"]["per_repeat"]] == [20.0, 10.0, 40.0]
    # speedups are paired per repeat (2, 4, 0.5), not a ratio of medians (2)
    assert rows["ours-tree"]["speedup"]["ours-ar"] == {"median": 2.0, "min": 0.5, "max": 4.0, "n": 3}
    assert rows["ours-ar"]["speedup"]["ours-tree"] == {"median": 0.5, "min": 0.25, "max": 2.0, "n": 3}
    assert rows["ours-tree"]["tokens_per_pass"]["median"] == 2.0
    # after the first token (0.05 s): 3 tokens per prompt in 0.15 s per prompt in repeat 0
    assert rows["ours-ar"]["per_repeat"][0]["decode_tok_s"] == 20.0
    (check,) = [c for c in result["identity_checks"] if c["row"] == "ours-tree"]
    assert (check["compared"], check["identical"], check["all_identical"]) == (6, 5, False)
    assert check["mismatches"] == [{"repeat": 1, "prompt": prompts[1].id, "first_difference": 2,
                                    "length": 4, "reference_length": 4}]
    md = render_markdown(dict(result, plot_note=None))
    assert "| ours-tree | 40.0 (20.0-40.0) | 2.00 (2.00-2.00) |" in md
    assert "2.00× (0.50-4.00)" in md and "| ours-tree | ours-ar | yes | 5/6 |" in md
    assert "rows:" not in md                          # labels that only repeat the row ids: no key
    result["rows"]["ours-ar"]["label"] = "specscope plain decoding"
    assert "\nrows: ours-ar: specscope plain decoding\n" in render_markdown(dict(result, plot_note=None))


def test_tiny_bench_reports_every_field(cpu_runtime, hf_model, tmp_path, monkeypatch):
    # a fresh profile cache: the adaptive row must find or probe its profile, here a quick probe
    monkeypatch.setenv("SPECSCOPE_CACHE", str(tmp_path / "cache"))
    cfg = BenchConfig(workload="code-edit", prompts=1, new_tokens=16, repeats=1, warmup_tokens=0)
    prompts = load_workload(cfg.workload, limit=cfg.prompts)
    # one thread: this checks what the bench reports, not speed, and two threads on a busy
    # 2-core machine wait on each other (5x slower)
    with one_torch_thread():
        rows, skipped, extra = open_rows(cpu_runtime, cfg.ours, cfg.peers, 2048, hf_model=hf_model,
                                         probe_args=dict(rows=(1, 4, 16), repeats=3, warmup=1,
                                                         context=256))
        t0 = time.perf_counter()
        result = run_benchmark(cfg, cpu_runtime, rows, prompts, skipped, extra=extra)
        elapsed = time.perf_counter() - t0          # the bench as this test's clock saw it
    paths = write_results(result, tmp_path / "out")
    data = json.loads(paths["json"].read_text())

    assert TOP_KEYS <= set(data)
    assert data["dtype"] == "float32" and data["model"]["format"] == "gguf"
    assert data["adaptive_profile"]["source"].startswith("specscope roofline")
    llama_installed = importlib.util.find_spec("llama_cpp") is not None
    names = list(data["rows"])
    expected = ["ours-ar", "ours-lookup", "ours-tree", "ours-adaptive", "transformers-greedy",
                "transformers-pld10", "transformers-pld3"]
    if llama_installed:
        expected += ["llamacpp-plain", "llamacpp-pld10", "llamacpp-pld2"]
        assert data["skipped"] == []
    else:   # not installed: skipped with the way to get it, never an error
        assert [s["peer"] for s in data["skipped"]] == ["llamacpp"]
        assert "specscope[llamacpp]" in data["skipped"][0]["reason"]
    assert names == expected
    # plain decoding named as every view names it; the row id stays (scripts key on it)
    assert data["rows"]["ours-ar"]["label"] == "specscope plain decoding"
    assert "ours-ar: specscope plain decoding" in paths["markdown"].read_text()

    for name, row in data["rows"].items():
        assert ROW_KEYS <= set(row), name
        (s,) = row["samples"]
        assert SAMPLE_KEYS <= set(s)
        assert 1 <= s["new_tokens"] == len(s["tokens"]) <= 16
        assert s["tok_s"] > 0 and s["forward_passes"] >= 1
        assert 0 < s["first_token_s"] < s["wall_s"]    # the prompt's prefill comes first
        # its rate is at least its tokens over the whole bench, timed from outside
        assert s["tok_s"] >= s["new_tokens"] / elapsed
        assert set(row["speedup"]) == set(names) - {name}
    # the samples ran one after another inside the bench: their times add up to less than it took
    walls = [s["wall_s"] for row in data["rows"].values() for s in row["samples"]]
    assert sum(walls) <= data["bench_s"] <= elapsed + 0.01           # (bench_s: rounded to 10 ms)
    rows_ = data["rows"]
    # greedy: each of our rows and transformers' generate emit plain decoding's tokens
    # (read from the samples here, not from the bench's own identity checks)
    plain_tokens = rows_["ours-ar"]["samples"][0]["tokens"]
    for name in ("ours-lookup", "ours-tree", "ours-adaptive", "transformers-greedy"):
        assert rows_[name]["samples"][0]["tokens"] == plain_tokens, name
    # plain decoding: one token per forward pass, in every engine (counts are real, not assumed)
    assert rows_["ours-ar"]["tokens_per_pass"]["median"] == 1.0
    assert rows_["transformers-greedy"]["tokens_per_pass"]["median"] == 1.0
    for name in ("ours-lookup", "ours-tree", "transformers-pld10", "transformers-pld3"):
        assert rows_[name]["tokens_per_pass"]["median"] >= 1.0
    # the code-edit answer re-emits the prompt's code: lookup must save passes
    assert rows_["ours-tree"]["samples"][0]["forward_passes"] < 16

    checks = {(c["row"], c["reference"]): c for c in data["identity_checks"]}
    for pair in [("ours-lookup", "ours-ar"), ("ours-tree", "ours-ar"), ("ours-adaptive", "ours-ar"),
                 ("transformers-greedy", "ours-ar")]:
        assert checks[pair]["required"] and checks[pair]["compared"] == 1
        assert checks[pair]["all_identical"], checks[pair]
    assert [g["goal"] for g in data["goals"]] == ["tree_vs_transformers_best_lookup",
                                                  "ar_vs_transformers_generate",
                                                  "best_vs_llamacpp_best"]
    tree_goal = data["goals"][0]
    best_pld = max(("transformers-pld10", "transformers-pld3"),
                   key=lambda n: rows_[n]["tok_s"]["median"])
    assert tree_goal["reference"] == best_pld
    assert tree_goal["measured"] == rows_["ours-tree"]["speedup"][best_pld]["median"]
    assert (data["goals"][2]["measured"] is None) == (not llama_installed)

    md = paths["markdown"].read_text()
    for name in names:
        assert f"| {name} |" in md
    if importlib.util.find_spec("matplotlib") is not None:
        assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and data["plot"] == "results.png"
    else:
        assert data["plot"] is None and "matplotlib" in data["plot_note"]
