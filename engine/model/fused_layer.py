"""The forward of a packed model on a GPU in ~9 launches a layer (the plain one launched ~25).

`FusedForward(model).forward(...)` computes what `Transformer.forward` computes, with the kernels
of engine.kernels.triton_fused between the packed matmuls (that module says what is fused and why
every verify row stays bit-identical to the one-row pass). A layer:

    h -> qkv partials (one launch per weight part: a Q4_K_M file keeps v in Q6_K in some layers)
      -> _qkv_rope_kernel (sum, bias, q/k norm, RoPE, q out, k and v into the cache)
      -> attention (layout-invariant split + combine; SDPA for prefill)
      -> o partials -> _residual_norm_kernel (x += o; h = norm(x))
      -> gate|up with the SwiGLU epilogue -> down partials -> _residual_norm_kernel

With SPECSCOPE_TAIL=1 (opt-in: measured exact but no faster on an H100), for a few rows (a
plain step, a small window) the residual + norm and a split gate|up's SwiGLU run in the tail of
the matmul before them (engine.kernels.triton_kernels.packed_residual_norm, packed_swiglu): ~7
launches a layer instead of ~9, each row's bits the same as the separate kernels give it.

A long prefill (at least DENSE_PREFILL_ROWS rows, every weight of a type
engine.kernels.triton_unpack takes) dequantizes each weight into a scratch matrix and runs the
vendor GEMM instead of the packed kernel, which would re-stream the weight every 64 rows; the
fused kernels around it are the same (prefill rows need no invariance: they are committed).

Selected by `fused_forward_for` on a GPU when every linear weight of every layer is packed in a
type the Triton kernels take; SPECSCOPE_FUSED=0 turns it off (the plain forward, for
comparisons). Imported lazily: it imports Triton.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from engine.model.attention import WindowLayout, gqa_bias, sdpa_gqa
from engine.model.cache import KVCache
from engine.model.layer import Layer, LayerStack
from engine.weights import PackedWeight

DENSE_PREFILL_ROWS = 32


def fused_forward_for(model: LayerStack) -> "FusedForward | None":
    """The fused forward of `model`, or None where it does not apply (a CPU, dense weights, a
    type without a Triton kernel, no Triton, SPECSCOPE_FUSED=0)."""
    if model.device.type != "cuda" or os.environ.get("SPECSCOPE_FUSED", "1") == "0":
        return None
    try:
        import engine.kernels.triton_fused  # noqa: F401
        from engine.kernels import triton_kernels  # noqa: F401
    except ImportError:
        return None
    return FusedForward(model) if fusable(model) else None


def fusable(model: LayerStack) -> bool:
    """Every layer's qkv is one or two packed parts split at a head boundary; o, gate|up and
    down are one packed part each, of types the Triton kernels take; head size a power of 2."""
    from engine.kernels.triton_kernels import SUPPORTED_QTYPES
    cfg = model.cfg
    D = cfg.head_dim
    if D < 16 or D & (D - 1):
        return False

    def ok(lin, max_parts: int = 1) -> bool:
        parts = lin.parts
        return (1 <= len(parts) <= max_parts
                and all(isinstance(p, PackedWeight) and p.qtype in SUPPORTED_QTYPES for p in parts))

    for L in model.layers:
        if not (ok(L.qkv, 2) and ok(L.o) and ok(L.gate_up) and ok(L.down)):
            return False
        if L.qkv.parts[0].shape[0] % D:
            return False
    return True


class FusedForward:
    """The fused forward over a Transformer's weights. Construction interleaves each layer's
    gate|up rows for the SwiGLU epilogue (engine.kernels.triton_kernels.packed_swiglu), in
    place: from then on the model's forward must go through this object."""

    def __init__(self, model: LayerStack):
        from engine.kernels.triton_kernels import swiglu_block
        self.model = model
        for L in model.layers:
            lin = L.gate_up
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
        # SPECSCOPE_DENSE_PREFILL=0: prefill on the packed kernels too (for comparisons)
        self.dense_prefill = (self._dense_ok()
                              and os.environ.get("SPECSCOPE_DENSE_PREFILL", "1") != "0")
        # per layer, the XP orders of gate|up's and down's inputs (None: that matmul reads x
        # as it is): the norm before gate|up and the SwiGLU before down (in gate|up's
        # epilogue; a split gate|up would need a launch to move it) write them so, and the
        # matmul skips its own copy (engine.kernels.xp_order; the same bits)
        from engine.kernels.triton_kernels import swiglu_in_epilogue
        from engine.kernels.xp_order import xp_dest
        dt, dev = model.dtype, model.device
        self.xp = [(xp_dest(L.gate_up.parts[0], dt, dev),
                    xp_dest(L.down.parts[0], dt, dev) if swiglu_in_epilogue(L.gate_up.parts[0], dev)
                    else None) for L in model.layers]

    def _norm(self, ws: torch.Tensor | None, x: torch.Tensor, h: torch.Tensor,
              w: torch.Tensor) -> None:
        from engine.kernels.triton_fused import residual_norm
        residual_norm(ws, x, h, w, self.model.cfg.rms_eps)

    def _linear_norm(self, a: torch.Tensor, w: PackedWeight, dense: bool, x: torch.Tensor,
                     h: torch.Tensor, nw: torch.Tensor, xp_in: bool = False,
                     dest: torch.Tensor | None = None) -> None:
        """x += a @ w.T; h = norm(x) * nw (with SPECSCOPE_TAIL=1, one launch for few rows).
        xp_in: a in w's XP order; dest: h written in the next matmul's (packed only)."""
        if dense:
            self._norm(self._partials(a, w, True), x, h, nw)
            return
        from engine.kernels.triton_kernels import packed_residual_norm
        packed_residual_norm(a, w, x, h, nw, self.model.cfg.rms_eps, xp_in=xp_in, dest=dest)

    @staticmethod
    def _partials(x: torch.Tensor, w: PackedWeight, dense: bool) -> torch.Tensor:
        """x @ w.T as float32 partial sums [S, R, N]: the packed kernel's split-K partials, or
        (dense) one product of the vendor GEMM with w dequantized into a scratch matrix."""
        if dense:
            from engine.kernels.triton_unpack import dequantize_dense
            W = dequantize_dense(w, torch.empty(w.shape, dtype=x.dtype, device=x.device))
            return F.linear(x, W).float().unsqueeze(0)
        from engine.kernels.triton_kernels import packed_partials
        return packed_partials(x, w)

    def _swiglu(self, h: torch.Tensor, w: PackedWeight, hb: int, dense: bool,
                xp: tuple = (None, None)) -> torch.Tensor:
        """xp: (gate|up's XP order, down's): h is in the first, the result in the second."""
        from engine.kernels.triton_kernels import packed_swiglu, swiglu_from_partials
        if not dense:
            return packed_swiglu(h, w, xp_in=xp[0] is not None, dest=xp[1])
        out = torch.empty(h.shape[0], w.shape[0] // 2, dtype=h.dtype, device=h.device)
        return swiglu_from_partials(self._partials(h, w, True), hb, out)

    def _dense_ok(self) -> bool:
        from engine.kernels.triton_unpack import DENSE_TYPES
        return all(p.qtype in DENSE_TYPES for L in self.model.layers
                   for lin in L.linears() for p in lin.parts)

    def _qkv_rope(self, L: Layer, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor,
                  positions: torch.Tensor, slots: torch.Tensor, dense: bool) -> None:
        from engine.kernels.triton_fused import qkv_rope
        m = self.model
        lin = L.qkv
        wa = self._partials(h, lin.parts[0], dense)
        wb = self._partials(h, lin.parts[1], dense) if len(lin.parts) > 1 else wa
        qkv_rope(wa, wb, lin.parts[0].shape[0], lin.bias, L.q_norm, L.k_norm,
                 m.cos, m.sin, positions, slots, q, kv[0], kv[1], m.cfg.rms_eps)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                cache: KVCache, slots: torch.Tensor, last_only: bool = False,
                layout: WindowLayout | None = None, exit_layer: int | None = None) -> torch.Tensor:
        """Transformer.forward's contract (read it there)."""
        m, cfg = self.model, self.model.cfg
        R = tokens.shape[0]
        dense = last_only and R >= DENSE_PREFILL_ROWS and self.dense_prefill
        Hq, Hkv, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        attend = (m.verify_attention(layout)
                  if m.verify_attention is not None and layout is not None and not last_only
                  else None)
        bias = gqa_bias(mask, Hq // Hkv, m.dtype) if attend is None else None
        x = F.embedding(tokens, m.embed).contiguous()           # [R, H], updated in place
        h = torch.empty_like(x)
        q = torch.empty(R, Hq, D, dtype=x.dtype, device=x.device)
        layers = m.layers[:exit_layer]
        self._norm(None, x, h, layers[0].attn_norm)
        for i, L in enumerate(layers):
            self._qkv_rope(L, h, q, cache.kv[i], positions, slots, dense)
            if attend is not None:
                a = attend(q, cache.kv[i, 0], cache.kv[i, 1]).reshape(R, Hq * D)
            else:
                a = sdpa_gqa(q, cache, i, bias)
            xp = self.xp[i] if not dense else (None, None)
            self._linear_norm(a, L.o.parts[0], dense, x, h, L.mlp_norm, dest=xp[0])
            act = self._swiglu(h, L.gate_up.parts[0], L.gate_up.swiglu_block, dense, xp)
            nxt = layers[i + 1].attn_norm if i + 1 < len(layers) else m.norm
            self._linear_norm(act, L.down.parts[0], dense, x, h, nxt, xp_in=xp[1] is not None)
        if last_only:
            h = h[-1:]
        return m.lm_head(h, invariant=attend is not None).float()
