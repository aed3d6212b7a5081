"""Dequantization helpers of the Triton packed matmul (``triton_kernels.py``), shared by every
GGUF type's tile (``triton_tiles.py``): integer fields of int32 words turned into exact float32
values in registers, and the ``tl.dot`` of a dequantized word tile against the activations.

Every type is read as int32 words (4 consecutive bytes). A tile of words [BN, JH, 4] has its
last axis (c) on the 4 lanes that the MMA operand layout spreads K bits 1-2 over, and each
word's 4 bytes in one thread's registers (K bit 0 and bit 3): ``_join4p`` builds exactly that
order, so the dequantized tile feeds ``tl.dot`` without any data movement, and each lane only
ever sees one sub-block per (row, c): the scale work per weight is small.

Imported only by the other ``triton_*`` modules, which are imported lazily: Triton is not a
dependency of the package.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_dot import dot_f32

_TWO23 = tl.constexpr(8388608.0)     # 2^23


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
def _magic(a, EXACT: tl.constexpr):
    """The exponent bits ``mg`` of ``_fval`` shaped like ``a``: 2^23 (EXACT) or 1.0."""
    if EXACT:
        return _opaque(a, 0x4B000000)
    else:
        return _opaque(a, 0x3F800000)


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
    """IEEE: 0 for 16-bit activations, else the code of the float32 dot precision of the
    backend the launcher runs on (engine.kernels.dot_precision: tf32x3 on CUDA, bf16x6 on ROCm)."""
    if IEEE:
        return dot_f32(w, xt, acc, IEEE)
    else:
        return tl.dot(w, xt, acc)


@triton.jit
def _xload1(x_ptr, rm, kx, K, EVEN_K: tl.constexpr):
    """x^T of a one-row launch (M == 1): row 0 of x at K positions kx [KP], loaded once as a
    [KP] vector, then made the [KP, 16] dot operand in registers with columns 1..15 zero. The
    operand is the one ``_xload`` gives at M == 1 (rows >= M masked to 0.0): the same dot on
    the same values, so row 0 of the product is bit-identical; only the loads differ (KP
    values instead of 16 masked rows of them).

    Built as [16, KP] and transposed: Triton 3.6 then stores it to the dot's shared operand
    without the register shuffle that a [KP, 16] ``where`` costs (sm_90: 128 registers, 4
    barriers a loop trip, against 145 and 8). The reshape pair is a no-op in the compiled
    code; in the CPU interpreter it makes the operand C-ordered (numpy's float32 matmul rounds
    differently on a transposed view)."""
    if EVEN_K:
        xr = tl.load(x_ptr + kx)
    else:
        xr = tl.load(x_ptr + kx, mask=kx < K, other=0.0)
    xt = tl.trans(tl.where(rm[:, None] == 0, xr[None, :], tl.zeros_like(xr)[None, :]))
    return tl.reshape(tl.reshape(xt, [xt.shape[0] * xt.shape[1]]), xt.shape)


@triton.jit
def _to_dot_type(v, cdt: tl.constexpr, RNE: tl.constexpr):
    """float32 weights -> the dot's dtype. RNE (bfloat16 on ROCm): round to nearest even in
    integer ops, (bits + 0x7FFF + bit 16) >> 16, which is the hardware conversion's result for
    every finite value and infinity (a packed weight is never NaN: its scales are checked
    finite at load, engine.model.source), in ~2.5 instructions a weight where RDNA's compiled
    conversion takes ~5.5 (a NaN check and select on top; gfx11/gfx12 have no bf16 convert)."""
    if RNE and cdt == tl.bfloat16:
        return _bf16_bits(v).to(tl.bfloat16, bitcast=True)
    else:
        return v.to(cdt)


@triton.jit
def _bf16_bits(v):
    """The bfloat16 bits (uint16) of float32 ``v`` rounded to nearest even: the bits plus
    0x7FFF plus bit 16 (ties go to the even half), then the top half."""
    b = v.to(tl.uint32, bitcast=True)
    return ((b + (((b >> 16) & 1) + 0x7FFF)) >> 16).to(tl.uint16)


@triton.jit
def _dot_words(acc0, acc1, acc2, acc3, v0, v1, v2, v3, kxw, x_ptr, sxm, M, K,
               NMB: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr,
               X1: tl.constexpr = False, XP: tl.constexpr = False, RNE: tl.constexpr = False):
    """acc_i[BN, 16] += w @ x[16i:16i+16, :]^T over one word tile.

    v0..v3: float32 weights [BN, JH, 4] of bytes 0..3 of the words; kxw [JH, 4]: the K
    position of byte 0 of each word (bytes are consecutive in K). X1 (a one-row launch, the
    host's promise that M == 1; NMB is 1): x's one row loaded once (``_xload1``). XP: x was
    permuted by the host so that this dot's K order is contiguous in memory; kxw is then the
    scalar offset of the dot's first value (the same values in the same order: the same bits,
    loaded as 16-byte vectors instead of 4-byte pairs). RNE: the weights' bfloat16 rounding in
    integer ops (``_to_dot_type``; ROCm): the same bits."""
    cdt = x_ptr.dtype.element_ty
    BN: tl.constexpr = v0.shape[0]
    JH: tl.constexpr = v0.shape[1]
    KP: tl.constexpr = JH * 16
    w = tl.reshape(_to_dot_type(_join4p(v0, v1, v2, v3), cdt, RNE), [BN, KP])
    if XP:
        kx = tl.max_contiguous(tl.multiple_of(kxw + tl.arange(0, KP), 16), 16)
    else:
        i2 = tl.arange(0, 2)
        kx = tl.reshape(kxw[:, None, :, None] + 2 * i2[None, :, None, None] + i2[None, None, None, :], [KP])
        kx = tl.max_contiguous(tl.multiple_of(kx, 2), 2)
    rm = tl.arange(0, 16)
    if X1:
        return _dot1(_xload1(x_ptr, rm, kx, K, EVEN_K), w, acc0, IEEE), acc1, acc2, acc3
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
def _dot_nibbles(acc0, acc1, acc2, acc3, wq, wh, a, b, mg, kxw, x_ptr, sxm, M, K,
                 P: tl.constexpr, HP: tl.constexpr, HB: tl.constexpr, FLAT: tl.constexpr,
                 NMB: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr,
                 X1: tl.constexpr = False, XP: tl.constexpr = False, RNE: tl.constexpr = False):
    """acc_i += one nibble half of a word tile @ x^T: byte i (0..3) of every word is the nibble
    at bit P + 8i of ``wq`` plus HB high bits at bit HP + 8i of ``wh`` (``_fval``), valued
    ``f * a + b`` (``_affine``), at K position ``kxw`` + i. FLAT: the words are [BN, X, Y, 4],
    flattened to the [BN, X*Y, 4] that ``_dot_words`` takes. X1, XP, RNE: see ``_dot_words``."""
    v0 = tl.fma(_fval(wq, wh, P, HP, HB, IEEE, mg), a, b)
    v1 = tl.fma(_fval(wq, wh, P + 8, HP + 8, HB, IEEE, mg), a, b)
    v2 = tl.fma(_fval(wq, wh, P + 16, HP + 16, HB, IEEE, mg), a, b)
    v3 = tl.fma(_fval(wq, wh, P + 24, HP + 24, HB, IEEE, mg), a, b)
    if FLAT:
        BN: tl.constexpr = wq.shape[0]
        JH: tl.constexpr = wq.shape[1] * wq.shape[2]
        v0 = tl.reshape(v0, [BN, JH, 4])
        v1 = tl.reshape(v1, [BN, JH, 4])
        v2 = tl.reshape(v2, [BN, JH, 4])
        v3 = tl.reshape(v3, [BN, JH, 4])
    return _dot_words(acc0, acc1, acc2, acc3, v0, v1, v2, v3, kxw, x_ptr, sxm, M, K,
                      NMB, EVEN_K, IEEE, X1, XP, RNE)
