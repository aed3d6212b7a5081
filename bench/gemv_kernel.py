"""An experiment, not shipped: a row-at-a-time packed matmul for few rows (Q4_K; bf16/fp16
activations): CUDA-core FMAs, no tensor cores, each row's sum in one fixed order whatever the
row count. ``bench/gemv_probe.py`` times it against the shipped tensor-core kernel
(``engine/kernels/triton_tiles.py``); BENCHMARKS.md, "A row-at-a-time kernel, measured", has
the result (slower at every row count on the H200, so not used).

Why try it: the dequantizing tensor-core kernel reaches ~29% of an H200's bandwidth at one
row (latency-bound: a dequantized tile round-trips shared memory to feed a 16-row dot of which
one row is used). A GEMV does what a one-row pass needs and no more.

Arithmetic, per row r, weight row n, super-block b, sub-block s of 32 values:

    y[r, n] = sum_b sum_s  A[n,b,s] * Q[r,n,b,s]  -  B[n,b,s] * X[r,b,s]
    A = f32(d) * sc,  B = f32(dmin) * mn               (the GGUF formula's exact products)
    X[r,b,s] = sum of x over the sub-block,  Q = sum of q * x over it = 128 * (P - X)
    P = sum of f * x,  f = 1 + q / 128                 (the nibble under the exponent of 1.0:
                                                         one logic op a weight, no conversion)

Every f * x is exact in float32 (8 + 8 significant bits), so P - X loses only the rounding of
the two sums (about 2^-17 of the sub-block's |x|), far below the bf16 rounding of the output.
Each thread keeps its own partial per 16-byte chunk of a super-block row; lanes are added once,
after the K loop.

Row invariance: each row's value is computed by the same unrolled code on tensors whose shapes
(hence layouts and reduction trees) depend on the launch configuration, never on the row
count: R rows are R copies of that code over one decoded weight tile (``R`` rows a program;
more rows are more programs, each re-reading the weights). Splits of K add their float32
partials in the fixed order s = 0..S-1. Checked bit for bit on the H200 and in
tests/bench/test_gemv_kernel.py (Triton's interpreter).
"""

from __future__ import annotations

import triton
import triton.language as tl

from engine.kernels.triton_dequant import _opaque


@triton.jit
def _nib(w, S: tl.constexpr, mg):
    """f = 1 + q/128 for the nibble at bit S of int32 ``w`` (moved to bit 16, under 1.0)."""
    if S > 16:
        v = w >> (S - 16)
    elif S < 16:
        v = w << (16 - S)
    else:
        v = w
    return ((v & 0xF0000) | mg).to(tl.float32, bitcast=True)


