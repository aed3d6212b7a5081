"""Quantized weights kept packed, and streamed loading, on the real bundled model and on
random-weight GGUF / safetensors models written by bench/make_model.py.

The packed path's outside reference is our float32 path, itself checked against transformers
(test_parity.py): the bundled file is Q4_1, so packed and dequantized compute the same weights
and differ only in the order of float32 roundings. The packed greedy check runs in
test_parity.py, beside the float32 decodes it compares with.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from engine.io.load import load_model
from engine.io.prompts import encode_prompt
from engine.model.runtime import Runtime

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
from make_model import SHAPES, Shape, write_model  # noqa: E402

PEAK = ROOT / "tests" / "engine" / "peak_memory.py"


# packed_runtime (tests/conftest.py, session): the exact CPU kernels, float32 throughout


def test_packed_runtime_keeps_linear_weights_packed(packed_runtime, cpu_runtime):
    assert packed_runtime.weights_mode == "packed" and cpu_runtime.weights_mode == "dequantized"
    layer = packed_runtime.model.layers[0]
    assert [p.qtype for p in layer["qkv"].parts] == ["Q4_1"]          # q|k|v merged, one kernel
    assert layer["qkv"].parts[0].shape == (576 + 2 * 192, 576)
    # Q4_1 is 5 bits a weight (4-bit values, an f16 scale and min per 32); the Q8_0 embedding
    # (the tied LM head) is dequantized
    assert packed_runtime.weight_bytes < 0.4 * cpu_runtime.weight_bytes
    assert packed_runtime.weights_label.startswith("Q4_1 packed")
    assert cpu_runtime.weights_label.startswith("Q4_1 as float32")


def test_packed_logits_match_float32_on_the_code_edit_prompts(packed_runtime, cpu_runtime,
                                                              code_edit_prompts):
    # the last three prompts (~1,800 positions; the suite's time): the packed path's logits are
    # not compared on the first two, its greedy tokens are (test_parity.py, lookup, 64 tokens)
    for p in code_edit_prompts[2:]:
        ids = encode_prompt(cpu_runtime.tokenizer, p["messages"])
        n = len(ids)
        t = torch.tensor(ids)
        pos = torch.arange(n)
        mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
        outs = []
        for rt in (cpu_runtime, packed_runtime):
            cache = rt.model.new_cache(n + 8)
            with torch.inference_mode():
                outs.append(rt.model.forward(t, pos, mask, cache, pos))
        err = (outs[0] - outs[1]).abs().max().item()
        assert err < 1e-3, (p["id"], err)


# The packed runtime's greedy output (lookup decoding, 40 tokens, the first two code-edit
# prompts) must equal float32 plain decoding's: checked in test_parity.py's
# test_greedy_output_matches_transformers, which decodes those prompts in float32
# anyway (and compares them with transformers).


def test_runtime_builds_weights_one_by_one_with_progress(tmp_path):
    path = write_model(tmp_path / "tiny.gguf", SHAPES["tiny"], "Q4_K_M", progress=None)
    loaded = load_model(path)
    assert loaded.file_type == "Q4_K_M"
    calls = []
    rt = Runtime(loaded, "cpu", "float32", weights="packed", progress=lambda m, f: calls.append(f))
    assert 10 <= len(calls) <= 101 and calls == sorted(calls) and calls[-1] == 1.0
    kinds = {p.qtype for L in rt.model.layers for k in ("qkv", "o", "gate_up", "down")
             for p in L[k].parts}
    assert kinds == {"Q4_K", "Q6_K"}                   # llama.cpp's Q4_K_M mix, kept as it is
    assert rt.weights_label.startswith("Q4_K_M packed")


def _peak(model: Path, *args: str) -> dict:
    out = subprocess.run([sys.executable, str(PEAK), str(model), *args], capture_output=True,
                         text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


MB = 1 << 20


def test_streamed_gguf_load_never_holds_a_float_copy(tmp_path):
    # ~330 M weights in Q8_0: 350 MB packed, 1.3 GB as float32
    shape = Shape("llama", 1024, 16, 16, 4, 64, 4096, 49152, 4096)
    path = write_model(tmp_path / "q8.gguf", shape, "Q8_0", progress=None)
    r = _peak(path, "--weights", "packed")
    # the weights' final size, plus one tensor dequantized to float32 (the embedding), plus
    # slack for the allocator and the RoPE tables: far below a float32 copy of the model
    bound = r["on_host"] + 4 * r["largest_tensor_values"] + 200 * MB
    assert r["peak_gain"] < bound, r
    assert r["weights"].startswith("Q8_0 packed")


def test_streamed_safetensors_load_never_holds_a_float_copy(tmp_path):
    from safetensors.torch import save_file
    sys.path.insert(0, str(ROOT / "tests" / "engine"))
    from tiny_models import tiny_tokenizer_files

    h, layers, inter, vocab = 1024, 12, 4096, 128
    g = torch.Generator().manual_seed(0)
    tensors = {"model.embed_tokens.weight": torch.randn(vocab, h, generator=g).bfloat16(),
               "model.norm.weight": torch.ones(h, dtype=torch.bfloat16),
               "lm_head.weight": torch.randn(vocab, h, generator=g).bfloat16()}
    for i in range(layers):
        p = f"model.layers.{i}."
        for name, shp in (("self_attn.q_proj", (h, h)), ("self_attn.k_proj", (256, h)),
                          ("self_attn.v_proj", (256, h)), ("self_attn.o_proj", (h, h)),
                          ("mlp.gate_proj", (inter, h)), ("mlp.up_proj", (inter, h)),
                          ("mlp.down_proj", (h, inter))):
            tensors[p + name + ".weight"] = (torch.randn(shp, generator=g) * 0.02).bfloat16()
        tensors[p + "input_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
        tensors[p + "post_attention_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    folder = tmp_path / "hf"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    del tensors
    tok_json, tok_cfg = tiny_tokenizer_files()
    (folder / "tokenizer.json").write_text(tok_json)
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
        "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": 16,
        "num_key_value_heads": 4, "vocab_size": vocab, "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2}))
    r = _peak(folder, "--dtype", "bfloat16")
    assert r["weights"].startswith("BF16 as bfloat16")
    assert r["weight_bytes"] > 300 * MB
    # bf16 -> bf16 on the CPU: the final weights plus one tensor's float32 round trip
    bound = r["on_host"] + 6 * r["largest_tensor_values"] + 200 * MB
    assert r["peak_gain"] < bound, r


def test_q6_k_is_widened_only_on_cuda(monkeypatch):
    """Q6_K weights become Q6_K8 (int8 quants, same values) on CUDA only: never on a CPU, not on
    ROCm by default (there the weight stream binds); SPECSCOPE_Q6K_INT8 forces either way."""
    from engine.model.transformer import widen_q6k_default
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    monkeypatch.delenv("SPECSCOPE_Q6K_INT8", raising=False)
    assert not widen_q6k_default(cpu)
    monkeypatch.setattr(torch.version, "hip", None)
    assert widen_q6k_default(gpu)
    monkeypatch.setattr(torch.version, "hip", "6.4")
    assert not widen_q6k_default(gpu)
    monkeypatch.setenv("SPECSCOPE_Q6K_INT8", "1")
    assert widen_q6k_default(gpu) and not widen_q6k_default(cpu)
    monkeypatch.setenv("SPECSCOPE_Q6K_INT8", "0")
    monkeypatch.setattr(torch.version, "hip", None)
    assert not widen_q6k_default(gpu)


def test_q4_k_native_order_is_opt_in(monkeypatch):
    """Q4_K weights stay in their planes unless SPECSCOPE_Q4K_NATIVE=1, and then only on a GPU
    (Q4_KN: GGUF's block order, engine.weights.packed.native_q4_k)."""
    from engine.model.transformer import native_q4k_default
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    monkeypatch.delenv("SPECSCOPE_Q4K_NATIVE", raising=False)
    assert not native_q4k_default(gpu) and not native_q4k_default(cpu)
    monkeypatch.setenv("SPECSCOPE_Q4K_NATIVE", "1")
    assert native_q4k_default(gpu) and not native_q4k_default(cpu)
