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

_TWO23 = 8388608.0     # 2^23


# ---------------------------------------------------------------------------------------------
# dequantization helpers


@triton.jit
def _biased(v):
    """int32 ``v`` in [0, 2^23) -> float32 ``2^23 + v``, exactly, without a conversion op."""
    return (v | 0x4B000000).to(tl.float32, bitcast=True)


@triton.jit
def _xload(xp, rm, kx, M, K, EVEN_K: tl.constexpr):
    if EVEN_K:
        return tl.load(xp, mask=rm[:, None] < M, other=0.0)
    else:
        return tl.load(xp, mask=(rm[:, None] < M) & (kx[None, :] < K), other=0.0)


@triton.jit
def _dot1(xt, wt, acc, IEEE: tl.constexpr):
    if IEEE:
        return tl.dot(xt, wt, acc, input_precision="ieee")
    else:
        return tl.dot(xt, wt, acc)


@triton.jit
def _dot_slices(acc0, acc1, acc2, acc3, w, kx, x_ptr, sxm, M, K,
                NMB: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr):
    """acc_i += x[16i:16i+16, kx] @ w.T for the first NMB slices. w: [BN, KP]; kx: [KP]."""
    wt = tl.trans(w)
    rm = tl.arange(0, 16)
    xp = x_ptr + rm[:, None] * sxm + kx[None, :]
    acc0 = _dot1(_xload(xp, rm, kx, M, K, EVEN_K), wt, acc0, IEEE)
    if NMB > 1:
        acc1 = _dot1(_xload(xp + 16 * sxm, rm + 16, kx, M, K, EVEN_K), wt, acc1, IEEE)
    if NMB > 2:
        acc2 = _dot1(_xload(xp + 32 * sxm, rm + 32, kx, M, K, EVEN_K), wt, acc2, IEEE)
    if NMB > 3:
        acc3 = _dot1(_xload(xp + 48 * sxm, rm + 48, kx, M, K, EVEN_K), wt, acc3, IEEE)
    return acc0, acc1, acc2, acc3


