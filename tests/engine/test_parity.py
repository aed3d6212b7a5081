"""Parity with an outside implementation: transformers loads the same GGUF; our logits and our
greedy output must match it on the five shared code-edit prompts."""

from __future__ import annotations

import pytest
import torch

from engine.speculation.decoder import Decoder
from engine.io.prompts import encode_prompt
from engine.speculation.settings import DecodeSettings


@pytest.fixture(scope="module")
def encoded(cpu_runtime, code_edit_prompts):
    return [encode_prompt(cpu_runtime.tokenizer, p["messages"]) for p in code_edit_prompts]


def test_last_position_logits_match_transformers(cpu_runtime, hf_model, encoded) -> None:
    rt = cpu_runtime
    for ids in encoded:
        rt.start(len(ids) + 8)
        rt.prefill(ids[:-1])
        ours = rt.verify([ids[-1]], [-1]).logits[0]
        with torch.inference_mode():
            ref = hf_model(torch.tensor([ids])).logits[0, -1]
        assert (ours - ref).abs().max().item() < 1e-3


def test_greedy_output_matches_transformers_for_64_tokens(cpu_runtime, hf_model, encoded) -> None:
    for ids in encoded:
        ours = Decoder(cpu_runtime, ids, DecodeSettings(draft="none", max_new_tokens=64)).run()
        with torch.inference_mode():
            out = hf_model.generate(torch.tensor([ids]), max_new_tokens=64, do_sample=False,
                                    attention_mask=torch.ones(1, len(ids), dtype=torch.long))
        ref = out[0, len(ids):].tolist()
        assert ours["tokens"] == ref[: len(ours["tokens"])]
        assert len(ours["tokens"]) == len(ref) or ours["finish_reason"] == "eos"


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_tiny_hf_folders_give_transformers_logits(arch: str, tmp_path) -> None:
    """A tiny random model written by save_pretrained, loaded through our HF-folder path, gives
    the logits transformers gives for the same tokens (prefill and a tree window)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from tiny_models import make_tiny_hf, tiny_model

    from engine.io.load import load_model
    from engine.model.runtime import Runtime

    folder = make_tiny_hf(arch, tmp_path / arch)
    ref_model = tiny_model(arch)
    rt = Runtime(load_model(folder), "cpu", "float32", capacity=64)
    ids = [5, 17, 99, 3, 42, 42, 7, 64, 11]
    rt.start(32)
    rt.prefill(ids[:-1])
    ours = rt.verify([ids[-1]], [-1]).logits[0]
    with torch.inference_mode():
        ref = ref_model(torch.tensor([ids])).logits[0, -1]
    assert (ours - ref).abs().max().item() < 1e-4
