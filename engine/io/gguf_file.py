"""GGUF models: the config from metadata, canonical weight names, and a TensorSource per weight.

The header is read by engine.io.gguf_header. Weights are not read here: every tensor becomes a
TensorSource over the memory-mapped file, and the model builds each one on its device
(dequantized by engine.weights, bit-identical to gguf.quants.dequantize, or kept packed) one at
a time.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from gguf import GGMLQuantizationType, LlamaFileType

from engine.model.config import (ARCHITECTURES, INT_LIMITS, ROPE_LIMITS, ModelConfig, RopeScaling, as_float,
                                 as_int, check_weight_shapes)
from engine.errors import ModelLoadError
from engine.io.names import NameMap
from engine.io.gguf_header import GGUFFile, TensorInfo, read_gguf, type_name
from engine.io.tokenizer import Tokenizer
from engine.model.rope import llama3_divisors, yarn_attention_factor
from engine.model.source import TensorSource
from engine.weights.dequant import SUPPORTED_TYPES as WEIGHT_TYPES

Q = GGMLQuantizationType
# Tensor types we can read: engine.weights dequantizes all but F64, which is converted here.
SUPPORTED_TYPES = frozenset([Q.F64] + [Q[name] for name in WEIGHT_TYPES])


def tensor_source(gf: GGUFFile, info: TensorInfo, unpermute_heads: int = 0) -> TensorSource:
    """The tensor as a TensorSource over the mapped file (checked: type known, bytes present)."""
    check_tensor_data(gf, info)
    rows = math.prod(info.shape[:-1])
    qtype = type_name(info.qtype)

    def read() -> torch.Tensor:
        raw = gf.data[info.offset:info.offset + info.n_bytes].reshape(rows, -1)
        return torch.from_numpy(raw)

    if info.qtype == Q.F64:     # rare (some converters' norms): narrowed to F32 here
        def read_f64() -> torch.Tensor:
            return torch.from_numpy(read().numpy().view(np.float64).astype(np.float32)).view(torch.uint8)
        return TensorSource(info.name, info.shape, "F32", info.n_bytes // 2, read_f64, unpermute_heads)
    return TensorSource(info.name, info.shape, qtype, info.n_bytes, read, unpermute_heads)


def dequantize(gf: GGUFFile, info: TensorInfo) -> torch.Tensor:
    """One tensor as float32 [info.shape], read from the mapped file."""
    return tensor_source(gf, info).dense()


# ---------------------------------------------------------------- names and config

_GLOBAL_NAMES = {"token_embd.weight": "embed", "output.weight": "lm_head", "output_norm.weight": "norm"}
_LAYER_NAMES = {
    "attn_norm.weight": "attn_norm",
    "attn_q.weight": "q", "attn_k.weight": "k", "attn_v.weight": "v",
    "attn_q.bias": "q_bias", "attn_k.bias": "k_bias", "attn_v.bias": "v_bias",
    "attn_q_norm.weight": "q_norm", "attn_k_norm.weight": "k_norm",
    "attn_output.weight": "o",
    "ffn_norm.weight": "mlp_norm",
    "ffn_gate.weight": "gate", "ffn_up.weight": "up", "ffn_down.weight": "down",
}


GGUF_NAMES = NameMap(_GLOBAL_NAMES, "blk.", _LAYER_NAMES)
gguf_name = GGUF_NAMES.file_name          # 'layers.3.q' -> 'blk.3.attn_q.weight'
canonical_name = GGUF_NAMES.canonical     # 'blk.3.attn_q.weight' -> 'layers.3.q' (None: unused)


# the ModelConfig field each `{arch}.` count becomes (its INT_LIMITS range)
_FIELDS = {"embedding_length": "hidden_size", "attention.head_count": "n_heads",
           "attention.head_count_kv": "n_kv_heads", "attention.key_length": "head_dim",
           "attention.value_length": "head_dim", "rope.dimension_count": "head_dim",
           "vocab_size": "vocab_size", "feed_forward_length": "intermediate_size",
           "block_count": "n_layers", "context_length": "max_context"}


def config_from_metadata(gf: GGUFFile, tokenizer: Tokenizer) -> ModelConfig:
    md, path = gf.metadata, gf.path
    arch = md.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ModelLoadError(
            f"{path}: architecture {arch!r} is not supported; specscope runs {', '.join(ARCHITECTURES)} "
            "models (Llama, SmolLM, Qwen2/2.5, Qwen3). Pick a GGUF of one of those."
        )
    keys = _ArchKeys(md, path, arch)
    count, real = keys.count, keys.real
    hidden = count("embedding_length", required=True)
    n_heads = count("attention.head_count", required=True)
    head_dim = count("attention.key_length") or hidden // n_heads
    if count("attention.value_length") not in (None, head_dim):
        raise ModelLoadError(f"{path}: key and value head sizes differ; specscope does not run such models.")
    rope_dims = count("rope.dimension_count")
    if rope_dims not in (None, head_dim):
        raise ModelLoadError(f"{path}: RoPE covers {rope_dims} of {head_dim} head dimensions; "
                             "partial rotary embeddings are not supported.")
    theta = real("rope.freq_base", 10000.0)
    embd = gf.tensors.get("token_embd.weight")
    tokens = md.get("tokenizer.ggml.tokens")
    vocab = count("vocab_size") or (len(tokens) if isinstance(tokens, list) else 0) or (embd.shape[0] if embd else 0)
    try:
        return ModelConfig(
            arch=arch,
            vocab_size=as_int(vocab, f"{path}: the vocabulary size", *INT_LIMITS["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=count("feed_forward_length", required=True),
            n_layers=count("block_count", required=True),
            n_heads=n_heads,
            n_kv_heads=count("attention.head_count_kv") or n_heads,
            head_dim=head_dim,
            rms_eps=real("attention.layer_norm_rms_epsilon", 1e-6),
            rope_theta=theta,
            rope_scaling=_rope_scaling(gf, arch, theta, head_dim),
            max_context=count("context_length", 4096),
            tie_embeddings="output.weight" not in gf.tensors,
            qkv_bias=arch == "qwen2" or "blk.0.attn_q.bias" in gf.tensors,
            qk_norm=arch == "qwen3" or "blk.0.attn_q_norm.weight" in gf.tensors,
            bos_id=tokenizer.bos_id,
            eos_ids=tokenizer.eos_ids,
        )
    except ValueError as e:
        raise ModelLoadError(f"{path}: inconsistent model metadata: {e}") from e


class _ArchKeys:
    """The `{arch}.` metadata keys of one file, read as single numbers (a list is refused)."""

    def __init__(self, md: dict[str, Any], path: Path, arch: str) -> None:
        self.md, self.path, self.arch = md, path, arch

    def get(self, key: str, default: Any = None, required: bool = False) -> Any:
        path, arch = self.path, self.arch
        v = self.md.get(f"{arch}.{key}", default)
        if required and v is None:
            raise ModelLoadError(f"{path}: GGUF metadata lacks {arch}.{key}; the file is incomplete. "
                                 "Re-convert it with a current llama.cpp.")
        if isinstance(v, list):
            raise ModelLoadError(f"{path}: {arch}.{key} is a list; specscope needs one number here "
                                 "(per-layer values are not supported).")
        return v

    def count(self, key: str, default: Any = None, required: bool = False) -> int | None:
        v = self.get(key, default, required)
        if v is None:
            return None
        lo, hi = INT_LIMITS[_FIELDS.get(key, "hidden_size")]
        return as_int(v, f"{self.path}: {self.arch}.{key}", lo, hi)

    def real(self, key: str, default: float) -> float:
        return as_float(self.get(key, default), f"{self.path}: {self.arch}.{key}")


def _rope_scaling(gf: GGUFFile, arch: str, theta: float, head_dim: int) -> RopeScaling:
    """The `{arch}.rope.scaling.*` keys (gguf.constants.Keys.Rope) as a RopeScaling, or a refusal."""
    md, path = gf.metadata, gf.path

    def num(key: str, default: float | None = None) -> float | None:
        v = md.get(f"{arch}.rope.scaling.{key}", default)
        return None if v is None else as_float(v, f"{path}: {arch}.rope.scaling.{key}")

    factor = float(num("factor", 1.0))
    # llama.cpp reads a factor without a type as linear scaling (llama-model.cpp)
    kind = md.get(f"{arch}.rope.scaling.type", "none" if factor == 1.0 else "linear")
    lo, hi = ROPE_LIMITS["factor"]
    if not lo <= factor <= hi:      # 0, negative or 1e30: refused whatever the type says
        raise ModelLoadError(f"{path}: {arch}.rope.scaling.factor is {factor:g}, outside the sane range "
                             f"[{lo:g}, {hi:g}]. The file is corrupt.")
    original = num("original_context_length", 0) or 0
    original = as_int(original, f"{path}: {arch}.rope.scaling.original_context_length",
                      0, INT_LIMITS["max_context"][1])
    # llama.cpp multiplies cos/sin by rope.scaling.attn_factor on top of YaRN's own factor
    # (llama-context.cpp: `cparams.yarn_attn_factor *= hparams.rope_attn_factor`)
    attn_factor = float(num("attn_factor", 1.0))
    if "rope_freqs.weight" in gf.tensors:
        # Llama 3.1+: the converter stores the llama3 frequency divisors instead of their parameters.
        s = _llama3_from_freqs(gf, theta, head_dim, original)
    elif kind not in ("none", None, "linear", "yarn"):
        raise ModelLoadError(f"{path}: RoPE scaling {str(kind)[:40]!r} is not supported (linear, yarn and llama3 "
                             "are).")
    elif kind in ("none", None) or factor == 1.0:
        s = RopeScaling()
    elif kind == "linear":
        s = RopeScaling(kind="linear", factor=factor)
    elif kind == "yarn":
        # llama.cpp's n_ctx_orig_yarn falls back to the training context, as transformers'
        # original_max_position_embeddings falls back to max_position_embeddings
        context = md.get(f"{arch}.context_length")
        s = _yarn(gf, arch, num, factor, original or as_int(context or 4096, f"{path}: {arch}.context_length",
                                                            *INT_LIMITS["max_context"]))
    if attn_factor != 1.0:
        if s.kind != "yarn":
            raise ModelLoadError(f"{path}: {arch}.rope.scaling.attn_factor = {attn_factor} with RoPE scaling "
                                 f"{s.kind!r} is not supported (only with yarn).")
        s = replace(s, attention_factor=yarn_attention_factor(s) * attn_factor)
    return s


def _yarn(gf: GGUFFile, arch: str, num: Callable[..., float | None], factor: float,
          original: int) -> RopeScaling:
    """YaRN from the keys convert_hf_to_gguf.py writes (yarn_beta_fast / yarn_beta_slow; HF's
    attention_factor as yarn_attn_factor; yarn_ext_factor) and DeepSeek's yarn_log_multiplier,
    0.1 * mscale_all_dim, which llama.cpp's llama-context.cpp pairs with mscale 1."""
    ext = num("yarn_ext_factor")
    if ext is not None and ext >= 0 and ext != 1.0:      # negative: unset, llama.cpp's default 1
        raise ModelLoadError(f"{gf.path}: {arch}.rope.scaling.yarn_ext_factor = {ext} is not supported "
                             "(only YaRN's own ramp, 1).")
    log_mul = num("yarn_log_multiplier")
    return RopeScaling(
        kind="yarn", factor=factor, original_max_position=original,
        beta_fast=float(num("yarn_beta_fast") or 32.0), beta_slow=float(num("yarn_beta_slow") or 1.0),
        mscale=1.0 if log_mul else None, mscale_all_dim=log_mul / 0.1 if log_mul else None,
        attention_factor=num("yarn_attn_factor"),
    )


