"""``packed_linear(x, w)``: y = x @ W.T for a PackedWeight W [N, K], without a full float copy of W.

Dispatch: a CUDA ``x`` goes to ``engine.kernels.triton_kernels.packed_matmul(x, w)`` when that
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
import torch.nn.functional as F

from .packed import PACKED_TYPES, PackedWeight, dequantize_packed

__all__ = ["PACKED_TYPES", "packed_linear", "packed_linear_torch", "dequantized_size",
           "ROW_BLOCK", "TILE_VALUES", "invariant_dense"]

ROW_BLOCK = 8          # rows per BLAS call (fixed, see module doc)
TILE_VALUES = 1 << 20  # weights dequantized per tile (4 MiB of float32)

_ACCEPTED = (torch.float32, torch.bfloat16, torch.float16)

_triton_mods: dict[str, object] = {}    # module name -> the module, or False: unavailable


def _lazy(name: str):
    """engine.kernels.<name> (a Triton module), or None when it or triton is not installed."""
    if name not in _triton_mods:
        try:
            import importlib
            mod = importlib.import_module(f"engine.kernels.{name}")
        except ImportError as e:
            missing = e.name or ""
            if missing == "triton" or missing.startswith("triton.") or missing.endswith(name):
                mod = False
            else:
                raise
        _triton_mods[name] = mod
    return _triton_mods[name] or None


def _triton_kernels():
    """engine.kernels.triton_kernels, or None when it (or triton) is not installed."""
    return _lazy("triton_kernels")


_BLAS_INVARIANT: dict[tuple, bool] = {}


def blas_row_invariant(w: torch.Tensor) -> bool | None:
    """Whether the vendor BLAS (cuBLAS / hipBLASLt, through F.linear) gives row r of an M-row
    product bit-identical to that row alone, for this weight's shape and dtype on this device:
    checked once per shape on random rows (M = 2..64 against 64 one-row calls). On the H200 it
    held for every bfloat16 shape tried and failed for every float32 one (bench/gpu_exact.py).
    None while a graph is being captured and the shape is not known yet (no check possible)."""
    key = (tuple(w.shape), w.dtype, str(w.device))
    if key not in _BLAS_INVARIANT:
        if w.is_cuda and torch.cuda.is_current_stream_capturing():
            return None
        g = torch.Generator(device=w.device).manual_seed(0)
        x = torch.randn(64, w.shape[1], generator=g, device=w.device).to(w.dtype)
        alone = torch.cat([F.linear(x[i:i + 1], w) for i in range(64)])
        _BLAS_INVARIANT[key] = all(torch.equal(F.linear(x[:m], w), alone[:m])
                                   for m in (2, 3, 4, 8, 16, 17, 32, 64))
    return _BLAS_INVARIANT[key]


def invariant_dense(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor | None:
    """x @ w.T with each row's result independent of the row count. On a GPU: the vendor BLAS
    where it is row-invariant for this shape (checked, `blas_row_invariant`), else the Triton
    kernel (engine.kernels.triton_dense); None without Triton (the caller then uses F.linear).
    On the CPU: ``ROW_BLOCK``-row products of x zero-padded (one fixed BLAS shape, as
    ``packed_linear_torch`` does; a 1-row call costs a ROW_BLOCK-row product). A bfloat16 BLAS
    matmul on a CPU without AVX512-BF16 depends on the row count otherwise (an Intel Xeon,
    2026-12-03)."""
    if not x.is_cuda:
        x2 = x.reshape(-1, w.shape[1])
        m = x2.shape[0]
        xp = torch.zeros((-(-m // ROW_BLOCK) * ROW_BLOCK, x2.shape[1]), dtype=x.dtype)
        xp[:m] = x2
        y = torch.cat([F.linear(xp[i:i + ROW_BLOCK], w) for i in range(0, xp.shape[0], ROW_BLOCK)])
        return y[:m].reshape(*x.shape[:-1], w.shape[0])
    mod = _lazy("triton_dense")
    if mod is None:
        return None
    if blas_row_invariant(w):
        return F.linear(x, w)
    return mod.dense_matmul(x.reshape(-1, w.shape[1]), w).reshape(*x.shape[:-1], w.shape[0])


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
