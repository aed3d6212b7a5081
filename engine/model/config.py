"""The model's shape, as a frozen dataclass every loader produces and the model consumes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from engine.errors import ModelLoadError

ARCHITECTURES = ("llama", "qwen2", "qwen3")


ROPE_SCALINGS = ("none", "linear", "llama3", "yarn")

# Sane ranges for the numbers a model file sizes things from, checked before anything is
# allocated. For scale, the largest open models: 126 layers, hidden 16,384 (53,248 in the MLP),
# 128 heads, head size 256, a 262k vocabulary, a 10M-token context.
INT_LIMITS = {
    "vocab_size": (1, 1 << 22), "hidden_size": (1, 1 << 16), "intermediate_size": (1, 1 << 18),
    "n_layers": (1, 1024), "n_heads": (1, 1024), "n_kv_heads": (1, 1024), "head_dim": (2, 1024),
    "max_context": (2, 1 << 32),
}
# RoPE base: below 1 the "frequencies" grow with the dimension; eps: a tiny positive constant.
FLOAT_LIMITS = {"rope_theta": (1.0, 1e12), "rms_eps": (0.0, 1.0)}
# RoPE scaling numbers, [lo, hi]: a context extension factor below 1 shrinks the context
# (transformers warns), real ones are 2 to 64; YaRN's betas count rotations, real 1 and 32;
# magnitudes (attention_factor, mscale) are near 1.
ROPE_LIMITS = {"factor": (1.0, 1024.0), "low_freq_factor": (1e-3, 1024.0), "high_freq_factor": (1e-3, 1024.0),
               "beta_fast": (1e-3, 1e4), "beta_slow": (1e-3, 1e4), "mscale": (-100.0, 100.0),
               "mscale_all_dim": (-100.0, 100.0), "attention_factor": (1e-3, 100.0)}


def as_int(value: Any, what: str, lo: int | None = None, hi: int | None = None) -> int:
    """A count read from a model file (`what` names it for the message): an int, or a float
    with a whole value; never a bool, a string, NaN or infinity. Raises ModelLoadError."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelLoadError(f"{what} is {_show(value)}; a whole number is needed here. "
                             "The file is corrupt or was not written for this kind of model.")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ModelLoadError(f"{what} is {value:,}, outside the sane range [{lo:,}, {hi:,}]. "
                             "The file is corrupt or not a model specscope can run.")
    return value


def as_float(value: Any, what: str) -> float:
    """A real number read from a model file: finite, never a bool or a string."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ModelLoadError(f"{what} is {_show(value)}; a finite number is needed here. "
                             "The file is corrupt.")
    return float(value)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling, computed in engine.model.rope.

    kind: "none" | "linear" | "llama3" | "yarn". `factor` is the context extension (every kind);
    low/high_freq_factor belong to llama3; beta_fast, beta_slow, mscale, mscale_all_dim,
    attention_factor and truncate to yarn, with transformers' meanings and defaults
    (attention_factor None: derived from factor, or from mscale / mscale_all_dim when both are set).
    """

    kind: str = "none"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError(f"RoPE scaling {f.name} must be finite, got {v}")
        if self.kind not in ROPE_SCALINGS:
            raise ValueError(f"unknown RoPE scaling {self.kind!r}: specscope computes {', '.join(ROPE_SCALINGS)}")
        for name, (lo, hi) in ROPE_LIMITS.items():
            v = getattr(self, name)
            if v is not None and not lo <= v <= hi:
                raise ValueError(f"RoPE scaling {name} is {v:g}, outside the sane range [{lo:g}, {hi:g}]")
        if not self.factor > 0:
            raise ValueError(f"RoPE scaling factor must be positive, got {self.factor}")
        if self.original_max_position <= 0:
            raise ValueError(f"RoPE original_max_position must be positive, got {self.original_max_position}")
        if self.kind == "llama3" and self.low_freq_factor >= self.high_freq_factor:
            raise ValueError(f"llama3 RoPE needs low_freq_factor < high_freq_factor, got "
                             f"{self.low_freq_factor} and {self.high_freq_factor}")
        if self.kind == "yarn" and not self.beta_fast > self.beta_slow > 0:
            raise ValueError(f"YaRN needs beta_fast > beta_slow > 0, got {self.beta_fast} and {self.beta_slow}")
        if self.attention_factor is not None and not self.attention_factor > 0:
            raise ValueError(f"YaRN attention_factor must be positive, got {self.attention_factor}")


@dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of a Llama-family decoder.

    Weights handed to the model use Hugging Face's layout (torch Linear [out, in], RoPE applied
    to the two halves of each head, "rotate_half"); the GGUF loader undoes llama.cpp's q/k
    permutation to get there.
    """

    arch: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rms_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    max_context: int = 4096
    tie_embeddings: bool = True
    qkv_bias: bool = False
    qk_norm: bool = False
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.arch not in ARCHITECTURES:
            raise ValueError(
                f"unknown architecture {self.arch!r}: specscope runs {', '.join(ARCHITECTURES)}"
            )
        for name, (lo, hi) in INT_LIMITS.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"model config field {name} must be an integer in [{lo}, {hi}], got {v!r}")
        for name, (lo, hi) in FLOAT_LIMITS.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo < v <= hi:
                raise ValueError(f"model config field {name} must be a number in ({lo:g}, {hi:g}], got {v!r}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.bos_id is not None and not (isinstance(self.bos_id, int) and 0 <= self.bos_id < self.vocab_size):
            raise ValueError(f"bos token id {self.bos_id!r} is not a token of the {self.vocab_size}-token vocabulary")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})"
            )


# Canonical weight names every loader produces (shapes for the config above):
#   embed                 [vocab, hidden]
#   lm_head               [vocab, hidden]          absent when tie_embeddings
#   norm                  [hidden]
#   layers.{i}.attn_norm  [hidden]
#   layers.{i}.q / k / v  [n_heads*head_dim | n_kv_heads*head_dim, hidden]
#   layers.{i}.q_bias / k_bias / v_bias            only when qkv_bias
#   layers.{i}.q_norm / k_norm  [head_dim]         only when qk_norm
#   layers.{i}.o          [hidden, n_heads*head_dim]
#   layers.{i}.mlp_norm   [hidden]
#   layers.{i}.gate / up  [intermediate, hidden]
#   layers.{i}.down       [hidden, intermediate]


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every weight the model needs, with its shape: loaders check against this."""
    h, d = cfg.hidden_size, cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {"embed": (cfg.vocab_size, h), "norm": (h,)}
    if not cfg.tie_embeddings:
        shapes["lm_head"] = (cfg.vocab_size, h)
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        shapes[p + "attn_norm"] = (h,)
        shapes[p + "q"] = (cfg.n_heads * d, h)
        shapes[p + "k"] = (cfg.n_kv_heads * d, h)
        shapes[p + "v"] = (cfg.n_kv_heads * d, h)
        if cfg.qkv_bias:
            shapes[p + "q_bias"] = (cfg.n_heads * d,)
            shapes[p + "k_bias"] = (cfg.n_kv_heads * d,)
            shapes[p + "v_bias"] = (cfg.n_kv_heads * d,)
        if cfg.qk_norm:
            shapes[p + "q_norm"] = (d,)
            shapes[p + "k_norm"] = (d,)
        shapes[p + "o"] = (h, cfg.n_heads * d)
        shapes[p + "mlp_norm"] = (h,)
        shapes[p + "gate"] = (cfg.intermediate_size, h)
        shapes[p + "up"] = (cfg.intermediate_size, h)
        shapes[p + "down"] = (h, cfg.intermediate_size)
    return shapes


def check_weight_shapes(cfg: ModelConfig, shapes: dict[str, tuple[int, ...]], source: Path,
                        file_name: Callable[[str], str]) -> None:
    """Check the canonical tensors a file offers against expected_shapes(cfg), before reading them.

    file_name maps a canonical name back to the file's own name, for the message. A tensor the
    model would silently ignore (a bias, a q/k norm) is an error too: dropping it would give a
    model that runs and talks nonsense.
    """
    expected = expected_shapes(cfg)
    for name, shape in expected.items():
        got = shapes.get(name)
        if got is None:
            raise ModelLoadError(
                f"{source}: tensor {file_name(name)} is missing; a {cfg.arch} model with this config "
                "needs it. The file is incomplete or was converted wrongly."
            )
        if tuple(got) != shape:
            raise ModelLoadError(
                f"{source}: tensor {file_name(name)} has shape {list(got)}, but the model's config "
                f"implies {list(shape)}. The file is corrupt or its metadata does not match its weights."
            )
    for name in shapes:
        if name not in expected and not (name == "lm_head" and cfg.tie_embeddings):
            raise ModelLoadError(
                f"{source}: tensor {file_name(name)} has no place in a {cfg.arch} model with this config; "
                "specscope does not run this variant."
            )
