"""Each row's top k of a pass's logits on a GPU (CUDA or ROCm): two Triton launches where torch's
top-k issues about twenty (a radix select: digit counts, scans, a gather, a sort), ~47 µs of an
H100's 1.1 ms one-row pass of the bundled model (BENCHMARKS.md, "Plain steps queued on the
device").

Kernel 1, `_topk_part_kernel`, grid (rows, chunks of BV logits): a program's k best of its chunk,
by k rounds of (max, then the lowest index holding it). Kernel 2, `_topk_merge_kernel`, grid
(rows,): the k best of a row's chunk candidates, the same way. The order is torch.topk's where
values differ and, among equal values, the lower id first (as the CPU's screened head ranks them:
engine.model.runtime.top_lower_id). NaN ranks above everything, as in torch.topk, and comes back
as NaN, so a broken pass is seen (the decoder checks the top value). A row's result depends on
its own logits only: row-invariant as the pass's logits are.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.pdl import pdl_kwargs, pdl_wait

BV = 4096                 # logits a chunk program ranks
NONE = 2 ** 31 - 1        # the id of "no candidate" (a chunk with fewer than k logits)


@triton.jit
def _best(key, val, cid, live, BIG: tl.constexpr):
    """(value, id) of the best live candidate (highest key, then lowest id) and live without it."""
    m = tl.max(tl.where(live, key, float("-inf")), 0)
    i = tl.min(tl.where(live & (key == m), cid, BIG), 0)
    hit = live & (cid == i)
    v = tl.max(tl.where(hit, val, float("-inf")), 0)
    v = tl.where(tl.sum((hit & (val != val)).to(tl.int32), 0) > 0, float("nan"), v)
    return v, i, live & (cid != i)


@triton.jit
def _topk_part_kernel(x_ptr, v_ptr, i_ptr, V, sx, K: tl.constexpr, BV: tl.constexpr,
                      BIG: tl.constexpr, PDL: tl.constexpr = False):
    pdl_wait(PDL)       # engine.kernels.pdl
    r, c = tl.program_id(0), tl.program_id(1)
    offs = c * BV + tl.arange(0, BV)
    live = offs < V
    x = tl.load(x_ptr + r * sx + offs, mask=live, other=0.0).to(tl.float32)
    key = tl.where(x != x, float("inf"), x)            # NaN first, as torch.topk ranks it
    w = (r * tl.num_programs(1) + c) * K
    for j in tl.static_range(K):
        v, i, live = _best(key, x, offs, live, BIG)
        tl.store(v_ptr + w + j, v)
        tl.store(i_ptr + w + j, i)


@triton.jit
def _topk_merge_kernel(v_ptr, i_ptr, ov_ptr, oi_ptr, N, K: tl.constexpr, NP: tl.constexpr,
                       BIG: tl.constexpr, PDL: tl.constexpr = False):
    pdl_wait(PDL)
    r = tl.program_id(0)
    p = tl.arange(0, NP)
    live = p < N
    val = tl.load(v_ptr + r * N + p, mask=live, other=float("-inf"))
    cid = tl.load(i_ptr + r * N + p, mask=live, other=BIG)
    live = live & (cid != BIG)
    key = tl.where(val != val, float("inf"), val)
    for j in tl.static_range(K):
        v, i, live = _best(key, val, cid, live, BIG)
        tl.store(ov_ptr + r * K + j, v)
        tl.store(oi_ptr + r * K + j, i.to(tl.int64))


def topk_triton(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values float32 [R, k], ids int64 [R, k]) of logits [R, V] (any float dtype, unit stride
    along V), k <= V."""
    R, V = logits.shape
    if not 1 <= k <= V:
        raise ValueError(f"topk_triton: k = {k} of {V} logits")
    logits = logits if logits.stride(1) == 1 else logits.contiguous()
    bv = min(BV, triton.next_power_of_2(V))
    S = triton.cdiv(V, bv)
    dev = logits.device
    part_v = torch.empty(R, S * k, dtype=torch.float32, device=dev)
    part_i = torch.empty(R, S * k, dtype=torch.int32, device=dev)
    _topk_part_kernel[(R, S)](logits, part_v, part_i, V, logits.stride(0), K=k, BV=bv,
                              BIG=NONE, num_warps=8, **pdl_kwargs(logits))
    values = torch.empty(R, k, dtype=torch.float32, device=dev)
    ids = torch.empty(R, k, dtype=torch.int64, device=dev)
    _topk_merge_kernel[(R,)](part_v, part_i, values, ids, S * k, K=k,
                             NP=triton.next_power_of_2(S * k), BIG=NONE, num_warps=4,
                             **pdl_kwargs(logits))
    return values, ids
