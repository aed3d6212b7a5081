"""Row-invariant dense matmul on a GPU: ``dense_matmul(x, w) -> x @ w.T``, Triton.

cuBLAS picks its kernel (tile shape, split-K, a GEMV for one row) from the row count, so row r
of an M-row product is not bit-identical to the same row multiplied alone; verify passes need it
to be (engine.model.attention explains why). Here the configuration is a function of (N, K,
dtype) only: every program multiplies one 16-row slice of x by BN weight rows, walking K in
BK-wide tiles in order, with one ``tl.dot`` of the same shape per tile; M only sets how many
slices the grid has. float32 dots take the backend's precision (``dot_precision.py``:
"tf32x3" on CUDA, float32 accuracy on tensor cores; "bf16x6" on ROCm).

Used for the dense weights of verify passes on a GPU (the LM head of a tied model, every layer
of a dequantized model); prefill keeps cuBLAS (it needs no invariance). Imported lazily: Triton
is not a dependency of the package.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .dot_precision import ieee_code
from .triton_dot import dot_f32

BM = 16


@triton.jit
def _dense_kernel(x_ptr, w_ptr, o_ptr, M, N, K, sxm, swn, som,
                  BN: tl.constexpr, BK: tl.constexpr, IEEE: tl.constexpr, EVEN_K: tl.constexpr):
    pn = tl.program_id(0)
    pm = tl.program_id(1)
    rm = pm * 16 + tl.arange(0, 16)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([16, BN], tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        if EVEN_K:
            xm = rm[:, None] < M
            wm = rn[:, None] < N
        else:
            xm = (rm[:, None] < M) & (kk[None, :] < K)
            wm = (rn[:, None] < N) & (kk[None, :] < K)
        x = tl.load(x_ptr + rm[:, None] * sxm + kk[None, :], mask=xm, other=0.0)      # [16, BK]
        w = tl.load(w_ptr + rn[:, None] * swn + kk[None, :], mask=wm, other=0.0)      # [BN, BK]
        if IEEE:
            acc += dot_f32(x, tl.trans(w), None, IEEE)
        else:
            acc += tl.dot(x, tl.trans(w))
    tl.store(o_ptr + rm[:, None] * som + rn[None, :], acc.to(o_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def dense_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [M, K] @ w[N, K].T -> [M, N] in x's dtype (float32 accumulation), row-invariant."""
    if x.dtype != w.dtype or x.shape[-1] != w.shape[1]:
        raise ValueError(f"dense_matmul: x {tuple(x.shape)} {x.dtype} vs w {tuple(w.shape)} {w.dtype}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    w = w if w.stride(-1) == 1 else w.contiguous()
    M, K = x.shape
    N = w.shape[0]
    ieee = ieee_code(x.dtype)           # float32: the backend's dot precision (dot_precision.py)
    BK = 32 if ieee else 64
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(N, 64), triton.cdiv(M, BM))
    _dense_kernel[grid](x, w, out, M, N, K, x.stride(0), w.stride(0), out.stride(0),
                        BN=64, BK=BK, IEEE=ieee, EVEN_K=K % BK == 0, num_warps=4, num_stages=3)
    return out
