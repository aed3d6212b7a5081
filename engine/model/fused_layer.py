"""The forward of a packed model on a GPU in ~9 launches a layer (the plain one launched ~25).

`FusedForward(model).forward(...)` computes what `Transformer.forward` computes, with the kernels
of engine.model.triton_fused between the packed matmuls (that module says what is fused and why
every verify row stays bit-identical to the one-row pass). A layer:

    h -> qkv partials (one launch per weight part: a Q4_K_M file keeps v in Q6_K in some layers)
      -> _qkv_rope_kernel (sum, bias, q/k norm, RoPE, q out, k and v into the cache)
      -> attention (layout-invariant split + combine; SDPA for prefill)
      -> o partials -> _residual_norm_kernel (x += o; h = norm(x))
      -> gate|up with the SwiGLU epilogue -> down partials -> _residual_norm_kernel

Selected by `fused_forward_for` on a GPU when every linear weight of every layer is packed in a
type the Triton kernels take; SPECSCOPE_FUSED=0 turns it off (the plain forward, for
comparisons). Imported lazily: it imports Triton.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from engine.model.attention import WindowLayout, gqa_bias, sdpa_gqa
from engine.model.cache import KVCache
from engine.weights import PackedWeight

if TYPE_CHECKING:
    from engine.model.transformer import Transformer


def fused_forward_for(model: "Transformer") -> "FusedForward | None":
    """The fused forward of `model`, or None where it does not apply (a CPU, dense weights, a
    type without a Triton kernel, no Triton, SPECSCOPE_FUSED=0)."""
    if model.device.type != "cuda" or os.environ.get("SPECSCOPE_FUSED", "1") == "0":
        return None
    try:
        import engine.model.triton_fused  # noqa: F401
        from engine.weights import triton_kernels  # noqa: F401
    except ImportError:
        return None
    return FusedForward(model) if fusable(model) else None


def fusable(model: "Transformer") -> bool:
    """Every layer's qkv is one or two packed parts split at a head boundary; o, gate|up and
    down are one packed part each, of types the Triton kernels take; head size a power of 2."""
    from engine.weights.triton_kernels import SUPPORTED_QTYPES
    cfg = model.cfg
    D = cfg.head_dim
    if D < 16 or D & (D - 1):
        return False

    def ok(lin, max_parts: int = 1) -> bool:
        parts = lin.parts
        return (1 <= len(parts) <= max_parts
                and all(isinstance(p, PackedWeight) and p.qtype in SUPPORTED_QTYPES for p in parts))

    for L in model.layers:
        if not (ok(L["qkv"], 2) and ok(L["o"]) and ok(L["gate_up"]) and ok(L["down"])):
            return False
        if L["qkv"].parts[0].shape[0] % D:
            return False
    return True


class FusedForward:
    """The fused forward over a Transformer's weights. Construction interleaves each layer's
    gate|up rows for the SwiGLU epilogue (engine.weights.triton_kernels.packed_swiglu), in
    place: from then on the model's forward must go through this object."""

    def __init__(self, model: "Transformer"):
        from engine.weights.triton_kernels import swiglu_block
        self.model = model
        for L in model.layers:
            lin = L["gate_up"]
            w = lin.parts[0]
            hb = swiglu_block(w, model.device)
            half = w.shape[0] // 2
            if half % hb:
                raise ValueError(f"gate|up of {w.shape[0]} rows does not split into blocks of {hb}")
            blocks = torch.arange(half // hb, device=w.device)[:, None] * hb
            idx = torch.arange(hb, device=w.device)[None, :]
            perm = torch.cat([blocks + idx, half + blocks + idx], dim=1).reshape(-1)
            lin.parts[0] = PackedWeight(w.qtype, w.shape,
                                        {p: t.index_select(0, perm) for p, t in w.planes.items()})
            lin.swiglu_block = hb          # the plain forward refuses a layer marked so

    def _norm(self, ws: torch.Tensor | None, x: torch.Tensor, h: torch.Tensor,
              w: torch.Tensor) -> None:
        from engine.model.triton_fused import _residual_norm_kernel
        import triton
        R, N = x.shape
        block = triton.next_power_of_2(N)
        src = ws if ws is not None else x
        _residual_norm_kernel[(R,)](
            src, x, h, w, N, src.stride(0), src.stride(1) if ws is not None else 0,
            x.stride(0), h.stride(0), self.model.cfg.rms_eps,
            S=0 if ws is None else ws.shape[0], BLOCK=block, num_warps=4 if block <= 2048 else 8)

    def _qkv_rope(self, L: dict, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor,
                  positions: torch.Tensor, slots: torch.Tensor) -> None:
        from engine.model.triton_fused import _qkv_rope_kernel
        from engine.weights.triton_kernels import packed_partials
        m, cfg = self.model, self.model.cfg
        lin = L["qkv"]
        wa = packed_partials(h, lin.parts[0])
        wb = packed_partials(h, lin.parts[1]) if len(lin.parts) > 1 else wa
        kc, vc = kv[0], kv[1]                                   # [Hkv, C, D]
        R, Hq, D = q.shape
        Hkv = kc.shape[0]
        bias = lin.bias if lin.bias is not None else h
        qn = L.get("q_norm", h)
        kn = L.get("k_norm", h)
        _qkv_rope_kernel[(R, Hq + 2 * Hkv)](
            wa, wb, bias, qn, kn, m.cos, m.sin, positions, slots, q, kc, vc,
            lin.parts[0].shape[0], wa.stride(0), wa.stride(1), wb.stride(0), wb.stride(1),
            q.stride(0), q.stride(1), kc.stride(0), kc.stride(1), m.cos.stride(0), cfg.rms_eps,
            HQ=Hq, HKV=Hkv, D=D, SA=wa.shape[0], SB=wb.shape[0],
            HAS_BIAS=lin.bias is not None, QK_NORM=bool(cfg.qk_norm), num_warps=1)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                cache: KVCache, slots: torch.Tensor, last_only: bool = False,
                layout: WindowLayout | None = None, exit_layer: int | None = None) -> torch.Tensor:
        """Transformer.forward's contract (read it there)."""
        from engine.weights.triton_kernels import packed_partials, packed_swiglu
        m, cfg = self.model, self.model.cfg
        R = tokens.shape[0]
        Hq, Hkv, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        attend = (m.verify_attention(layout)
                  if m.verify_attention is not None and layout is not None and not last_only
                  else None)
        bias = gqa_bias(mask, Hq // Hkv, m.dtype) if attend is None else None
        x = F.embedding(tokens, m.embed).contiguous()           # [R, H], updated in place
        h = torch.empty_like(x)
        q = torch.empty(R, Hq, D, dtype=x.dtype, device=x.device)
        layers = m.layers[:exit_layer]
        self._norm(None, x, h, layers[0]["attn_norm"])
        for i, L in enumerate(layers):
            self._qkv_rope(L, h, q, cache.kv[i], positions, slots)
            if attend is not None:
                a = attend(q, cache.kv[i, 0], cache.kv[i, 1]).reshape(R, Hq * D)
            else:
                a = sdpa_gqa(q, cache, i, bias)
            self._norm(packed_partials(a, L["o"].parts[0]), x, h, L["mlp_norm"])
            act = packed_swiglu(h, L["gate_up"].parts[0])
            nxt = layers[i + 1]["attn_norm"] if i + 1 < len(layers) else m.norm
            self._norm(packed_partials(act, L["down"].parts[0]), x, h, nxt)
        if last_only:
            h = h[-1:]
        return m.lm_head(h, invariant=attend is not None).float()
