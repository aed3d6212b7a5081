"""The small kernels of a packed GPU layer, fused (Triton; CUDA and ROCm alike).

A packed layer of the plain forward launched ~25 kernels at one row (norms, the split-K sums of
each matmul, residual adds, q/k norms, six for RoPE, two cache writes, SiLU, a product): on the
H200 those launches cost more than streaming the 4-bit weights. Here (engine.model.fused_layer
puts them together) a layer is:

    qkv matmul(s) -> float32 partial sums [S, R, N]      (engine.kernels.triton_kernels)
    _qkv_rope_kernel    sums the partials, adds the bias, q/k RMSNorm (Qwen3), RoPE, writes q
                        and the cache's k and v slots: one launch for every head
    attention           (engine.kernels.triton_attention: split + combine)
    o matmul -> partials
    _residual_norm_kernel   x = x + sum(partials); h = RMSNorm(x) * w: one launch
    gate|up matmul with the SwiGLU epilogue (or partials + _reduce_swiglu_kernel when split)
    down matmul -> partials
    _residual_norm_kernel   with the next layer's (or the final) norm weight

Row invariance: every kernel here gives a row's result from that row's inputs alone, with a
reduction order fixed by the shapes of the weights (hidden size, head size, split count), never
by the row count: one program per row (or per row and head), the partial sums added in the
order s = 0, 1, ... So a verify row stays bit-identical to the one-row pass.

Rounding follows the plain forward's: a matmul's output is rounded to the activations' dtype
before it is used (as a standalone matmul would return it), the residual sum is rounded, then
the norm is computed in float32 and rounded once.

Imported lazily (engine.model.fused_layer, only on a GPU with Triton): Triton is optional.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from engine.kernels.pdl import pdl_kwargs, pdl_wait

# The step after a split matmul (the residual and norm after o and down, the SwiGLU of a split
# gate|up) in the matmul's tail for few rows (tail_rows: plain steps, small windows): the launch's
# last program does it (triton_tiles._packed_mm_kernel's TAIL, _tail below) instead of a launch
# of its own, with the same bits (order-free norm sums, elementwise SwiGLU). SPECSCOPE_TAIL=1.
# Off by default: measured on an H100 (BENCHMARKS.md, "The tails measured and refuted") it is
# exact (216/216) but no faster (plain 0.995x, adaptive windows 0.94x): the tail's atomic and
# dependent loads cost what the launch did. With it on, every residual norm takes the order-free
# sum of squares, so a tail and this module's kernel give a row the same bits. A tail's tile
# holds at most _TAIL_ELEMS values.
TAILS = os.environ.get("SPECSCOPE_TAIL", "0") == "1"
_TAIL_ELEMS = 8192
_TAIL_COUNTERS: dict = {}      # device -> int32 [1]: programs done; each tail resets it to 0


def tail_rows(width: int, on: bool | None = None) -> int:
    """How many rows a matmul's tail takes for a step over `width` values (0: tails off; on:
    default TAILS)."""
    on = TAILS if on is None else on
    return max(1, _TAIL_ELEMS // triton.next_power_of_2(width)) if on else 0


def _tail_counter(device: torch.device) -> torch.Tensor:
    # created on first use, a warm-up run before any graph capture (as attention's counters)
    c = _TAIL_COUNTERS.get(device)
    if c is None:
        c = _TAIL_COUNTERS[device] = torch.zeros(1, dtype=torch.int32, device=device)
    return c


def tail_args(tail, dst, m: int, max_rows: int) -> tuple:
    """(cnt, tx, th, tw, tsx, tsh, eps) and the constexprs of a packed matmul's tail (kind, x,
    h, w, eps, width, hb, splits), or placeholders for none (triton_kernels._launch)."""
    if tail is None:
        return (dst, dst, dst, dst, 0, 0, 0.0), {}
    kind, x, h, w, eps, width, hb, splits = tail
    if m > max_rows or h.stride(-1) != 1 or (x is not None and x.stride(-1) != 1):
        raise ValueError("packed matmul tail: at most 64 rows of contiguous outputs")
    return ((_tail_counter(h.device), x if x is not None else h, h, w if w is not None else h,
             x.stride(0) if x is not None else 0, h.stride(0), float(eps)),
            {"TAIL": kind, "TS": splits, "TB": triton.next_power_of_2(width),
             "RB": triton.next_power_of_2(m), "HB": hb})


@triton.jit
def _sum_parts(ws_ptr, row_off, cols, mask, sws, S: tl.constexpr, CG: tl.constexpr = False):
    """sum_{s < S} ws[s, row, cols] in the order s = 0, 1, ... (float32). CG: loads past the L1
    (the matmul's tail reads what the launch's other programs wrote)."""
    CM: tl.constexpr = ".cg" if CG else ""
    acc = tl.load(ws_ptr + row_off + cols, mask=mask, other=0.0, cache_modifier=CM)
    for s in tl.static_range(1, S):
        acc += tl.load(ws_ptr + s * sws + row_off + cols, mask=mask, other=0.0, cache_modifier=CM)
    return acc


@triton.jit
def _sum_squares(xf):
    """Each row's sum of squares of xf [RB, TB] (float32, zeros where masked), the same bits
    whatever the tile's shape, warps or layout (the norm runs in the matmul's tail and in its
    own kernel: a row must get the same value from both). Order-free: the row's largest |x|
    (a max: exact in any order) picks the power of two s that brings it into [1, 2); each
    (x s)^2, truncated to a multiple of 2^-40 (elementwise), is summed as an int64 (exact,
    associative) and scaled back. N <= 2^16 values below 4 stay below 2^58; the truncation
    costs at most N 2^-40 against a sum of at least 1: float32's own rounding. A row holding
    inf or NaN takes the float sum (inf or NaN in any order)."""
    a = tl.max(tl.abs(xf), axis=1)
    e = tl.minimum((a.to(tl.int32, bitcast=True) >> 23) & 0xFF, 253)
    s = ((254 - e) << 23).to(tl.float32, bitcast=True)           # 2^(127 - e)
    y = xf * s[:, None]
    sq = y * y
    fx = (tl.where(sq <= 16.0, sq, 0.0) * 1099511627776.0).to(tl.int64)      # 2^40
    ss = tl.sum(fx, axis=1).to(tl.float32) * (1.0 / 1099511627776.0) / s / s
    bad = tl.sum(tl.where(tl.abs(xf) <= 3.4028234663852886e38, 0, 1), axis=1)
    return tl.where(bad == 0, ss, tl.sum(xf * xf, axis=1))


@triton.jit
def _residual_norm_rows(ws_ptr, x_ptr, h_ptr, w_ptr, rows, M, N, sws, swr, sxr, shr, eps,
                        S: tl.constexpr, TB: tl.constexpr, CG: tl.constexpr, hd_ptr,
                        HD: tl.constexpr):
    """Rows `rows` (< M) of x [., N]: x = round(x + round(sum_s ws[s, row])) (S = 0: x as it
    is), stored in place; h = round(x * rsqrt(mean(x^2) + eps) * w). Each row from its own
    values alone, with _sum_squares' order-free sum: the same bits for any tile of rows.
    HD: h's column c stored at column hd[c] (the next matmul's XP order)."""
    c = tl.arange(0, TB)
    m = (rows[:, None] < M) & (c[None, :] < N)
    dt = x_ptr.dtype.element_ty
    xp = x_ptr + rows[:, None] * sxr + c[None, :]
    x = tl.load(xp, mask=m, other=0.0)
    if S > 0:
        y = _sum_parts(ws_ptr, rows[:, None] * swr, c[None, :], m, sws, S, CG).to(dt)
        x = (x.to(tl.float32) + y.to(tl.float32)).to(dt)
        tl.store(xp, x, mask=m)
    xf = x.to(tl.float32)
    rstd = tl.rsqrt(_sum_squares(xf) / N + eps)
    w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
    hc = tl.load(hd_ptr + c, mask=c < N, other=0) if HD else c
    tl.store(h_ptr + rows[:, None] * shr + hc[None, :],
             (xf * rstd[:, None] * w[None, :]).to(h_ptr.dtype.element_ty), mask=m)


@triton.jit
def _residual_norm_kernel(ws_ptr, x_ptr, h_ptr, w_ptr, hd_ptr, N, sws, swr, sxr, shr, eps,
                          S: tl.constexpr, BLOCK: tl.constexpr, OF: tl.constexpr = False,
                          PDL: tl.constexpr = False, HD: tl.constexpr = False):
    """Row r: x[r] = round(x[r] + round(sum_s ws[s, r])) (S = 0: x[r] as it is), then
    h[r] = round(x[r] * rsqrt(mean(x[r]^2) + eps) * w). x is updated in place. OF (with the
    matmul tails, TAILS): the sum of squares order-free, as the tails compute it
    (_residual_norm_rows); else a float sum whose order follows N only. HD: h's column c is
    stored at column hd[c] (the next matmul's XP order: the same values, moved). PDL:
    engine.kernels.pdl."""
    pdl_wait(PDL)
    if OF:
        rows = tl.program_id(0) + tl.arange(0, 1)
        _residual_norm_rows(ws_ptr, x_ptr, h_ptr, w_ptr, rows, rows + 1, N, sws, swr, sxr, shr,
                            eps, S, BLOCK, False, hd_ptr, HD)
    else:
        r = tl.program_id(0)
        c = tl.arange(0, BLOCK)
        m = c < N
        dt = x_ptr.dtype.element_ty
        x = tl.load(x_ptr + r * sxr + c, mask=m, other=0.0)
        if S > 0:
            y = _sum_parts(ws_ptr, r * swr, c, m, sws, S).to(dt)
            x = (x.to(tl.float32) + y.to(tl.float32)).to(dt)
            tl.store(x_ptr + r * sxr + c, x, mask=m)
        xf = x.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(xf * xf, axis=0) / N + eps)
        w = tl.load(w_ptr + c, mask=m, other=0.0).to(tl.float32)
        hc = tl.load(hd_ptr + c, mask=m, other=0) if HD else c
        tl.store(h_ptr + r * shr + hc, (xf * rstd * w).to(h_ptr.dtype.element_ty), mask=m)


@triton.jit
def _swiglu_rows(ws_ptr, o_ptr, rows, i, M, NH, sws, swr, sor, HB: tl.constexpr,
                 S: tl.constexpr, CG: tl.constexpr):
    """Rows `rows` (< M), outputs i (< NH): gate and up are the partial sums of a gate|up weight
    whose rows are interleaved in blocks of HB (block b: gate rows bHB.., then up rows bHB..);
    o[r, i] = round(silu(round(g)) * round(u)). Elementwise: any tile gives the same bits."""
    m = (rows[:, None] < M) & (i[None, :] < NH)
    col_g = (i // HB) * (2 * HB) + i % HB
    dt = o_ptr.dtype.element_ty
    g = _sum_parts(ws_ptr, rows[:, None] * swr, col_g[None, :], m, sws, S, CG).to(dt).to(tl.float32)
    u = _sum_parts(ws_ptr, rows[:, None] * swr, col_g[None, :] + HB, m, sws, S, CG).to(dt).to(tl.float32)
    tl.store(o_ptr + rows[:, None] * sor + i[None, :], (g * tl.sigmoid(g) * u).to(dt), mask=m)


@triton.jit
def _reduce_swiglu_kernel(ws_ptr, o_ptr, NH, sws, swr, sor, HB: tl.constexpr,
                          S: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """Row r, outputs i in this program's block (_swiglu_rows)."""
    pdl_wait(PDL)
    rows = tl.program_id(0) + tl.arange(0, 1)
    i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    _swiglu_rows(ws_ptr, o_ptr, rows, i, rows + 1, NH, sws, swr, sor, HB, S, False)


@triton.jit
def _tail(o_ptr, cnt_ptr, tx_ptr, th_ptr, tw_ptr, M, N, som, sop, tsx, tsh, eps,
          TAIL: tl.constexpr, TS: tl.constexpr, TB: tl.constexpr, RB: tl.constexpr,
          HB: tl.constexpr):
    """The step that reads a split launch's partials (o_ptr [TS, M, N], rows M <= RB), run by
    its last program to finish (a counter at cnt_ptr, which that program resets), so the step
    costs no launch of its own: TAIL 1, the residual and RMSNorm (tx [M, N] += the partials'
    sum, th = norm(tx) * tw; triton_fused._residual_norm_rows); 2, the SwiGLU of an interleaved
    gate|up weight into th [M, N/2] (blocks of HB; triton_fused._swiglu_rows). Each row gets
    the bits their own kernels give it (order-free sums, elementwise ops): rows stay invariant
    whichever runs them. The release makes this program's partials visible to the last one,
    whose acquire sees every program's (as the attention kernel's combine)."""
    done = tl.atomic_add(cnt_ptr, 1, sem="acq_rel", scope="gpu")
    if done == tl.num_programs(0) * tl.num_programs(1) - 1:
        rows = tl.arange(0, RB)
        if TAIL == 1:
            _residual_norm_rows(o_ptr, tx_ptr, th_ptr, tw_ptr, rows, M, N, sop, som, tsx, tsh,
                                eps, TS, TB, True, th_ptr, False)
        else:
            _swiglu_rows(o_ptr, th_ptr, rows, tl.arange(0, TB), M, N // 2, sop, som, tsh, HB,
                         TS, True)
        tl.atomic_xchg(cnt_ptr, 0, sem="relaxed", scope="gpu")


@triton.jit
def _head_values(wa_ptr, wb_ptr, bias_ptr, r, col, c, NA, swa_s, swa_r, swb_s, swb_r,
                 SA: tl.constexpr, SB: tl.constexpr, HAS_BIAS: tl.constexpr, dt: tl.constexpr):
    """The q|k|v output columns col + c of row r, from the partials of part A (columns < NA)
    or part B (the rest), rounded to dt, plus the bias (rounded again), as float32. Both parts
    are read under masks (the other's add exact zeros): no branch picks a pointer, which the
    HIP backend's pointer canonicalization cannot compile."""
    in_a = col < NA
    ya = _sum_parts(wa_ptr, r * swa_r + col, c, (c >= 0) & in_a, swa_s, SA)
    yb = _sum_parts(wb_ptr, r * swb_r + col - NA, c, (c >= 0) & (col >= NA), swb_s, SB)
    y = (ya + yb).to(dt)
    if HAS_BIAS:
        y = (y.to(tl.float32) + tl.load(bias_ptr + col + c).to(tl.float32)).to(dt)
    return y.to(tl.float32)


@triton.jit
def _qkv_rope_kernel(wa_ptr, wb_ptr, bias_ptr, qn_ptr, kn_ptr, cos_ptr, sin_ptr, pos_ptr,
                     slot_ptr, q_ptr, k_ptr, v_ptr, NA, swa_s, swa_r, swb_s, swb_r,
                     sqr, sqh, skh, skc, stab, eps,
                     HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
                     SA: tl.constexpr, SB: tl.constexpr, HAS_BIAS: tl.constexpr,
                     QK_NORM: tl.constexpr, PDL: tl.constexpr = False):
    """Program (r, j): head j of row r (q heads, then k heads, then v heads). q and k: the
    head's RMSNorm (QK_NORM), then rotate-half RoPE at the row's position; q to q[r, j], k and v
    to the cache at the row's slot. Which of the three a head is selects masks, not pointers."""
    pdl_wait(PDL)
    r = tl.program_id(0)
    j = tl.program_id(1)
    D2: tl.constexpr = D // 2
    dt = q_ptr.dtype.element_ty
    c = tl.arange(0, D2)
    col = j * D
    is_q = j < HQ
    is_k = (j >= HQ) & (j < HQ + HKV)
    is_v = j >= HQ + HKV
    lo = _head_values(wa_ptr, wb_ptr, bias_ptr, r, col, c, NA, swa_s, swa_r, swb_s, swb_r,
                      SA, SB, HAS_BIAS, dt)
    hi = _head_values(wa_ptr, wb_ptr, bias_ptr, r, col + D2, c, NA, swa_s, swa_r, swb_s, swb_r,
                      SA, SB, HAS_BIAS, dt)
    slot = tl.load(slot_ptr + r)
    if QK_NORM:
        rstd = tl.rsqrt((tl.sum(lo * lo, axis=0) + tl.sum(hi * hi, axis=0)) / D + eps)
        n_lo = (tl.load(qn_ptr + c, mask=(c >= 0) & is_q, other=0.0).to(tl.float32)
                + tl.load(kn_ptr + c, mask=(c >= 0) & is_k, other=0.0).to(tl.float32))
        n_hi = (tl.load(qn_ptr + D2 + c, mask=(c >= 0) & is_q, other=0.0).to(tl.float32)
                + tl.load(kn_ptr + D2 + c, mask=(c >= 0) & is_k, other=0.0).to(tl.float32))
        nlo = (lo * rstd * n_lo).to(dt).to(tl.float32)
        nhi = (hi * rstd * n_hi).to(dt).to(tl.float32)
    else:
        nlo = lo
        nhi = hi
    p = tl.load(pos_ptr + r)
    cos_lo = tl.load(cos_ptr + p * stab + c).to(tl.float32)
    cos_hi = tl.load(cos_ptr + p * stab + D2 + c).to(tl.float32)
    sin_lo = tl.load(sin_ptr + p * stab + c).to(tl.float32)
    sin_hi = tl.load(sin_ptr + p * stab + D2 + c).to(tl.float32)
    # q and k heads rotated; v heads as they are
    out_lo = tl.where(is_v, lo, nlo * cos_lo - nhi * sin_lo).to(dt)
    out_hi = tl.where(is_v, hi, nhi * cos_hi + nlo * sin_hi).to(dt)
    mq = (c >= 0) & is_q
    mk = (c >= 0) & is_k
    mv = (c >= 0) & is_v
    qb = q_ptr + r * sqr + j * sqh
    kb = k_ptr + (j - HQ) * skh + slot * skc
    vb = v_ptr + (j - HQ - HKV) * skh + slot * skc
    tl.store(qb + c, out_lo, mask=mq)
    tl.store(qb + D2 + c, out_hi, mask=mq)
    tl.store(kb + c, out_lo, mask=mk)
    tl.store(kb + D2 + c, out_hi, mask=mk)
    tl.store(vb + c, out_lo, mask=mv)
    tl.store(vb + D2 + c, out_hi, mask=mv)


# ---------------------------------------------------------------------------------------------
# launchers (engine.model.fused_layer calls these; engine.kernels.kernel_catalog compiles them)


def residual_norm(ws: torch.Tensor | None, x: torch.Tensor, h: torch.Tensor, w: torch.Tensor,
                  eps: float, order_free: bool | None = None, dest: torch.Tensor | None = None) -> None:
    """x [R, N] += the sum of the partials ws [S, R, N] (None: x as it is), in place; h [R, N] =
    RMSNorm(x) * w. One program a row; its warps follow N only. order_free (default TAILS):
    the sum of squares the matmul tails take. dest (int32 [N]): h's column c is written at
    column dest[c] (engine.kernels.xp_order.xp_dest)."""
    order_free = TAILS if order_free is None else order_free
    R, N = x.shape
    block = triton.next_power_of_2(N)
    src = ws if ws is not None else x
    _residual_norm_kernel[(R,)](
        src, x, h, w, dest if dest is not None else w, N, src.stride(0),
        src.stride(1) if ws is not None else 0, x.stride(0), h.stride(0), eps,
        S=0 if ws is None else ws.shape[0], BLOCK=block,
        num_warps=4 if block <= 2048 else 8, **({"OF": True} if order_free else {}),
        **({"HD": True} if dest is not None else {}), **pdl_kwargs(x))


def reduce_swiglu(ws: torch.Tensor, hb: int, out: torch.Tensor) -> torch.Tensor:
    """out [M, N/2] = silu(gate) * up from the partials ws [S, M, N] of a gate|up product whose
    columns are interleaved in blocks of hb."""
    S, m, n = ws.shape
    blk = 1024
    _reduce_swiglu_kernel[(m, triton.cdiv(n // 2, blk))](
        ws, out, n // 2, ws.stride(0), ws.stride(1), out.stride(0), HB=hb, S=S, BLOCK=blk,
        num_warps=4, **pdl_kwargs(ws))
    return out


def qkv_rope(wa: torch.Tensor, wb: torch.Tensor, na: int, bias: torch.Tensor | None,
             q_norm: torch.Tensor | None, k_norm: torch.Tensor | None, cos: torch.Tensor,
             sin: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, q: torch.Tensor,
             kc: torch.Tensor, vc: torch.Tensor, eps: float) -> None:
    """From the q|k|v partials (wa [SA, R, na] for columns < na, wb [SB, R, *] for the rest;
    wb may be wa when one weight holds all three): q [R, Hq, D] and the cache's k and v
    ([Hkv, C, D] each) at `slots`, after the bias, q/k RMSNorm (when given) and RoPE at
    `positions` (tables cos, sin [C, D])."""
    R, Hq, D = q.shape
    Hkv = kc.shape[0]
    qk_norm = q_norm is not None
    _qkv_rope_kernel[(R, Hq + 2 * Hkv)](
        wa, wb, bias if bias is not None else wa, q_norm if qk_norm else q, k_norm if qk_norm else q,
        cos, sin, positions, slots, q, kc, vc, na, wa.stride(0), wa.stride(1), wb.stride(0),
        wb.stride(1), q.stride(0), q.stride(1), kc.stride(0), kc.stride(1), cos.stride(0), eps,
        HQ=Hq, HKV=Hkv, D=D, SA=wa.shape[0], SB=wb.shape[0], HAS_BIAS=bias is not None,
        QK_NORM=qk_norm, num_warps=1, **pdl_kwargs(q))
