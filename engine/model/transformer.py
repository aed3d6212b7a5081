"""The transformer forward: Llama / Qwen2 / Qwen3 in plain torch.

`forward(tokens, positions, mask, cache, slots)`: the R rows of one call may form a tree. Each
row has its own position and an explicit boolean mask over the cache's first `span` slots (the
committed prefix and this window's rows). Row r's keys and values are written to cache slot
slots[r] before attention, so a row can attend to itself and its ancestors in the same call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.model.cache import KVCache
from engine.model.config import ModelConfig
from engine.model.rope import rope_tables


class Transformer:
    """Holds the weights (fused where it saves passes over memory) and the RoPE tables."""

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor],
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
        self.cfg = cfg
        self.device = torch.device(device)
        self.dtype = dtype

        def w(name: str) -> torch.Tensor:
            return weights[name].to(device=self.device, dtype=dtype).contiguous()

        self.embed = w("embed")                                   # [V, H]
        self.lm_head = self.embed if cfg.tie_embeddings else w("lm_head")
        self.norm = w("norm")
        self.layers = []
        for i in range(cfg.n_layers):
            p = f"layers.{i}."
            layer = {
                "attn_norm": w(p + "attn_norm"),
                # q, k, v fused: [(Hq + 2 Hkv) * D, H]
                "qkv": torch.cat([w(p + "q"), w(p + "k"), w(p + "v")]).contiguous(),
                "o": w(p + "o"),
                "mlp_norm": w(p + "mlp_norm"),
                # gate and up fused: [2 I, H]
                "gate_up": torch.cat([w(p + "gate"), w(p + "up")]).contiguous(),
                "down": w(p + "down"),
            }
            if cfg.qkv_bias:
                layer["qkv_bias"] = torch.cat([w(p + "q_bias"), w(p + "k_bias"), w(p + "v_bias")])
            if cfg.qk_norm:
                layer["q_norm"] = w(p + "q_norm")
                layer["k_norm"] = w(p + "k_norm")
            self.layers.append(layer)
        self.cos, self.sin = rope_tables(cfg, self.device, dtype)   # [C, D] each, scaled

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
            qkv = F.linear(h, L["qkv"], L.get("qkv_bias"))        # [R, (Hq+2Hkv)D]
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
            x = torch.addmm(x, a, L["o"].t())                     # x + a @ o^T
            h = self._rms(x, L["mlp_norm"])
            gate, up = F.linear(h, L["gate_up"]).chunk(2, dim=-1)
            x = torch.addmm(x, F.silu(gate) * up, L["down"].t())
        if last_only:
            x = x[-1:]
        return F.linear(self._rms(x, self.norm), self.lm_head).float()
