"""``packed_linear(x, w)``: y = x @ W.T for a PackedWeight W [N, K], without a full float copy of W.

Dispatch: a CUDA ``x`` goes to ``engine.weights.triton_kernels.packed_matmul(x, w)`` when that
module imports (Triton present); otherwise, and on CPU, ``packed_linear_torch``.

``packed_linear_torch`` dequantizes a tile of output features at a time (about
``TILE_VALUES`` weights, float32, bit-identical to gguf) and multiplies in float32.

Row invariance (row r of an M-row call == the 1-row call on x[r:r+1], bit for bit): BLAS
sgemm picks different kernels, hence different summation orders, for different M (MKL here:
M=1 is a GEMV, and M=2, 3, 4.. differ again). So the torch path never hands BLAS a
shape that depends on M: x is zero-padded to a multiple of ``ROW_BLOCK`` rows, and every
matmul call is one ``[ROW_BLOCK, K] @ [K, n_tile]`` product, whose shape depends only on the
weight. Each block is a fresh, 64-byte-aligned buffer (alignment can steer BLAS too).
"""

from __future__ import annotations

import torch

from .packed import PACKED_TYPES, PackedWeight, dequantize_packed

__all__ = ["PACKED_TYPES", "packed_linear", "packed_linear_torch", "dequantized_size",
           "ROW_BLOCK", "TILE_VALUES"]

ROW_BLOCK = 8          # rows per BLAS call (fixed, see module doc)
TILE_VALUES = 1 << 20  # weights dequantized per tile (4 MiB of float32)

_ACCEPTED = (torch.float32, torch.bfloat16, torch.float16)

_triton_mod = None       # None: not tried yet; False: unavailable; else the module


def _triton_kernels():
    """engine.weights.triton_kernels, or None when it (or triton) is not installed."""
    global _triton_mod
    if _triton_mod is None:
        try:
            from . import triton_kernels as mod
        except ImportError as e:
            missing = e.name or ""
            if missing == "triton" or missing.startswith("triton.") or missing.endswith("triton_kernels"):
                mod = False
            else:
                raise
        _triton_mod = mod
    return _triton_mod or None


def dequantized_size(w: PackedWeight, dtype: torch.dtype = torch.float32) -> int:
    """Bytes the weight would take dequantized to ``dtype`` (vs ``w.nbytes`` packed)."""
    n, k = w.shape
    return n * k * torch.empty((), dtype=dtype).element_size()


def tile_rows(k: int, tile_values: int = TILE_VALUES) -> int:
    """Output features per dequantized tile (a multiple of 8 when K allows)."""
    nt = max(1, tile_values // k)
    return nt - nt % 8 if nt >= 16 else nt


def _check(x: torch.Tensor, w: PackedWeight) -> None:
    if x.dtype not in _ACCEPTED:
        raise TypeError(f"packed_linear: x must be float32/bfloat16/float16, got {x.dtype}")
    if x.shape[-1] != w.shape[1]:
        raise ValueError(f"packed_linear: x has {x.shape[-1]} features, weight {w.shape} wants {w.shape[1]}")
    if x.device != w.device:
        raise ValueError(f"packed_linear: x on {x.device}, weight on {w.device}")


def packed_linear_torch(x: torch.Tensor, w: PackedWeight,
                        tile_values: int = TILE_VALUES) -> torch.Tensor:
    """x [..., K] -> [..., N] in x.dtype; float32 dequant tiles, float32 accumulation, row-invariant."""
    _check(x, w)
    n, k = w.shape
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    out = torch.empty((m, n), dtype=torch.float32, device=x.device)
    if m == 0:
        return out.to(x.dtype).reshape(*lead, n)
    nblk = (m + ROW_BLOCK - 1) // ROW_BLOCK
    blocks = []
    for i in range(nblk):
        xb = torch.zeros((ROW_BLOCK, k), dtype=torch.float32, device=x.device)
        r0, r1 = i * ROW_BLOCK, min(m, (i + 1) * ROW_BLOCK)
        xb[: r1 - r0].copy_(x2[r0:r1])
        blocks.append(xb)
    nt = tile_rows(k, tile_values)
    wt = None
    for n0 in range(0, n, nt):
        n1 = min(n, n0 + nt)
        if wt is None or wt.shape[0] != n1 - n0:
            wt = torch.empty((n1 - n0, k), dtype=torch.float32, device=x.device)
        dequantize_packed(w, slice(n0, n1), out=wt)
        wtt = wt.t()
        for i, xb in enumerate(blocks):
            r0, r1 = i * ROW_BLOCK, min(m, (i + 1) * ROW_BLOCK)
            yb = torch.mm(xb, wtt)
            out[r0:r1, n0:n1].copy_(yb[: r1 - r0])
    return out.to(x.dtype).reshape(*lead, n)


def packed_linear(x: torch.Tensor, w: PackedWeight) -> torch.Tensor:
    """x [..., K] (float32/bfloat16/float16) @ W.T -> [..., N] in x.dtype, float32 accumulation.

    CUDA with Triton: ``triton_kernels.packed_matmul``; otherwise ``packed_linear_torch``.
    """
    if x.is_cuda:
        mod = _triton_kernels()
        if mod is not None:
            _check(x, w)
            y = mod.packed_matmul(x.reshape(-1, w.shape[1]), w)
            return y.reshape(*x.shape[:-1], w.shape[0])
    return packed_linear_torch(x, w)
