"""The opt-in int8 path of ``packed_matmul`` (``I8=1``; Q4_K with bf16/fp16 activations;
``_q4k_i8_kernel``): the
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
split is fixed per shape. Fewer instructions per weight than the dequantizing kernel, yet
measured slower than it (BENCHMARKS.md, "Engine model and kernel timings (moved from code comments)"): Triton 3.6
stages the register-built int8 A tile through shared memory (STS + fence + LDSM every
superblock), the scale/min loads are too narrow for cp.async (prefetched one superblock
ahead by hand instead), and the large tiles leave 1-2 programs per SM. Kept as groundwork,
off by default.

Imported lazily, through ``triton_kernels.py``: Triton is not a dependency of the package.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_tiles import MAX_ROWS, _sum_splits_kernel

# Activations quantized per row to int8 with one float scale per 256 values (llama.cpp's
# q8_K), integer tensor-core dots per sub-block.


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


@triton.jit
def _i8_operands(scp, mnp, up, up2, pd, pdm, xs_ptr, rn, rm, M, K256, sb, X2: tl.constexpr):
    """Superblock sb's small operands (see _q4k_i8_kernel): sub-block scales and mins, the
    x sums (and the residual's), the weight's d and dmin, the x scale."""
    rmask = rm < M
    sc = tl.load(scp + sb * 8).to(tl.int32)                         # [BN, 4, 2]
    mnh = tl.load(mnp + sb * 8).to(tl.float16)                      # [BN, 16]
    u = tl.load(up + sb * 16, mask=rmask[None, :], other=0.0)      # [16, BM]
    u2 = tl.load(up2 + sb * 16, mask=rm[None, :] < M * X2, other=0.0)
    d = tl.load(pd + rn * K256 + sb).to(tl.float32)
    dm = tl.load(pdm + rn * K256 + sb).to(tl.float32)
    xs = tl.load(xs_ptr + rm * K256 + sb, mask=rmask, other=0.0)
    return sc, mnh, u, u2, d, dm, xs


@triton.jit
def _i8_superblock(accf, wp, xp, xp2, sb, m4, sc, mnh, u, u2, d, dm, xs, rmask, X2: tl.constexpr):
    """accf [BN, BM] plus superblock sb's products (see _q4k_i8_kernel)."""
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
    return accf


@triton.jit
def _i8_store(accf, o_ptr, rn_out, rm, rmask, N, som, sop, pid_s, SPLIT: tl.constexpr):
    mask = rmask[None, :] & (rn_out[:, None] < N)
    if SPLIT:
        tl.store(o_ptr + pid_s * sop + rm[None, :] * som + rn_out[:, None], accf, mask=mask)
    else:
        tl.store(o_ptr + rm[None, :] * som + rn_out[:, None], accf.to(o_ptr.dtype.element_ty), mask=mask)


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
    sc, mnh, u, u2, d, dm, xs = _i8_operands(scp, mnp, up, up2, pd, pdm, xs_ptr, rn, rm, M, K256,
                                             pid_s * TPS, X2)
    last = pid_s * TPS + TPS - 1
    for i in range(0, TPS):
        sb = pid_s * TPS + i
        nb = tl.minimum(sb + 1, last)
        sc_n, mnh_n, u_n, u2_n, d_n, dm_n, xs_n = _i8_operands(scp, mnp, up, up2, pd, pdm, xs_ptr, rn, rm, M,
                                                               K256, nb, X2)
        accf = _i8_superblock(accf, wp, xp, xp2, sb, m4, sc, mnh, u, u2, d, dm, xs, rmask, X2)
        sc, mnh, u, u2, d, dm, xs = sc_n, mnh_n, u_n, u2_n, d_n, dm_n, xs_n
    _i8_store(accf, o_ptr, rn_out, rm, rmask, N, som, sop, pid_s, SPLIT)


# ---------------------------------------------------------------------------------------------
# host side


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
