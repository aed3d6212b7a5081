"""KV cache: a committed prefix plus scratch rows for the current window.

Layout: one tensor `kv` [n_layers, 2, n_kv_heads, capacity, head_dim], preallocated to the
context length, so that committing a tree's accepted branch is two ops for all layers at once.

    slots [0, length)              committed tokens (the prompt and everything emitted, except the
                                   window's root, whose keys are computed as row 0 of the window)
    slots [length, length + rows)  this window's rows, written by the forward pass

The cache owns `length`: it moves only through `advance` (a prefill chunk), `commit` (a
window's accepted rows), `truncate` and `reset`. A pass at another length (a draft or timing
pass) is given that length explicitly (engine.model.runtime.Session.scratch).
"""

from __future__ import annotations

import torch

from engine.model.config import ModelConfig
from engine.errors import ParameterError


class KVCache:
    def __init__(self, cfg: ModelConfig, capacity: int, device: torch.device | str, dtype: torch.dtype):
        if capacity < 2:
            raise ParameterError(f"KV cache capacity must be at least 2 tokens, got {capacity}")
        self.capacity = capacity
        # kv: [L, 2, H_kv, C, D]
        self.kv = torch.zeros(cfg.n_layers, 2, cfg.n_kv_heads, capacity, cfg.head_dim,
                              device=device, dtype=dtype)
        self._length = 0

    @property
    def length(self) -> int:
        """Committed tokens: slots [0, length)."""
        return self._length

    def reset(self) -> None:
        self._length = 0

    def advance(self, n: int) -> None:
        """The forward pass wrote n more committed tokens at slots [length, length + n)."""
        if n < 0 or self._length + n > self.capacity:
            raise ParameterError(f"cannot advance a cache of {self._length}/{self.capacity} "
                                 f"tokens by {n}")
        self._length += n

    def room(self) -> int:
        """Rows a window may still write after the committed prefix."""
        return self.capacity - self.length

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
        # k, v: [H_kv, R, D]; slots: [R] long
        self.kv[layer, 0].index_copy_(1, slots, k)
        self.kv[layer, 1].index_copy_(1, slots, v)

    def keys_values(self, layer: int, span: int) -> tuple[torch.Tensor, torch.Tensor]:
        # -> k, v: [1, H_kv, span, D]
        return self.kv[layer, 0, :, :span].unsqueeze(0), self.kv[layer, 1, :, :span].unsqueeze(0)

    def commit(self, accepted_rows: list[int]) -> None:
        """Keep the window rows `accepted_rows` (indices from the window start, in order) as the
        next committed tokens; forget the other scratch rows.

        Row 0 (the window's root) is normally the first accepted row. A chain 0, 1, ..., k-1 is
        already in place; a tree branch is gathered down into a contiguous prefix.
        """
        n = len(accepted_rows)
        if n == 0:
            return
        start = self._length
        if start + max(accepted_rows) >= self.capacity:
            raise ParameterError("commit past the end of the KV cache")
        if accepted_rows != list(range(n)):
            src = torch.tensor(accepted_rows, device=self.kv.device) + start
            moved = self.kv.index_select(3, src)            # [L, 2, H_kv, n, D]
            self.kv[:, :, :, start:start + n] = moved
        self._length = start + n

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self._length:
            raise ParameterError(f"cannot truncate a cache of {self._length} tokens to {length}")
        self._length = length
