"""The dequantizing Triton kernel of ``packed_matmul`` (see ``triton_kernels.py`` for the design
and the launch): one tile per GGUF type (``acc += (one tile of the weight rows rn) @ x^T``),
the kernel that walks a program's K range over them, and the fixed-order sum of split-K
partials (also used by the int8 path, ``triton_int8.py``).

Imported lazily, through ``triton_kernels.py``: Triton is not a dependency of the package.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .pdl import pdl_late, pdl_wait, prefetch_weights
from .triton_fused import _tail
from .triton_sf import _sb_q4k_sf
from .triton_dequant import _TWO23, _affine, _dot_nibbles, _dot_words, _magic, _opaque
from .triton_rdna import (_kv, _rdna_dot, _rdna_words, _rows16, _sb_q4k_rdna, _sb_q4k_si, _tile_q4_01_rdna,
                          _tile_q4_01_si, _tile_q6k8_si)

MAX_ROWS = 64          # rows per launch (4 slices of 16); larger M is done in chunks of 64


# ---------------------------------------------------------------------------------------------
# per-type tiles: acc += (one tile of the weight rows rn) @ x^T


@triton.jit
def _int8_affine(s, IEEE: tl.constexpr):
    """(a, b, mg) for int8 quants of scale s: value = s * q = fma(f, a, b), f from
    ``_int8_fields``. IEEE: f = q exactly; else f = 1 + (q + 128) / 2048 under 1.0's exponent,
    mg = 1.0 with the 0x80 bit at bit 19 (q = (byte ^ 0x80) - 128)."""
    if IEEE:
        return s, s * 0.0, _opaque(s, 0x4B000080)
    else:
        return s * 2048.0, s * -2176.0, _opaque(s, 0x3F880000)


@triton.jit
def _int8_fields(w, mg, IEEE: tl.constexpr):
    """The four int8 quants of each int32 word of ``w`` as ``_int8_affine``'s f (one op each)."""
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
    return f0, f1, f2, f3


