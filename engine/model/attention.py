"""Attention whose result for a window row does not depend on the window: layout-invariant.

Lossless speculation compares a verify window's rows with the tokens one-row decode steps would
have produced, so a row at depth d of any window (a chain, a tree branch, rows placed at any
cache slots, any row count) must compute, bit for bit, what plain decoding computes at that
position. Two things break that with an ordinary attention kernel:

- where a row's keys sit. A tree row on a side branch has its ancestors at scratch slots further
  along than their positions, with sibling rows in between; a kernel that reduces over cache
  slots (blocked, vectorized, split) groups the row's terms differently than plain decoding
  would, and in bfloat16 that moves close calls (measured on the H200: logits off by up to 0.5).
- the kernel's blocking picked from the shapes (row count, key count, batch).

So every path here reduces over *logical positions*: row r sees positions 0 .. n + depth[r]
(n = committed length), position p < n at cache slot p, and position n + j at the slot of the
row's ancestor at depth j (`anc[r, j]`, a window row index). Keys are gathered by logical
position into fixed blocks of `BLOCK` positions (block boundaries at multiples of BLOCK), each
block's partial sums are computed by an op whose per-row result does not depend on the shapes
around it, and the blocks are combined in position order. A plain decode step is a 1-row window
through the same function, so it sums the same terms in the same order.

Two implementations, the same contract:

    `layout_attention`       torch, for the CPU (row-invariant with the fast CPU kernels; see
                             below) and for the tests.
    `engine.kernels.triton_attention.layout_attention_triton`   a Triton split-KV kernel for
                             GPUs (CUDA and ROCm), imported lazily.

CPU details: float32 matmuls run in float32 on a row-invariant route (`float32_bmm`): oneDNN
where its bfloat16 mode still computes float32 (CPUs without bfloat16 instructions, where MKL's
results depended on M, N or the batch count), MKL ("ieee") on CPUs with AVX512-BF16 or AMX,
where that mode would round to bfloat16. Scores are computed as K @ q^T (keys as the matmul's rows). Lengths
are multiples of BLOCK (64), so elementwise ops never hit a scalar tail loop. The block partials
are added with cumsum (a sequential fold), so trailing all-masked blocks add exact zeros.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn.functional as F

from engine.kernels.window_layout import BLOCK, WindowLayout


@contextmanager
def _fp32_precision(mode: str) -> Iterator[None]:
    mm = torch.backends.mkldnn.matmul
    prev = mm.fp32_precision
    mm.fp32_precision = mode
    try:
        yield
    finally:
        mm.fp32_precision = prev


@functools.lru_cache(maxsize=1)
def onednn_bf16_mode_is_fp32() -> bool:
    """Whether oneDNN's bfloat16 math mode still computes float32 products on this CPU.

    The mode routes float32 bmm to oneDNN, whose per-element results do not depend on the
    matrix shapes. A CPU without bfloat16 instructions (the AVX-512 EPYC) ignores the mode and
    computes in float32; one with them (AVX512-BF16, AMX) rounds the inputs to bfloat16, an
    error of ~1e-2 that a float32 path must never take. Measured once per process on a
    64x64 product against float64 (bfloat16 inputs would be off by ~1e-1 here)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(1, 64, 64, generator=g), torch.randn(1, 64, 64, generator=g)
    with _fp32_precision("bf16"):
        got = torch.bmm(a, b)
    return bool((got.double() - a.double() @ b.double()).abs().max() < 1e-3)


@contextmanager
def float32_bmm() -> Iterator[None]:
    """float32 bmm in float32 arithmetic on a row-invariant route, for the duration; the
    process-wide precision flag is restored after. On a CPU that ignores oneDNN's bfloat16 mode
    (`onednn_bf16_mode_is_fp32`), that mode routes bmm to oneDNN; elsewhere "ieee" (MKL), whose
    products measured row-invariant on an AMX Xeon (tests/engine/model/test_cpu_fast_model.py,
    test_layout_attention_random). Either way never bfloat16 arithmetic, whatever the flag
    was set to before."""
    with _fp32_precision("bf16" if onednn_bf16_mode_is_fp32() else "ieee"):
        yield


@dataclass(frozen=True)
class _Plan:
    """What every layer's attention of one pass shares (the layout, resolved once)."""

    n: int
    P: int                   # shared positions [0, P): P // BLOCK whole blocks every row sees
    T: int                   # the rest, [P, P + T), gathered per row
    slot: torch.Tensor       # [R, T] cache slot of each row's tail position (0 where invalid)
    tail: torch.Tensor       # [1, R, 1, T] that slot - P (0 where invalid)
    invalid: torch.Tensor    # [1, R, 1, T] bool: past the row's own position


