"""Triton matmul straight from packed GGUF planes: ``packed_matmul(x, w) -> x @ dequant(w).T``.

Imported lazily (by ``matmul.py``, only when ``x`` is on a GPU): Triton is not a dependency of
the package. Everything here is plain Triton (no inline asm, no TMA, no vendor libraries), so
the same source runs on NVIDIA and on AMD (ROCm, RDNA3/4 WMMA); under ``TRITON_INTERPRET=1`` it
runs on CPU tensors, which is how the tests check it.

Design
------
``x`` is ``[M, K]`` (M up to 64 per launch; more rows are done 64 at a time), the weight is
``[N, K]`` in the packed plane layout (see ``packed.py``). One program owns ``BN`` weight rows
and a contiguous range of K (all of K unless the shape is split, below). It walks its K range
one tile of ``BK = 256`` values at a time:

* it loads the tile's bytes of every plane (each weight byte is read once per call: all M
  activation rows are handled by the program that loaded the tile),
* dequantizes them in registers to the exact float32 GGUF value (``_exact`` below: integer
  bits turned into a float by OR-ing in the exponent of 2^23, then one subtract, so no
  int->float conversion instruction; the scale/min applied with one FMA, which rounds exactly
  as gguf's numpy code does), then casts to the activations' dtype,
* and for every 16-row slice of ``x`` (``NMB`` = ceil(M/16) slices, each its own float32
  accumulator) does ``acc += x_slice[16, BK] @ w_tile[BK, BN]`` with ``tl.dot`` (tensor cores
  for bf16/fp16; ``input_precision="ieee"``, i.e. exact fp32 FMAs, no TF32, for float32).

The nibble planes are not reordered in registers: a Q4 tile is dotted as two halves (the low
nibbles and the high nibbles), each against the activations gathered at the K positions those
nibbles hold. A dot only needs ``x`` and ``w`` to agree on the order of K, not K to be sorted.

Row invariance (row r of an M-row call == a 1-row call on ``x[r:r+1]``, bit for bit): the
kernel configuration (BN, BK, warps, stages, the K split) is a function of (qtype, N, K, device)
only, never of M. Each 16-row slice is an independent ``tl.dot`` of the same shape
``[16, BK] x [BK, BN]`` on the same dequantized tile, accumulated over the same K tiles in the
same order; M only decides how many of those identical slices are issued (``NMB``) and which
rows are masked to zero. A row's result depends only on its own activations (an MMA output
element is the sum over K of its own row times the weight column, in a fixed order, whatever
the other rows of the tile hold), so its bits cannot change with M. No atomics, no
data-dependent reduction order anywhere.

Split K: when ``ceil(N/BN)`` programs are too few to fill the GPU (k/v projections), K is cut
into ``S`` ranges (S from the shape and SM count, not M); each program writes its float32
partial sum to a workspace ``[S, M, N]`` and a second small kernel adds the S partials in the
fixed order s = 0..S-1 and casts. Same order for every row, so still row-invariant.

Status (H200, Triton 3.6, bench/bench_packed_matmul.py): correct and bitwise row-invariant for
M = 1..64 on every type and shape, capturable in CUDA graphs, but slow: the 28672x8192 Q4_K
matrix takes 113 us at M=1 (25% of 4.8 TB/s) and 153 us at M=32; a Qwen3-8B-like Q4_K layer
171 us at M=1, 1.02x at M=2, 1.39x at M=32. The loop is ~4.4 instructions per weight
(mask-and-OR, shift for every second nibble, FMA, half a cvt) yet runs ~4x slower than its
issue bound: latency, not issue, limits it (few warps per SM, a wgmma wait after every dot,
bank-conflicted word loads from shared memory). Q5_K/Q6_K also round-trip the dequantized
tile through shared memory (the 5th/6th-bit merge defeats the layout propagation): ~10%.

int8 path (opt-in, ``I8=1``; Q4_K with bf16/fp16 activations; ``_q4k_i8_kernel``): the
llama.cpp idea. A pre-kernel quantizes each activation row per 256 values (one float scale,
like llama.cpp's q8_K) to int8 plus an int8 residual plane (x ~= s * (q + q2/256), ~16 bits,
so the result is more accurate than bf16 ``F.linear``: max error 3.1e-3 of the output's
max vs 4.0e-3 for bf16 F.linear on 28672x8192; 7.2e-3 with ``I8_X2=0``, the single plane).
The 6-bit sub-block scale is split sc = 8*sh + sl so that q*sl and q*sh fit int8 (one
32-bit multiply scales four packed nibbles), and a superblock is two (four with the
residual) ``tl.dot(int8, int8) -> int32`` of K = 256, no per-sub-block rescale; the min
term is one exact fp16 dot of the mins with the per-sub-block sums of x. Row invariance is
structural there: the integer dots are exact whatever the tile shape, and every float op
after them is elementwise, so the tile (BN, warps, 16/32/64 rows) may follow M; only the K
split is fixed per shape. ~3.2-3.9 SASS instructions per weight, yet measured on the H200
(28672x8192, M=1) at 175-250 us against 113 us for the dequantizing kernel: Triton 3.6
stages the register-built int8 A tile through shared memory (STS + fence + LDSM every
superblock), the scale/min loads are too narrow for cp.async (prefetched one superblock
ahead by hand instead), and the large tiles leave 1-2 programs per SM. Kept as groundwork,
off by default.

CUDA graphs: no host syncs, no ``.item()``, no data-dependent shapes; the only allocations are
``torch.empty`` (output and, for split shapes, the workspace), which graph capture serves from
its private pool.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

__all__ = ["packed_matmul", "kernel_config", "SUPPORTED_QTYPES", "MAX_ROWS"]

MAX_ROWS = 64          # rows per launch (4 slices of 16); larger M is done in chunks of 64
BK = 256               # K values per tile (one K-quant superblock, eight 32-blocks)

# qtype codes (constexpr in the kernel)
_Q8_0, _Q4_0, _Q4_1, _Q4_K, _Q5_K, _Q6_K = 0, 1, 2, 3, 4, 5
_CODES = {"Q8_0": _Q8_0, "Q4_0": _Q4_0, "Q4_1": _Q4_1, "Q4_K": _Q4_K, "Q5_K": _Q5_K, "Q6_K": _Q6_K}
SUPPORTED_QTYPES = tuple(_CODES)

# the planes each type's kernel reads, in argument order
_PLANES = {
    "Q8_0": ("qs", "d"),
    "Q4_0": ("qs", "d"),
    "Q4_1": ("qs", "d", "m"),
    "Q4_K": ("qs", "d", "dmin", "sc", "mn"),
    "Q5_K": ("qs", "qh", "d", "dmin", "sc", "mn"),
    "Q6_K": ("ql", "qh", "sc", "d"),
}
_SUPERBLOCK = {"Q8_0": 32, "Q4_0": 32, "Q4_1": 32, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256}

_TWO23 = tl.constexpr(8388608.0)     # 2^23


# ---------------------------------------------------------------------------------------------
# dequantization helpers
#
# Every type is read as int32 words (4 consecutive bytes). A tile of words [BN, JH, 4] has its
# last axis (c) on the 4 lanes that the MMA operand layout spreads K bits 1-2 over, and each
# word's 4 bytes in one thread's registers (K bit 0 and bit 3): ``_join4p`` builds exactly that
# order, so the dequantized tile feeds ``tl.dot`` without any data movement, and each lane only
# ever sees one sub-block per (row, c): the scale work per weight is small.


@triton.jit
def _opaque(a, C: tl.constexpr):
    """The int32 constant C shaped like ``a``, computed as ``where(a == a, C, 0)`` (``a`` is
    never NaN) so that it is not a literal: the compiler then keeps it in a register and
    folds the mask and the OR of the value extraction into one 3-input logic op (with a
    literal it needs two ops per weight)."""
    return tl.where(a == a, C, 0)


@triton.jit
def _affine(s, t, P: tl.constexpr, EXACT: tl.constexpr):
    """(a, b) with ``f * a + b == s * q + t`` for f = q (EXACT) or f = 1 + q * 2^(P-23).

    Non-exact: a = s * 2^(23-P) is exact, b = t - a is rounded once: an absolute error of
    about s * 2^(-1-P) (2^-17 / 2^-13 of the block scale for P = 16 / 12), far below the
    bf16/fp16 rounding of the weight that follows."""
    if EXACT:
        return s, t
    else:
        a = s * (1 << (23 - P))
        return a, t - a


@triton.jit
def _shift(w, D: tl.constexpr):
    if D > 0:
        return w << D
    elif D < 0:
        return w >> (-D)
    else:
        return w


@triton.jit
def _bit_to(h, P: tl.constexpr, DST: tl.constexpr, NB: tl.constexpr):
    """The NB-bit field at bit P of int32 ``h``, moved to bit DST (other bits cleared)."""
    return _shift(h, DST - P) & (((1 << NB) - 1) << DST)


@triton.jit
def _fval(wq, wh, P: tl.constexpr, HP: tl.constexpr, HB: tl.constexpr, EXACT: tl.constexpr, mg):
    """Quant = the nibble at bit P of ``wq`` plus HB high bits at bit HP of ``wh`` -> float.

    EXACT: f = q (field at bit 0 under the exponent of 2^23, mg = 0x4B000000, minus 2^23).
    Otherwise the nibble goes to bit p = 16 (P = 0 mod 8) or p = 12 (P = 4 mod 8), the high
    bits above it, under the exponent of 1.0 (mg = 0x3F800000): f = 1 + q * 2^(p-23). Two
    nibbles share each shift (w<<16, w<<8, w, w>>8, w>>16 serve all eight), then one
    mask-and-OR op per value (see _opaque). Pair with ``_affine(.., p, ..)``."""
    if EXACT:
        q = (wq >> P) & 15
        if HB > 0:
            q = q | _bit_to(wh, HP, 4, HB)
        return (q | mg).to(tl.float32, bitcast=True) - _TWO23
    else:
        if P % 8 == 0:
            bits = _shift(wq, 16 - P) & 0xF0000
            if HB > 0:
                bits = bits | _bit_to(wh, HP, 20, HB)
        else:
            bits = _shift(wq, 12 - P) & 0xF000
            if HB > 0:
                bits = bits | _bit_to(wh, HP, 16, HB)
        return (bits | mg).to(tl.float32, bitcast=True)


@triton.jit
def _join4p(v0, v1, v2, v3):
    """Four [BN, A, 4] tensors (bytes 0..3 of each word) -> [BN, A, 2, 4, 2], axes (a, byte
    bit 1, c, byte bit 0): flattened, that is the MMA operand order (see the section note)."""
    return tl.permute(tl.join(tl.join(v0, v2), tl.join(v1, v3)), (0, 1, 3, 2, 4))


@triton.jit
def _xload(xp, rows, kx, M, K, EVEN_K: tl.constexpr):
    """x^T: rows ``rows`` [16] of x at K positions kx [KP] -> [KP, 16] (zeros past M / K)."""
    if EVEN_K:
        return tl.load(xp, mask=rows[None, :] < M, other=0.0)
    else:
        return tl.load(xp, mask=(rows[None, :] < M) & (kx[:, None] < K), other=0.0)


@triton.jit
def _dot1(xt, w, acc, IEEE: tl.constexpr):
    if IEEE:
        return tl.dot(w, xt, acc, input_precision="ieee")
    else:
        return tl.dot(w, xt, acc)


@triton.jit
def _dot_words(acc0, acc1, acc2, acc3, v0, v1, v2, v3, kxw, x_ptr, sxm, M, K,
               NMB: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr):
    """acc_i[BN, 16] += w @ x[16i:16i+16, :]^T over one word tile.

    v0..v3: float32 weights [BN, JH, 4] of bytes 0..3 of the words; kxw [JH, 4]: the K
    position of byte 0 of each word (bytes are consecutive in K)."""
    cdt = x_ptr.dtype.element_ty
    BN: tl.constexpr = v0.shape[0]
    JH: tl.constexpr = v0.shape[1]
    KP: tl.constexpr = JH * 16
    w = tl.reshape(_join4p(v0, v1, v2, v3).to(cdt), [BN, KP])
    i2 = tl.arange(0, 2)
    kx = tl.reshape(kxw[:, None, :, None] + 2 * i2[None, :, None, None] + i2[None, None, None, :], [KP])
    kx = tl.max_contiguous(tl.multiple_of(kx, 2), 2)
    rm = tl.arange(0, 16)
    xp = x_ptr + rm[None, :] * sxm + kx[:, None]
    acc0 = _dot1(_xload(xp, rm, kx, M, K, EVEN_K), w, acc0, IEEE)
    if NMB > 1:
        acc1 = _dot1(_xload(xp + 16 * sxm, rm + 16, kx, M, K, EVEN_K), w, acc1, IEEE)
    if NMB > 2:
        acc2 = _dot1(_xload(xp + 32 * sxm, rm + 32, kx, M, K, EVEN_K), w, acc2, IEEE)
    if NMB > 3:
        acc3 = _dot1(_xload(xp + 48 * sxm, rm + 48, kx, M, K, EVEN_K), w, acc3, IEEE)
    return acc0, acc1, acc2, acc3


@triton.jit
def _store(acc, o_ptr, row0, rn, M, N, som, sop, pid_s, SPLIT: tl.constexpr):
    rm = row0 + tl.arange(0, 16)
    mask = (rm[None, :] < M) & (rn[:, None] < N)
    if SPLIT:
        p = o_ptr + pid_s * sop + rm[None, :] * som + rn[:, None]
        tl.store(p, acc, mask=mask)
    else:
        p = o_ptr + rm[None, :] * som + rn[:, None]
        tl.store(p, acc.to(o_ptr.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------------------------------------
# per-type tiles: acc += (one tile of the weight rows rn) @ x^T


@triton.jit
def _tile_q8_0(acc0, acc1, acc2, acc3, x_ptr, pq, pd, rn, kb, M, K, sxm, K4, K32,
               NMB: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr):
    """Q8_0, 256 values (8 blocks of 32) from kb: qs int8 [N, K], d f16 [N, K/32].
    Words [BN, bh, jw, c]: block 4bh+c, word jw (bytes 4jw..4jw+3)."""
    BN: tl.constexpr = rn.shape[0]
    c4 = tl.arange(0, 4)
    bh = tl.arange(0, 2)
    jw = tl.arange(0, 8)
    blk = 4 * bh[:, None] + c4[None, :]                                             # [2, 4]
    woff = kb // 4 + 8 * blk[:, None, :] + jw[None, :, None]                        # [2, 8, 4]
    wp = pq.to(tl.pointer_type(tl.int32)) + rn[:, None, None, None] * K4 + woff[None]
    dp = pd + rn[:, None, None] * K32 + kb // 32 + blk[None]
    if EVEN_K:
        w = tl.load(wp)
        d = tl.load(dp).to(tl.float32)
    else:
        w = tl.load(wp, mask=(kb + 32 * blk < K)[None, :, None, :], other=0)
        d = tl.load(dp, mask=(kb + 32 * blk < K)[None], other=0.0).to(tl.float32)
    # value = d * q, q = (byte ^ 0x80) - 128
    if IEEE:
        a = d
        b = d * 0.0
        mg = _opaque(a, 0x4B000080)
    else:
        a = d * 2048.0                                  # f = 1 + (q + 128) / 2048
        b = d * -2176.0
        mg = _opaque(a, 0x3F880000)                     # 1.0 with the 0x80 bit at bit 19
    a = a[:, :, None, :]
    b = b[:, :, None, :]
    mg = mg[:, :, None, :]
    if IEEE:
        f0 = ((w & 0xFF) ^ mg).to(tl.float32, bitcast=True) - (_TWO23 + 128.0)
        f1 = (((w >> 8) & 0xFF) ^ mg).to(tl.float32, bitcast=True) - (_TWO23 + 128.0)
        f2 = (((w >> 16) & 0xFF) ^ mg).to(tl.float32, bitcast=True) - (_TWO23 + 128.0)
        f3 = (((w >> 24) & 0xFF) ^ mg).to(tl.float32, bitcast=True) - (_TWO23 + 128.0)
    else:
        f0 = (((w << 12) & 0xFF000) ^ mg).to(tl.float32, bitcast=True)
        f1 = (((w << 4) & 0xFF000) ^ mg).to(tl.float32, bitcast=True)
        f2 = (((w >> 4) & 0xFF000) ^ mg).to(tl.float32, bitcast=True)
        f3 = (((w >> 12) & 0xFF000) ^ mg).to(tl.float32, bitcast=True)
    v0 = tl.reshape(tl.fma(f0, a, b), [BN, 16, 4])
    v1 = tl.reshape(tl.fma(f1, a, b), [BN, 16, 4])
    v2 = tl.reshape(tl.fma(f2, a, b), [BN, 16, 4])
    v3 = tl.reshape(tl.fma(f3, a, b), [BN, 16, 4])
    kxw = tl.reshape(kb + 32 * blk[:, None, :] + 4 * jw[None, :, None], [16, 4])
    return _dot_words(acc0, acc1, acc2, acc3, v0, v1, v2, v3, kxw, x_ptr, sxm, M, K,
                      NMB, EVEN_K, IEEE)


@triton.jit
def _tile_q4_01(acc0, acc1, acc2, acc3, x_ptr, pq, pd, pm, rn, kb, M, K, sxm, K8, K32,
                Q41: tl.constexpr, NMB: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr):
    """Q4_0 / Q4_1, 256 values (8 blocks of 32) from kb: qs [N, K/2] (per block 16 bytes,
    byte j = value j low nibble, value 16+j high nibble), d (, m) f16 [N, K/32].
    Words [BN, bh, jw, c]: block 4bh+c, word jw (bytes 4jw..4jw+3)."""
    BN: tl.constexpr = rn.shape[0]
    c4 = tl.arange(0, 4)
    bh = tl.arange(0, 2)
    jw = tl.arange(0, 4)
    blk = 4 * bh[:, None] + c4[None, :]                                             # [2, 4]
    woff = kb // 8 + 4 * blk[:, None, :] + jw[None, :, None]                        # [2, 4, 4]
    wp = pq.to(tl.pointer_type(tl.int32)) + rn[:, None, None, None] * K8 + woff[None]
    sp = rn[:, None, None] * K32 + kb // 32 + blk[None]
    if EVEN_K:
        w = tl.load(wp)
        d = tl.load(pd + sp).to(tl.float32)
        if Q41:
            t = tl.load(pm + sp).to(tl.float32)
    else:
        w = tl.load(wp, mask=(kb + 32 * blk < K)[None, :, None, :], other=0)
        d = tl.load(pd + sp, mask=(kb + 32 * blk < K)[None], other=0.0).to(tl.float32)
        if Q41:
            t = tl.load(pm + sp, mask=(kb + 32 * blk < K)[None], other=0.0).to(tl.float32)
    if not Q41:
        t = d * -8.0                                    # Q4_0: d * (q - 8)
    a_lo, b_lo = _affine(d, t, 16, IEEE)
    a_hi, b_hi = _affine(d, t, 12, IEEE)
    if IEEE:
        mg = _opaque(d, 0x4B000000)[:, :, None, :]
    else:
        mg = _opaque(d, 0x3F800000)[:, :, None, :]
    a_lo = a_lo[:, :, None, :]
    b_lo = b_lo[:, :, None, :]
    a_hi = a_hi[:, :, None, :]
    b_hi = b_hi[:, :, None, :]
    kxw = tl.reshape(kb + 32 * blk[:, None, :] + 4 * jw[None, :, None], [8, 4])
    acc0, acc1, acc2, acc3 = _dot_words(
        acc0, acc1, acc2, acc3,
        tl.reshape(tl.fma(_fval(w, w, 0, 0, 0, IEEE, mg), a_lo, b_lo), [BN, 8, 4]),
        tl.reshape(tl.fma(_fval(w, w, 8, 0, 0, IEEE, mg), a_lo, b_lo), [BN, 8, 4]),
        tl.reshape(tl.fma(_fval(w, w, 16, 0, 0, IEEE, mg), a_lo, b_lo), [BN, 8, 4]),
        tl.reshape(tl.fma(_fval(w, w, 24, 0, 0, IEEE, mg), a_lo, b_lo), [BN, 8, 4]),
        kxw, x_ptr, sxm, M, K, NMB, EVEN_K, IEEE)
    return _dot_words(
        acc0, acc1, acc2, acc3,
        tl.reshape(tl.fma(_fval(w, w, 4, 0, 0, IEEE, mg), a_hi, b_hi), [BN, 8, 4]),
        tl.reshape(tl.fma(_fval(w, w, 12, 0, 0, IEEE, mg), a_hi, b_hi), [BN, 8, 4]),
        tl.reshape(tl.fma(_fval(w, w, 20, 0, 0, IEEE, mg), a_hi, b_hi), [BN, 8, 4]),
        tl.reshape(tl.fma(_fval(w, w, 28, 0, 0, IEEE, mg), a_hi, b_hi), [BN, 8, 4]),
        kxw + 16, x_ptr, sxm, M, K, NMB, EVEN_K, IEEE)


@triton.jit
def _sb_q45k(acc0, acc1, acc2, acc3, x_ptr, pq, ph, psc, pmn, d, dm, rn, kb, M, K, sxm, K8, K32,
             Q5: tl.constexpr, NMB: tl.constexpr, IEEE: tl.constexpr, JS: tl.constexpr):
    """Q4_K / Q5_K, one superblock from kb (d, dm: its f16 scales as float32 [BN, 1]).
    qs [N, K/2], 4 chunks of 32 bytes: chunk c byte j = value 64c+j (low nibble, sub-block
    2c) and 64c+32+j (high nibble, 2c+1). Q5_K qh [N, K/8], 32 bytes: bit s of byte j is the
    5th bit of value 32s+j. sc, mn u8 [N, K/32]. Words [BN, jh, c]: chunk c, bytes 4jh.."""
    BN: tl.constexpr = rn.shape[0]
    c4 = tl.arange(0, 4)
    s8 = rn[:, None] * K32 + kb // 32 + tl.arange(0, 8)[None, :]
    sc_lo, sc_hi = tl.split(tl.reshape(tl.load(psc + s8), [BN, 4, 2]))
    mn_lo, mn_hi = tl.split(tl.reshape(tl.load(pmn + s8), [BN, 4, 2]))
    # value = (d * sc) * q - (dmin * mn); low nibbles at p = 16, high at p = 12 (see _fval)
    a_lo, b_lo = _affine(d * sc_lo.to(tl.float32), -(dm * mn_lo.to(tl.float32)), 16, IEEE)
    a_hi, b_hi = _affine(d * sc_hi.to(tl.float32), -(dm * mn_hi.to(tl.float32)), 12, IEEE)
    if IEEE:
        mg = _opaque(a_lo, 0x4B000000)[:, None, :]
    else:
        mg = _opaque(a_lo, 0x3F800000)[:, None, :]
    a_lo = a_lo[:, None, :]
    b_lo = b_lo[:, None, :]
    a_hi = a_hi[:, None, :]
    b_hi = b_hi[:, None, :]
    if Q5:
        HB: tl.constexpr = 1
    else:
        HB: tl.constexpr = 0
    # JS words of each chunk per dot (8: one dot per half-superblock; 4: two, fewer live
    # registers). The K order inside a dot changes, the per-row arithmetic sequence is fixed.
    for part in tl.static_range(0, 8 // JS):
        jh = part * JS + tl.arange(0, JS)
        wq = tl.load(pq.to(tl.pointer_type(tl.int32)) + rn[:, None, None] * K8
                     + (kb // 8 + 8 * c4[None, :] + jh[:, None])[None])             # [BN, JS, 4]
        if Q5:
            # qh word jh holds the 5th bits of values 4jh..4jh+3 of every sub-block
            wh = tl.load(ph.to(tl.pointer_type(tl.int32)) + rn[:, None, None] * K32
                         + (kb // 32 + jh[:, None] + 0 * c4[None, :])[None])
            wh = wh >> (2 * c4)[None, None, :]         # bit 8i (+1): sub-block 2c (2c+1)
        else:
            wh = wq
        kxw = kb + 64 * c4[None, :] + 4 * jh[:, None]                                # [JS, 4]
        acc0, acc1, acc2, acc3 = _dot_words(
            acc0, acc1, acc2, acc3,
            tl.fma(_fval(wq, wh, 0, 0, HB, IEEE, mg), a_lo, b_lo),
            tl.fma(_fval(wq, wh, 8, 8, HB, IEEE, mg), a_lo, b_lo),
            tl.fma(_fval(wq, wh, 16, 16, HB, IEEE, mg), a_lo, b_lo),
            tl.fma(_fval(wq, wh, 24, 24, HB, IEEE, mg), a_lo, b_lo),
            kxw, x_ptr, sxm, M, K, NMB, True, IEEE)
        acc0, acc1, acc2, acc3 = _dot_words(
            acc0, acc1, acc2, acc3,
            tl.fma(_fval(wq, wh, 4, 1, HB, IEEE, mg), a_hi, b_hi),
            tl.fma(_fval(wq, wh, 12, 9, HB, IEEE, mg), a_hi, b_hi),
            tl.fma(_fval(wq, wh, 20, 17, HB, IEEE, mg), a_hi, b_hi),
            tl.fma(_fval(wq, wh, 28, 25, HB, IEEE, mg), a_hi, b_hi),
            kxw + 32, x_ptr, sxm, M, K, NMB, True, IEEE)
    return acc0, acc1, acc2, acc3


@triton.jit
def _sb_q6k(acc0, acc1, acc2, acc3, x_ptr, pl, ph, psc, d, rn, kb, M, K, sxm, K8, K16,
            NMB: tl.constexpr, IEEE: tl.constexpr):
    """Q6_K, one superblock from kb (d: f16 scale as float32 [BN, 1]). ql [N, K/2] (128
    bytes), qh [N, K/4] (64), sc i8 [N, K/16]. Value 128h + 32j + l (h 0..1, j 0..3, l 0..31):
    low 4 bits = ql[64h + 32(j%2) + l] >> 4(j//2), high 2 bits = qh[32h + l] >> 2j,
    value = d * sc[8h + 2j + l//16] * (q - 32).
    Words [BN, h, lw, c] with c = 2a + l//16 (a = j%2), l = 16(c%2) + 4lw + byte: the low
    nibbles are j = a, the high ones j = a + 2, so a lane's scale index is 8h + 4nb + c."""
    BN: tl.constexpr = rn.shape[0]
    c4 = tl.arange(0, 4)
    hh = tl.arange(0, 2)
    lw = tl.arange(0, 4)
    ql_off = kb // 8 + 16 * hh[:, None, None] + 4 * c4[None, None, :] + lw[None, :, None]
    qh_off = kb // 16 + 8 * hh[:, None, None] + 4 * (c4 % 2)[None, None, :] + lw[None, :, None]
    wq = tl.load(pl.to(tl.pointer_type(tl.int32)) + rn[:, None, None, None] * K8 + ql_off[None])
    wh = tl.load(ph.to(tl.pointer_type(tl.int32)) + rn[:, None, None, None] * K16 + qh_off[None])
    wh = wh >> (2 * (c4 // 2))[None, None, None, :]    # bits 8i + 4nb (2 of them): j = a + 2nb
    sc = tl.load(psc + rn[:, None] * K16 + kb // 16 + tl.arange(0, 16)[None, :])
    sc_lo, sc_hi = tl.split(tl.permute(tl.reshape(sc, [BN, 2, 2, 4]), (0, 1, 3, 2)))  # [BN, 2, 4]
    a_lo, b_lo = _affine(d[:, :, None] * sc_lo.to(tl.float32), d[:, :, None] * sc_lo.to(tl.float32) * -32.0, 16, IEEE)
    a_hi, b_hi = _affine(d[:, :, None] * sc_hi.to(tl.float32), d[:, :, None] * sc_hi.to(tl.float32) * -32.0, 12, IEEE)
    if IEEE:
        mg = _opaque(a_lo, 0x4B000000)[:, :, None, :]
    else:
        mg = _opaque(a_lo, 0x3F800000)[:, :, None, :]
    a_lo = a_lo[:, :, None, :]
    b_lo = b_lo[:, :, None, :]
    a_hi = a_hi[:, :, None, :]
    b_hi = b_hi[:, :, None, :]
    kxw = tl.reshape(kb + 128 * hh[:, None, None] + 4 * lw[None, :, None]
                     + (32 * (c4 // 2) + 16 * (c4 % 2))[None, None, :], [8, 4])
    acc0, acc1, acc2, acc3 = _dot_words(
        acc0, acc1, acc2, acc3,
        tl.reshape(tl.fma(_fval(wq, wh, 0, 0, 2, IEEE, mg), a_lo, b_lo), [BN, 8, 4]),
        tl.reshape(tl.fma(_fval(wq, wh, 8, 8, 2, IEEE, mg), a_lo, b_lo), [BN, 8, 4]),
        tl.reshape(tl.fma(_fval(wq, wh, 16, 16, 2, IEEE, mg), a_lo, b_lo), [BN, 8, 4]),
        tl.reshape(tl.fma(_fval(wq, wh, 24, 24, 2, IEEE, mg), a_lo, b_lo), [BN, 8, 4]),
        kxw, x_ptr, sxm, M, K, NMB, True, IEEE)
    return _dot_words(
        acc0, acc1, acc2, acc3,
        tl.reshape(tl.fma(_fval(wq, wh, 4, 4, 2, IEEE, mg), a_hi, b_hi), [BN, 8, 4]),
        tl.reshape(tl.fma(_fval(wq, wh, 12, 12, 2, IEEE, mg), a_hi, b_hi), [BN, 8, 4]),
        tl.reshape(tl.fma(_fval(wq, wh, 20, 20, 2, IEEE, mg), a_hi, b_hi), [BN, 8, 4]),
        tl.reshape(tl.fma(_fval(wq, wh, 28, 28, 2, IEEE, mg), a_hi, b_hi), [BN, 8, 4]),
        kxw + 64, x_ptr, sxm, M, K, NMB, True, IEEE)


@triton.jit
def _kscales(pd, rn, kb, K256, SB: tl.constexpr):
    """The f16 superblock scale of rows rn for superblocks kb/256 .. (+SB-1) as float32
    [BN, 1] each (SB = 2: one 4-byte load per row, which the pipeliner can copy ahead)."""
    if SB == 2:
        dd = tl.load(pd + rn[:, None] * K256 + kb // 256 + tl.arange(0, 2)[None, :])
        d0, d1 = tl.split(dd.to(tl.float32))
        return d0[:, None], d1[:, None]
    else:
        d0 = tl.load(pd + rn[:, None] * K256 + kb // 256).to(tl.float32)
        return d0, d0


# ---------------------------------------------------------------------------------------------
# the kernel


@triton.jit(do_not_specialize=["M"])   # one compiled kernel per row-slice count, whatever M
def _packed_mm_kernel(
    x_ptr, o_ptr, p0, p1, p2, p3, p4, p5,
    M, N, K, sxm, som, sop, K4, K8, K16, K32, K256,
    TPS: tl.constexpr, QT: tl.constexpr, BN: tl.constexpr, NMB: tl.constexpr, SPLIT: tl.constexpr,
    EVEN_K: tl.constexpr, IEEE: tl.constexpr, SB: tl.constexpr, JS: tl.constexpr,
):
    """One program: weight rows [pid_n*BN, +BN), tiles [pid_s*TPS, +TPS) of TK = 256*SB values
    (SB superblocks for K-quants; SB = 1 for the 32-block types)."""
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    rn_out = pid_n * BN + tl.arange(0, BN)
    rn = tl.minimum(rn_out, N - 1)          # clamped rows: loads need no N mask

    acc0 = tl.zeros([BN, 16], dtype=tl.float32)
    acc1 = tl.zeros([BN, 16], dtype=tl.float32)
    acc2 = tl.zeros([BN, 16], dtype=tl.float32)
    acc3 = tl.zeros([BN, 16], dtype=tl.float32)

    # the host picks a split count dividing the tile count: every split has TPS tiles (a
    # constexpr: a known trip count, and Triton 3.6's CPU interpreter cannot loop over a
    # runtime scalar with numpy >= 2.4)
    for i in range(0, TPS):
        kb = (pid_s * TPS + i) * (256 * SB)
        if QT == 0:
            acc0, acc1, acc2, acc3 = _tile_q8_0(acc0, acc1, acc2, acc3, x_ptr, p0, p1, rn, kb,
                                                M, K, sxm, K4, K32, NMB, EVEN_K, IEEE)
        elif QT == 1:
            acc0, acc1, acc2, acc3 = _tile_q4_01(acc0, acc1, acc2, acc3, x_ptr, p0, p1, p1, rn, kb,
                                                 M, K, sxm, K8, K32, False, NMB, EVEN_K, IEEE)
        elif QT == 2:
            acc0, acc1, acc2, acc3 = _tile_q4_01(acc0, acc1, acc2, acc3, x_ptr, p0, p1, p2, rn, kb,
                                                 M, K, sxm, K8, K32, True, NMB, EVEN_K, IEEE)
        elif QT == 3:
            # Q4_K planes: qs, d, dmin, sc, mn
            d0, d1 = _kscales(p1, rn, kb, K256, SB)
            m0, m1 = _kscales(p2, rn, kb, K256, SB)
            acc0, acc1, acc2, acc3 = _sb_q45k(acc0, acc1, acc2, acc3, x_ptr, p0, p0, p3, p4,
                                              d0, m0, rn, kb, M, K, sxm, K8, K32, False, NMB, IEEE, JS)
            if SB == 2:
                acc0, acc1, acc2, acc3 = _sb_q45k(acc0, acc1, acc2, acc3, x_ptr, p0, p0, p3, p4,
                                                  d1, m1, rn, kb + 256, M, K, sxm, K8, K32, False, NMB, IEEE, JS)
        elif QT == 4:
            # Q5_K planes: qs, qh, d, dmin, sc, mn
            d0, d1 = _kscales(p2, rn, kb, K256, SB)
            m0, m1 = _kscales(p3, rn, kb, K256, SB)
            acc0, acc1, acc2, acc3 = _sb_q45k(acc0, acc1, acc2, acc3, x_ptr, p0, p1, p4, p5,
                                              d0, m0, rn, kb, M, K, sxm, K8, K32, True, NMB, IEEE, JS)
            if SB == 2:
                acc0, acc1, acc2, acc3 = _sb_q45k(acc0, acc1, acc2, acc3, x_ptr, p0, p1, p4, p5,
                                                  d1, m1, rn, kb + 256, M, K, sxm, K8, K32, True, NMB, IEEE, JS)
        else:
            # Q6_K planes: ql, qh, sc, d
            d0, d1 = _kscales(p3, rn, kb, K256, SB)
            acc0, acc1, acc2, acc3 = _sb_q6k(acc0, acc1, acc2, acc3, x_ptr, p0, p1, p2, d0,
                                             rn, kb, M, K, sxm, K8, K16, NMB, IEEE)
            if SB == 2:
                acc0, acc1, acc2, acc3 = _sb_q6k(acc0, acc1, acc2, acc3, x_ptr, p0, p1, p2, d1,
                                                 rn, kb + 256, M, K, sxm, K8, K16, NMB, IEEE)

    _store(acc0, o_ptr, 0, rn_out, M, N, som, sop, pid_s, SPLIT)
    if NMB > 1:
        _store(acc1, o_ptr, 16, rn_out, M, N, som, sop, pid_s, SPLIT)
    if NMB > 2:
        _store(acc2, o_ptr, 32, rn_out, M, N, som, sop, pid_s, SPLIT)
    if NMB > 3:
        _store(acc3, o_ptr, 48, rn_out, M, N, som, sop, pid_s, SPLIT)


@triton.jit
def _sum_splits_kernel(ws_ptr, o_ptr, MN, sws, S: tl.constexpr, BLOCK: tl.constexpr):
    """o[i] = sum_{s=0..S-1} ws[s, i] in that fixed order (float32), cast to o's dtype."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < MN
    acc = tl.load(ws_ptr + i, mask=mask, other=0.0)
    for s in range(1, S):
        acc += tl.load(ws_ptr + s * sws + i, mask=mask, other=0.0)
    tl.store(o_ptr + i, acc.to(o_ptr.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------------------------------------
# int8 path (bf16/fp16 activations, Q4_K / Q6_K): activations quantized per row to int8 with
# one float scale per 256 values (llama.cpp's q8_K), integer tensor-core dots per sub-block


@triton.jit
def _quant_x_kernel(x_ptr, q_ptr, q2_ptr, s_ptr, u_ptr, u2_ptr, sxm, K, K256, K16):
    """Row r, superblock b (one program each: nothing depends on other rows):
    s = amax / 127 (float32 [M, K/256]); q = round(x / s) (int8 [M, K]) and the residual
    q2 = round(256 * (x / s - q)) (int8, |.| <= 127): x ~= s * (q + q2 / 256), about 16 bits.
    q, q2 are stored in the K order of the kernel's weight tile (words (g, t, h), see
    _q4k_i8_kernel): value 64g + 32h + 4t + b at 64g + 8t + 4h + b, so a superblock of x is
    one contiguous load there.
    Per 32 values j, the integer sums u_j of q (and of q2) as fp16 pairs
    (u_j - (u_j & 31), u_j & 31) at [M, K/16]: both exact in fp16 (the min-term dot)."""
    r = tl.program_id(0)
    b = tl.program_id(1)
    offs = b * 256 + tl.arange(0, 256)
    v = tl.load(x_ptr + r * sxm + offs).to(tl.float32)
    amax = tl.max(tl.abs(v), axis=0)
    inv = tl.where(amax > 0.0, 127.0 / amax, 0.0)
    f = v * inv
    qf = tl.floor(f + 0.5)
    q = tl.minimum(tl.maximum(qf.to(tl.int32), -127), 127)
    q2 = tl.minimum(tl.maximum(tl.floor((f - qf) * 256.0 + 0.5).to(tl.int32), -127), 127)
    g4 = tl.arange(0, 4)
    t8 = tl.arange(0, 8)
    h2 = tl.arange(0, 2)
    perm = tl.reshape(64 * g4[:, None, None, None] + 8 * t8[None, None, :, None] + 4 * h2[None, :, None, None]
                      + tl.arange(0, 4)[None, None, None, :], [256])
    tl.store(q_ptr + r * K + b * 256 + perm, q.to(tl.int8))
    tl.store(q2_ptr + r * K + b * 256 + perm, q2.to(tl.int8))
    tl.store(s_ptr + r * K256 + b, amax / 127.0)
    u = tl.sum(tl.reshape(q, [8, 32]), axis=1)
    ul = u & 31
    tl.store(u_ptr + r * K16 + b * 16 + tl.arange(0, 16), tl.reshape(tl.join(u - ul, ul), [16]).to(tl.float16))
    u = tl.sum(tl.reshape(q2, [8, 32]), axis=1)
    ul = u & 31
    tl.store(u2_ptr + r * K16 + b * 16 + tl.arange(0, 16), tl.reshape(tl.join(u - ul, ul), [16]).to(tl.float16))


@triton.jit
def _bytes_i8(w):
    """int32 words [BN, A, B, C] (each byte 0..127) -> int8 [BN, 4ABC], byte b of word
    (a, b', c) at column 4 * ((a * B + b') * C + c) + b (a word's bytes stay in one thread's
    register: the packing folds away)."""
    BN: tl.constexpr = w.shape[0]
    NW: tl.constexpr = w.shape[1] * w.shape[2] * w.shape[3]
    b0 = w.to(tl.int8)
    b1 = (w >> 8).to(tl.int8)
    b2 = (w >> 16).to(tl.int8)
    b3 = (w >> 24).to(tl.int8)
    return tl.reshape(tl.join(tl.join(b0, b2), tl.join(b1, b3)), [BN, 4 * NW])


@triton.jit(do_not_specialize=["M"])
def _q4k_i8_kernel(xq_ptr, xq2_ptr, xs_ptr, xu_ptr, xu2_ptr, o_ptr, pq, pd, pdm, psc, pmn,
                   M, N, K, som, sop, K8, K32, K128, K256, K16,
                   TPS: tl.constexpr, BN: tl.constexpr, BM: tl.constexpr, SPLIT: tl.constexpr,
                   X2: tl.constexpr):
    """Q4_K x int8 activations. Program: weight rows [pid_n*BN, +BN), superblocks
    [pid_s*TPS, +TPS), activation rows 0..BM-1 (BM = 16/32/64 >= M: the integer dots are
    exact whatever their shape, and every float op after them is elementwise, so a row's
    bits do not depend on BM or M).

    Per superblock and row n: value = (d*sc_j) * q - dmin*mn_j, x ~ xs * xq, so
        y += (d*xs) * sum_j sc_j * (q_j . xq_j) - (dmin*xs) * sum_j mn_j * u_j
    with u_j = sum of xq over sub-block j. The scale is folded into the int8 weights without
    a per-sub-block rescale: sc = 8*sh + sl (sh, sl in 0..7), q*sl and q*sh are <= 105 (one
    32-bit multiply scales 4 packed bytes, no carries), and two int32 accumulators collect
    q*sl . xq and q*sh . xq over the whole superblock on the tensor cores."""
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    rn_out = pid_n * BN + tl.arange(0, BN)
    rn = tl.minimum(rn_out, N - 1)
    rm = tl.arange(0, BM)
    rmask = rm < M
    accf = tl.zeros([BN, BM], dtype=tl.float32)
    mnp = pmn + rn[:, None] * K32 + tl.arange(0, 16)[None, :] // 2
    up = xu_ptr + rm[None, :] * K16 + tl.arange(0, 16)[:, None]
    # the nibble mask as a runtime value (K >= 0): with a literal, LLVM folds the shifts of
    # the high nibbles into the byte extraction and can no longer see that the bytes are
    # just the word (it then repacks them with PRMTs)
    m4 = (K >> 31) | 0x0F0F0F0F
    # one superblock as [BN, 4 (g), 8 (t), 2 (h)] words: word t of group g, low (h = 0) or
    # high nibbles; byte b of it is the value at k = 64g + 32h + 4t + b (sub-block 2g + h).
    # The A tile's K order is (g, t, h, b); x is stored in that order (_quant_x_kernel).
    g4 = tl.arange(0, 4)
    t8 = tl.arange(0, 8)
    h2 = tl.arange(0, 2)
    wp = pq.to(tl.pointer_type(tl.int32)) + rn[:, None, None] * K8 + (8 * g4[:, None] + t8[None, :])[None]
    scp = psc + rn[:, None, None] * K32 + (2 * g4[:, None] + h2[None, :])[None]
    xp = xq_ptr + rm[None, :] * K + tl.arange(0, 256)[:, None]
    xp2 = xq2_ptr + rm[None, :] * K + tl.arange(0, 256)[:, None]
    up2 = xu2_ptr + rm[None, :] * K16 + tl.arange(0, 16)[:, None]
    # The small per-superblock operands (scales, mins, x scale and sums) are too narrow for
    # the pipeliner's async copies: they are loaded one superblock ahead, into registers.
    sb = pid_s * TPS
    sc = tl.load(scp + sb * 8).to(tl.int32)                         # [BN, 4, 2]
    mnh = tl.load(mnp + sb * 8).to(tl.float16)                      # [BN, 16]
    u = tl.load(up + sb * 16, mask=rmask[None, :], other=0.0)      # [16, BM]
    u2 = tl.load(up2 + sb * 16, mask=rm[None, :] < M * X2, other=0.0)
    d = tl.load(pd + rn * K256 + sb).to(tl.float32)
    dm = tl.load(pdm + rn * K256 + sb).to(tl.float32)
    xs = tl.load(xs_ptr + rm * K256 + sb, mask=rmask, other=0.0)
    last = pid_s * TPS + TPS - 1
    for i in range(0, TPS):
        sb = pid_s * TPS + i
        nb = tl.minimum(sb + 1, last)
        sc_n = tl.load(scp + nb * 8).to(tl.int32)
        mnh_n = tl.load(mnp + nb * 8).to(tl.float16)
        u_n = tl.load(up + nb * 16, mask=rmask[None, :], other=0.0)
        u2_n = tl.load(up2 + nb * 16, mask=rm[None, :] < M * X2, other=0.0)
        d_n = tl.load(pd + rn * K256 + nb).to(tl.float32)
        dm_n = tl.load(pdm + rn * K256 + nb).to(tl.float32)
        xs_n = tl.load(xs_ptr + rm * K256 + nb, mask=rmask, other=0.0)
        kb = sb * 256
        w = tl.load(wp + sb * 32)                                   # [BN, 4, 8]
        q = tl.join(w & m4, (w >> 4) & m4)                          # [BN, 4, 8, 2]
        sl = (sc & 7)[:, :, None, :]
        sh = (sc >> 3)[:, :, None, :]
        xt = tl.load(xp + kb, mask=rmask[None, :], other=0)        # [256, BM]
        a_l = _bytes_i8(q * sl)
        a_h = _bytes_i8(q * sh)
        acc_l = tl.dot(a_l, xt, out_dtype=tl.int32)
        acc_h = tl.dot(a_h, xt, out_dtype=tl.int32)
        isum = (acc_l + 8 * acc_h).to(tl.float32)
        # min term sum_j mn_j * u_j, exact: fp16 products of small integers, fp32 sums < 2^24
        acc_m = tl.dot(mnh, u)
        if X2:
            xt2 = tl.load(xp2 + kb, mask=rmask[None, :], other=0)
            acc_l2 = tl.dot(a_l, xt2, out_dtype=tl.int32)
            acc_h2 = tl.dot(a_h, xt2, out_dtype=tl.int32)
            isum = tl.fma((acc_l2 + 8 * acc_h2).to(tl.float32), 0.00390625, isum)
            acc_m = tl.fma(tl.dot(mnh, u2), 0.00390625, acc_m)
        a = d[:, None] * xs[None, :]
        b = dm[:, None] * xs[None, :]
        accf = tl.fma(a, isum, accf)
        accf = tl.fma(-b, acc_m, accf)
        sc, mnh, u, u2, d, dm, xs = sc_n, mnh_n, u_n, u2_n, d_n, dm_n, xs_n
    mask = rmask[None, :] & (rn_out[:, None] < N)
    if SPLIT:
        tl.store(o_ptr + pid_s * sop + rm[None, :] * som + rn_out[:, None], accf, mask=mask)
    else:
        tl.store(o_ptr + rm[None, :] * som + rn_out[:, None], accf.to(o_ptr.dtype.element_ty), mask=mask)

# ---------------------------------------------------------------------------------------------
# host side


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    try:
        return torch.cuda.get_device_properties(device_index).multi_processor_count
    except Exception:  # noqa: BLE001 - interpreter on CPU, or no CUDA runtime
        return 16


_KQUANTS = ("Q4_K", "Q5_K", "Q6_K")
_I8_TYPES = ("Q4_K",)


def _wave_eff(programs: int, sms: int) -> float:
    return programs / (triton.cdiv(programs, sms) * sms)


@functools.lru_cache(maxsize=None)
def _config(qtype: str, n: int, k: int, sms: int, override: tuple) -> dict:
    sb = 2 if qtype in _KQUANTS and (k // 256) % 2 == 0 else 1
    n_tiles = triton.cdiv(k, 256 * sb)
    if triton.cdiv(n, 128) >= sms // 2 and qtype not in ("Q5_K", "Q6_K"):
        # Q4_K: two stages and half-width dots keep ~126 registers and ~70 KB of shared
        # memory per 256-thread program, so two programs share an SM
        cfg = {"BN": 128, "num_warps": 8, "num_stages": 2 if qtype == "Q4_K" else 3}
    else:
        cfg = {"BN": 64, "num_warps": 4, "num_stages": 3}
    cfg.update(dict(override))
    if cfg.get("I8", 0) and qtype in _I8_TYPES:
        n_blocks = triton.cdiv(n, cfg.get("I8_BN", 64))
    else:
        n_blocks = triton.cdiv(n, cfg["BN"])
    if "splits" not in cfg:
        # Split K only when the row blocks alone leave SMs idle: the partial sums cost
        # S * M * N * 8 bytes of traffic. The count divides the tile count (equal splits).
        splits = 1
        if n_blocks < sms:
            for s in range(2, min(n_tiles, 16) + 1):
                if n_tiles % s == 0 and n_blocks * (s // 2 if s > 2 else 1) < sms and \
                        _wave_eff(n_blocks * s, sms) > _wave_eff(n_blocks * splits, sms) + 0.02:
                    splits = s
        cfg["splits"] = splits
    if n_tiles % cfg["splits"]:
        raise ValueError(f"splits={cfg['splits']} does not divide {n_tiles} tiles")
    cfg.update(SB=sb, n_tiles=n_tiles, tiles_per_split=n_tiles // cfg["splits"])
    # The x tiles of every 16-row slice are staged in shared memory for each pipeline stage,
    # so 3-4 slices get one stage fewer. Pipeline depth only changes when loads are issued,
    # not any arithmetic or its order: rows stay bit-identical across M.
    cfg.setdefault("num_stages_wide", min(cfg["num_stages"], 2))
    # the int8 path (Q4_K, bf16/fp16 activations; opt-in with I8=1): see _q4k_i8_kernel.
    # Measured slower than the dequantizing kernel on the H200 (module docstring), so off by
    # default. Only the split count matters for its bits (it fixes the float summation
    # order); the tile shape may follow the row count because every integer dot is exact and
    # all float ops are elementwise.
    cfg.setdefault("I8", 0)
    if cfg["I8"]:
        cfg.setdefault("I8_X2", 1)      # the residual int8 plane: ~16-bit activations
        # (BN, warps, stages) for 16-, 32- and 64-row tiles
        cfg.setdefault("I8_BN", 64)
        cfg.setdefault("I8_WARPS", 4)
        cfg.setdefault("I8_STAGES", 3)
        cfg.setdefault("I8_BN32", cfg["I8_BN"])
        cfg.setdefault("I8_WARPS32", cfg["I8_WARPS"])
        cfg.setdefault("I8_STAGES32", cfg["I8_STAGES"])
        cfg.setdefault("I8_BN64", 64)
        cfg.setdefault("I8_WARPS64", 4)
        cfg.setdefault("I8_STAGES64", 2)
    cfg.setdefault("JS", 4 if qtype in ("Q4_K", "Q5_K") else 8)
    return cfg


def kernel_config(qtype: str, n: int, k: int, sms: int, **override) -> dict:
    """The launch configuration of a shape: a function of (qtype, N, K, SM count) only, never
    of the number of activation rows (that is what makes the result row-invariant).
    ``override`` (BN, num_warps, num_stages, splits; I8 and the I8_* tile keys of the int8
    path) is for benchmarks."""
    return dict(_config(qtype, n, k, sms, tuple(sorted(override.items()))))


def packed_matmul(x: torch.Tensor, w, **override) -> torch.Tensor:
    """``x @ dequant(w).T`` for ``x`` [..., K] (bf16/fp16/fp32, on the GPU, or on the CPU under
    ``TRITON_INTERPRET=1``) and a packed weight ``w`` (``.qtype``, ``.shape`` (N, K),
    ``.planes``). Returns [..., N] in ``x.dtype``. ``override``: see ``kernel_config``."""
    qtype = getattr(w.qtype, "name", str(w.qtype)).upper().split(".")[-1]
    if qtype not in _CODES:
        raise NotImplementedError(f"packed_matmul: no Triton kernel for {qtype}")
    n, k = (int(s) for s in w.shape)
    if x.shape[-1] != k:
        raise ValueError(f"packed_matmul: x has K={x.shape[-1]}, weight is {n}x{k}")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise TypeError(f"packed_matmul: unsupported activation dtype {x.dtype}")
    if k % _SUPERBLOCK[qtype]:
        raise ValueError(f"packed_matmul: {qtype} needs K to be a multiple of {_SUPERBLOCK[qtype]}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m_all = x2.shape[0]
    out = torch.empty((m_all, n), dtype=x.dtype, device=x.device)
    if m_all == 0:
        return out.reshape(*lead, n)
    if x.dtype != torch.float32 and qtype in _I8_TYPES:
        sms = _sm_count(x.device.index or 0) if x.device.type == "cuda" else 16
        cfg = kernel_config(qtype, n, k, sms, **override)
        if cfg["I8"] and k % 256 == 0:
            _i8_matmul(x2, w, qtype, n, k, cfg, out)
            return out.reshape(*lead, n)
    planes = [w.planes[name] for name in _PLANES[qtype]]
    for p in planes:
        if not p.is_contiguous():
            raise ValueError("packed_matmul: planes must be contiguous")
    planes = planes + [planes[0]] * (6 - len(planes))
    if qtype == "Q8_0":
        planes[0] = planes[0].view(torch.uint8)
    if qtype == "Q6_K":
        planes[2] = planes[2].view(torch.int8)
    sms = _sm_count(x.device.index or 0) if x.device.type == "cuda" else 16
    cfg = kernel_config(qtype, n, k, sms, **override)
    splits = cfg["splits"]
    even_k = k % 256 == 0
    ieee = x.dtype == torch.float32
    grid = (triton.cdiv(n, cfg["BN"]), splits)
    for r0 in range(0, m_all, MAX_ROWS):
        r1 = min(m_all, r0 + MAX_ROWS)
        m = r1 - r0
        xc = x2[r0:r1]
        oc = out[r0:r1]
        if splits > 1:
            ws = torch.empty((splits, m, n), dtype=torch.float32, device=x.device)
            dst, sop = ws, ws.stride(0)
        else:
            dst, sop = oc, 0
        _packed_mm_kernel[grid](
            xc, dst, *planes, m, n, k, xc.stride(0), dst.stride(-2), sop,
            k // 4, k // 8, k // 16, k // 32, k // 256,  # plane row strides (JIT-specialized)
            TPS=cfg["tiles_per_split"], QT=_CODES[qtype], BN=cfg["BN"], NMB=triton.cdiv(m, 16),
            SPLIT=splits > 1, EVEN_K=even_k, IEEE=ieee, SB=cfg["SB"], JS=cfg["JS"],
            num_warps=cfg["num_warps"],
            num_stages=cfg["num_stages"] if m <= 32 else cfg["num_stages_wide"],
        )
        if splits > 1:
            mn = m * n
            blk = 1024
            _sum_splits_kernel[(triton.cdiv(mn, blk),)](
                ws, oc, mn, ws.stride(0), S=splits, BLOCK=blk, num_warps=4)
    return out.reshape(*lead, n)


def _i8_matmul(x2, w, qtype, n, k, cfg, out):
    """The int8 path: quantize the rows of x (per row, per 256 values), then the integer
    tensor-core kernel on chunks of up to 64 rows."""
    m_all = x2.shape[0]
    dev = x2.device
    xq = torch.empty((2, m_all, k), dtype=torch.int8, device=dev)
    xs = torch.empty((m_all, k // 256), dtype=torch.float32, device=dev)
    xu = torch.empty((2, m_all, k // 16), dtype=torch.float16, device=dev)
    _quant_x_kernel[(m_all, k // 256)](x2, xq[0], xq[1], xs, xu[0], xu[1], x2.stride(0), k, k // 256, k // 16,
                                       num_warps=2)
    p = w.planes
    splits = cfg["splits"]
    for r0 in range(0, m_all, MAX_ROWS):
        r1 = min(m_all, r0 + MAX_ROWS)
        m = r1 - r0
        bm = 16 if m <= 16 else (32 if m <= 32 else 64)
        if bm == 64:
            bn, nw, ns = cfg["I8_BN64"], cfg["I8_WARPS64"], cfg["I8_STAGES64"]
        elif bm == 32:
            bn, nw, ns = cfg["I8_BN32"], cfg["I8_WARPS32"], cfg["I8_STAGES32"]
        else:
            bn, nw, ns = cfg["I8_BN"], cfg["I8_WARPS"], cfg["I8_STAGES"]
        oc = out[r0:r1]
        if splits > 1:
            ws = torch.empty((splits, m, n), dtype=torch.float32, device=dev)
            dst, sop = ws, ws.stride(0)
        else:
            dst, sop = oc, 0
        _q4k_i8_kernel[(triton.cdiv(n, bn), splits)](
            xq[0, r0:r1], xq[1, r0:r1], xs[r0:r1], xu[0, r0:r1], xu[1, r0:r1], dst, p["qs"], p["d"], p["dmin"], p["sc"], p["mn"],
            m, n, k, dst.stride(-2), sop, k // 8, k // 32, k // 128, k // 256, k // 16,
            TPS=cfg["n_tiles"] * cfg["SB"] // splits, BN=bn, BM=bm, SPLIT=splits > 1, X2=cfg["I8_X2"],
            num_warps=nw, num_stages=ns)
        if splits > 1:
            mn = m * n
            _sum_splits_kernel[(triton.cdiv(mn, 1024),)](ws, oc, mn, ws.stride(0), S=splits, BLOCK=1024, num_warps=4)
