"""The transformer forward: Llama / Qwen2 / Qwen3 in plain torch.

`forward(tokens, positions, mask, cache, slots)`: the R rows of one call may form a tree. Each
row has its own position and an explicit boolean mask over the cache's first `span` slots (the
committed prefix and this window's rows). Row r's keys and values are written to cache slot
slots[r] before attention, so a row can attend to itself and its ancestors in the same call.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from engine.model.cache import KVCache
from engine.model.linear import Linear
from engine.model.source import TensorSource
from engine.weights import PackedWeight
from engine.model.config import ModelConfig
from engine.model.rope import rope_tables


class Transformer:
    """Holds the weights (fused where it saves passes over memory) and the RoPE tables.

    `weights` maps canonical names to TensorSources; each is built on the device in its final
    form, one at a time. With `packed`, linear weights stored in a packed quantization
    (engine.weights.PACKED_TYPES) stay in it and are multiplied by engine.weights' kernels;
    everything else (norms, embeddings, other types) is dequantized to `dtype`.
    """

    def __init__(self, cfg: ModelConfig, weights: dict[str, TensorSource],
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 packed: bool = False, progress: Callable[[str, float], None] | None = None):
        self.cfg = cfg
        self.device = torch.device(device)
        self.dtype = dtype
        names = [n for n in weights if not (cfg.tie_embeddings and n == "lm_head")]
        self.file_types = sorted({weights[n].qtype for n in names})
        done = [0]
        every = max(1, len(names) // 100)

        def step() -> None:
            done[0] += 1
            if progress is not None and done[0] % every == 0:
                progress("placing weights on the device", done[0] / len(names))

        def w(name: str) -> torch.Tensor:
            t = weights[name].dense(self.device, dtype)
            step()
            return t

        def lin(name: str) -> torch.Tensor | PackedWeight:
            src = weights[name]
            if packed and src.packable:
                step()
                return src.packed(self.device)
            return w(name)

        self.embed = w("embed")                                   # [V, H]
        self.lm_head = Linear([self.embed] if cfg.tie_embeddings else [lin("lm_head")])
        self.norm = w("norm")
        self.layers = []
        for i in range(cfg.n_layers):
            p = f"layers.{i}."
            layer = {"attn_norm": w(p + "attn_norm")}
            bias = torch.cat([w(p + "q_bias"), w(p + "k_bias"), w(p + "v_bias")]) if cfg.qkv_bias else None
            # q, k, v fused: [(Hq + 2 Hkv) * D, H]
            layer["qkv"] = Linear([lin(p + "q"), lin(p + "k"), lin(p + "v")], bias)
            if cfg.qk_norm:
                layer["q_norm"] = w(p + "q_norm")
                layer["k_norm"] = w(p + "k_norm")
            layer["o"] = Linear([lin(p + "o")])
            layer["mlp_norm"] = w(p + "mlp_norm")
            # gate and up fused: [2 I, H]
            layer["gate_up"] = Linear([lin(p + "gate"), lin(p + "up")])
            layer["down"] = Linear([lin(p + "down")])
            self.layers.append(layer)
        self.cos, self.sin = rope_tables(cfg, self.device, dtype)   # [C, D] each, scaled

    def weights_summary(self) -> dict:
        """Bytes of every weight on the device, and the storage types of the weights in use."""
        seen: dict[int, int] = {}
        packed_types: set[str] = set()
        file_types: set[str] = set(self.file_types)

        def add(t: torch.Tensor | None) -> None:
            if t is not None:
                seen[t.data_ptr()] = t.numel() * t.element_size()

        add(self.embed)
        add(self.norm)
        for L in self.layers:
            for v in L.values():
                if isinstance(v, Linear):
                    for part in v.parts:
                        if isinstance(part, PackedWeight):
                            packed_types.add(part.qtype)
                            for plane in part.planes.values():
                                add(plane)
                        else:
                            add(part)
                    add(v.bias)
                else:
                    add(v)
        for part in self.lm_head.parts:
            if isinstance(part, PackedWeight):
                packed_types.add(part.qtype)
                for plane in part.planes.values():
                    add(plane)
            else:
                add(part)
        return {"bytes": sum(seen.values()), "packed_types": sorted(packed_types),
                "file_types": sorted(file_types)}

    def new_cache(self, capacity: int) -> KVCache:
        return KVCache(self.cfg, min(capacity, self.cfg.max_context), self.device, self.dtype)

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # one fused kernel where torch has one (it accumulates in float32 for half types)
        return F.rms_norm(x, x.shape[-1:], weight, eps=self.cfg.rms_eps)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        # x: [R, H, D]; cos/sin: [R, 1, D] (rotate_half convention)
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rot * sin

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                cache: KVCache, slots: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """tokens, positions, slots: [R] long; mask: [R, S] bool (True = attend) over cache slots
        [0, S). Returns logits [R, V] (or [1, V] for the last row when last_only).

        On a GPU every kernel launch costs microseconds whatever its size, and a decode pass of a
        small model is almost all launches, so the layer is written to launch few: fused RMSNorm,
        one RoPE over q and k together, residual adds folded into addmm, no key copies for GQA.
        """
        cfg = self.cfg
        R, S = mask.shape
        Hq, Hkv, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        G = Hq // Hkv
        x = F.embedding(tokens, self.embed)                       # [R, H]
        cos = self.cos[positions].unsqueeze(1)                    # [R, 1, D]
        sin = self.sin[positions].unsqueeze(1)
        # Grouped-query attention without copying keys: the G query heads that share a kv head
        # become G*R rows of one attention "head" (head h uses kv head h // G), so the mask
        # repeats G times along the rows. One additive mask serves every layer.
        bias = torch.zeros(G * R, S, dtype=x.dtype, device=x.device)
        bias.masked_fill_(~mask.repeat(G, 1), float("-inf"))
        bias = bias.view(1, 1, G * R, S)
        for i, L in enumerate(self.layers):
            h = self._rms(x, L["attn_norm"])
            qkv = L["qkv"](h)                                     # [R, (Hq+2Hkv)D]
            qk = qkv[:, :(Hq + Hkv) * D].view(R, Hq + Hkv, D)
            v = qkv[:, (Hq + Hkv) * D:].view(R, Hkv, D)
            if cfg.qk_norm:
                qk = torch.cat([self._rms(qk[:, :Hq], L["q_norm"]),
                                self._rms(qk[:, Hq:], L["k_norm"])], dim=1)
            qk = self._rotate(qk, cos, sin)                       # [R, Hq+Hkv, D]
            k = qk[:, Hq:].transpose(0, 1)                        # [Hkv, R, D]
            cache.write(i, k, v.transpose(0, 1), slots)
            kc, vc = cache.keys_values(i, S)                      # [1, Hkv, S, D]
            # [R, Hq, D] -> [1, Hkv, G*R, D]: row g*R + r of kv head j is query head j*G + g
            qg = qk[:, :Hq].transpose(0, 1).reshape(1, Hkv, G * R, D)
            a = F.scaled_dot_product_attention(qg, kc, vc, attn_mask=bias)  # [1, Hkv, G*R, D]
            a = a.reshape(Hq, R, D).transpose(0, 1).reshape(R, Hq * D)
            x = L["o"](a, residual=x)                             # x + a @ o^T
            h = self._rms(x, L["mlp_norm"])
            gate, up = L["gate_up"](h).chunk(2, dim=-1)
            x = L["down"](F.silu(gate) * up, residual=x)
        if last_only:
            x = x[-1:]
        return self.lm_head(self._rms(x, self.norm)).float()
