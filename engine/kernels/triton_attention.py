"""Layout-invariant attention on a GPU (CUDA or ROCm): a Triton split-KV kernel.

The contract is engine.model.attention's (read its module doc): row r of a verify window attends
to logical positions 0 .. n + depth[r]; position p < n is cache slot p, position n + j the slot of
the row's ancestor at depth j. The result for a row depends only on its query and those keys,
never on the other rows, the slots the keys sit in or the row count, so a tree row equals the
one-row decode step of the same token bit for bit.

Kernel 1, `_split_kernel`, grid (rows, kv heads, splits): one program takes one window row, the
G query heads that share a kv head (padded to GP >= 16 rows for tl.dot), and one split of
SPLIT_BLOCKS x BLOCK logical positions starting at a multiple of that length. It gathers the
keys of each block by logical position, runs the online softmax over its blocks in order, and
writes its partial (max, sum, accumulator) in float32. Splits and blocks past the row's last
position do nothing, so a pass reads only the keys each row attends to (not the whole cache).
Rows packed (PACK, opt-in: SPECSCOPE_ATTN_PACK=1; a window of more than one row): a split of committed keys only holds the
same keys for every row, so the program of every P-th row (P = GP // G) takes it for P rows in
one tile, row i's heads in tile rows iG .. iG + G - 1, where one row a program left GP - G tile
rows empty and read the keys once a row (the 8B-like model's 16-row pass spent 2.6x the
one-row pass's attention time, BENCHMARKS.md). A tile row's scores, softmax and output are
its own (the dots' and reductions' work per tile row does not depend on the other rows or on
which tile row it is), so a row keeps the bits it gets alone: checked on the card by the
doctor (a window's rows against the same rows alone) and bench/attn_ab.py, and in the
interpreter against PACK off.

Then the row's last split program to finish (an atomic counter per row and kv head, reset by
that program) adds the row's splits in order 0, 1, ... (`_combine`; the split count is a
function of the row's own length only): one launch a layer, no combine kernel (L3, opt-in:
the combine's partials loaded before any is added, one trip to the L2 a chunk, not one a
split; the same bits). Rows packed
count per group of P rows instead, and the group's last partial adds every row's splits in one
tile, each tile row as its row alone would (`_group_count_and_combine`).

Every dot has the same shape whatever the window ([GP, D] x [D, BLOCK] and [GP, BLOCK] x
[BLOCK, D]); the row count only sets the grid. float32 dots take the backend's precision
(engine.kernels.dot_precision: "tf32x3" on CUDA, three TF32 products, float32 accuracy on
tensor cores; "ieee" on ROCm, FMAs), passed as the code IEEE (0 for 16-bit dtypes).
The committed length is read from device memory, so the kernels run inside CUDA/HIP graphs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.window_layout import BLOCK, WindowLayout
from engine.kernels.dot_precision import ieee_code
from engine.kernels.pdl import pdl_kwargs, pdl_wait
from engine.kernels.triton_dot import dot_f32

import os

# blocks per split (a split covers SPLIT_BLOCKS * 64 logical positions); any fixed value keeps
# rows exact. SPECSCOPE_ATTN_SPLIT_BLOCKS is for measuring the choice on a card.
SPLIT_BLOCKS = int(os.environ.get("SPECSCOPE_ATTN_SPLIT_BLOCKS", "2"))
# splits the combine loads at a time (SPECSCOPE_ATTN_COMBINE_CH, for measuring; any value gives
# the same bits)
CH = tl.constexpr(int(os.environ.get("SPECSCOPE_ATTN_COMBINE_CH", "8")))
# rows packed (the kernel's P): a window's splits of committed keys, the same keys for every
# row, run GP // G rows to a program, one tile (each row's bits as alone: _split_blocks).
# Opt-in (SPECSCOPE_ATTN_PACK=1): on an H100 (2026-12-07, BENCHMARKS.md) it ran exact (216/216)
# and halved the 8B-like model's 16-row attention at long contexts, but doubled the bundled
# model's; one combine a group (since) is not yet measured on a card
PACK = os.environ.get("SPECSCOPE_ATTN_PACK", "0") == "1"
# the combine's loads in one go (L3, opt-in: SPECSCOPE_ATTN_L3=1): one row a program's combine
# loads a chunk's CH partials as three tiles, all in flight together. The default's loop, CH
# splits unrolled, compiles (sm_90, Triton 3.6) to one split's loads at a time: each split's
# weight goes through shared memory (a layout conversion between two barriers) before the
# next split's loads issue, so a row's combine waits on ns dependent trips to the L2 in turn.
# The same values, operations and order: the same bits (tests/specscope/test_doctor.py,
# test_the_attention_with_its_loads_first_gives_the_same_bits).
# Not yet timed on a card
L3 = os.environ.get("SPECSCOPE_ATTN_L3", "0") == "1"
# a split's two blocks of keys and values loaded before the first block's arithmetic (KV2,
# opt-in: SPECSCOPE_ATTN_KV2=1; one row a program, SB = 2): compiled, the unrolled block loop
# issues the second block's loads after the first block's dots and softmax. The same bits
# (the same test as L3). On RDNA it costs registers: bfloat16 spills 288-1,484 bytes where
# the default spills 0-356 (gfx1100, gfx1201). Not yet timed on a card
KV2 = os.environ.get("SPECSCOPE_ATTN_KV2", "0") == "1"


@triton.jit
def _split_blocks(q, kbase, vbase, anc_ptr, r, sar, n, length, start, skc, scale,
                  GP: tl.constexpr, D: tl.constexpr, BN: tl.constexpr, SB: tl.constexpr,
                  IEEE: tl.constexpr):
    """The online softmax of q [GP, D] over one split's SB blocks of BN logical positions from
    `start` (keys and values of one kv head at kbase / vbase), positions < length; returns
    (m, l, acc). A block of committed keys only reads cache slots as they are; a block reaching
    past n gathers row r's ancestors (anc). Every q row's result is its own: the same ops on
    the same keys give a row the same bits whichever tile row it sits in."""
    m_i = tl.full([GP], float("-inf"), tl.float32)
    l_i = tl.zeros([GP], tl.float32)
    acc = tl.zeros([GP, D], tl.float32)
    # unrolled. Compiled, a block's loads issue after the block before it has been computed
    # (KV2 loads both first). A block past the row's end (all masked: scores -inf, p = 0,
    # alpha = 1) leaves m, l, acc as skipping it would, bit for bit; a split's first block is
    # used.
    for b in tl.static_range(SB):
        kk, vv, valid = _block_kv(kbase, vbase, anc_ptr, r, sar, n, length, start + b * BN, skc,
                                  D, BN)
        m_i, l_i, acc = _block_step(q, kk, vv, valid, m_i, l_i, acc, scale, IEEE)
    return m_i, l_i, acc


@triton.jit
def _block_kv(kbase, vbase, anc_ptr, r, sar, n, length, start, skc, D: tl.constexpr,
              BN: tl.constexpr):
    """_split_blocks' keys and values of the block of BN logical positions from start, and
    which are valid: its loads, nothing computed from them."""
    dd = tl.arange(0, D)
    offs = start + tl.arange(0, BN)
    valid = offs < length
    rel = offs - n
    if start + BN <= n:                 # committed keys: no ancestor load to wait on
        slot = offs.to(tl.int64)
    else:
        a = tl.load(anc_ptr + r * sar + rel, mask=valid & (rel >= 0), other=0)
        slot = tl.where(rel < 0, offs, n + a)
    kk = tl.load(kbase + slot[:, None] * skc + dd[None, :], mask=valid[:, None], other=0.0)
    vv = tl.load(vbase + slot[:, None] * skc + dd[None, :], mask=valid[:, None], other=0.0)
    return kk, vv, valid


@triton.jit
def _block_step(q, kk, vv, valid, m_i, l_i, acc, scale, IEEE: tl.constexpr):
    """_split_blocks' online softmax over one block: its loop body's operations."""
    if IEEE:
        sc = dot_f32(q, tl.trans(kk), None, IEEE)
    else:
        sc = tl.dot(q, tl.trans(kk))
    sc = tl.where(valid[None, :], sc * scale, float("-inf"))           # [GP, BN]
    m_new = tl.maximum(m_i, tl.max(sc, 1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(sc - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if IEEE:
        pv = dot_f32(p, vv, None, IEEE)
    else:
        pv = tl.dot(p.to(vv.dtype), vv)
    acc = acc * alpha[:, None] + pv
    return m_new, l_i, acc


@triton.jit
def _split_blocks_kv2(q, kbase, vbase, anc_ptr, r, sar, n, length, start, skc, scale,
                     GP: tl.constexpr, D: tl.constexpr, BN: tl.constexpr, IEEE: tl.constexpr):
    """_split_blocks for a split of two blocks (SB = 2, the default) with both blocks' keys
    and values loaded before the first block's arithmetic (KV2): compiled, the loop issued the
    second block's loads only after the first block's dots and softmax, one more trip to
    memory a program. The same operations in the same order: the same bits."""
    k0, v0, ok0 = _block_kv(kbase, vbase, anc_ptr, r, sar, n, length, start, skc, D, BN)
    k1, v1, ok1 = _block_kv(kbase, vbase, anc_ptr, r, sar, n, length, start + BN, skc, D, BN)
    m_i = tl.full([GP], float("-inf"), tl.float32)
    l_i = tl.zeros([GP], tl.float32)
    acc = tl.zeros([GP, D], tl.float32)
    m_i, l_i, acc = _block_step(q, k0, v0, ok0, m_i, l_i, acc, scale, IEEE)
    m_i, l_i, acc = _block_step(q, k1, v1, ok1, m_i, l_i, acc, scale, IEEE)
    return m_i, l_i, acc


@triton.jit
def _count_and_combine(o_ptr, m_ptr, l_ptr, acc_ptr, cnt_ptr, depth_ptr, r, h, n, NH, sor, soh,
                       NS: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                       BN: tl.constexpr, SB: tl.constexpr, L3: tl.constexpr = False):
    """Row r, kv head h: one more split partial stored; the row's last split to finish adds
    all of them (a counter per (row, kv head); its release/acquire makes the others' partials
    visible) and resets the counter."""
    rh = r * NH + h
    ns = tl.cdiv(n + tl.load(depth_ptr + r) + 1, SB * BN)   # the row's splits: its own length only
    done = tl.atomic_add(cnt_ptr + rh, 1, sem="acq_rel", scope="gpu")
    if done == ns - 1:
        _combine(o_ptr, m_ptr, l_ptr, acc_ptr, r, h, rh * NS, ns, sor, soh, NS, G, GP, D, L3)
        tl.atomic_xchg(cnt_ptr + rh, 0, sem="relaxed", scope="gpu")


@triton.jit
def _group_count_and_combine(o_ptr, m_ptr, l_ptr, acc_ptr, cnt_ptr, depth_ptr, r0, h, n, R, NH,
                             sor, soh, k, NS: tl.constexpr, G: tl.constexpr, GP: tl.constexpr,
                             D: tl.constexpr, BN: tl.constexpr, SB: tl.constexpr,
                             P: tl.constexpr):
    """Rows packed: the group of rows r0 .. r0 + P - 1, kv head h, k more split partials
    stored (all its rows' for a split of committed keys, one row's for a split reaching past
    n). One counter a group (at its first row's place); the group's last partial to land adds
    every row's splits, each row in its own tile rows, in the order and with the operations of
    one row alone (_combine): one combine a group, not P in turn."""
    g = tl.arange(0, GP)
    row = r0 + g // G
    ok = (g < P * G) & (row < R)
    ns = tl.where(ok, tl.cdiv(n + tl.load(depth_ptr + row, mask=ok, other=0) + 1, SB * BN), 0)
    total = tl.sum(tl.where(g % G == 0, ns, 0), 0)          # the group's partials
    ci = r0 * NH + h
    done = tl.atomic_add(cnt_ptr + ci, k, sem="acq_rel", scope="gpu")
    if done + k == total:
        _combine_rows(o_ptr, m_ptr, l_ptr, acc_ptr, row, ok, h, (row * NH + h) * NS, g % G, ns,
                      tl.max(ns, 0), sor, soh, NS, G, GP, D)
        tl.atomic_xchg(cnt_ptr + ci, 0, sem="relaxed", scope="gpu")


@triton.jit
def _split_kernel(q_ptr, k_ptr, v_ptr, n_ptr, depth_ptr, anc_ptr, m_ptr, l_ptr, acc_ptr,
                  cnt_ptr, o_ptr, sqr, sqh, skh, skc, sar, sor, soh, scale, NS: tl.constexpr,
                  G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BN: tl.constexpr,
                  SB: tl.constexpr, IEEE: tl.constexpr, PDL: tl.constexpr = False,
                  P: tl.constexpr = 1, L3: tl.constexpr = False, KV2: tl.constexpr = False):
    """Program (r, h, s): row r, kv head h, split s. P > 1 (rows packed): a split of committed
    keys only is the same for every row, so the program of each P-th row takes it for rows
    r .. r + P - 1 in one tile (row i's G heads at tile rows i G .. i G + G - 1; the others'
    programs do nothing there); a split reaching past n stays one row's."""
    pdl_wait(PDL)       # engine.kernels.pdl
    r, h, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    n = tl.load(n_ptr)
    start = s * SB * BN
    g = tl.arange(0, GP)
    dd = tl.arange(0, D)
    kbase = k_ptr + h * skh
    vbase = v_ptr + h * skh
    NH = tl.num_programs(1)
    R = tl.num_programs(0)
    if P > 1 and start + SB * BN <= n:
        if r % P == 0:
            row = r + g // G
            ok = (g < P * G) & (row < R)
            hq = h * G + g % G
            q = tl.load(q_ptr + row[:, None] * sqr + hq[:, None] * sqh + dd[None, :],
                        mask=ok[:, None], other=0.0)                         # [GP, D]
            m_i, l_i, acc = _split_blocks(q, kbase, vbase, anc_ptr, r, sar, n, n, start, skc,
                                          scale, GP, D, BN, SB, IEEE)
            w = ((row * NH + h) * NS + s) * GP + g % G
            tl.store(m_ptr + w, m_i, mask=ok)
            tl.store(l_ptr + w, l_i, mask=ok)
            tl.store(acc_ptr + w[:, None] * D + dd[None, :], acc, mask=ok[:, None])
            _group_count_and_combine(o_ptr, m_ptr, l_ptr, acc_ptr, cnt_ptr, depth_ptr, r, h, n,
                                     R, NH, sor, soh, tl.minimum(P, R - r), NS, G, GP, D, BN,
                                     SB, P)
    else:
        length = n + tl.load(depth_ptr + r) + 1          # the row's logical key count
        if start < length:
            q = tl.load(q_ptr + r * sqr + (h * G + g)[:, None] * sqh + dd[None, :],
                        mask=g[:, None] < G, other=0.0)                         # [GP, D]
            if KV2 and SB == 2:
                m_i, l_i, acc = _split_blocks_kv2(q, kbase, vbase, anc_ptr, r, sar, n, length,
                                                 start, skc, scale, GP, D, BN, IEEE)
            else:
                m_i, l_i, acc = _split_blocks(q, kbase, vbase, anc_ptr, r, sar, n, length,
                                              start, skc, scale, GP, D, BN, SB, IEEE)
            w = (r * NH + h) * NS + s
            tl.store(m_ptr + w * GP + g, m_i)
            tl.store(l_ptr + w * GP + g, l_i)
            tl.store(acc_ptr + (w * GP + g)[:, None] * D + dd[None, :], acc)
            if P > 1:       # a packed window's split past n: its row's group counts it
                _group_count_and_combine(o_ptr, m_ptr, l_ptr, acc_ptr, cnt_ptr, depth_ptr,
                                         r - r % P, h, n, R, NH, sor, soh, 1, NS, G, GP, D,
                                         BN, SB, P)
            else:
                _count_and_combine(o_ptr, m_ptr, l_ptr, acc_ptr, cnt_ptr, depth_ptr, r, h, n,
                                   NH, sor, soh, NS, G, GP, D, BN, SB, L3)


@triton.jit
def _part(m_ptr, l_ptr, acc_ptr, w, ok, GP: tl.constexpr, D: tl.constexpr):
    """Split partial w's (m, l, acc), as _combine's loop loads them (nothing where not ok)."""
    g = tl.arange(0, GP)
    dd = tl.arange(0, D)
    m = tl.load(m_ptr + w * GP + g, mask=ok, other=float("-inf"), cache_modifier=".cg")
    l = tl.load(l_ptr + w * GP + g, mask=ok, other=0.0, cache_modifier=".cg")
    a = tl.load(acc_ptr + (w * GP + g)[:, None] * D + dd[None, :], mask=ok, other=0.0,
                cache_modifier=".cg")
    return m, l, a


@triton.jit
def _add(tot, out, m, l, a, mx):
    """One split partial added: _combine's loop body, the same operations."""
    wt = tl.exp(m - mx)
    tot += l * wt
    out += a * wt[:, None]
    return tot, out


@triton.jit
def _chunk(m_ptr, l_ptr, acc_ptr, w, k, tot, out, mx, OWN_MAX: tl.constexpr,
           GP: tl.constexpr, D: tl.constexpr):
    """L3: the k (<= 8 used) partials from w loaded first, each in its own registers, so every
    load is issued before the first weight's trip through shared memory; then added in order
    0, 1, ... with _combine's operations (_add). OWN_MAX: the row's only chunk, its max taken
    from these loads (a max is exact in any order; mx may differ in the sign of a zero only,
    and m - mx, exp of it and so the weights do not)."""
    m0, l0, a0 = _part(m_ptr, l_ptr, acc_ptr, w, 0 < k, GP, D)
    m1, l1, a1 = _part(m_ptr, l_ptr, acc_ptr, w + 1, 1 < k, GP, D)
    m2, l2, a2 = _part(m_ptr, l_ptr, acc_ptr, w + 2, 2 < k, GP, D)
    m3, l3, a3 = _part(m_ptr, l_ptr, acc_ptr, w + 3, 3 < k, GP, D)
    m4, l4, a4 = _part(m_ptr, l_ptr, acc_ptr, w + 4, 4 < k, GP, D)
    m5, l5, a5 = _part(m_ptr, l_ptr, acc_ptr, w + 5, 5 < k, GP, D)
    m6, l6, a6 = _part(m_ptr, l_ptr, acc_ptr, w + 6, 6 < k, GP, D)
    m7, l7, a7 = _part(m_ptr, l_ptr, acc_ptr, w + 7, 7 < k, GP, D)
    if OWN_MAX:
        mx = tl.maximum(tl.maximum(tl.maximum(m0, m1), tl.maximum(m2, m3)),
                        tl.maximum(tl.maximum(m4, m5), tl.maximum(m6, m7)))
    tot, out = _add(tot, out, m0, l0, a0, mx)
    tot, out = _add(tot, out, m1, l1, a1, mx)
    tot, out = _add(tot, out, m2, l2, a2, mx)
    tot, out = _add(tot, out, m3, l3, a3, mx)
    tot, out = _add(tot, out, m4, l4, a4, mx)
    tot, out = _add(tot, out, m5, l5, a5, mx)
    tot, out = _add(tot, out, m6, l6, a6, mx)
    tot, out = _add(tot, out, m7, l7, a7, mx)
    return tot, out


@triton.jit
def _sum_l3(m_ptr, l_ptr, acc_ptr, w0, ns, NS: tl.constexpr, GP: tl.constexpr,
            D: tl.constexpr):
    """_combine's (tot, out) with its loads first (L3): a row of at most 8 splits (a context
    of up to 8 x 128 positions) in one trip to the L2 for all its partials; more, one trip for
    the max and one a chunk of 8. The same sums as _combine's loop, bit for bit."""
    g = tl.arange(0, GP)
    c8 = tl.arange(0, 8)
    tot = tl.zeros([GP], tl.float32)
    out = tl.zeros([GP, D], tl.float32)
    mx = tl.full([GP], float("-inf"), tl.float32)
    if ns <= 8:
        tot, out = _chunk(m_ptr, l_ptr, acc_ptr, w0, ns, tot, out, mx, True, GP, D)
    else:
        for c in range(0, NS, 8):                   # the max: exact in any order
            if c < ns:
                mm = tl.load(m_ptr + (w0 + c + c8)[:, None] * GP + g[None, :],
                             mask=(c + c8)[:, None] < ns, other=float("-inf"),
                             cache_modifier=".cg")
                mx = tl.maximum(mx, tl.max(mm, 0))
        for c in range(0, NS, 8):
            if c < ns:
                tot, out = _chunk(m_ptr, l_ptr, acc_ptr, w0 + c, ns - c, tot, out, mx, False,
                                  GP, D)
    return tot, out


@triton.jit
def _combine(o_ptr, m_ptr, l_ptr, acc_ptr, r, h, w0, ns, sor, soh, NS: tl.constexpr,
             G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, L3: tl.constexpr = False):
    """Row r, kv head h: its ns split partials (at w0..) added in order 0, 1, ...; loads past
    the L1 (".cg"): other programs wrote them. CH splits at a time, unrolled, so their loads
    are issued together (a loop of one split at a time waited on each in turn: the kernel's
    longest part at short contexts). A split past ns loads m = -inf (weight exp(-inf) = 0),
    l = acc = 0: adding its 0 * 0 leaves tot and out as they are, bit for bit, as skipping
    it would (neither is ever -0.0), so the sum keeps the order 0, 1, ... of the splits."""
    g = tl.arange(0, GP)
    dd = tl.arange(0, D)
    if L3:
        tot, out = _sum_l3(m_ptr, l_ptr, acc_ptr, w0, ns, NS, GP, D)
    else:
        c8 = tl.arange(0, CH)
        mx = tl.full([GP], float("-inf"), tl.float32)
        for c in range(0, NS, CH):                  # the max: exact in any order
            if c < ns:
                mm = tl.load(m_ptr + (w0 + c + c8)[:, None] * GP + g[None, :],
                             mask=(c + c8)[:, None] < ns, other=float("-inf"),
                             cache_modifier=".cg")
                mx = tl.maximum(mx, tl.max(mm, 0))
        tot = tl.zeros([GP], tl.float32)
        out = tl.zeros([GP, D], tl.float32)
        for c in range(0, NS, CH):
            if c < ns:
                for j in tl.static_range(CH):
                    w = w0 + c + j
                    ok = c + j < ns
                    wt = tl.exp(tl.load(m_ptr + w * GP + g, mask=ok, other=float("-inf"),
                                        cache_modifier=".cg") - mx)
                    tot += tl.load(l_ptr + w * GP + g, mask=ok, other=0.0,
                                   cache_modifier=".cg") * wt
                    out += tl.load(acc_ptr + (w * GP + g)[:, None] * D + dd[None, :], mask=ok,
                                   other=0.0, cache_modifier=".cg") * wt[:, None]
    out = out / tot[:, None]
    tl.store(o_ptr + r * sor + (h * G + g)[:, None] * soh + dd[None, :],
             out.to(o_ptr.dtype.element_ty), mask=g[:, None] < G)


@triton.jit
def _combine_rows(o_ptr, m_ptr, l_ptr, acc_ptr, row, ok, h, w0, lane, ns, nsmax, sor, soh,
                  NS: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr):
    """_combine for a packed group: tile row i (its window row row[i], stored where ok[i])
    adds its own ns[i] split partials (at split slots w0[i].., lane lane[i]) with _combine's
    operations in _combine's order; a split past ns[i] adds 0 * 0 as there, so each tile row
    gets its row's bits whatever the other tile rows' counts (nsmax, their largest). Kept
    apart from _combine so the one-row-a-program path compiles as it did when measured."""
    g = tl.arange(0, GP)
    dd = tl.arange(0, D)
    c8 = tl.arange(0, CH)
    mx = tl.full([GP], float("-inf"), tl.float32)
    for c in range(0, NS, CH):                  # the max: exact in any order
        if c < nsmax:
            mm = tl.load(m_ptr + (w0[None, :] + c + c8[:, None]) * GP + lane[None, :],
                         mask=(c + c8)[:, None] < ns[None, :], other=float("-inf"),
                         cache_modifier=".cg")
            mx = tl.maximum(mx, tl.max(mm, 0))
    tot = tl.zeros([GP], tl.float32)
    out = tl.zeros([GP, D], tl.float32)
    for c in range(0, NS, CH):
        if c < nsmax:
            for j in tl.static_range(CH):
                w = (w0 + c + j) * GP + lane
                use = c + j < ns
                wt = tl.exp(tl.load(m_ptr + w, mask=use, other=float("-inf"),
                                    cache_modifier=".cg") - mx)
                tot += tl.load(l_ptr + w, mask=use, other=0.0, cache_modifier=".cg") * wt
                out += tl.load(acc_ptr + w[:, None] * D + dd[None, :], mask=use[:, None],
                               other=0.0, cache_modifier=".cg") * wt[:, None]
    out = out / tot[:, None]
    tl.store(o_ptr + row[:, None] * sor + (h * G + g % G)[:, None] * soh + dd[None, :],
             out.to(o_ptr.dtype.element_ty), mask=ok[:, None])


_COUNTERS: dict = {}       # device -> int32 zeros, one per (row, kv head); each pass leaves 0s
_RETIRED: list = []        # counters outgrown: graphs captured with them still read them


def _counters(device: torch.device, need: int) -> torch.Tensor:
    c = _COUNTERS.get(device)
    if c is None or c.numel() < need:
        # first use (a warm-up run, before any graph capture, for the row counts it takes). An
        # outgrown array stays alive: a graph holds its address, and freed memory would be
        # handed to other tensors under it
        if c is not None:
            _RETIRED.append(c)
        c = _COUNTERS[device] = torch.zeros(max(need, 4096), dtype=torch.int32, device=device)
    return c


def bind_layout_attention_triton(layout: WindowLayout):
    """`attend(q, k, v)` for every layer of one verify pass over `layout`."""
    return lambda q, k, v: layout_attention_triton(q, k, v, layout)


def layout_attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            layout: WindowLayout, pack: bool | None = None,
                            l3: bool | None = None, kv2: bool | None = None) -> torch.Tensor:
    """q: [R, Hq, D]; k, v: [Hkv, C, D] (one layer of the cache, same strides); layout.n a 0-d or
    1-element long tensor on the device (or an int). Returns [R, Hq, D] in q's dtype. pack: rows
    packed (default PACK; the same bits either way). l3: the combine's loads in one go (default
    L3), kv2: a split's two blocks loaded first (default KV2); the same bits either way."""
    R, Hq, D = q.shape
    Hkv, C = k.shape[0], k.shape[1]
    l3 = L3 if l3 is None else l3
    kv2 = KV2 if kv2 is None else kv2
    G = Hq // Hkv
    GP = max(16, triton.next_power_of_2(G))
    if k.stride(2) != 1 or v.stride() != k.stride() or D & (D - 1) or D < 16:
        raise ValueError(f"layout_attention_triton: unsupported cache layout {tuple(k.stride())} "
                         f"or head size {D}")
    q = q if q.stride(2) == 1 else q.contiguous()
    n = layout.n
    if not isinstance(n, torch.Tensor):
        n = torch.tensor(n, dtype=torch.long, device=q.device)
    span = SPLIT_BLOCKS * BLOCK
    NS = triton.cdiv(C, span)
    ws = torch.empty(R * Hkv * NS * GP * (D + 2), dtype=torch.float32, device=q.device)
    m_ws = ws[:R * Hkv * NS * GP]
    l_ws = ws[R * Hkv * NS * GP:2 * R * Hkv * NS * GP]
    acc_ws = ws[2 * R * Hkv * NS * GP:]
    ieee = ieee_code(q.dtype, small=True)   # float32: the backend's dot precision (nonzero)
    anc = layout.anc
    out = torch.empty(R, Hq, D, dtype=q.dtype, device=q.device)
    _split_kernel[(R, Hkv, NS)](
        q, k, v, n, layout.depth, anc, m_ws, l_ws, acc_ws, _counters(q.device, R * Hkv), out,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), anc.stride(0), out.stride(0),
        out.stride(1), D ** -0.5, NS=NS, G=G, GP=GP, D=D, BN=BLOCK, SB=SPLIT_BLOCKS, IEEE=ieee,
        num_warps=4, **pdl_kwargs(q), **({"P": GP // G} if (PACK if pack is None else pack) and R > 1 and GP // G > 1 else {}),
        **({"L3": True} if l3 else {}), **({"KV2": True} if kv2 else {}))
    return out
