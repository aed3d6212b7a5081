"""Packed tiles laid out for RDNA's WMMA (ROCm, 16-bit activations): Q4_K's superblock here,
Q4_0 / Q4_1's 256 values here, Q8_0's in ``triton_tiles._tile_q8_0_rdna`` (it shares the int8
helpers there); ``triton_kernels`` turns them on by backend (the config key RDNA).

``triton_dequant._join4p`` orders a dequantized tile for NVIDIA's MMA operand: each lane holds
pairs of consecutive K values and the four lanes of a quad hold the four words of a row. RDNA3/4's
WMMA wants something else from operand A: lane l holds row l % 16 and EIGHT consecutive K values,
lanes 16-31 the next eight. Compiled for gfx1201 the NVIDIA order costs a register shuffle of
every dequantized value across lanes (``v_cndmask`` + ``ds_bpermute``) or a trip through LDS.

Here a row's quant bytes are cut into chunks (Q4_K: 32 bytes, values 64c.. and 64c + 32..;
Q4_0 / Q4_1: a block's 16 bytes, values 32c.. and 32c + 16..; Q8_0: a block's 32 bytes); a lane
reads the half of each chunk (8S bytes, words [row % 16, h, row // 16, c, w], ``_rdna_words``:
the load's own layout is the WMMA operand's) and the dot's K order is chosen so that those bytes
are exactly the lane's WMMA share: dot position [c, s, h, w1, b] (w = 2s + w1: the word, b: the
byte) holds chunk c's byte 8S h + 8s + 4w1 + b (``_kv``). x is gathered in that order (runs of
4 values), or permuted into it by the host (XP, Q4_K). A dot only needs x and w to agree on the
order of K; each value is ``_fval``/``_affine``'s (the same float32 weights as the NVIDIA
order), rounded by ``_to_dot_type``. Static counts: BENCHMARKS.md, "The packed matmul, fourth
round" (gfx1201 Q4_K 13.9 -> 8.2 instructions a weight at one row).

Row invariance is the dequantizing kernel's: the order is a function of the type and backend,
never of the row count, and each 16-row slice of x is its own dot on the same tile.

SI (ROCm's default for Q4_K, Q4_0, Q4_1 and Q6_K8; ``kernel_config``'s SI): the same lane
layout, but a block's quants are dotted as the small integers BASE + q (``_si_vals``: a nibble
under the exponent of 128 (bf16) or 1024 (fp16), two a word by one mask and OR, nothing
converted, scaled or rounded a weight) and the block's scale and min go to the dot's result in
float32 with x's block sums (a dot with ones). Its own K order a block (``_kv_si``) and its own
bits, row-invariant the same way. Static counts: BENCHMARKS.md, "No card this session"
(gfx1201 Q4_K 8.2 -> 4.2 instructions a weight at one row).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_dequant import _affine, _dot1, _fval, _magic, _to_dot_type, _xload


@triton.jit
def _rdna_half(acc0, acc1, acc2, acc3, wq, a, b, mg, kx, x_ptr, sxm, M, K,
               P: tl.constexpr, NMB: tl.constexpr, RNE: tl.constexpr, EVEN_K: tl.constexpr = True):
    """acc_i += the nibbles at bit P (0: low, 4: high) of words wq [row % 16, h, row // 16, c,
    w] (``_rdna_words``) @ x^T (``_rdna_dot``); a, b [16, 1, BN / 16, C, 1] per row and chunk."""
    v0 = tl.fma(_fval(wq, wq, P, 0, 0, False, mg), a, b)
    v1 = tl.fma(_fval(wq, wq, P + 8, 0, 0, False, mg), a, b)
    v2 = tl.fma(_fval(wq, wq, P + 16, 0, 0, False, mg), a, b)
    v3 = tl.fma(_fval(wq, wq, P + 24, 0, 0, False, mg), a, b)
    return _rdna_dot(acc0, acc1, acc2, acc3, v0, v1, v2, v3, kx, x_ptr, sxm, M, K, NMB, RNE, EVEN_K)


@triton.jit
def _rdna_dot(acc0, acc1, acc2, acc3, v0, v1, v2, v3, kx, x_ptr, sxm, M, K,
              NMB: tl.constexpr, RNE: tl.constexpr, EVEN_K: tl.constexpr):
    """acc_i += w @ x^T, w the float32 weights v0..v3 (bytes 0..3 of words [row % 16, h,
    row // 16, c, w], ``_rdna_words``) in the dot's K order [c, s, h, w1, b] (w = 2s + w1;
    module note), x gathered at kx (that order's K positions)."""
    RH: tl.constexpr = v0.shape[2]
    C: tl.constexpr = v0.shape[3]
    S: tl.constexpr = v0.shape[4] // 2
    v = tl.join(tl.join(v0, v2), tl.join(v1, v3))            # [.., w, b // 2, b % 2]
    v = tl.reshape(v, [16, 2, RH, C, S, 2, 2, 2])             # [rl, h, rh, c, s, w1, b // 2, b % 2]
    v = tl.permute(v, (2, 0, 3, 4, 1, 5, 6, 7))               # [rh, rl, c, s, h, w1, ..]
    w = tl.reshape(_to_dot_type(v, x_ptr.dtype.element_ty, RNE), [16 * RH, 16 * C * S])
    rm = tl.arange(0, 16)
    xp = x_ptr + rm[None, :] * sxm + kx[:, None]
    acc0 = _dot1(_xload(xp, rm, kx, M, K, EVEN_K), w, acc0, 0)
    if NMB > 1:
        acc1 = _dot1(_xload(xp + 16 * sxm, rm + 16, kx, M, K, EVEN_K), w, acc1, 0)
    if NMB > 2:
        acc2 = _dot1(_xload(xp + 32 * sxm, rm + 32, kx, M, K, EVEN_K), w, acc2, 0)
    if NMB > 3:
        acc3 = _dot1(_xload(xp + 48 * sxm, rm + 48, kx, M, K, EVEN_K), w, acc3, 0)
    return acc0, acc1, acc2, acc3


@triton.jit
def _rdna_words(pq, rn, qrow, qoff, C: tl.constexpr, W: tl.constexpr, live=None):
    """The qs words of C chunks of 2W words from word qoff of each row (row stride qrow
    words) as [row % 16, h, row // 16, c, w] (word 2Wc + Wh + w): the coalescer spreads the
    lanes over the first two dims (16 rows, the half) and the warps over the third, which is
    the WMMA operand's layout. ``live`` [C]: chunks to read (the rest are 0)."""
    RH: tl.constexpr = rn.shape[0] // 16
    cc = tl.arange(0, C)
    i2 = tl.arange(0, 2)
    ww = tl.arange(0, W)
    rr = tl.permute(tl.reshape(rn, [RH, 16]), (1, 0))                              # [16, RH]
    p = (pq.to(tl.pointer_type(tl.int32)) + rr[:, None, :, None, None] * qrow
         + (qoff + 2 * W * cc[:, None] + ww[None, :])[None, None, None, :, :]
         + W * i2[None, :, None, None, None])                                      # [16, 2, RH, C, W]
    if live is None:
        return tl.load(p)
    else:
        return tl.load(p, mask=live[None, None, None, :, None], other=0)


@triton.jit
def _kv(C: tl.constexpr, S: tl.constexpr, CV: tl.constexpr):
    """The value index (in a chunk of CV values from chunk 0) of each dot position [c, s, h,
    w1, b]: chunk c, byte 8S h + 8s + 4w1 + b of it (the low nibbles)."""
    cc = tl.arange(0, C)
    ss = tl.arange(0, S)
    i2 = tl.arange(0, 2)
    b4 = tl.arange(0, 4)
    return tl.reshape(CV * cc[:, None, None, None, None] + 8 * ss[None, :, None, None, None]
                      + 8 * S * i2[None, None, :, None, None] + 4 * i2[None, None, None, :, None]
                      + b4[None, None, None, None, :], [16 * C * S])


@triton.jit
def _sb_q4k_rdna(acc0, acc1, acc2, acc3, x_ptr, pq, qrow, qoff, d, dm, sc_lo, sc_hi, mn_lo, mn_hi,
                 rn, kb, M, K, sxm, NMB: tl.constexpr, RNE: tl.constexpr, XP: tl.constexpr):
    """Q4_K, one superblock from kb in the RDNA order (module note). qs words qoff.. of each
    row (row stride qrow words); d, dm [BN, 1] and sc_*, mn_* [BN, 4] as ``_sb_q45k`` takes
    them (sub-blocks 2c: _lo, 2c + 1: _hi), valued as there (``_affine`` at p = 16 / 12). XP:
    x was permuted by the host into this order (``_xperm_order(.., rdna=True)``): each dot
    reads 128 consecutive values (16-byte loads instead of runs of 4)."""
    a_lo, b_lo = _affine(d * sc_lo.to(tl.float32), -(dm * mn_lo.to(tl.float32)), 16, 0)
    a_hi, b_hi = _affine(d * sc_hi.to(tl.float32), -(dm * mn_hi.to(tl.float32)), 12, 0)
    mg = _magic(_rows16(a_lo), 0)
    wq = _rdna_words(pq, rn, qrow, qoff, 4, 4)
    if XP:
        k_lo = tl.max_contiguous(tl.multiple_of(kb + tl.arange(0, 128), 16), 16)
        k_hi = k_lo + 128
    else:
        k_lo = kb + _kv(4, 2, 64)
        k_hi = k_lo + 32
    acc0, acc1, acc2, acc3 = _rdna_half(acc0, acc1, acc2, acc3, wq, _rows16(a_lo), _rows16(b_lo),
                                        mg, k_lo, x_ptr, sxm, M, K, 0, NMB, RNE)
    return _rdna_half(acc0, acc1, acc2, acc3, wq, _rows16(a_hi), _rows16(b_hi),
                      mg, k_hi, x_ptr, sxm, M, K, 4, NMB, RNE)


@triton.jit
def _tile_q4_01_rdna(acc0, acc1, acc2, acc3, x_ptr, pq, pd, pm, rn, kb, M, K, sxm, K8, K32,
                     Q41: tl.constexpr, NMB: tl.constexpr, EVEN_K: tl.constexpr, RNE: tl.constexpr):
    """Q4_0 / Q4_1, 256 values (8 blocks of 32) from kb in the RDNA order: block c's 16 qs
    bytes are the chunk (byte j: value j low nibble, 16 + j high), a lane half reads 8 of
    them, so a dot position [c, h, w1, b] is value 32c + 8h + 4w1 + b (16 more for the high
    nibbles); d (, m) f16 [N, K/32] valued as ``_tile_q4_01`` values them."""
    blk = tl.arange(0, 8)
    live = kb + 32 * blk < K
    sp = rn[:, None] * K32 + kb // 32 + blk[None, :]
    if EVEN_K:
        wq = _rdna_words(pq, rn, K8, kb // 8, 8, 2)
        d = tl.load(pd + sp).to(tl.float32)
        t = tl.load(pm + sp).to(tl.float32) if Q41 else d * -8.0
    else:
        wq = _rdna_words(pq, rn, K8, kb // 8, 8, 2, live)
        d = tl.load(pd + sp, mask=live[None, :], other=0.0).to(tl.float32)
        t = tl.load(pm + sp, mask=live[None, :], other=0.0).to(tl.float32) if Q41 else d * -8.0
    a_lo, b_lo = _affine(d, t, 16, 0)
    a_hi, b_hi = _affine(d, t, 12, 0)
    mg = _magic(_rows16(a_lo), 0)
    kx = kb + _kv(8, 1, 32)
    acc0, acc1, acc2, acc3 = _rdna_half(acc0, acc1, acc2, acc3, wq, _rows16(a_lo), _rows16(b_lo),
                                        mg, kx, x_ptr, sxm, M, K, 0, NMB, RNE, EVEN_K)
    return _rdna_half(acc0, acc1, acc2, acc3, wq, _rows16(a_hi), _rows16(b_hi),
                      mg, kx + 16, x_ptr, sxm, M, K, 4, NMB, RNE, EVEN_K)


@triton.jit
def _rows16(t):
    """[BN, C] per row and chunk -> [16, 1, BN / 16, C, 1], the words' [row % 16, h, row // 16,
    c, w] (``_rdna_words``)."""
    return tl.permute(tl.reshape(t, [t.shape[0] // 16, 16, t.shape[1]]), (1, 0, 2))[:, None, :, :, None]


@triton.jit
def _kv_si(S0: tl.constexpr, S1: tl.constexpr):
    """SI's K order in one 32-value block: dot position [i, j, w1, a, b] holds value
    S0 i + S1 j + 4 w1 + 2b + a of it (a word's bytes 0, 2, 1, 3: one word's two 16-bit halves
    are consecutive positions). Q4_K: (8, 16), [s, h, ..] (word 2s + w1 of lane half h); Q4_0 /
    Q4_1: (16, 8), [nibble, h, ..]."""
    i2 = tl.arange(0, 2)
    return tl.reshape(S0 * i2[:, None, None, None, None] + S1 * i2[None, :, None, None, None]
                      + 4 * i2[None, None, :, None, None] + i2[None, None, None, :, None]
                      + 2 * i2[None, None, None, None, :], [32])


@triton.jit
def _si_vals(wq, P: tl.constexpr, dt: tl.constexpr, SIX: tl.constexpr = False):
    """The nibbles at bit P of words wq [16, 2, RH, 1, W] (``_rdna_words``) as 16-bit floats of
    value BASE + q (bf16 0x4300 | q = 128 + q, fp16 0x6400 | q = 1024 + q), two a word by one
    mask and OR ((w >> P) & 0x000F000F | base pair: bytes 0 and 2; >> P + 8: bytes 1 and 3):
    [16, 2, RH, W, a, b] = byte a + 2b of word w. SIX: the bytes are int8 q in -32..31 (Q6_K8),
    valued BASE + 32 + q: (q & 63) ^ 32 is q + 32 (a 6-bit two's complement, its sign flipped)."""
    RH: tl.constexpr = wq.shape[2]
    W: tl.constexpr = wq.shape[4]
    base = 0x43004300 if dt == tl.bfloat16 else 0x64006400
    if SIX:
        e = ((wq >> P) & 0x003F003F) ^ (base | 0x00200020)
        o = ((wq >> (P + 8)) & 0x003F003F) ^ (base | 0x00200020)
    else:
        e = ((wq >> P) & 0x000F000F) | base
        o = ((wq >> (P + 8)) & 0x000F000F) | base
    t = tl.join(tl.join(e.to(tl.int16), o.to(tl.int16)),
                tl.join((e >> 16).to(tl.int16), (o >> 16).to(tl.int16)))    # [.., a, b]
    return tl.reshape(t.to(dt, bitcast=True), [16, 2, RH, W, 2, 2])


@triton.jit
def _si_tile(wq, P: tl.constexpr, dt: tl.constexpr):
    """Q4_K: a chunk's nibbles at bit P (one sub-block) as the dot's [16 RH, 32] operand in
    ``_kv_si(8, 16)``'s order."""
    RH: tl.constexpr = wq.shape[2]
    t = tl.reshape(_si_vals(wq, P, dt), [16, 2, RH, 2, 2, 2, 2])           # [rl, h, rh, s, w1, a, b]
    return tl.reshape(tl.permute(t, (2, 0, 3, 1, 4, 5, 6)), [16 * RH, 32])


@triton.jit
def _si_block(acc, w, xt, a, b):
    """acc += a (w @ xt) + b sum(xt): one 32-value sub-block (w: BASE + q, a = d sc, b = -(BASE a
    + dmin m), [BN, 1] each; xt [32, 16]). x's sums come from a dot with ones (a WMMA, each row
    its own column: no cross-lane reduction; gfx1201 at one row 6.7 -> 4.2 instructions a
    weight against a tl.sum)."""
    s = tl.dot(tl.full(w.shape, 1.0, xt.dtype), xt)        # [BN, 16]: every row x's sums
    return tl.fma(tl.dot(w, xt), a, tl.fma(b, s, acc))


@triton.jit
def _si_slices(acc0, acc1, acc2, acc3, w, kx, x_ptr, sxm, M, K, a, b, NMB: tl.constexpr,
               EVEN_K: tl.constexpr):
    """``_si_block`` of the tile w on each of x's NMB 16-row slices, x at K positions kx."""
    rm = tl.arange(0, 16)
    xp = x_ptr + rm[None, :] * sxm + kx[:, None]
    acc0 = _si_block(acc0, w, _xload(xp, rm, kx, M, K, EVEN_K), a, b)
    if NMB > 1:
        acc1 = _si_block(acc1, w, _xload(xp + 16 * sxm, rm + 16, kx, M, K, EVEN_K), a, b)
    if NMB > 2:
        acc2 = _si_block(acc2, w, _xload(xp + 32 * sxm, rm + 32, kx, M, K, EVEN_K), a, b)
    if NMB > 3:
        acc3 = _si_block(acc3, w, _xload(xp + 48 * sxm, rm + 48, kx, M, K, EVEN_K), a, b)
    return acc0, acc1, acc2, acc3


@triton.jit
def _sb_q4k_si(acc0, acc1, acc2, acc3, x_ptr, pq, psc, pmn, qrow, qoff, d, dm, rn, kb, M, K, sxm,
               K32, NMB: tl.constexpr, XP: tl.constexpr):
    """Q4_K, one superblock from kb, small integers (SI; ROCm, 16-bit activations): each
    32-value sub-block j is dotted as BASE + q (``_si_tile``: no float conversion, scale or
    rounding a weight) and its scale and min are applied to the dot's result in float32:
    acc += d sc_j (w.x) - (BASE d sc_j + dmin m_j) sum(x), x's sum per row and sub-block.
    Chunk c's words hold sub-blocks 2c (low nibbles) and 2c + 1 (high); sub-block j's dot
    reads K positions 32 j + ``_kv_si(8, 16)`` (XP: 32 consecutive values, ``_xperm_order``).
    Row-invariant as the other orders (a function of the type and backend; each 16-row slice
    its own dot on the same tile and sums). Its own bits; more exact than a bf16 weight."""
    dt: tl.constexpr = x_ptr.dtype.element_ty
    BASE: tl.constexpr = 128.0 if dt == tl.bfloat16 else 1024.0
    for c in tl.static_range(4):
        wq = _rdna_words(pq, rn, qrow, qoff + 8 * c, 1, 4)
        for hf in tl.static_range(2):
            j = 2 * c + hf
            a = d * tl.load(psc + rn[:, None] * K32 + kb // 32 + j).to(tl.float32)
            b = -(BASE * a + dm * tl.load(pmn + rn[:, None] * K32 + kb // 32 + j).to(tl.float32))
            w = _si_tile(wq, 4 * hf, dt)
            if XP:
                kx = tl.max_contiguous(tl.multiple_of(kb + 32 * j + tl.arange(0, 32), 16), 16)
            else:
                kx = kb + 32 * j + _kv_si(8, 16)
            acc0, acc1, acc2, acc3 = _si_slices(acc0, acc1, acc2, acc3, w, kx, x_ptr, sxm, M, K, a, b,
                                                NMB, True)
    return acc0, acc1, acc2, acc3


@triton.jit
def _tile_q4_01_si(acc0, acc1, acc2, acc3, x_ptr, pq, pd, pm, rn, kb, M, K, sxm, K8, K32,
                   Q41: tl.constexpr, NMB: tl.constexpr, EVEN_K: tl.constexpr):
    """Q4_0 / Q4_1, 256 values (8 blocks of 32) from kb as small integers (SI, as
    ``_sb_q4k_si``): block c's 16 bytes (byte j: value j low nibble, 16 + j high), a lane half
    reading 8 of them, are one dot of BASE + q in ``_kv_si(16, 8)``'s order; the block's
    scale d and offset t (Q4_1: m; Q4_0: -8 d) go to its result: acc += d (w . x) + (t - BASE
    d) sum(x). A block past K (K not a multiple of 256) has d = t = 0: it adds nothing."""
    dt: tl.constexpr = x_ptr.dtype.element_ty
    BASE: tl.constexpr = 128.0 if dt == tl.bfloat16 else 1024.0
    RH: tl.constexpr = rn.shape[0] // 16
    for c in tl.static_range(8):
        sp = rn[:, None] * K32 + kb // 32 + c
        live = kb + 32 * c < K
        if EVEN_K:
            wq = _rdna_words(pq, rn, K8, kb // 8 + 4 * c, 1, 2)
            d = tl.load(pd + sp).to(tl.float32)
            t = tl.load(pm + sp).to(tl.float32) if Q41 else d * -8.0
        else:
            wq = _rdna_words(pq, rn, K8, kb // 8 + 4 * c, 1, 2, (tl.zeros([1], tl.int32) == 0) & live)
            d = tl.load(pd + sp, mask=live, other=0.0).to(tl.float32)
            t = tl.load(pm + sp, mask=live, other=0.0).to(tl.float32) if Q41 else d * -8.0
        v = tl.join(_si_vals(wq, 0, dt), _si_vals(wq, 4, dt))          # [rl, h, rh, w1, a, b, nibble]
        w = tl.reshape(tl.permute(v, (2, 0, 6, 1, 3, 4, 5)), [16 * RH, 32])
        kx = kb + 32 * c + _kv_si(16, 8)
        b = t - BASE * d
        acc0, acc1, acc2, acc3 = _si_slices(acc0, acc1, acc2, acc3, w, kx, x_ptr, sxm, M, K, d, b,
                                            NMB, EVEN_K)
    return acc0, acc1, acc2, acc3


@triton.jit
def _tile_q6k8_si(acc0, acc1, acc2, acc3, x_ptr, pq, psc, pd, rn, kb, M, K, sxm, K4, K16, K256,
                  NMB: tl.constexpr):
    """Q6_K8 (Q6_K widened at load: int8 q - 32, scale sc a 16 values, d a superblock), one
    superblock from kb as small integers (SI, as ``_sb_q4k_si``; ROCm, 16-bit activations):
    each 16-value group is one dot of BASE + 32 + q (``_si_vals`` SIX; a lane half's 8 values
    are 2 words: position [h, w, a, b] is value 8h + 4w + 2b + a) and its scale d sc goes to the
    result: acc += d sc (w . x) - (BASE + 32) d sc sum(x)."""
    dt: tl.constexpr = x_ptr.dtype.element_ty
    BASE: tl.constexpr = 128.0 if dt == tl.bfloat16 else 1024.0
    RH: tl.constexpr = rn.shape[0] // 16
    i2 = tl.arange(0, 2)
    kv = tl.reshape(8 * i2[:, None, None, None] + 4 * i2[None, :, None, None]
                    + i2[None, None, :, None] + 2 * i2[None, None, None, :], [16])
    d = tl.load(pd + rn[:, None] * K256 + kb // 256).to(tl.float32)
    for g in tl.static_range(16):
        wq = _rdna_words(pq, rn, K4, kb // 4 + 4 * g, 1, 2)
        a = d * tl.load(psc + rn[:, None] * K16 + kb // 16 + g).to(tl.float32)
        b = -(BASE + 32.0) * a
        v = _si_vals(wq, 0, dt, True)                                    # [rl, h, rh, w, a, b]
        w = tl.reshape(tl.permute(v, (2, 0, 1, 3, 4, 5)), [16 * RH, 16])
        kx = kb + 16 * g + kv
        acc0, acc1, acc2, acc3 = _si_slices(acc0, acc1, acc2, acc3, w, kx, x_ptr, sxm, M, K, a, b,
                                            NMB, True)
    return acc0, acc1, acc2, acc3