def _llama3_from_freqs(gf: GGUFFile, theta: float, head_dim: int, original: int) -> RopeScaling:
    info = gf.tensors["rope_freqs.weight"]
    check_tensor_data(gf, info)
    divisors = dequantize(gf, info).double()
    if divisors.shape != (head_dim // 2,):
        raise ModelLoadError(f"{gf.path}: rope_freqs.weight has shape {tuple(divisors.shape)}, "
                             f"expected ({head_dim // 2},).")
    if torch.all(divisors == 1):
        return RopeScaling()
    s = RopeScaling(kind="llama3", factor=float(divisors.max()), original_max_position=original or 8192)
    if not torch.allclose(llama3_divisors(s, theta, head_dim), divisors, rtol=1e-4):
        raise ModelLoadError(f"{gf.path}: rope_freqs.weight does not match llama3 RoPE scaling with "
                             "low/high frequency factors 1 and 4; this RoPE variant is not supported.")
    return s


# ---------------------------------------------------------------- weights

def check_tensor_data(gf: GGUFFile, info: TensorInfo) -> None:
    if info.qtype not in SUPPORTED_TYPES:
        raise ModelLoadError(
            f"{gf.path}: tensor {info.name} is stored as {type_name(info.qtype)}, which specscope does not "
            f"dequantize (supported: {', '.join(sorted(Q(t).name for t in SUPPORTED_TYPES))}). "
            "Use a GGUF quantized to one of those, e.g. Q4_K_M, Q8_0 or F16."
        )
    if info.n_bytes < 0:
        raise ModelLoadError(f"{gf.path} is corrupt: tensor {info.name} has rows of {info.shape[-1]} values, "
                             f"not a whole number of {type_name(info.qtype)} blocks. Download it again.")
    size = gf.data.shape[0]
    if info.offset + info.n_bytes > size:
        raise ModelLoadError(
            f"{gf.path} is truncated: tensor {info.name} needs bytes up to {info.offset + info.n_bytes:,} "
            f"but the file has {size:,}. Download it again."
        )


def file_type(gf: GGUFFile) -> str | None:
    """llama.cpp's name for the file's quantization mix (e.g. "Q4_K_M"), if the file says."""
    ft = gf.metadata.get("general.file_type")
    try:
        return LlamaFileType(int(ft)).name.removeprefix("MOSTLY_") if ft is not None else None
    except (ValueError, TypeError, OverflowError):
        return None


def load_gguf(path: Path, progress: Callable[[str, float], None]
              ) -> tuple[ModelConfig, dict[str, TensorSource], Tokenizer, str | None]:
    progress("reading GGUF header", 0.0)
    gf = read_gguf(path)
    progress("building tokenizer", 0.05)
    tokenizer = Tokenizer.from_gguf_fields(gf.metadata, source=str(path))
    cfg = config_from_metadata(gf, tokenizer)

    wanted: dict[str, TensorInfo] = {}
    for name, info in gf.tensors.items():
        canon = canonical_name(name)
        if canon is not None:
            wanted[canon] = info
    for info in wanted.values():     # an unsupported type is named as such, before any shape
        check_tensor_data(gf, info)
    check_weight_shapes(cfg, {k: v.shape for k, v in wanted.items()}, path, gguf_name)
    sources: dict[str, TensorSource] = {}
    for canon, info in wanted.items():
        heads = 0
        if cfg.arch == "llama" and canon.endswith((".q", ".q_bias")):
            heads = cfg.n_heads
        elif cfg.arch == "llama" and canon.endswith((".k", ".k_bias")):
            heads = cfg.n_kv_heads
        sources[canon] = tensor_source(gf, info, heads)
    progress("header read", 1.0)
    return cfg, sources, tokenizer, file_type(gf)
