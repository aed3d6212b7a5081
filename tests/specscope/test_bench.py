"""`specscope bench`: workloads, options, and one tiny real run (ours + transformers, one prompt,
16 tokens) whose JSON must carry every field, with llama.cpp skipped when it is not installed."""

from __future__ import annotations

import importlib.util
import json

import pytest

from specscope.bench import (WORKLOADS, BenchConfig, config_from_args, load_workload,
                          run_benchmark, write_results)
from specscope.peers import open_rows
from specscope.cli import build_parser
from engine.errors import ParameterError
from engine.model.device import one_torch_thread

TOP_KEYS = {"date", "config", "machine", "device", "dtype", "model", "prompts", "rows",
            "identity_checks", "goals", "skipped", "bench_s", "load_s", "adaptive_profile",
            "plot", "plot_note"}
ROW_KEYS = {"engine", "label", "params", "tok_s", "decode_tok_s", "first_token_s",
            "tokens_per_pass", "per_repeat", "per_prompt", "samples", "notes", "speedup"}
SAMPLE_KEYS = {"repeat", "prompt", "new_tokens", "wall_s", "tok_s", "first_token_s",
               "decode_tok_s", "forward_passes", "tokens_per_pass", "tokens"}


def test_workloads_read_the_shared_files():
    code = load_workload("code-edit")
    assert len(code) == 5 and code[0].id == "p0_textwrap_dedent"
    assert code[0].messages[0]["role"] == "user" and "dedent" in code[0].messages[0]["content"]
    spec = load_workload("specbench:qa,coding", per_category=2)
    assert [p.category for p in spec] == ["qa", "qa", "coding", "coding"]
    with open(WORKLOADS / "specbench_questions.jsonl") as f:
        first_qa = next(r for r in map(json.loads, f) if r["category"] == "qa")
    assert spec[0].messages == ({"role": "user", "content": first_qa["turns"][0]},)
    assert spec[0].id == f"qa-{first_qa['question_id']}"
    assert len(load_workload("specbench", per_category=1)) == 6
    assert len(load_workload("code-edit", limit=2)) == 2
    with pytest.raises(ParameterError, match="no category 'poetry'"):
        load_workload("specbench:poetry")
    with pytest.raises(ParameterError, match="--workload"):
        load_workload("mt-bench")


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
        result = run_benchmark(cfg, cpu_runtime, rows, prompts, skipped, extra=extra)
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

    for name, row in data["rows"].items():
        assert ROW_KEYS <= set(row), name
        (s,) = row["samples"]
        assert SAMPLE_KEYS <= set(s)
        assert 1 <= s["new_tokens"] == len(s["tokens"]) <= 16
        assert s["tok_s"] > 0 and s["forward_passes"] >= 1
        assert 0 < s["first_token_s"] < s["wall_s"]    # the prompt's prefill comes first
        assert row["tok_s"]["median"] == row["per_repeat"][0]["tok_s"]
        assert set(row["speedup"]) == set(names) - {name}
        for ref, sp in row["speedup"].items():   # paired ratios: a/b times b/a is one
            back = data["rows"][ref]["speedup"][name]["median"]
            assert sp["median"] * back == pytest.approx(1.0, rel=1e-3)
    rows_ = data["rows"]
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