def _plan(layout: WindowLayout, device: torch.device) -> _Plan:
    n = int(layout.n)
    depth = layout.depth.to("cpu")
    R = depth.shape[0]
    P = (n // BLOCK) * BLOCK
    T = -(-(n + int(depth.max()) + 1 - P) // BLOCK) * BLOCK
    pos = torch.arange(P, P + T)                                   # [T] logical positions
    rel = pos - n
    anc = layout.anc.to("cpu")[:, rel.clamp(0, layout.anc.shape[1] - 1)]          # [R, T]
    valid = pos.unsqueeze(0) <= (n + depth).unsqueeze(1)                          # [R, T]
    slot = torch.where(rel < 0, pos.expand(R, T), n + anc).masked_fill(~valid, 0)
    tail = (slot - P).clamp(min=0).view(1, R, 1, T)
    return _Plan(n, P, T, slot.to(device), tail.to(device), (~valid).view(1, R, 1, T).to(device))


def bind_layout_attention(layout: WindowLayout):
    """`attend(q, k, v)` for every layer of one verify pass over `layout` (torch, float32)."""
    plans: dict = {}

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if k.device not in plans:
            plans[k.device] = _plan(layout, k.device)
        return _attend(q, k, v, plans[k.device])
    return attend


def layout_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: WindowLayout
                     ) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v over each row's logical keys (module doc), float32.

    q: [R, Hq, D]; k, v: [Hkv, C, D], one layer of the cache, the window's rows already written.
    Returns [R, Hq, D] float32.
    """
    return bind_layout_attention(layout)(q, k, v)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: _Plan) -> torch.Tensor:
    R, Hq, D = q.shape
    Hkv = k.shape[0]
    G = Hq // Hkv
    P, T = plan.P, plan.T
    nb_p, nb_t = P // BLOCK, T // BLOCK
    qs = (q.float() * D ** -0.5).view(R, Hkv, G, D).transpose(0, 1)               # [Hkv, R, G, D]
    k, v = k.float(), v.float()
    W = plan.n + R - P                  # the slots tail positions come from: [P, n + R)
    # ... computed over a multiple of BLOCK keys: oneDNN's last partial row block is computed
    # by another micro-kernel, which rounds differently
    S = min(k.shape[1], -(-(P + W) // BLOCK) * BLOCK)
    with float32_bmm():
        # every score once, in one product over the slots [0, S) (keys as the matmul's rows); a score depends only on its query and key, so the tail's scores are then
        # picked per row in logical order: [Hkv, R, G, T]
        sc = torch.bmm(k[:, :S], qs.reshape(Hkv, R * G, D).transpose(1, 2))      # [Hkv, S, R*G]
        sp = sc[:, :P].transpose(1, 2)                                            # [Hkv, R*G, P]
        sw = sc[:, P:P + W].view(Hkv, W, R, G).permute(0, 2, 3, 1)                # [Hkv, R, G, W]
        st = sw.gather(3, plan.tail.expand(Hkv, R, G, T))
        st = st.masked_fill(plan.invalid, float("-inf"))
        s = torch.cat([sp.reshape(Hkv, R, G, P), st], dim=-1)                     # [Hkv, R, G, P+T]
        m = s.amax(dim=-1, keepdim=True)          # exact, whatever the layout
        p = torch.exp(s - m).view(Hkv, R, G, nb_p + nb_t, BLOCK)
        # block partials of p @ V: the shared blocks for all rows at once, the tail per row
        op = torch.bmm(p[..., :nb_p, :].permute(0, 3, 1, 2, 4).reshape(Hkv * nb_p, R * G, BLOCK),
                       v[:, :P].reshape(Hkv * nb_p, BLOCK, D))
        op = op.view(Hkv, nb_p, R, G, D).permute(0, 2, 1, 3, 4)                   # [Hkv, R, nb_p, G, D]
        vt = v.index_select(1, plan.slot.view(-1)).view(Hkv * R * nb_t, BLOCK, D)
        ot = torch.bmm(p[..., nb_p:, :].transpose(2, 3).reshape(Hkv * R * nb_t, G, BLOCK), vt)
        o = torch.cat([op, ot.view(Hkv, R, nb_t, G, D)], dim=2)                   # [Hkv, R, NB, G, D]
        o = o.cumsum(dim=2)[:, :, -1]                                             # [Hkv, R, G, D]
        l = p.sum(dim=-1).cumsum(dim=-1)[..., -1:]                                # [Hkv, R, G, 1]
    return (o / l).transpose(0, 1).reshape(R, Hq, D)


def gqa_bias(mask: torch.Tensor, G: int, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask of `sdpa_gqa` from mask [R, S] bool (True = attend): [1, 1, G*R, S].

    Grouped-query attention without copying keys: the G query heads that share a kv head become
    G*R rows of one attention "head" (head h uses kv head h // G), so the mask repeats G times
    along the rows. One additive mask serves every layer."""
    R, S = mask.shape
    bias = torch.zeros(G * R, S, dtype=dtype, device=mask.device)
    bias.masked_fill_(~mask.repeat(G, 1), float("-inf"))
    return bias.view(1, 1, G * R, S)


def sdpa_gqa(q: torch.Tensor, cache, layer: int, bias: torch.Tensor) -> torch.Tensor:
    """SDPA of q [R, Hq, D] over layer `layer` of the cache's first S slots (bias from
    `gqa_bias`): [R, Hq * D]. Not layout-invariant (prefill, and devices without it)."""
    R, Hq, D = q.shape
    S = bias.shape[-1]
    kc, vc = cache.keys_values(layer, S)                      # [1, Hkv, S, D]
    Hkv = kc.shape[1]
    # [R, Hq, D] -> [1, Hkv, G*R, D]: row g*R + r of kv head j is query head j*G + g
    qg = q.transpose(0, 1).reshape(1, Hkv, (Hq // Hkv) * R, D)
    a = F.scaled_dot_product_attention(qg, kc, vc, attn_mask=bias)   # [1, Hkv, G*R, D]
    return a.reshape(Hq, R, D).transpose(0, 1).reshape(R, Hq * D)