@triton.jit
def _row(x_ptr, row, M, kq, f0, f1, f2, f3, h0, h1, h2, h3, alo, blo, ahi, bhi):
    """One row's contribution [BN,T,4,2] of one tile, still split by lane chunk: kq [T,4,2,4]
    = K position of byte 0 of each word's low nibble (the high nibble's value is 32 further).
    The sum over a chunk's 4 words stays in one thread; lanes are added once, at the end."""
    ok = row < M
    p = x_ptr + kq                              # x_ptr: the row's start
    x0 = tl.load(p, mask=ok, other=0.0).to(tl.float32)
    x1 = tl.load(p + 1, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(p + 2, mask=ok, other=0.0).to(tl.float32)
    x3 = tl.load(p + 3, mask=ok, other=0.0).to(tl.float32)
    y0 = tl.load(p + 32, mask=ok, other=0.0).to(tl.float32)
    y1 = tl.load(p + 33, mask=ok, other=0.0).to(tl.float32)
    y2 = tl.load(p + 34, mask=ok, other=0.0).to(tl.float32)
    y3 = tl.load(p + 35, mask=ok, other=0.0).to(tl.float32)
    xl = tl.sum((x0 + x1) + (x2 + x3), axis=3, keep_dims=True)[None]    # [1,T,4,2,1]
    xh = tl.sum((y0 + y1) + (y2 + y3), axis=3, keep_dims=True)[None]
    pl = tl.sum(f0 * x0[None] + f1 * x1[None] + f2 * x2[None] + f3 * x3[None], axis=4, keep_dims=True)
    ph = tl.sum(h0 * y0[None] + h1 * y1[None] + h2 * y2[None] + h3 * y3[None], axis=4, keep_dims=True)
    return (alo * ((pl - xl) * 128.0) - blo * xl) + (ahi * ((ph - xh) * 128.0) - bhi * xh)


@triton.jit
def _q4k_gemv_kernel(x_ptr, qs_ptr, d_ptr, dm_ptr, sc_ptr, mn_ptr, o_ptr,
                     M, N, sxm, som, sop, K8, K32, K256,
                     TPS: tl.constexpr, BN: tl.constexpr, T: tl.constexpr, R: tl.constexpr,
                     SPLIT: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    row0 = tl.program_id(2) * R
    rn = pid_n * BN + tl.arange(0, BN)
    rc = tl.minimum(rn, N - 1).to(tl.int64)
    t = tl.arange(0, T)[:, None, None, None]
    g = tl.arange(0, 4)[None, :, None, None]
    hf = tl.arange(0, 2)[None, None, :, None]
    j = tl.arange(0, 4)[None, None, None, :]
    acc0 = tl.zeros([BN, T, 4, 2, 1], tl.float32)
    acc1 = tl.zeros([BN, T, 4, 2, 1], tl.float32)
    acc2 = tl.zeros([BN, T, 4, 2, 1], tl.float32)
    acc3 = tl.zeros([BN, T, 4, 2, 1], tl.float32)
    acc4 = tl.zeros([BN, T, 4, 2, 1], tl.float32)
    acc5 = tl.zeros([BN, T, 4, 2, 1], tl.float32)
    acc6 = tl.zeros([BN, T, 4, 2, 1], tl.float32)
    acc7 = tl.zeros([BN, T, 4, 2, 1], tl.float32)
    xr = x_ptr + row0.to(tl.int64) * sxm
    r5 = rc[:, None, None, None, None]
    for it in range(0, TPS, T):
        sb = pid_s * TPS + it + t                                          # [T,1,1,1]
        widx = sb * 32 + g * 8 + hf * 4 + j                                # [T,4,2,4]
        w = tl.load(qs_ptr + r5 * K8 + widx[None])                         # [BN,T,4,2,4] int32
        so = r5 * K32 + (sb * 8 + 2 * g)[None]                             # [BN,T,4,1,1]
        d = tl.load(d_ptr + r5 * K256 + sb[None]).to(tl.float32)           # [BN,T,1,1,1]
        dm = tl.load(dm_ptr + r5 * K256 + sb[None]).to(tl.float32)
        alo = d * tl.load(sc_ptr + so).to(tl.float32)
        ahi = d * tl.load(sc_ptr + so + 1).to(tl.float32)
        blo = dm * tl.load(mn_ptr + so).to(tl.float32)
        bhi = dm * tl.load(mn_ptr + so + 1).to(tl.float32)
        mg = _opaque(w, 0x3F800000)
        f0 = _nib(w, 0, mg)
        f1 = _nib(w, 8, mg)
        f2 = _nib(w, 16, mg)
        f3 = _nib(w, 24, mg)
        h0 = _nib(w, 4, mg)
        h1 = _nib(w, 12, mg)
        h2 = _nib(w, 20, mg)
        h3 = _nib(w, 28, mg)
        kq = sb * 256 + g * 64 + hf * 16 + j * 4                           # [T,4,2,4]
        acc0 += _row(xr, row0, M, kq, f0, f1, f2, f3, h0, h1, h2, h3, alo, blo, ahi, bhi)
        if R > 1:
            acc1 += _row(xr + sxm, row0 + 1, M, kq, f0, f1, f2, f3, h0, h1, h2, h3, alo, blo, ahi, bhi)
        if R > 2:
            acc2 += _row(xr + 2 * sxm, row0 + 2, M, kq, f0, f1, f2, f3, h0, h1, h2, h3, alo, blo, ahi, bhi)
            acc3 += _row(xr + 3 * sxm, row0 + 3, M, kq, f0, f1, f2, f3, h0, h1, h2, h3, alo, blo, ahi, bhi)
        if R > 4:
            acc4 += _row(xr + 4 * sxm, row0 + 4, M, kq, f0, f1, f2, f3, h0, h1, h2, h3, alo, blo, ahi, bhi)
            acc5 += _row(xr + 5 * sxm, row0 + 5, M, kq, f0, f1, f2, f3, h0, h1, h2, h3, alo, blo, ahi, bhi)
            acc6 += _row(xr + 6 * sxm, row0 + 6, M, kq, f0, f1, f2, f3, h0, h1, h2, h3, alo, blo, ahi, bhi)
            acc7 += _row(xr + 7 * sxm, row0 + 7, M, kq, f0, f1, f2, f3, h0, h1, h2, h3, alo, blo, ahi, bhi)
    nm = rn < N
    if SPLIT:
        base = o_ptr + pid_s * sop + rn
        odt = tl.float32
    else:
        base = o_ptr + rn
        odt = o_ptr.dtype.element_ty
    tl.store(base + row0 * som, _fold(acc0).to(odt), mask=nm & (row0 < M))
    if R > 1:
        tl.store(base + (row0 + 1) * som, _fold(acc1).to(odt), mask=nm & (row0 + 1 < M))
    if R > 2:
        tl.store(base + (row0 + 2) * som, _fold(acc2).to(odt), mask=nm & (row0 + 2 < M))
        tl.store(base + (row0 + 3) * som, _fold(acc3).to(odt), mask=nm & (row0 + 3 < M))
    if R > 4:
        tl.store(base + (row0 + 4) * som, _fold(acc4).to(odt), mask=nm & (row0 + 4 < M))
        tl.store(base + (row0 + 5) * som, _fold(acc5).to(odt), mask=nm & (row0 + 5 < M))
        tl.store(base + (row0 + 6) * som, _fold(acc6).to(odt), mask=nm & (row0 + 6 < M))
        tl.store(base + (row0 + 7) * som, _fold(acc7).to(odt), mask=nm & (row0 + 7 < M))


@triton.jit
def _fold(acc):
    return tl.sum(tl.sum(tl.sum(tl.sum(acc, axis=4), axis=3), axis=2), axis=1)


def q4k_gemv(x, w, BN: int = 32, T: int = 1, R: int = 1, splits: int = 1, num_warps: int = 4,
             out=None):
    """x [M, K] (bf16/fp16) @ dequant(w).T for a Q4_K PackedWeight w [N, K] -> [M, N] in x.dtype
    (``splits`` > 1: float32 partials [S, M, N] added in order)."""
    import torch
    n, k = (int(s) for s in w.shape)
    m = x.shape[0]
    nsb = k // 256
    if nsb % (splits * T):
        raise ValueError(f"q4k_gemv: {nsb} super-blocks do not split in {splits} x {T}")
    qs = w.planes["qs"].view(torch.int32)
    grid = (triton.cdiv(n, BN), splits, triton.cdiv(m, R))
    args = (w.planes["d"], w.planes["dmin"], w.planes["sc"], w.planes["mn"])
    if splits == 1:
        out = torch.empty((m, n), dtype=x.dtype, device=x.device) if out is None else out
        _q4k_gemv_kernel[grid](x, qs, *args, out, m, n, x.stride(0), n, 0, k // 8, k // 32, k // 256,
                               TPS=nsb, BN=BN, T=T, R=R, SPLIT=False, num_warps=num_warps)
        return out
    ws = torch.empty((splits, m, n), dtype=torch.float32, device=x.device)
    _q4k_gemv_kernel[grid](x, qs, *args, ws, m, n, x.stride(0), n, m * n, k // 8, k // 32, k // 256,
                           TPS=nsb // splits, BN=BN, T=T, R=R, SPLIT=True, num_warps=num_warps)
    return ws.sum(0).to(x.dtype) if out is None else out.copy_(ws.sum(0))