@triton.jit
def _store(acc, o_ptr, row0, rn, M, N, som, sop, pid_s, SPLIT: tl.constexpr):
    rm = row0 + tl.arange(0, 16)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT:
        p = o_ptr + pid_s * sop + rm[:, None] * som + rn[None, :]
        tl.store(p, acc, mask=mask)
    else:
        p = o_ptr + rm[:, None] * som + rn[None, :]
        tl.store(p, acc.to(o_ptr.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------------------------------------
# the kernel


@triton.jit
def _packed_mm_kernel(
    x_ptr, o_ptr, p0, p1, p2, p3, p4, p5,
    M, N, K, sxm, som, sop,
    TPS: tl.constexpr, QT: tl.constexpr, BN: tl.constexpr, NMB: tl.constexpr, SPLIT: tl.constexpr,
    EVEN_K: tl.constexpr, IEEE: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    rn_out = pid_n * BN + tl.arange(0, BN)
    rn = tl.minimum(rn_out, N - 1)          # clamped rows: loads need no N mask
    cdt = x_ptr.dtype.element_ty

    acc0 = tl.zeros([16, BN], dtype=tl.float32)
    acc1 = tl.zeros([16, BN], dtype=tl.float32)
    acc2 = tl.zeros([16, BN], dtype=tl.float32)
    acc3 = tl.zeros([16, BN], dtype=tl.float32)

    t_lo = pid_s * TPS
    nrow3 = rn[:, None, None]
    nrow2 = rn[:, None]
    j32 = tl.arange(0, 32)
    j16 = tl.arange(0, 16)
    # the host picks a split count dividing the tile count: every split has TPS tiles (a
    # constexpr: a known trip count, and Triton 3.6's CPU interpreter cannot loop over a
    # runtime scalar with numpy >= 2.4)
    for i in range(0, TPS):
        kb = (t_lo + i) * 256
        if QT == 0:
            # Q8_0: qs int8 [N, K] (read as bytes), d f16 [N, K/32]
            b8 = tl.arange(0, 8)
            kk = kb + 32 * b8[:, None] + j32[None, :]                      # [8, 32]
            blk = kb // 32 + b8                                             # [8]
            if EVEN_K:
                q = tl.load(p0 + nrow3 * K + kk[None, :, :])
                d = tl.load(p1 + nrow2 * (K // 32) + blk[None, :])
            else:
                q = tl.load(p0 + nrow3 * K + kk[None, :, :], mask=(kk < K)[None, :, :], other=0)
                d = tl.load(p1 + nrow2 * (K // 32) + blk[None, :],
                            mask=(blk < K // 32)[None, :], other=0.0)
            qf = _biased(q.to(tl.int32) ^ 0x80) - (_TWO23 + 128.0)        # exact int8 value
            w = (qf * d.to(tl.float32)[:, :, None]).to(cdt)
            acc0, acc1, acc2, acc3 = _dot_slices(
                acc0, acc1, acc2, acc3, tl.reshape(w, [BN, 256]), tl.reshape(kk, [256]),
                x_ptr, sxm, M, K, NMB, EVEN_K, IEEE)
        elif QT == 1 or QT == 2:
            # Q4_0 / Q4_1: qs [N, K/2], 16 bytes per 32-block: byte j = value j (low nibble)
            # and value 16+j (high nibble); d (and m) f16 [N, K/32]
            b8 = tl.arange(0, 8)
            kk = kb + 32 * b8[:, None] + j16[None, :]                      # [8, 16] low-nibble k
            blk = kb // 32 + b8
            if EVEN_K:
                q = tl.load(p0 + nrow3 * (K // 2) + (kb // 2 + 16 * b8[:, None] + j16[None, :])[None, :, :])
                d = tl.load(p1 + nrow2 * (K // 32) + blk[None, :]).to(tl.float32)
                if QT == 2:
                    m = tl.load(p2 + nrow2 * (K // 32) + blk[None, :]).to(tl.float32)
            else:
                bm = (blk < K // 32)[None, :]
                q = tl.load(p0 + nrow3 * (K // 2) + (kb // 2 + 16 * b8[:, None] + j16[None, :])[None, :, :],
                            mask=bm[:, :, None], other=0)
                d = tl.load(p1 + nrow2 * (K // 32) + blk[None, :], mask=bm, other=0.0).to(tl.float32)
                if QT == 2:
                    m = tl.load(p2 + nrow2 * (K // 32) + blk[None, :], mask=bm, other=0.0).to(tl.float32)
            qi = q.to(tl.int32)
            if QT == 1:
                lo = (_biased(qi & 15) - (_TWO23 + 8.0)) * d[:, :, None]
                hi = (_biased(qi >> 4) - (_TWO23 + 8.0)) * d[:, :, None]
            else:
                lo = tl.fma(_biased(qi & 15) - _TWO23, d[:, :, None], m[:, :, None])
                hi = tl.fma(_biased(qi >> 4) - _TWO23, d[:, :, None], m[:, :, None])
            acc0, acc1, acc2, acc3 = _dot_slices(
                acc0, acc1, acc2, acc3, tl.reshape(lo.to(cdt), [BN, 128]), tl.reshape(kk, [128]),
                x_ptr, sxm, M, K, NMB, EVEN_K, IEEE)
            acc0, acc1, acc2, acc3 = _dot_slices(
                acc0, acc1, acc2, acc3, tl.reshape(hi.to(cdt), [BN, 128]), tl.reshape(kk + 16, [128]),
                x_ptr, sxm, M, K, NMB, EVEN_K, IEEE)
        elif QT == 3 or QT == 4:
            # Q4_K / Q5_K: qs [N, K/2], per superblock 4 chunks of 32 bytes; chunk c byte j:
            # low nibble = value 64c+j (sub-block 2c), high nibble = value 64c+32+j (2c+1).
            # Q5_K: qh [N, K/8], 32 bytes per superblock: bit s of byte j is the 5th bit of
            # value 32s+j. d, dmin f16 [N, K/256]; sc, mn u8 [N, K/32].
            c4 = tl.arange(0, 4)
            kk = kb + 64 * c4[:, None] + j32[None, :]                       # [4, 32] low-nibble k
            q = tl.load(p0 + nrow3 * (K // 2) + (kb // 2 + 32 * c4[:, None] + j32[None, :])[None, :, :])
            qi = q.to(tl.int32)
            if QT == 3:
                pd = p1
                pdm = p2
                psc = p3
                pmn = p4
                qlo = qi & 15
                qhi = qi >> 4
            else:
                h = tl.load(p1 + nrow3 * (K // 8) + (kb // 8 + j32)[None, None, :]).to(tl.int32)
                h = h >> (2 * c4)[None, :, None]
                qlo = (qi & 15) | ((h & 1) << 4)
                qhi = (qi >> 4) | ((h & 2) << 3)
                pd = p2
                pdm = p3
                psc = p4
                pmn = p5
            d = tl.load(pd + nrow2 * (K // 256) + kb // 256).to(tl.float32)      # [BN, 1]
            dm = tl.load(pdm + nrow2 * (K // 256) + kb // 256).to(tl.float32)
            sub = kb // 32 + 2 * c4                                             # [4]
            sc_lo = tl.load(psc + nrow2 * (K // 32) + sub[None, :]).to(tl.float32)
            sc_hi = tl.load(psc + nrow2 * (K // 32) + sub[None, :] + 1).to(tl.float32)
            mn_lo = tl.load(pmn + nrow2 * (K // 32) + sub[None, :]).to(tl.float32)
            mn_hi = tl.load(pmn + nrow2 * (K // 32) + sub[None, :] + 1).to(tl.float32)
            # gguf: (d * sc) * q - (dmin * m): the products are exact, one rounding; fma too
            lo = tl.fma(_biased(qlo) - _TWO23, (d * sc_lo)[:, :, None], -(dm * mn_lo)[:, :, None])
            hi = tl.fma(_biased(qhi) - _TWO23, (d * sc_hi)[:, :, None], -(dm * mn_hi)[:, :, None])
            acc0, acc1, acc2, acc3 = _dot_slices(
                acc0, acc1, acc2, acc3, tl.reshape(lo.to(cdt), [BN, 128]), tl.reshape(kk, [128]),
                x_ptr, sxm, M, K, NMB, True, IEEE)
            acc0, acc1, acc2, acc3 = _dot_slices(
                acc0, acc1, acc2, acc3, tl.reshape(hi.to(cdt), [BN, 128]), tl.reshape(kk + 32, [128]),
                x_ptr, sxm, M, K, NMB, True, IEEE)
        else:
            # Q6_K: ql [N, K/2] (128 bytes per superblock), qh [N, K/4] (64), sc i8 [N, K/16],
            # d f16 [N, K/256]. Value 128h + 32j + l (half h, j 0..3, l 0..31):
            #   low 4 bits = ql[64h + 32(j%2) + l] >> 4(j//2), high 2 bits = qh[32h + l] >> 2j,
            #   scale sc[(128h + 32j + l) // 16]; value = d * sc * (q - 32).
            # Tile axes: g = 2h + a (a = j%2, ql chunk g), l = 16 l1 + l0.
            g4 = tl.arange(0, 4)
            l2 = tl.arange(0, 2)
            ql_off = kb // 2 + 32 * g4[:, None, None] + 16 * l2[None, :, None] + j16[None, None, :]
            qh_off = kb // 4 + 32 * (g4 // 2)[:, None, None] + 16 * l2[None, :, None] + j16[None, None, :]
            b = tl.load(p0 + rn[:, None, None, None] * (K // 2) + ql_off[None, :, :, :]).to(tl.int32)
            h = tl.load(p1 + rn[:, None, None, None] * (K // 4) + qh_off[None, :, :, :]).to(tl.int32)
            a = g4 % 2
            hg = h >> (2 * a)[None, :, None, None]
            qlo = (b & 15) | ((hg & 3) << 4)
            qhi = (b >> 4) | ((hg & 48))                    # bits (2a+4, 2a+5) -> 4, 5
            # value index in the superblock: lo 128h + 32a + l, hi +64; scale index /16
            s_lo_idx = kb // 16 + 8 * (g4 // 2)[:, None] + 2 * a[:, None] + l2[None, :]   # [4, 2]
            d = tl.load(p3 + nrow2 * (K // 256) + kb // 256).to(tl.float32)            # [BN, 1]
            sc_lo = tl.load(p2 + rn[:, None, None] * (K // 16) + s_lo_idx[None, :, :]).to(tl.float32)
            sc_hi = tl.load(p2 + rn[:, None, None] * (K // 16) + s_lo_idx[None, :, :] + 4).to(tl.float32)
            s_lo = (d[:, :, None] * sc_lo)[:, :, :, None]
            s_hi = (d[:, :, None] * sc_hi)[:, :, :, None]
            lo = (_biased(qlo) - (_TWO23 + 32.0)) * s_lo
            hi = (_biased(qhi) - (_TWO23 + 32.0)) * s_hi
            kk = kb + 128 * (g4 // 2)[:, None, None] + 32 * a[:, None, None] + 16 * l2[None, :, None] + j16[None, None, :]
            acc0, acc1, acc2, acc3 = _dot_slices(
                acc0, acc1, acc2, acc3, tl.reshape(lo.to(cdt), [BN, 128]), tl.reshape(kk, [128]),
                x_ptr, sxm, M, K, NMB, True, IEEE)
            acc0, acc1, acc2, acc3 = _dot_slices(
                acc0, acc1, acc2, acc3, tl.reshape(hi.to(cdt), [BN, 128]), tl.reshape(kk + 64, [128]),
                x_ptr, sxm, M, K, NMB, True, IEEE)

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
# host side


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    try:
        return torch.cuda.get_device_properties(device_index).multi_processor_count
    except Exception:  # noqa: BLE001 - interpreter on CPU, or no CUDA runtime
        return 16


@functools.lru_cache(maxsize=None)
def kernel_config(qtype: str, n: int, k: int, sms: int) -> dict:
    """The launch configuration of a shape: a function of (qtype, N, K, SM count) only, never
    of the number of activation rows (that is what makes the result row-invariant)."""
    bn = 64
    n_blocks = triton.cdiv(n, bn)
    n_tiles = triton.cdiv(k, BK)
    splits = 1
    target = 2 * sms
    if n_blocks < target:
        want = max(1, target // n_blocks)
        # the largest divisor of n_tiles not above want: every split gets the same tile count
        splits = max(s for s in range(1, min(want, n_tiles) + 1) if n_tiles % s == 0)
    tiles_per_split = n_tiles // splits
    return {"BN": bn, "num_warps": 4, "num_stages": 3, "splits": splits,
            "tiles_per_split": tiles_per_split, "n_tiles": n_tiles}


def packed_matmul(x: torch.Tensor, w) -> torch.Tensor:
    """``x @ dequant(w).T`` for ``x`` [..., K] (bf16/fp16/fp32, on the GPU, or on the CPU under
    ``TRITON_INTERPRET=1``) and a packed weight ``w`` (``.qtype``, ``.shape`` (N, K),
    ``.planes``). Returns [..., N] in ``x.dtype``."""
    qtype = str(w.qtype).upper().split(".")[-1]
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
    planes = [w.planes[name] for name in _PLANES[qtype]]
    for p in planes:
        if not p.is_contiguous():
            raise ValueError("packed_matmul: planes must be contiguous")
    planes = planes + [planes[0]] * (6 - len(planes))
    if qtype == "Q8_0":
        planes[0] = planes[0].view(torch.uint8)
    if qtype == "Q6_K":
        planes[2] = planes[2].view(torch.int8)
    dev_index = x.device.index if x.device.type == "cuda" else -1
    cfg = kernel_config(qtype, n, k, _sm_count(dev_index) if dev_index >= 0 else 16)
    splits = cfg["splits"]
    even_k = k % BK == 0
    ieee = x.dtype == torch.float32
    grid = (triton.cdiv(n, cfg["BN"]), splits)
    for r0 in range(0, m_all, MAX_ROWS):
        r1 = min(m_all, r0 + MAX_ROWS)
        m = r1 - r0
        xc = x2[r0:r1]
        oc = out[r0:r1]
        nmb = triton.cdiv(m, 16)
        if splits > 1:
            ws = torch.empty((splits, m, n), dtype=torch.float32, device=x.device)
            dst, sop = ws, ws.stride(0)
        else:
            dst, sop = oc, 0
        _packed_mm_kernel[grid](
            xc, dst, *planes, m, n, k, xc.stride(0), dst.stride(-2), sop,
            TPS=cfg["tiles_per_split"], QT=_CODES[qtype], BN=cfg["BN"], NMB=nmb, SPLIT=splits > 1, EVEN_K=even_k, IEEE=ieee,
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        )
        if splits > 1:
            mn = m * n
            blk = 1024
            _sum_splits_kernel[(triton.cdiv(mn, blk),)](
                ws, oc, mn, ws.stride(0), S=splits, BLOCK=blk, num_warps=4)
    return out.reshape(*lead, n)
