"""Packed GGUF planes to a dense matrix in the activations' dtype, on the GPU (Triton): what a
long prefill multiplies with the vendor GEMM (engine.model.fused_layer).

A prompt of hundreds of tokens is compute-bound: the packed kernel re-streams the weight for
every 64 rows and dequantizes it each time, while dequantizing once into a scratch buffer and
running cuBLAS / hipBLASLt on it costs one weight stream plus a write and a read of the dense
copy (the scratch holds one weight at a time, never the model). Prefill needs no row
invariance (its rows are committed, never compared with a one-row pass), so the GEMM may pick
its kernel by shape.

Values: the exact float32 GGUF value (scale times quant, minus the min, one FMA) rounded once
to the output dtype, as the packed kernel's weights are before its dot.

    dequantize_dense(w, out)   w: PackedWeight [N, K] of a type in DENSE_TYPES; out [N, K]

Imported lazily (on a GPU with Triton, or under TRITON_INTERPRET=1).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

DENSE_TYPES = ("Q4_K", "Q6_K", "Q6_K8", "Q8_0", "Q4_0", "Q4_1", "Q4_KN")


@triton.jit
def _q4k_kernel(qs_ptr, d_ptr, dm_ptr, sc_ptr, mn_ptr, o_ptr, N, K, BR: tl.constexpr):
    """Rows [pid0*BR, +BR), superblock pid1: value t (0..255) is nibble t//32 % 2 of byte
    (t//64)*32 + t%32; sub-block t//32: value = d*sc*q - dmin*mn."""
    rn = tl.program_id(0) * BR + tl.arange(0, BR)
    sb = tl.program_id(1)
    t = tl.arange(0, 256)
    m = (rn < N)[:, None]
    byte = (t // 64) * 32 + t % 32
    q = tl.load(qs_ptr + rn[:, None] * (K // 2) + sb * 128 + byte[None, :], mask=m, other=0)
    q = ((q >> (4 * ((t // 32) % 2))[None, :]) & 15).to(tl.float32)
    sub = sb * 8 + t // 32
    sc = tl.load(sc_ptr + rn[:, None] * (K // 32) + sub[None, :], mask=m, other=0).to(tl.float32)
    mn = tl.load(mn_ptr + rn[:, None] * (K // 32) + sub[None, :], mask=m, other=0).to(tl.float32)
    d = tl.load(d_ptr + rn * (K // 256) + sb, mask=rn < N, other=0.0).to(tl.float32)[:, None]
    dm = tl.load(dm_ptr + rn * (K // 256) + sb, mask=rn < N, other=0.0).to(tl.float32)[:, None]
    v = tl.fma(d * sc, q, -(dm * mn))
    tl.store(o_ptr + rn[:, None] * K + sb * 256 + t[None, :], v.to(o_ptr.dtype.element_ty), mask=m)


@triton.jit
def _q4kn_kernel(b_ptr, o_ptr, N, K, BR: tl.constexpr):
    """Q4_KN (GGUF's block_q4_K, 144 bytes: d, dmin, 12 bytes of 6-bit scales, 128 qs bytes):
    ``_q4k_kernel`` with the scales unpacked as engine.weights.dequant.unpack_k_scales does."""
    rn = tl.program_id(0) * BR + tl.arange(0, BR)
    sb = tl.program_id(1)
    t = tl.arange(0, 256)
    m = (rn < N)[:, None]
    base = rn[:, None] * (K // 256 * 144) + sb * 144                               # [BR, 1]
    byte = (t // 64) * 32 + t % 32
    q = tl.load(b_ptr + base + 16 + byte[None, :], mask=m, other=0)
    q = ((q >> (4 * ((t // 32) % 2))[None, :]) & 15).to(tl.float32)
    j = t // 32
    lo = (j < 4)[None, :]
    a = tl.load(b_ptr + base + 4 + (j % 4)[None, :], mask=m, other=0)     # q[j] / q[j-4]
    b = tl.load(b_ptr + base + 8 + (j % 4)[None, :], mask=m, other=0)     # q[j+4] / q[j]
    c = tl.load(b_ptr + base + 12 + (j % 4)[None, :], mask=m, other=0)    # q[j+4] (j >= 4)
    sc = tl.where(lo, a & 63, (c & 15) | ((a >> 6) << 4)).to(tl.float32)
    mn = tl.where(lo, b & 63, (c >> 4) | ((b >> 6) << 4)).to(tl.float32)
    hp = b_ptr.to(tl.pointer_type(tl.float16)) + rn * (K // 256 * 72) + sb * 72
    d = tl.load(hp, mask=rn < N, other=0.0).to(tl.float32)[:, None]
    dm = tl.load(hp + 1, mask=rn < N, other=0.0).to(tl.float32)[:, None]
    v = tl.fma(d * sc, q, -(dm * mn))
    tl.store(o_ptr + rn[:, None] * K + sb * 256 + t[None, :], v.to(o_ptr.dtype.element_ty), mask=m)


@triton.jit
def _q6k_kernel(ql_ptr, qh_ptr, sc_ptr, d_ptr, o_ptr, N, K, BR: tl.constexpr, W8: tl.constexpr):
    """Value t = 128h + 32j + l: low 4 bits of ql[64h + 32(j%2) + l] >> 4(j//2), high 2 bits of
    qh[32h + l] >> 2j; value = d * sc[t // 16] * (q - 32). W8 (Q6_K8): ql_ptr is the int8
    plane of q - 32 [N, K] (qh_ptr unused)."""
    rn = tl.program_id(0) * BR + tl.arange(0, BR)
    sb = tl.program_id(1)
    t = tl.arange(0, 256)
    m = (rn < N)[:, None]
    sc = tl.load(sc_ptr + rn[:, None] * (K // 16) + sb * 16 + (t // 16)[None, :],
                 mask=m, other=0).to(tl.float32)
    d = tl.load(d_ptr + rn * (K // 256) + sb, mask=rn < N, other=0.0).to(tl.float32)[:, None]
    if W8:
        q8 = tl.load(ql_ptr + rn[:, None] * K + sb * 256 + t[None, :], mask=m, other=0)
        v = (d * sc) * q8.to(tl.float32)
    else:
        h = t // 128
        j = (t % 128) // 32
        li = t % 32
        lo = tl.load(ql_ptr + rn[:, None] * (K // 2) + sb * 128 + (64 * h + 32 * (j % 2) + li)[None, :],
                     mask=m, other=0)
        hi = tl.load(qh_ptr + rn[:, None] * (K // 4) + sb * 64 + (32 * h + li)[None, :], mask=m, other=0)
        q = ((lo >> (4 * (j // 2))[None, :]) & 15) | (((hi >> (2 * j)[None, :]) & 3) << 4)
        v = (d * sc) * (q.to(tl.float32) - 32.0)
    tl.store(o_ptr + rn[:, None] * K + sb * 256 + t[None, :], v.to(o_ptr.dtype.element_ty), mask=m)


@triton.jit
def _q32_kernel(qs_ptr, d_ptr, m_ptr, o_ptr, N, K, BR: tl.constexpr, QT: tl.constexpr):
    """Blocks of 32 (QT 0: Q8_0 int8 qs [N, K]; 1: Q4_0, 2: Q4_1 with qs [N, K/2], byte j =
    value j low nibble, value 16 + j high nibble), 8 blocks (256 values) per program."""
    rn = tl.program_id(0) * BR + tl.arange(0, BR)
    k0 = tl.program_id(1) * 256
    t = tl.arange(0, 256)
    m = (rn < N)[:, None] & (k0 + t < K)[None, :]
    blk = (k0 + t) // 32
    d = tl.load(d_ptr + rn[:, None] * (K // 32) + blk[None, :], mask=m, other=0.0).to(tl.float32)
    if QT == 0:
        q = tl.load(qs_ptr + rn[:, None] * K + (k0 + t)[None, :], mask=m, other=0).to(tl.float32)
        v = d * q
    else:
        byte = blk * 16 + t % 16
        q = tl.load(qs_ptr + rn[:, None] * (K // 2) + byte[None, :], mask=m, other=0)
        q = ((q >> (4 * ((t % 32) // 16))[None, :]) & 15).to(tl.float32)
        if QT == 1:
            v = d * (q - 8.0)
        else:
            mm = tl.load(m_ptr + rn[:, None] * (K // 32) + blk[None, :], mask=m, other=0.0)
            v = tl.fma(d, q, mm.to(tl.float32))
    tl.store(o_ptr + rn[:, None] * K + (k0 + t)[None, :], v.to(o_ptr.dtype.element_ty), mask=m)


def dequantize_dense(w, out: torch.Tensor) -> torch.Tensor:
    """Fill out [N, K] (contiguous, any float dtype) with w's values; returns out."""
    n, k = w.shape
    if tuple(out.shape) != (n, k) or not out.is_contiguous():
        raise ValueError(f"dequantize_dense: out must be a contiguous {(n, k)} tensor")
    p = w.planes
    BR = 16
    if w.qtype == "Q4_K":
        _q4k_kernel[(triton.cdiv(n, BR), k // 256)](p["qs"], p["d"], p["dmin"], p["sc"], p["mn"],
                                                    out, n, k, BR=BR, num_warps=4)
    elif w.qtype == "Q4_KN":
        _q4kn_kernel[(triton.cdiv(n, BR), k // 256)](p["blk"], out, n, k, BR=BR, num_warps=4)
    elif w.qtype == "Q6_K":
        _q6k_kernel[(triton.cdiv(n, BR), k // 256)](p["ql"], p["qh"], p["sc"].view(torch.int8),
                                                    p["d"], out, n, k, BR=BR, W8=False, num_warps=4)
    elif w.qtype == "Q6_K8":
        _q6k_kernel[(triton.cdiv(n, BR), k // 256)](p["q8"], p["q8"], p["sc"], p["d"], out, n, k,
                                                    BR=BR, W8=True, num_warps=4)
    elif w.qtype in ("Q8_0", "Q4_0", "Q4_1"):
        qt = ("Q8_0", "Q4_0", "Q4_1").index(w.qtype)
        qs = p["qs"].view(torch.int8) if qt == 0 else p["qs"]
        _q32_kernel[(triton.cdiv(n, BR), triton.cdiv(k, 256))](
            qs, p["d"], p.get("m", p["d"]), out, n, k, BR=BR, QT=qt, num_warps=4)
    else:
        raise NotImplementedError(f"dequantize_dense: no kernel for {w.qtype}")
    return out
