"""Q4_K with the sub-block scale folded into small integers (SF; ``kernel_config``'s SF): the
design issue 36 asks for, fewer instructions a weight, for NVIDIA's MMA operand order.

The dequantizing tile (``triton_tiles._sb_q45k``) spends ~4.3 SASS instructions a weight on
sm_90 (extract the nibble, an FMA with the sub-block's scale and min, a float-to-bf16
conversion, the pack). Here a weight costs about one integer op:

* a Q4_K value is d sc_j q - dmin m_j (q a nibble, sc_j and m_j 6-bit). sc_j q <= 63 x 15 =
  945 < 1024, so the fp16 number with the bits 0x6400 + sc_j q is exactly 1024 + sc_j q. Two
  nibbles of a word (bytes 0 and 2, or 1 and 3) become two such fp16 values in one 32-bit
  register by ``((w >> S) & 0x000F000F) * sc_j + 0x64006400`` (one mask and one multiply-add:
  no carry crosses the halves). No conversion, no rounding: the weights are exact.
* x (bf16 or fp16) is made fp16 once per call by ``_sf_x_kernel``: each row's superblock of
  256 values times a power of two s that puts its largest |x| in [2^14, 2^15) (an exact
  scaling; a bf16 value's 8 bits fit fp16's 11 unless it is ~2^-29 of the block's largest),
  stored in the dots' K order (the loads are 16-byte vectors, as XP's), with the block's sums.
* a superblock is one fresh dot t = W' x'^T of the 256 values (W' = 1024 + sc q), then
  acc += (d (t - 1024 sum(x')) - 32 dmin tm) / s, where tm = sum_j m_j sum_j(x') / 32 is a
  second, 16-deep dot of the mins (exact in fp16) with the sub-block sums split in two fp16
  halves (hi + lo). Each output is a function of its own x row and its weight row only, and
  every 16-row slice is its own dot on the same tile: row-invariant as every tile here. Its own
  bits, more exact than the dequantizing tile (whose weights are rounded to bf16).

16-bit activations, K a multiple of 256; float32 keeps the dequantizing kernel.

Imported lazily, with the kernels: Triton is optional.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .pdl import pdl_kwargs, pdl_wait

AUX_WORDS = tl.constexpr(16)      # per (row, superblock): 8 words of fp16 (hi, lo) sums, 1024 sum(x'), 1/s, pad


@triton.jit
def _sf_pos_value(JS: tl.constexpr):
    """The superblock value (0..255) that dot position p (0..255) holds: dot (part, h) of KP =
    16 JS positions, in it [jh, b0, c, b1] (``_sf_words``): value 64c + 32h + 4(part JS + jh)
    + 2 b1 + b0."""
    KP: tl.constexpr = 16 * JS
    p = tl.arange(0, 256)
    part = p // (2 * KP)
    h = (p // KP) % 2
    jh = (p // 16) % JS
    b0 = (p // 8) % 2
    c = (p // 2) % 4
    b1 = p % 2
    return 64 * c + 32 * h + 4 * (part * JS + jh) + 2 * b1 + b0


@triton.jit
def _sf_x_kernel(x_ptr, xh_ptr, aux_ptr, sxm, K, K256, JS: tl.constexpr, PDL: tl.constexpr = False):
    """Row r, superblock b (one program each; nothing depends on other rows): xh [M, K] fp16 =
    x s in the dots' K order (``_sf_pos_value``), s the power of two that puts the block's
    largest |x| in [2^14, 2^15) (1 for a block of zeros or one holding inf / NaN, which then
    reach the output); aux [M, K256, 16] int32 words: 0..7 the fp16 pairs (hi, lo) of
    sum_j(x s) / 32 for sub-blocks j = 0..7, 8 the float32 1024 sum(x s), 9 the float32 1/s."""
    pdl_wait(PDL)
    r = tl.program_id(0)
    b = tl.program_id(1)
    kb = b * 256
    v = tl.load(x_ptr + r * sxm + kb + tl.arange(0, 256)).to(tl.float32)
    amax = tl.max(tl.abs(v), axis=0)
    e = (amax.to(tl.int32, bitcast=True) >> 23) & 0xFF
    ok = (e > 0) & (e < 255)
    e = tl.maximum(e, 14)
    s = tl.where(ok, ((268 - e) << 23).to(tl.float32, bitcast=True), 1.0)    # 2^(141 - e)
    xv = tl.load(x_ptr + r * sxm + kb + _sf_pos_value(JS)).to(tl.float32)
    tl.store(xh_ptr + r * K + kb + tl.arange(0, 256), (xv * s).to(tl.float16))
    vs = (v * s).to(tl.float16).to(tl.float32)
    sj = tl.sum(tl.reshape(vs, [8, 32]), axis=1)                             # [8]
    q = sj * (1.0 / 32.0)
    hi = q.to(tl.float16)
    lo = (q - hi.to(tl.float32)).to(tl.float16)
    base = (r * K256 + b) * AUX_WORDS
    tl.store(aux_ptr.to(tl.pointer_type(tl.float16)) + 2 * base + tl.arange(0, 16),
             tl.reshape(tl.join(hi, lo), [16]))
    tl.store(aux_ptr.to(tl.pointer_type(tl.float32)) + base + 8, 1024.0 * tl.sum(sj, axis=0))
    tl.store(aux_ptr.to(tl.pointer_type(tl.float32)) + base + 9, 1.0 / s)


def sf_prepare(x2: torch.Tensor, js: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(xh [M, K] fp16, aux [M, K/256, 16] int32) for ``_sb_q4k_sf`` (``_sf_x_kernel``)."""
    m, k = x2.shape
    xh = torch.empty((m, k), dtype=torch.float16, device=x2.device)
    aux = torch.empty((m, k // 256, AUX_WORDS), dtype=torch.int32, device=x2.device)   # 10..15 unused
    if m:
        _sf_x_kernel[(m, k // 256)](x2, xh, aux, x2.stride(0), k, k // 256, JS=js, num_warps=2,
                                    **pdl_kwargs(x2))
    return xh, aux


@triton.jit
def _sf_words(wq, S: tl.constexpr, sc):
    """The nibbles at bit S (bytes 0, 2) and S + 8 (bytes 1, 3) of words wq [BN, JS, 4] (chunk c
    last) as fp16 1024 + sc q (sc [BN, 1, 4] int32, the chunk's sub-block scale): the dot's
    [BN, 16 JS] operand in the order [jh, b0, c, b1] (byte 2 b1 + b0), NVIDIA's MMA operand
    order (a register holds positions 2i, 2i + 1: one word's two halves)."""
    BN: tl.constexpr = wq.shape[0]
    JS: tl.constexpr = wq.shape[1]
    ev = ((wq >> S) & 0x000F000F) * sc + 0x64006400
    od = ((wq >> (S + 8)) & 0x000F000F) * sc + 0x64006400
    pe = tl.join(ev.to(tl.int16), (ev >> 16).to(tl.int16))           # [BN, JS, 4, b1]
    po = tl.join(od.to(tl.int16), (od >> 16).to(tl.int16))
    v = tl.permute(tl.join(pe, po), (0, 1, 4, 2, 3))                  # [BN, JS, b0, c, b1]
    return tl.reshape(v, [BN, 16 * JS]).to(tl.float16, bitcast=True)


@triton.jit
def _sf_x(x_ptr, sxm, r0, kx, M, KP: tl.constexpr):
    """x'^T [KP, 16] of rows r0.. at contiguous K positions kx.. (zeros past M)."""
    rm = r0 + tl.arange(0, 16)
    kk = tl.max_contiguous(tl.multiple_of(kx + tl.arange(0, KP), 16), 16)
    return tl.load(x_ptr + rm[None, :] * sxm + kk[:, None], mask=rm[None, :] < M, other=0.0)


@triton.jit
def _sf_dots(t0, t1, t2, t3, w, kx, x_ptr, sxm, M, NMB: tl.constexpr):
    KP: tl.constexpr = w.shape[1]
    t0 = tl.dot(w, _sf_x(x_ptr, sxm, 0, kx, M, KP), t0)
    if NMB > 1:
        t1 = tl.dot(w, _sf_x(x_ptr, sxm, 16, kx, M, KP), t1)
    if NMB > 2:
        t2 = tl.dot(w, _sf_x(x_ptr, sxm, 32, kx, M, KP), t2)
    if NMB > 3:
        t3 = tl.dot(w, _sf_x(x_ptr, sxm, 48, kx, M, KP), t3)
    return t0, t1, t2, t3


@triton.jit
def _sf_apply(acc, t, am, paux, r0, sb, d, dm32, M, K256):
    """acc += (d (t - 1024 sum(x')) - 32 dmin tm) / s for rows r0..r0 + 15 (``_sf_x_kernel``'s
    aux; rows past M read zeros and add nothing)."""
    rm = r0 + tl.arange(0, 16)
    live = rm < M
    base = (rm * K256 + sb) * 16
    bm = tl.load(paux.to(tl.pointer_type(tl.float16)) + 2 * base[None, :] + tl.arange(0, 16)[:, None],
                 mask=live[None, :], other=0.0)                                           # [16, 16]
    tm = tl.dot(am, bm)
    xb = tl.load(paux.to(tl.pointer_type(tl.float32)) + base + 8, mask=live, other=0.0)
    xi = tl.load(paux.to(tl.pointer_type(tl.float32)) + base + 9, mask=live, other=0.0)
    return tl.fma(tl.fma(t - xb[None, :], d, -(tm * dm32)), xi[None, :], acc)


@triton.jit
def _sb_q4k_sf(acc0, acc1, acc2, acc3, x_ptr, pq, paux, qrow, qoff, d, dm, sc_lo, sc_hi, mn_lo,
               mn_hi, rn, kb, M, K256, sxm, NMB: tl.constexpr, JS: tl.constexpr):
    """Q4_K, one superblock from kb (d, dm [BN, 1] float32; sc_*, mn_* [BN, 4]:
    ``_k_subscales``), SF (module note). x_ptr: x' (fp16, ``_sf_x_kernel``'s order); paux: its
    aux words. The words [BN, JS, 4] are ``_sb_q45k``'s."""
    BN: tl.constexpr = rn.shape[0]
    KP: tl.constexpr = 16 * JS
    c4 = tl.arange(0, 4)
    slo = sc_lo.to(tl.int32)[:, None, :]
    shi = sc_hi.to(tl.int32)[:, None, :]
    z = tl.zeros([BN, 16], dtype=tl.float32)
    t0, t1, t2, t3 = z, z, z, z
    for part in tl.static_range(0, 8 // JS):
        jh = part * JS + tl.arange(0, JS)
        wq = tl.load(pq.to(tl.pointer_type(tl.int32)) + rn[:, None, None] * qrow
                     + (qoff + 8 * c4[None, :] + jh[:, None])[None])                 # [BN, JS, 4]
        kx = kb + part * (2 * KP)
        t0, t1, t2, t3 = _sf_dots(t0, t1, t2, t3, _sf_words(wq, 0, slo), kx, x_ptr, sxm, M, NMB)
        t0, t1, t2, t3 = _sf_dots(t0, t1, t2, t3, _sf_words(wq, 4, shi), kx + KP, x_ptr, sxm, M, NMB)
    # the mins, m_j at columns 2j and 2j + 1 (j = 2c + h: mn_lo of sub-blocks 0, 2, 4, 6)
    m8 = tl.reshape(tl.join(mn_lo.to(tl.float32), mn_hi.to(tl.float32)), [BN, 8])
    am = tl.reshape(tl.join(m8, m8), [BN, 16]).to(tl.float16)
    sb = kb // 256
    dm32 = dm * 32.0
    acc0 = _sf_apply(acc0, t0, am, paux, 0, sb, d, dm32, M, K256)
    if NMB > 1:
        acc1 = _sf_apply(acc1, t1, am, paux, 16, sb, d, dm32, M, K256)
    if NMB > 2:
        acc2 = _sf_apply(acc2, t2, am, paux, 32, sb, d, dm32, M, K256)
    if NMB > 3:
        acc3 = _sf_apply(acc3, t3, am, paux, 48, sb, d, dm32, M, K256)
    return acc0, acc1, acc2, acc3
