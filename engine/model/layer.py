"""One transformer layer's weights, and what the fused forward reads of a model.

Both the plain forward (engine.model.transformer) and the fused one (engine.model.fused_layer)
walk the same layers; keeping the layer's type here lets each import it without importing the
other (the fused forward used to name the Transformer, which imports it)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, Iterator, Protocol

import torch

from engine.model.config import ModelConfig
from engine.model.linear import Linear

LINEAR_NAMES = ("qkv", "o", "gate_up", "down")


@dataclass(frozen=True)
class Layer:
    """q, k, v fused into `qkv` [(Hq + 2 Hkv) * D, H] and gate, up into `gate_up` [2 I, H];
    `q_norm` / `k_norm` only on models with per-head q/k norms (Qwen3). Frozen: the fused
    forward rewrites a Linear's parts in place, never which Linear a layer holds.

    Reading by name (`layer["qkv"]`, `get`, `values`) is kept for the bench scripts and tests
    that walk layers generically."""

    attn_norm: torch.Tensor
    qkv: Linear
    o: Linear
    mlp_norm: torch.Tensor
    gate_up: Linear
    down: Linear
    q_norm: torch.Tensor | None = None
    k_norm: torch.Tensor | None = None

    def linears(self) -> tuple[Linear, ...]:
        return tuple(getattr(self, k) for k in LINEAR_NAMES)

    def __getitem__(self, name: str):
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def get(self, name: str, default=None):
        if name not in {f.name for f in fields(self)}:
            return default
        value = getattr(self, name)
        return default if value is None else value

    def values(self) -> Iterator[torch.Tensor | Linear]:
        """The layer's weights (absent norms left out), in the order the dict had them."""
        for name in ("attn_norm", "qkv", "q_norm", "k_norm", "o", "mlp_norm", "gate_up", "down"):
            value = getattr(self, name)
            if value is not None:
                yield value


class LayerStack(Protocol):
    """What the fused forward reads of a model (engine.model.transformer.Transformer is one)."""

    cfg: ModelConfig
    device: torch.device
    dtype: torch.dtype
    layers: list[Layer]
    embed: torch.Tensor
    norm: torch.Tensor
    lm_head: Linear
    cos: torch.Tensor
    sin: torch.Tensor
    verify_attention: Callable | None
