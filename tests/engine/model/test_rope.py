"""RoPE scalings (linear, llama3, YaRN) against transformers: the frequencies and attention factor
of modeling_rope_utils, the logits of tiny random models read from HF folders and from GGUFs,
and a clear refusal for every variant specscope does not compute."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from tiny_models import make_tiny_gguf, make_tiny_hf, tiny_config, tiny_model

from engine.errors import ModelLoadError
from engine.io.hf import read_config
from engine.io.load import load_model
from engine.model.config import RopeScaling
from engine.model.rope import attention_factor, inv_freq, rope_tables
from engine.model.runtime import Runtime, chain

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
# (arch, transformers rope_parameters): the tiny models have head_dim 16 (32 for qwen3) and 256
# positions, so with an original context of 64 every scaling bends some frequencies and not others.
CASES = {
    "linear": ("llama", {"rope_type": "linear", "factor": 4.0}),
    "llama3": ("llama", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64}),
    "yarn": ("llama", YARN),
    "yarn-qwen2": ("qwen2", YARN),
    "yarn-qwen3-mscale-all-dim": ("qwen3", dict(YARN, mscale=1.0, mscale_all_dim=0.5)),
    "yarn-betas-untruncated": ("llama", dict(YARN, beta_fast=16.0, beta_slow=2.0, truncate=False)),
    "yarn-attention-factor": ("qwen2", dict(YARN, attention_factor=1.3)),
}


def _our_config(arch: str, rope: dict, tmp_path: Path):
    tiny_config(arch, rope).save_pretrained(tmp_path)
    return read_config(tmp_path)


@pytest.mark.parametrize("case", CASES)
def test_frequencies_and_attention_factor_equal_transformers(case, tmp_path):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    arch, rope = CASES[case]
    cfg = _our_config(arch, rope, tmp_path)
    assert cfg.rope_scaling.kind == rope["rope_type"]
    want_inv, want_factor = ROPE_INIT_FUNCTIONS[rope["rope_type"]](tiny_config(arch, rope), "cpu")
    torch.testing.assert_close(inv_freq(cfg), want_inv, rtol=1e-6, atol=0)
    assert attention_factor(cfg.rope_scaling) == pytest.approx(want_factor, rel=1e-12)
    cos, sin = rope_tables(cfg)
    assert cos.shape == sin.shape == (256, cfg.head_dim)
    assert cos[0].tolist() == [pytest.approx(want_factor)] * cfg.head_dim  # cos 0 = the magnitude


def _chain_logits(rt: Runtime, ids: list[int], committed: int) -> torch.Tensor:
    """Logits of rows committed..len(ids)-1, as one verify pass of a chain after a prefill."""
    ses = rt.session(len(ids) + 1)
    ses.prefill(ids[:committed])
    rest = ids[committed:]
    return ses.verify(rest, *chain(len(rest))).logits


IDS = torch.randint(3, 128, (160,), generator=torch.Generator().manual_seed(7)).tolist()


@pytest.mark.parametrize("case", CASES)
def test_scaled_tiny_models_give_transformers_logits_past_the_original_context(case, tmp_path):
    arch, rope = CASES[case]
    rt = Runtime(load_model(make_tiny_hf(arch, tmp_path / arch, rope=rope)), "cpu", "float32", capacity=256)
    ours = _chain_logits(rt, IDS, 40)                             # positions 40..159
    with torch.inference_mode():
        ref = tiny_model(arch, rope=rope)(torch.tensor([IDS])).logits[0, 40:]
        unscaled = tiny_model(arch)(torch.tensor([IDS])).logits[0, 40:]
    assert (ours - ref).abs().max().item() < 1e-4
    # the scaling is not a no-op on these positions: ignoring it would fail by far
    assert (unscaled - ref).abs().max().item() > 100 * 1e-4


def test_yarn_gguf_reads_the_converters_keys_and_gives_transformers_logits(tmp_path):
    rope = dict(YARN, beta_fast=16.0, beta_slow=2.0)
    meta = {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 64,
            "rope.scaling.yarn_beta_fast": 16.0, "rope.scaling.yarn_beta_slow": 2.0}
    # float32 tensors, so the weights equal the HF model's exactly and only RoPE can differ
    path = make_tiny_gguf("qwen2", tmp_path / "yarn.gguf", qtype_of=lambda name, w: Q.F32,
                          metadata_overrides=meta)
    loaded = load_model(path)
    assert loaded.config.rope_scaling == _our_config("qwen2", rope, tmp_path).rope_scaling
    ours = _chain_logits(Runtime(loaded, "cpu", "float32", capacity=256), IDS, 40)
    with torch.inference_mode():
        ref = tiny_model("qwen2", rope=rope)(torch.tensor([IDS])).logits[0, 40:]
    assert (ours - ref).abs().max().item() < 1e-4


def _gguf_rope(tmp_path: Path, **meta) -> RopeScaling:
    overrides = {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0, **meta}
    return load_model(make_tiny_gguf("llama", tmp_path / "m.gguf", metadata_overrides=overrides)).config.rope_scaling


def test_yarn_gguf_defaults_attn_factor_and_log_multiplier(tmp_path):
    s = _gguf_rope(tmp_path)
    # no original_context_length: llama.cpp's n_ctx_orig_yarn falls back to context_length (256)
    assert s == RopeScaling("yarn", 4.0, original_max_position=256)
    mscale = 0.1 * math.log(4.0) + 1
    assert attention_factor(s) == pytest.approx(mscale)
    # rope.scaling.attn_factor multiplies YaRN's own magnitude (llama.cpp's rope_attn_factor)
    assert attention_factor(_gguf_rope(tmp_path, **{"rope.scaling.attn_factor": 1.25})) == \
        pytest.approx(1.25 * mscale, rel=1e-6)
    # yarn_attn_factor is transformers' attention_factor, written by convert_hf_to_gguf.py
    assert attention_factor(_gguf_rope(tmp_path, **{"rope.scaling.yarn_attn_factor": 0.75})) == \
        pytest.approx(0.75)
    # DeepSeek's yarn_log_multiplier = 0.1 * mscale_all_dim, with mscale 1
    got = attention_factor(_gguf_rope(tmp_path, **{"rope.scaling.yarn_log_multiplier": 0.05}))
    assert got == pytest.approx(mscale / (0.1 * 0.5 * math.log(4.0) + 1), rel=1e-6)


def test_unsupported_rope_variants_are_refused_by_name(tmp_path):
    folder = make_tiny_hf("llama", tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    for rope in ({"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [1.0] * 8},
                 {"rope_type": "dynamic", "factor": 2.0}, {"rope_type": "default", "partial_rotary_factor": 0.5}):
        (folder / "config.json").write_text(json.dumps(dict(config, rope_parameters=dict(rope, rope_theta=1e4))))
        word = "partial_rotary_factor=0.5" if rope["rope_type"] == "default" else f"RoPE scaling '{rope['rope_type']}'"
        with pytest.raises(ModelLoadError, match=f"{word} is not supported"):
            load_model(folder)
    with pytest.raises(ModelLoadError, match="RoPE scaling 'longrope' is not supported"):
        _gguf_rope(tmp_path, **{"rope.scaling.type": "longrope"})
    with pytest.raises(ModelLoadError, match="yarn_ext_factor = 0.5 is not supported"):
        _gguf_rope(tmp_path, **{"rope.scaling.yarn_ext_factor": 0.5})
    with pytest.raises(ModelLoadError, match="attn_factor = 2.0 with RoPE scaling 'linear'"):
        _gguf_rope(tmp_path, **{"rope.scaling.type": "linear", "rope.scaling.attn_factor": 2.0})
    with pytest.raises(ModelLoadError, match="YaRN needs beta_fast > beta_slow"):
        _gguf_rope(tmp_path, **{"rope.scaling.yarn_beta_fast": 1.0, "rope.scaling.yarn_beta_slow": 4.0})


def test_growing_the_tables_keeps_the_old_rows_and_the_old_tensors(loaded_model):
    """A session whose cache outgrows the RoPE tables makes longer ones. The positions already
    tabled keep their values bit for bit, and the old tensors stay alive: a graph captured on
    another session reads them by address (on a GPU), and a freed table's memory would be
    handed to other tensors under that graph (issue 31: a runtime that had decoded a long
    prompt gave other tokens than a fresh one)."""
    rt = Runtime(loaded_model, "cpu", "float32", capacity=64)
    m = rt.model
    cos0, sin0 = m.cos, m.sin
    L = cos0.shape[0]
    s = rt.session(L + 100)
    assert m.cos.shape[0] > L and s.capacity >= L + 100
    assert torch.equal(m.cos[:L], cos0) and torch.equal(m.sin[:L], sin0)
    assert any(c is cos0 and si is sin0 for c, si in m._retired_rope)
    # the new rows are the formula's, as a table made that long from the start has them
    fresh_cos, fresh_sin = rope_tables(rt.config, "cpu", torch.float32, length=m.cos.shape[0])
    assert torch.equal(m.cos, fresh_cos) and torch.equal(m.sin, fresh_sin)
    s.close()
