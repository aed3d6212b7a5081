"""The kernel catalog's attention site (engine.kernels.triton_attention.layout_attention_triton):
its launches and its smoke check against a float64 reference. engine.kernels.kernel_catalog's
attention site calls these."""

from __future__ import annotations

from functools import partial
from typing import Iterator

import torch

from engine.kernels.kernel_aot import Target
from engine.kernels.kernel_catalog import (DTYPES, HEAD_LAYOUTS, Call, Smoke, _dt, _meta,
                                           _skip_in_kernels, _tolerances)


def _graph_layout(rows: int, device="meta"):
    """The WindowLayout of a graph bucket, laid out as graphs.GraphBucket lays it out (one
    packed long tensor: tokens, depths, n, the ancestor table), so pointer alignment matches."""
    from engine.kernels.window_layout import WindowLayout
    B = rows
    packed = torch.zeros(2 * B + 1 + B * B, dtype=torch.long, device=device)
    return WindowLayout(packed[2 * B], packed[B:2 * B], packed[2 * B + 1:].view(B, B))


def attention_configs(t: Target, scope: str) -> Iterator[tuple[str, Call]]:
    """full: head layout x dtype x graph bucket class (1 row: the ancestor table's stride is
    specialized to 1; 2: even; 16: a multiple of 16) at a 2048-slot cache, and 256 / 32768
    slots (1 and 128 splits) for the first layout. quick: per dtype one layout and bucket
    class. kernels: float32 and bfloat16."""
    from engine.kernels.triton_attention import layout_attention_triton
    for a, (hq, hkv, d) in enumerate(HEAD_LAYOUTS):
        for b, dtype in enumerate(DTYPES):
            for c, rows in enumerate((1, 2, 16)):
                for cap in (2048, 256, 32768):
                    if cap != 2048 and (a or scope != "full"):
                        continue
                    if scope in ("quick", "kernels") and (a != b or c != b):
                        continue
                    if scope == "kernels" and dtype == torch.float16 or _skip_in_kernels(t, scope, dtype):
                        continue

                    def call(hq=hq, hkv=hkv, d=d, cap=cap, rows=rows, dtype=dtype, pack=None,
                             l3=None, kv2=None):
                        kv = _meta(2, hkv, cap, d, dtype=dtype)       # one layer of the cache
                        layout_attention_triton(_meta(rows, hq, d, dtype=dtype), kv[0], kv[1],
                                                _graph_layout(rows), pack=pack, l3=l3, kv2=kv2)
                    yield f"{_dt(dtype)} heads {hq}/{hkv}x{d} cache {cap} rows {rows}", call
                    if rows == 16 and cap == 2048 and scope != "kernels":     # rows packed (opt-in)
                        yield (f"{_dt(dtype)} heads {hq}/{hkv}x{d} cache {cap} rows {rows} packed",
                               partial(call, pack=True))
                    if rows == 1 and cap in (2048, 32768) and scope == "full":   # opt-in
                        yield (f"{_dt(dtype)} heads {hq}/{hkv}x{d} cache {cap} rows {rows} L3 KV2",
                               partial(call, l3=True, kv2=True))


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n: int,
                        visible: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v in float64 on the CPU, textbook style (one masked softmax
    over every score): what a window row attends to, written independently of
    engine.model.attention. q [R, Hq, D]; k, v [Hkv, C, D] with the committed keys at slots
    0..n-1 and window row a at slot n + a; visible [R, R] bool: row r sees window row a (its
    ancestors and itself). Query head h reads kv head h // (Hq / Hkv). Returns [R, Hq, D]."""
    R, Hq, D = q.shape
    G = Hq // k.shape[0]
    S = n + R
    mask = torch.ones(R, S, dtype=torch.bool)
    mask[:, n:] = visible.cpu()
    kk = k[:, :S].cpu().double().repeat_interleave(G, dim=0)              # [Hq, S, D]
    vv = v[:, :S].cpu().double().repeat_interleave(G, dim=0)
    scores = torch.einsum("rhd,hsd->rhs", q.cpu().double(), kk) / D ** 0.5
    scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
    return torch.einsum("rhs,hsd->rhd", torch.softmax(scores, dim=-1), vv)


def attention_smoke(device: torch.device, dtypes=DTYPES) -> Smoke:
    from engine.kernels.window_layout import WindowLayout, ancestor_table
    from engine.kernels.triton_attention import layout_attention_triton
    g = torch.Generator().manual_seed(3)
    R, hq, hkv, d, cap, n = 5, 8, 2, 64, 512, 300
    depths = [0, 1, 1, 2, 3]                 # a small tree: rows 1 and 2 siblings
    parent = [-1, 0, 0, 1, 3]
    anc_mask = torch.zeros(R, R, dtype=torch.bool)
    for r in range(R):
        a = r
        while a >= 0:
            anc_mask[r, a] = True
            a = parent[a]
    anc = ancestor_table(depths, anc_mask)
    q = torch.randn(R, hq, d, generator=g)
    kv = torch.randn(2, hkv, cap, d, generator=g)
    out = []
    for dtype, tol in _tolerances(dtypes):
        qd, kvd = q.to(device, dtype), kv.to(device, dtype)
        dl = WindowLayout(torch.tensor(n, device=device), torch.tensor(depths, device=device),
                          anc.to(device))
        got = layout_attention_triton(qd, kvd[0], kvd[1], dl)
        want = attention_reference(qd, kvd[0], kvd[1], n, anc_mask)
        out.append((f"{_dt(dtype)} tree of {R} rows at {n}", got.float().cpu(), want, tol))
        # rows packed (opt-in, triton_attention.PACK): rows 0-3 share one program's tile for
        # the splits of committed keys, row 3 in tile rows 12-15: the same bits as one row a
        # program
        packed = layout_attention_triton(qd, kvd[0], kvd[1], dl, pack=True)
        out.append((f"{_dt(dtype)} tree of {R} rows, packed", packed.float().cpu(),
                    got.float().cpu(), 0.0))
        # rows 4 (the deepest: rows 0, 1, 3 its ancestors) and 3 alone, one row after their
        # ancestors were committed at slots n..: the same keys, other slots, a 1-row layout
        # (a row's heads in tile rows 0-3)
        for r in (4, 3):
            path = [a for a in range(R) if anc_mask[r, a]]          # by depth, itself last
            one = WindowLayout(torch.tensor(n + depths[r], device=device),
                               torch.zeros(1, dtype=torch.long, device=device),
                               torch.zeros(1, 1, dtype=torch.long, device=device))
            kv1 = kvd.clone()
            for j, a in enumerate(path):
                kv1[:, :, n + j] = kvd[:, :, n + a]
            alone = layout_attention_triton(qd[r:r + 1], kv1[0], kv1[1], one)
            out.append((f"{_dt(dtype)} {'deepest row' if r == 4 else 'row 3'} alone",
                        alone.float().cpu(), got[r:r + 1].float().cpu(), 0.0))
    return out