@triton.jit
def _tile_q8_0_rdna(acc0, acc1, acc2, acc3, x_ptr, pq, pd, rn, kb, M, K, sxm, K4, K32,
                    NMB: tl.constexpr, EVEN_K: tl.constexpr, RNE: tl.constexpr):
    """Q8_0, 256 values from kb in the order of RDNA's WMMA operand (triton_rdna): two dots of
    4 blocks; block c's 32 bytes are the chunk, a lane half reads 16 of them, so dot position
    [c, s, h, w1, b] is value 32c + 16h + 8s + 4w1 + b; valued as ``_tile_q8_0`` values them."""
    for g in tl.static_range(2):
        blk = 4 * g + tl.arange(0, 4)
        live = kb + 32 * blk < K
        dp = pd + rn[:, None] * K32 + kb // 32 + blk[None, :]
        if EVEN_K:
            wq = _rdna_words(pq, rn, K4, kb // 4 + 32 * g, 4, 4)
            d = tl.load(dp).to(tl.float32)
        else:
            wq = _rdna_words(pq, rn, K4, kb // 4 + 32 * g, 4, 4, live)
            d = tl.load(dp, mask=live[None, :], other=0.0).to(tl.float32)
        a, b, mg = _int8_affine(_rows16(d), 0)
        f0, f1, f2, f3 = _int8_fields(wq, mg, 0)
        acc0, acc1, acc2, acc3 = _rdna_dot(acc0, acc1, acc2, acc3, tl.fma(f0, a, b), tl.fma(f1, a, b),
                                           tl.fma(f2, a, b), tl.fma(f3, a, b), kb + 128 * g + _kv(4, 2, 32),
                                           x_ptr, sxm, M, K, NMB, RNE, EVEN_K)
    return acc0, acc1, acc2, acc3


@triton.jit
def _tile_q8_0(acc0, acc1, acc2, acc3, x_ptr, pq, pd, rn, kb, M, K, sxm, K4, K32,
               NMB: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr, RNE: tl.constexpr = False,
               RDNA: tl.constexpr = False):
    """Q8_0, 256 values (8 blocks of 32) from kb: qs int8 [N, K], d f16 [N, K/32].
    Words [BN, bh, jw, c]: block 4bh+c, word jw (bytes 4jw..4jw+3). RDNA: ``_tile_q8_0_rdna``."""
    if RDNA:
        return _tile_q8_0_rdna(acc0, acc1, acc2, acc3, x_ptr, pq, pd, rn, kb, M, K, sxm, K4, K32,
                               NMB, EVEN_K, RNE)
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
    a, b, mg = _int8_affine(d, IEEE)
    f0, f1, f2, f3 = _int8_fields(w, mg[:, :, None, :], IEEE)
    a = a[:, :, None, :]
    b = b[:, :, None, :]
    v0 = tl.reshape(tl.fma(f0, a, b), [BN, 16, 4])
    v1 = tl.reshape(tl.fma(f1, a, b), [BN, 16, 4])
    v2 = tl.reshape(tl.fma(f2, a, b), [BN, 16, 4])
    v3 = tl.reshape(tl.fma(f3, a, b), [BN, 16, 4])
    kxw = tl.reshape(kb + 32 * blk[:, None, :] + 4 * jw[None, :, None], [16, 4])
    return _dot_words(acc0, acc1, acc2, acc3, v0, v1, v2, v3, kxw, x_ptr, sxm, M, K,
                      NMB, EVEN_K, IEEE, RNE=RNE)


@triton.jit
def _tile_q6k8(acc0, acc1, acc2, acc3, x_ptr, pq, psc, pd, rn, kb, M, K, sxm, K4, K16, K256,
               NMB: tl.constexpr, IEEE: tl.constexpr, RNE: tl.constexpr = False, RDNA: tl.constexpr = False):
    """Q6_K8 (Q6_K widened at load), one superblock from kb: q8 int8 [N, K] (q - 32), sc
    int8 [N, K/16], d f16 [N, K/256]. As ``_tile_q8_0`` (words [BN, bh, half, jw, c]: block
    4bh+c, word 4half+jw) with the scale d * sc of the word's 16-value group 2(4bh+c)+half.
    RDNA 2: small integers in RDNA's WMMA order (``triton_rdna._tile_q6k8_si``)."""
    if RDNA == 2:
        return _tile_q6k8_si(acc0, acc1, acc2, acc3, x_ptr, pq, psc, pd, rn, kb, M, K, sxm, K4, K16,
                             K256, NMB)
    BN: tl.constexpr = rn.shape[0]
    c4 = tl.arange(0, 4)
    bh = tl.arange(0, 2)
    hf = tl.arange(0, 2)
    jw = tl.arange(0, 4)
    blk = 4 * bh[:, None, None] + c4[None, None, :]                                  # [2, 1, 4]
    grp = 2 * blk + hf[None, :, None]                                                # [2, 2, 4]
    woff = (kb // 4 + 8 * blk[:, :, None, :] + 4 * hf[None, :, None, None]
            + jw[None, None, :, None])                                               # [2, 2, 4, 4]
    w = tl.load(pq.to(tl.pointer_type(tl.int32)) + rn[:, None, None, None, None] * K4 + woff[None])
    d = tl.load(pd + rn * K256 + kb // 256).to(tl.float32)
    sc = tl.load(psc + rn[:, None, None, None] * K16 + kb // 16 + grp[None]).to(tl.float32)
    a, b, mg = _int8_affine(d[:, None, None, None] * sc, IEEE)   # exact: the Q6_K scale d * sc
    f0, f1, f2, f3 = _int8_fields(w, mg[:, :, :, None, :], IEEE)
    a = a[:, :, :, None, :]
    b = b[:, :, :, None, :]
    v0 = tl.reshape(tl.fma(f0, a, b), [BN, 16, 4])
    v1 = tl.reshape(tl.fma(f1, a, b), [BN, 16, 4])
    v2 = tl.reshape(tl.fma(f2, a, b), [BN, 16, 4])
    v3 = tl.reshape(tl.fma(f3, a, b), [BN, 16, 4])
    kxw = tl.reshape(kb + 32 * blk[:, :, None, :] + 16 * hf[None, :, None, None]
                     + 4 * jw[None, None, :, None], [16, 4])
    return _dot_words(acc0, acc1, acc2, acc3, v0, v1, v2, v3, kxw, x_ptr, sxm, M, K,
                      NMB, True, IEEE, RNE=RNE)


@triton.jit
def _tile_q4_01(acc0, acc1, acc2, acc3, x_ptr, pq, pd, pm, rn, kb, M, K, sxm, K8, K32,
                Q41: tl.constexpr, NMB: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr,
                RNE: tl.constexpr = False, RDNA: tl.constexpr = False):
    """Q4_0 / Q4_1, 256 values (8 blocks of 32) from kb: qs [N, K/2] (per block 16 bytes,
    byte j = value j low nibble, value 16+j high nibble), d (, m) f16 [N, K/32].
    Words [BN, bh, jw, c]: block 4bh+c, word jw (bytes 4jw..4jw+3). RDNA: in the order of RDNA's
    WMMA operand (``triton_rdna._tile_q4_01_rdna``); RDNA 2: its small integers (``_tile_q4_01_si``)."""
    if RDNA == 2:
        return _tile_q4_01_si(acc0, acc1, acc2, acc3, x_ptr, pq, pd, pm, rn, kb, M, K, sxm, K8, K32,
                              Q41, NMB, EVEN_K)
    if RDNA:
        return _tile_q4_01_rdna(acc0, acc1, acc2, acc3, x_ptr, pq, pd, pm, rn, kb, M, K, sxm, K8, K32,
                                Q41, NMB, EVEN_K, RNE)
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
    mg = _magic(d, IEEE)[:, :, None, :]
    a_lo = a_lo[:, :, None, :]
    b_lo = b_lo[:, :, None, :]
    a_hi = a_hi[:, :, None, :]
    b_hi = b_hi[:, :, None, :]
    kxw = tl.reshape(kb + 32 * blk[:, None, :] + 4 * jw[None, :, None], [8, 4])
    acc0, acc1, acc2, acc3 = _dot_nibbles(acc0, acc1, acc2, acc3, w, w, a_lo, b_lo, mg, kxw,
                                          x_ptr, sxm, M, K, 0, 0, 0, True, NMB, EVEN_K, IEEE, RNE=RNE)
    return _dot_nibbles(acc0, acc1, acc2, acc3, w, w, a_hi, b_hi, mg, kxw + 16,
                        x_ptr, sxm, M, K, 4, 0, 0, True, NMB, EVEN_K, IEEE, RNE=RNE)


@triton.jit
def _k_subscales(psc, pmn, rn, kb, K32):
    """Q4_K / Q5_K planes: the 6-bit scales and mins of one superblock from kb as (sc_lo,
    sc_hi, mn_lo, mn_hi) [BN, 4]: _lo of sub-blocks 0, 2, 4, 6, _hi of 1, 3, 5, 7."""
    BN: tl.constexpr = rn.shape[0]
    s8 = rn[:, None] * K32 + kb // 32 + tl.arange(0, 8)[None, :]
    sc_lo, sc_hi = tl.split(tl.reshape(tl.load(psc + s8), [BN, 4, 2]))
    mn_lo, mn_hi = tl.split(tl.reshape(tl.load(pmn + s8), [BN, 4, 2]))
    return sc_lo, sc_hi, mn_lo, mn_hi


@triton.jit
def _sb_q45k(acc0, acc1, acc2, acc3, x_ptr, pq, qrow, qoff, ph, d, dm, sc_lo, sc_hi, mn_lo, mn_hi,
             rn, kb, M, K, sxm, K32,
             Q5: tl.constexpr, NMB: tl.constexpr, IEEE: tl.constexpr, JS: tl.constexpr,
             X1: tl.constexpr = False, XP: tl.constexpr = False, RNE: tl.constexpr = False):
    """Q4_K / Q5_K, one superblock from kb (d, dm: its f16 scales as float32 [BN, 1]; sc_*,
    mn_*: its sub-block scales and mins [BN, 4], ``_k_subscales``). The 128 qs bytes are int32
    words qoff.. of each row (row stride qrow words), 4 chunks of 32 bytes: chunk c byte j =
    value 64c+j (low nibble, sub-block 2c) and 64c+32+j (high nibble, 2c+1). Q5_K qh [N, K/8],
    32 bytes: bit s of byte j is the 5th bit of value 32s+j. Words [BN, jh, c]: chunk c, bytes
    4jh.. Q4_KN reads the same words and scales from other addresses: the same arithmetic.
    X1: a one-row launch, x's row loaded once per dot (``_dot_words``): the same bits. XP: x
    permuted by the host to the dots' K order (``_xperm_order``): the same bits."""
    c4 = tl.arange(0, 4)
    # value = (d * sc) * q - (dmin * mn); low nibbles at p = 16, high at p = 12 (see _fval)
    a_lo, b_lo = _affine(d * sc_lo.to(tl.float32), -(dm * mn_lo.to(tl.float32)), 16, IEEE)
    a_hi, b_hi = _affine(d * sc_hi.to(tl.float32), -(dm * mn_hi.to(tl.float32)), 12, IEEE)
    mg = _magic(a_lo, IEEE)[:, None, :]
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
        wq = tl.load(pq.to(tl.pointer_type(tl.int32)) + rn[:, None, None] * qrow
                     + (qoff + 8 * c4[None, :] + jh[:, None])[None])                 # [BN, JS, 4]
        if Q5:
            # qh word jh holds the 5th bits of values 4jh..4jh+3 of every sub-block
            wh = tl.load(ph.to(tl.pointer_type(tl.int32)) + rn[:, None, None] * K32
                         + (kb // 32 + jh[:, None] + 0 * c4[None, :])[None])
            wh = wh >> (2 * c4)[None, None, :]         # bit 8i (+1): sub-block 2c (2c+1)
        else:
            wh = wq
        if XP:
            # x permuted on the host: this part's low-nibble dot reads x'[kb + 2 KP part ..],
            # its high-nibble dot the next KP values (``_xperm_order``)
            kx_lo = kb + part * (32 * JS)            # KP = 16 JS values a dot
            kx_hi = kx_lo + 16 * JS
        else:
            kx_lo = kb + 64 * c4[None, :] + 4 * jh[:, None]                          # [JS, 4]
            kx_hi = kx_lo + 32
        acc0, acc1, acc2, acc3 = _dot_nibbles(acc0, acc1, acc2, acc3, wq, wh, a_lo, b_lo, mg, kx_lo,
                                              x_ptr, sxm, M, K, 0, 0, HB, False, NMB, True, IEEE, X1, XP, RNE)
        acc0, acc1, acc2, acc3 = _dot_nibbles(acc0, acc1, acc2, acc3, wq, wh, a_hi, b_hi, mg, kx_hi,
                                              x_ptr, sxm, M, K, 4, 1, HB, False, NMB, True, IEEE, X1, XP, RNE)
    return acc0, acc1, acc2, acc3


@triton.jit
def _sb_q6k(acc0, acc1, acc2, acc3, x_ptr, pl, ph, psc, d, rn, kb, M, K, sxm, K8, K16,
            NMB: tl.constexpr, IEEE: tl.constexpr, RNE: tl.constexpr = False):
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
    mg = _magic(a_lo, IEEE)[:, :, None, :]
    a_lo = a_lo[:, :, None, :]
    b_lo = b_lo[:, :, None, :]
    a_hi = a_hi[:, :, None, :]
    b_hi = b_hi[:, :, None, :]
    kxw = tl.reshape(kb + 128 * hh[:, None, None] + 4 * lw[None, :, None]
                     + (32 * (c4 // 2) + 16 * (c4 % 2))[None, None, :], [8, 4])
    acc0, acc1, acc2, acc3 = _dot_nibbles(acc0, acc1, acc2, acc3, wq, wh, a_lo, b_lo, mg, kxw,
                                          x_ptr, sxm, M, K, 0, 0, 2, True, NMB, True, IEEE, RNE=RNE)
    return _dot_nibbles(acc0, acc1, acc2, acc3, wq, wh, a_hi, b_hi, mg, kxw + 64,
                        x_ptr, sxm, M, K, 4, 4, 2, True, NMB, True, IEEE, RNE=RNE)


@triton.jit
def _kscales(pd, rn, kb, K256, SB: tl.constexpr, DW: tl.constexpr = False):
    """The f16 superblock scale of rows rn for superblocks kb/256 .. (+SB-1) as float32
    [BN, 1] each (SB = 2: one 4-byte load per row, which the pipeliner can copy ahead).
    DW: read as the aligned 4-byte word that holds it (and its neighbour), whatever SB: a
    2-byte load is synchronous (Nsight Compute on the H100: a fifth of the one-row kernel's
    stall samples waited on it), a word is copied ahead with the tile. The host sets DW only
    when the plane has an even number of values (the last word is inside it)."""
    if DW:
        i = rn[:, None] * K256 + kb // 256
        w = tl.load(pd.to(tl.pointer_type(tl.int32)) + i // 2)
        if SB == 2:      # i even (K256 even): the word is superblocks kb and kb + 256
            lo = w
            hi = w >> 16
        else:
            lo = w >> ((i % 2) * 16)
            hi = lo
        return (lo.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32),
                hi.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32))
    if SB == 2:
        dd = tl.load(pd + rn[:, None] * K256 + kb // 256 + tl.arange(0, 2)[None, :])
        d0, d1 = tl.split(dd.to(tl.float32))
        return d0[:, None], d1[:, None]
    else:
        d0 = tl.load(pd + rn[:, None] * K256 + kb // 256).to(tl.float32)
        return d0, d0


@triton.jit
def _tile_q45k(acc0, acc1, acc2, acc3, x_ptr, pq, ph, pd, pdm, psc, pmn, rn, kb, M, K, sxm, K8, K32, K256,
               Q5: tl.constexpr, NMB: tl.constexpr, IEEE: tl.constexpr, JS: tl.constexpr, SB: tl.constexpr,
               X1: tl.constexpr = False, XP: tl.constexpr = False, RNE: tl.constexpr = False,
               DW: tl.constexpr = False, RDNA: tl.constexpr = False, SF: tl.constexpr = False):
    """Q4_K / Q5_K, SB superblocks from kb (``_sb_q45k`` each, ``ph`` unused for Q4_K; DW:
    ``_kscales``; RDNA: Q4_K in RDNA's WMMA order, ``triton_rdna``; RDNA 2: that order's small
    integers, ``triton_rdna._sb_q4k_si``; SF: Q4_K's scales folded into small integers,
    ``triton_sf._sb_q4k_sf``, x_ptr its fp16 x' and ph its aux words)."""
    d0, d1 = _kscales(pd, rn, kb, K256, SB, DW)
    m0, m1 = _kscales(pdm, rn, kb, K256, SB, DW)
    for j in tl.static_range(SB):
        sc_lo, sc_hi, mn_lo, mn_hi = _k_subscales(psc, pmn, rn, kb + 256 * j, K32)
        if SF:
            acc0, acc1, acc2, acc3 = _sb_q4k_sf(acc0, acc1, acc2, acc3, x_ptr, pq, ph, K8,
                                                (kb + 256 * j) // 8, d1 if j else d0, m1 if j else m0,
                                                sc_lo, sc_hi, mn_lo, mn_hi, rn, kb + 256 * j, M, K256,
                                                sxm, NMB, JS)
        elif RDNA == 2:
            acc0, acc1, acc2, acc3 = _sb_q4k_si(acc0, acc1, acc2, acc3, x_ptr, pq, psc, pmn, K8,
                                                (kb + 256 * j) // 8, d1 if j else d0, m1 if j else m0,
                                                rn, kb + 256 * j, M, K, sxm, K32, NMB, XP)
        elif RDNA:
            acc0, acc1, acc2, acc3 = _sb_q4k_rdna(acc0, acc1, acc2, acc3, x_ptr, pq, K8, (kb + 256 * j) // 8,
                                                  d1 if j else d0, m1 if j else m0, sc_lo, sc_hi,
                                                  mn_lo, mn_hi, rn, kb + 256 * j, M, K, sxm, NMB, RNE, XP)
        else:
            acc0, acc1, acc2, acc3 = _sb_q45k(acc0, acc1, acc2, acc3, x_ptr, pq, K8, (kb + 256 * j) // 8,
                                              ph, d1 if j else d0, m1 if j else m0, sc_lo, sc_hi,
                                              mn_lo, mn_hi, rn, kb + 256 * j, M, K, sxm, K32, Q5, NMB,
                                              IEEE, JS, X1, XP, RNE)
    return acc0, acc1, acc2, acc3


@triton.jit
def _sb_q4kn(acc0, acc1, acc2, acc3, x_ptr, pb, rn, kb, M, K, sxm, K32, K256,
             NMB: tl.constexpr, IEEE: tl.constexpr, JS: tl.constexpr, HDR: tl.constexpr,
             X1: tl.constexpr = False, XP: tl.constexpr = False):
    """Q4_KN, one superblock from kb: blk [N, K/256*144], GGUF's block_q4_K (d, dmin, 12
    bytes of 6-bit scales, 128 qs bytes) at byte 144 * (kb/256) of each row. Every load is at
    least 4 bytes wide and aligned, so the pipeliner copies all of them ahead (cp.async; Q4_K's
    2-byte d / dmin loads are not pipelined): d | dmin as one word, the scales per lane (HDR
    below), the qs as Q4_K's words (16-byte vectors). They become exactly the d, dmin, sc,
    mn that Q4_K's planes hold, then ``_sb_q45k`` does Q4_K's arithmetic on them:
    bit-identical results."""
    BN: tl.constexpr = rn.shape[0]
    qrow = K256 * 36                                     # words per row (144 bytes a block)
    qoff = (kb // 256) * 36                              # this block's first word
    # word 0: d (low half), dmin (high half), f16 bits
    w0 = tl.load(pb.to(tl.pointer_type(tl.int32)) + rn[:, None] * qrow + qoff)        # [BN, 1]
    d = w0.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    dm = (w0 >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    # the packed scales q[0..11] (bytes 4-15; engine.weights.dequant.unpack_k_scales). Built
    # from [BN, 1] word loads by broadcasts, they keep Triton 3.6 from giving the dequantized
    # tile the dot's register layout (it then goes through shared memory: the AOT compile for
    # sm_90 shows it), so each form below loads per lane. HDR 1: [BN, 4] words, lane c's
    # (fewer ALU ops); 0: [BN, 8] byte gathers, sub-block j's (fewer loads)
    if HDR == 1:
        # byte i of w1 & 63 / w2 & 63 is sc[i] / mn[i]; of (w3 & 15) | ((w1 >> 2) & 0x30)
        # sc[4 + i], of ((w3 >> 4) & 15) | ((w2 >> 2) & 0x30) mn[4 + i]. Lane c of _lo is
        # sub-block 2c (byte 2c % 4 of half c // 2), of _hi 2c + 1 (the next byte)
        c4 = tl.arange(0, 4)[None, :]
        hi = c4 >= 2
        wp = pb.to(tl.pointer_type(tl.int32)) + rn[:, None] * qrow + qoff + 0 * c4     # [BN, 4]
        ws = tl.load(wp + tl.where(hi, 3, 1))        # w1 (c < 2) / w3
        wm = tl.load(wp + tl.where(hi, 3, 2))        # w2 (c < 2) / w3
        w1 = tl.load(wp + 1)
        w2 = tl.load(wp + 2)
        sh = 16 * (c4 % 2)
        s_c = tl.where(hi, (ws & 0x0F0F0F0F) | ((w1 >> 2) & 0x30303030), ws & 0x3F3F3F3F) >> sh
        m_c = tl.where(hi, ((wm >> 4) & 0x0F0F0F0F) | ((w2 >> 2) & 0x30303030),
                       wm & 0x3F3F3F3F) >> sh
        sc_lo = s_c & 0xFF
        sc_hi = (s_c >> 8) & 0xFF
        mn_lo = m_c & 0xFF
        mn_hi = (m_c >> 8) & 0xFF
    else:
        # q[j % 4], q[4 + j % 4], q[8 + j % 4] for sub-block j
        j8 = tl.arange(0, 8)[None, :]
        bp = pb + rn[:, None] * (K256 * 144) + (kb // 256) * 144 + 4 + j8 % 4         # [BN, 8]
        qa = tl.load(bp)             # q[j % 4]
        qb = tl.load(bp + 4)         # q[4 + j % 4]
        qc = tl.load(bp + 8)         # q[8 + j % 4]
        sc = tl.where(j8 < 4, qa & 63, (qc & 15) | ((qa >> 6) << 4))
        mn = tl.where(j8 < 4, qb & 63, (qc >> 4) | ((qb >> 6) << 4))
        sc_lo, sc_hi = tl.split(tl.reshape(sc, [BN, 4, 2]))                               # as Q4_K's
        mn_lo, mn_hi = tl.split(tl.reshape(mn, [BN, 4, 2]))
    return _sb_q45k(acc0, acc1, acc2, acc3, x_ptr, pb, qrow, qoff + 4, pb, d, dm,
                    sc_lo, sc_hi, mn_lo, mn_hi, rn, kb, M, K, sxm, K32, False, NMB, IEEE, JS, X1, XP)


@triton.jit
def _tile_q4kn(acc0, acc1, acc2, acc3, x_ptr, pb, rn, kb, M, K, sxm, K32, K256,
               NMB: tl.constexpr, IEEE: tl.constexpr, JS: tl.constexpr, SB: tl.constexpr,
               HDR: tl.constexpr, X1: tl.constexpr = False, XP: tl.constexpr = False):
    """Q4_KN, SB superblocks from kb (``_sb_q4kn`` each)."""
    acc0, acc1, acc2, acc3 = _sb_q4kn(acc0, acc1, acc2, acc3, x_ptr, pb, rn, kb, M, K, sxm,
                                      K32, K256, NMB, IEEE, JS, HDR, X1, XP)
    if SB == 2:
        acc0, acc1, acc2, acc3 = _sb_q4kn(acc0, acc1, acc2, acc3, x_ptr, pb, rn, kb + 256, M, K,
                                          sxm, K32, K256, NMB, IEEE, JS, HDR, X1, XP)
    return acc0, acc1, acc2, acc3


def _xperm_order(m: int, k: int, js: int, rdna: bool = False, si: bool = False) -> tuple:
    """XP (Q4_K / Q5_K / Q4_KN): x [m, k] viewed as ``x.view(*shape).permute(*perm)`` and made
    contiguous puts each superblock's values in the order its dots read them. In a superblock,
    value 64c + 32h + 4jh + 2b1 + b0 (c: 32-byte chunk, h: low / high nibble, jh = JS part + j:
    word, b1 b0: byte) feeds dot (part, h) at position 16j + 8b1 + 2c + b0 (``_sb_q45k``,
    ``_join4p``); the dot (part, h) reads positions [(2 part + h) KP, +KP), KP = 16 JS.
    ``rdna``: the RDNA order (``triton_rdna``): value 64c + 32h + 16g + 8s + 4w1 + b (g: the
    lane half) at position 128h + 32c + 16s + 8g + 4w1 + b. ``si`` (its small integers,
    ``_sb_q4k_si``): value 32j + 16g + 8s + 4w1 + 2b + a at position 32j + 16s + 8g + 4w1 + 2a + b."""
    if si:
        return (m, k // 256, 8, 2, 2, 2, 2, 2), (0, 1, 2, 4, 3, 5, 7, 6)
    if rdna:
        return (m, k // 256, 4, 2, 2, 2, 2, 4), (0, 1, 3, 2, 5, 4, 6, 7)
    return (m, k // 256, 4, 2, 8 // js, js, 2, 2), (0, 1, 4, 3, 5, 6, 2, 7)


@triton.jit
def _tile_q6k(acc0, acc1, acc2, acc3, x_ptr, pl, ph, psc, pd, rn, kb, M, K, sxm, K8, K16, K256,
              NMB: tl.constexpr, IEEE: tl.constexpr, SB: tl.constexpr, RNE: tl.constexpr = False):
    """Q6_K, SB superblocks from kb (``_sb_q6k`` each)."""
    d0, d1 = _kscales(pd, rn, kb, K256, SB)
    acc0, acc1, acc2, acc3 = _sb_q6k(acc0, acc1, acc2, acc3, x_ptr, pl, ph, psc, d0,
                                     rn, kb, M, K, sxm, K8, K16, NMB, IEEE, RNE)
    if SB == 2:
        acc0, acc1, acc2, acc3 = _sb_q6k(acc0, acc1, acc2, acc3, x_ptr, pl, ph, psc, d1,
                                         rn, kb + 256, M, K, sxm, K8, K16, NMB, IEEE, RNE)
    return acc0, acc1, acc2, acc3


# ---------------------------------------------------------------------------------------------
# the kernel


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


@triton.jit
def _store_swiglu(acc, o_ptr, row0, pid_n, M, som, od_ptr, ODST: tl.constexpr):
    """The SwiGLU epilogue of a gate|up weight whose rows are interleaved in blocks of BN/2
    (this program's rows: BN/2 gate rows, then the BN/2 up rows of the same outputs):
    o[m, pid_n*BN/2 + i] = round(silu(round(g)) * round(u)), as the unfused layer rounds.
    ODST: output column c goes to column od[c] instead (the next matmul's XP order)."""
    BN: tl.constexpr = acc.shape[0]
    HB: tl.constexpr = BN // 2
    g, u = tl.split(tl.permute(tl.reshape(acc, [2, HB, 16]), (1, 2, 0)))     # [HB, 16] each
    dt = o_ptr.dtype.element_ty
    g = g.to(dt).to(tl.float32)
    u = u.to(dt).to(tl.float32)
    rm = row0 + tl.arange(0, 16)
    ro = pid_n * HB + tl.arange(0, HB)
    if ODST:
        ro = tl.load(od_ptr + ro)
    tl.store(o_ptr + rm[None, :] * som + ro[:, None], (g * tl.sigmoid(g) * u).to(dt),
             mask=rm[None, :] < M)


@triton.jit
def _store_all(acc0, acc1, acc2, acc3, o_ptr, rn_out, pid_n, pid_s, M, N, som, sop,
               NMB: tl.constexpr, SPLIT: tl.constexpr, SWIGLU: tl.constexpr, od_ptr,
               ODST: tl.constexpr):
    """The NMB 16-row slices' accumulators stored: through the SwiGLU epilogue, or as they are
    (as split-K partials when SPLIT)."""
    if SWIGLU:
        _store_swiglu(acc0, o_ptr, 0, pid_n, M, som, od_ptr, ODST)
        if NMB > 1:
            _store_swiglu(acc1, o_ptr, 16, pid_n, M, som, od_ptr, ODST)
        if NMB > 2:
            _store_swiglu(acc2, o_ptr, 32, pid_n, M, som, od_ptr, ODST)
        if NMB > 3:
            _store_swiglu(acc3, o_ptr, 48, pid_n, M, som, od_ptr, ODST)
    else:
        _store(acc0, o_ptr, 0, rn_out, M, N, som, sop, pid_s, SPLIT)
        if NMB > 1:
            _store(acc1, o_ptr, 16, rn_out, M, N, som, sop, pid_s, SPLIT)
        if NMB > 2:
            _store(acc2, o_ptr, 32, rn_out, M, N, som, sop, pid_s, SPLIT)
        if NMB > 3:
            _store(acc3, o_ptr, 48, rn_out, M, N, som, sop, pid_s, SPLIT)


@triton.jit(do_not_specialize=["M"])   # one compiled kernel per row-slice count, whatever M
def _packed_mm_kernel(
    x_ptr, o_ptr, p0, p1, p2, p3, p4, p5,
    M, N, K, sxm, som, sop, K4, K8, K16, K32, K256,
    cnt_ptr, tx_ptr, th_ptr, tw_ptr, tsx, tsh, eps, od_ptr,
    TPS: tl.constexpr, QT: tl.constexpr, BN: tl.constexpr, NMB: tl.constexpr, SPLIT: tl.constexpr,
    EVEN_K: tl.constexpr, IEEE: tl.constexpr, SB: tl.constexpr, JS: tl.constexpr,
    SWIGLU: tl.constexpr = False, HDR: tl.constexpr = 1, X1: tl.constexpr = False,
    XP: tl.constexpr = False, RNE: tl.constexpr = False, DW: tl.constexpr = False, RDNA: tl.constexpr = False,
    TAIL: tl.constexpr = 0, TS: tl.constexpr = 1, TB: tl.constexpr = 16, RB: tl.constexpr = 1, HB: tl.constexpr = 1,
    PDL: tl.constexpr = False, PFL: tl.constexpr = 0, SF: tl.constexpr = False, ODST: tl.constexpr = False,
):
    """One program: weight rows [pid_n*BN, +BN), tiles [pid_s*TPS, +TPS) of TK = 256*SB values
    (SB superblocks for K-quants; SB = 1 for the 32-block types). SWIGLU (no split): the
    output is silu(gate) * up of an interleaved gate|up weight (``_store_swiglu``). HDR: how
    Q4_KN's tile reads the packed scales (``_sb_q4kn``; loads only, never the arithmetic).
    X1, XP (x loads), RNE (bf16 rounding in integer ops), DW (scale loads): the same bits
    (``_xload1``, ``_xperm_order``, ``_to_dot_type``, ``_kscales``); RDNA: ``triton_rdna``. TAIL:
    the split's next step, in the last program (``_tail``). PDL, PFL: ``pdl.prefetch_weights``. ODST
    (SWIGLU): output column c stored at column od_ptr[c] (``xp_order.xp_dest``)."""
    pid_n, pid_s = tl.program_id(0), tl.program_id(1)
    rn_out = pid_n * BN + tl.arange(0, BN)
    rn = tl.minimum(rn_out, N - 1)          # clamped rows: loads need no N mask
    prefetch_weights(p0, rn, pid_s, K4, K8, K256, QT, TPS, SB, PFL, PDL)
    z = tl.zeros([BN, 16], dtype=tl.float32)
    acc0, acc1, acc2, acc3 = z, z, z, z
    # every split has TPS tiles (the host's split count divides the tile count): a constexpr trip
    # count (Triton 3.6's interpreter cannot loop over a runtime scalar with numpy >= 2.4)
    for i in range(0, TPS):
        kb = (pid_s * TPS + i) * (256 * SB)
        if QT == 0:
            acc0, acc1, acc2, acc3 = _tile_q8_0(acc0, acc1, acc2, acc3, x_ptr, p0, p1, rn, kb,
                                                M, K, sxm, K4, K32, NMB, EVEN_K, IEEE, RNE, RDNA)
        elif QT == 1:
            acc0, acc1, acc2, acc3 = _tile_q4_01(acc0, acc1, acc2, acc3, x_ptr, p0, p1, p1, rn, kb,
                                                 M, K, sxm, K8, K32, False, NMB, EVEN_K, IEEE, RNE, RDNA)
        elif QT == 2:
            acc0, acc1, acc2, acc3 = _tile_q4_01(acc0, acc1, acc2, acc3, x_ptr, p0, p1, p2, rn, kb,
                                                 M, K, sxm, K8, K32, True, NMB, EVEN_K, IEEE, RNE, RDNA)
        elif QT == 3:       # Q4_K planes: qs, d, dmin, sc, mn (SF: p5 the aux words of x')
            acc0, acc1, acc2, acc3 = _tile_q45k(acc0, acc1, acc2, acc3, x_ptr, p0, p5, p1, p2, p3, p4, rn, kb,
                                                M, K, sxm, K8, K32, K256, False, NMB, IEEE, JS, SB, X1, XP, RNE, DW, RDNA, SF)
        elif QT == 4:       # Q5_K planes: qs, qh, d, dmin, sc, mn
            acc0, acc1, acc2, acc3 = _tile_q45k(acc0, acc1, acc2, acc3, x_ptr, p0, p1, p2, p3, p4, p5, rn, kb,
                                                M, K, sxm, K8, K32, K256, True, NMB, IEEE, JS, SB, X1, XP, RNE, DW)
        elif QT == 7:
            # Q4_KN plane: blk (GGUF's block_q4_K, 144 bytes a superblock)
            acc0, acc1, acc2, acc3 = _tile_q4kn(acc0, acc1, acc2, acc3, x_ptr, p0, rn, kb,
                                                M, K, sxm, K32, K256, NMB, IEEE, JS, SB, HDR, X1, XP)
        elif QT == 6:
            # Q6_K8 planes: q8, sc, d
            acc0, acc1, acc2, acc3 = _tile_q6k8(acc0, acc1, acc2, acc3, x_ptr, p0, p1, p2, rn, kb,
                                                M, K, sxm, K4, K16, K256, NMB, IEEE, RNE, RDNA)
        else:
            # Q6_K planes: ql, qh, sc, d
            acc0, acc1, acc2, acc3 = _tile_q6k(acc0, acc1, acc2, acc3, x_ptr, p0, p1, p2, p3, rn, kb,
                                               M, K, sxm, K8, K16, K256, NMB, IEEE, SB, RNE)
    pdl_late(PDL)       # a matmul's late trigger (SPECSCOPE_PDL_LATE=1)
    _store_all(acc0, acc1, acc2, acc3, o_ptr, rn_out, pid_n, pid_s, M, N, som, sop, NMB, SPLIT, SWIGLU, od_ptr, ODST)
    if TAIL != 0:
        _tail(o_ptr, cnt_ptr, tx_ptr, th_ptr, tw_ptr, M, N, som, sop, tsx, tsh, eps, TAIL, TS, TB, RB, HB)


@triton.jit
def _sum_splits_kernel(ws_ptr, o_ptr, MN, sws, S: tl.constexpr, BLOCK: tl.constexpr,
                       PDL: tl.constexpr = False):
    """o[i] = sum_{s=0..S-1} ws[s, i] in that fixed order (float32), cast to o's dtype."""
    pdl_wait(PDL)
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < MN
    acc = tl.load(ws_ptr + i, mask=mask, other=0.0)
    for s in range(1, S):
        acc += tl.load(ws_ptr + s * sws + i, mask=mask, other=0.0)
    tl.store(o_ptr + i, acc.to(o_ptr.dtype.element_ty), mask=mask)
