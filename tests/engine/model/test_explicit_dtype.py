"""An explicit --dtype is honoured on the CPU (issue 26): `--weights auto` takes the int4 kernels,
whose activations are bfloat16, only when the dtype is auto too; an explicit float32 gets float32
arithmetic, and the report names the activation dtype actually used.

The prompts are the two Spec-Bench questions (83, 86) on which the bfloat16-activation path's
greedy output leaves transformers' float32 output within 48 tokens (at tokens 23 and 10; measured
2026-12-02 on this AVX-512 CPU, where `auto` packs the bundled Q4_1 model). float32 matches.
"""

from __future__ import annotations

import json

import torch

from engine.io.prompts import encode_prompt
from engine.io.workloads import SPECBENCH_FILE, read_jsonl
from engine.model.runtime import Runtime, cpu_fast_fits
from specscope.cli import main

QUESTIONS = (83, 86)
NEW = 32


def _messages(qid: int) -> list[dict]:
    (row,) = [r for r in read_jsonl(SPECBENCH_FILE) if r["question_id"] == qid]
    return [{"role": "user", "content": row["turns"][0]}]


def test_auto_weights_honour_an_explicit_dtype(loaded_model):
    fits = cpu_fast_fits(loaded_model)
    auto = Runtime(loaded_model, "cpu", "auto", capacity=64)
    assert auto.dtype_name == "float32" and auto.model.cpu_fast == fits
    assert auto.activation_dtype == ("bfloat16" if fits else "float32")
    explicit = Runtime(loaded_model, "cpu", "float32", capacity=64)
    assert not explicit.model.cpu_fast and explicit.weights_mode == "dequantized"
    assert explicit.activation_dtype == "float32"
    # packed asked for with float32: the exact packed kernels, float32 activations
    packed = Runtime(loaded_model, "cpu", "float32", weights="packed", capacity=64)
    assert packed.weights_mode == "packed" and not packed.model.cpu_fast
    assert packed.activation_dtype == "float32"


def test_explicit_float32_greedy_equals_transformers(hf_model, tokenizer, tmp_path, capsys):
    for qid in QUESTIONS:
        f = tmp_path / f"q{qid}.json"
        f.write_text(json.dumps(_messages(qid)))
        code = main(["generate", "--device", "cpu", "--dtype", "float32", "--prompt-file", str(f),
                     "--max-new-tokens", str(NEW), "--json"])
        report = json.loads(capsys.readouterr().out)
        assert code == 0
        assert report["dtype"] == report["activation_dtype"] == "float32"
        ids = encode_prompt(tokenizer, _messages(qid))
        with torch.inference_mode():
            out = hf_model.generate(torch.tensor([ids]), max_new_tokens=NEW, do_sample=False,
                                    attention_mask=torch.ones(1, len(ids), dtype=torch.long))
        assert report["tokens"] == out[0, len(ids):].tolist()[:len(report["tokens"])], qid
        assert len(report["tokens"]) == NEW or report["finish_reason"] == "eos"

