"""Captured passes: a verify pass of a row-count bucket and a prefill chunk, each recorded once
as a CUDA graph over one session's KV cache and replayed with one host -> device copy.

On a GPU (CUDA or ROCm) eager PyTorch spends most of a pass on kernel launches, a replayed
graph a fraction of that (BENCHMARKS.md, "Engine model and kernel timings (moved from code comments)"). On the CPU a bucket runs the same code eagerly
(the tests exercise it there). `engine.model.runtime.Session` owns the buckets.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

import numpy as np
import torch

from engine.kernels.pass_launch import pass_launches
from engine.kernels.window_layout import WindowLayout, fill_ancestor_table
from engine.model.cache import KVCache

if TYPE_CHECKING:
    from engine.model.transformer import Transformer


class BucketOwner(Protocol):
    """What a bucket reads of the runtime that owns it (engine.model.runtime.Runtime, which
    imports this module: naming it here would close a circle)."""

    device: torch.device
    model: "Transformer"
    forward_fn: Callable
    _pool: Any               # the verify graphs' memory pool
    _prefill_pool: Any       # the prefill graphs' own pool

TOPK = 5    # the top-k (values, ids) of each row a pass returns on the fast path


# SPECSCOPE_TORCH_TOPK=1: torch's top-k on the GPU too (for measuring), read once at import
TORCH_TOPK = os.environ.get("SPECSCOPE_TORCH_TOPK", "0") == "1"


def top_k(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's top k of a pass's logits [R, V]: (values, ids). On a GPU with Triton, two
    launches (engine.kernels.triton_topk: float32 values, ties to the lower id) instead of
    torch's ~20; elsewhere, or with TORCH_TOPK, torch.topk."""
    if logits.device.type == "cuda" and not TORCH_TOPK:
        try:
            from engine.kernels.triton_topk import topk_triton
        except ImportError:
            pass
        else:
            return topk_triton(logits, k)
    top = logits.topk(k, dim=-1)
    return top.values, top.indices


def capture(run: Callable, dev: torch.device, pool) -> tuple["torch.cuda.CUDAGraph", Any]:
    """(graph, what run returned while captured): two warm-up runs on a side stream (kernels
    compiled, allocator settled), then the capture into `pool`."""
    s = torch.cuda.Stream(dev)
    s.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(s):
        for _ in range(2):
            run()
    torch.cuda.current_stream(dev).wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out = run()
    return graph, out


def staging(n: int, pinned: bool) -> torch.Tensor:
    """A zeroed long host tensor of n for ONE upload (`packed.copy_(h, non_blocking=True)`).

    Never reuse one: an asynchronous copy from pinned memory reads the host bytes when the
    stream reaches it, not when it is enqueued. A bucket that kept one host buffer and refilled
    it for the next chunk while the GPU was still busy with the last uploaded the next chunk's
    tokens twice: a prompt whose consecutive prefill chunks share a bucket left a chunk's slots
    unwritten, by timing (a runtime that had decoded before gave other tokens than a fresh one,
    issue 31; BENCHMARKS.md "Same prompt, same tokens"). A new pinned tensor per upload is safe:
    torch's pinned allocator does not hand its block out again until the copy reading it has
    run."""
    return torch.zeros(n, dtype=torch.long, pin_memory=pinned)


class GraphBucket:
    """One captured verify pass of `rows` rows over one session's cache, at its capacity.

    Host -> device traffic per pass is one packed long tensor: tokens [B], depths [B], the
    committed length n [1] and the window's ancestor table [B*B] (row r's ancestor at depth j,
    engine.model.attention.ancestor_table). Positions, cache slots and, where the model attends
    with a mask, the [B, C] mask are derived inside the graph.
    """

    def __init__(self, rt: BucketOwner, cache: KVCache, rows: int, exit_layer: int | None = None):
        C, dev, B = cache.capacity, rt.device, rows
        self.rows = B
        self.packed = torch.zeros(2 * B + 1 + B * B, dtype=torch.long, device=dev)
        # warm-up and capture runs write their keys at the very end of the cache, never over
        # a committed prefix
        self.packed[2 * B] = C - B
        self.pinned = dev.type == "cuda"
        cols = torch.arange(C, device=dev)
        ar = torch.arange(B, device=dev)

        def run():
            tokens = self.packed[:B]
            depth = self.packed[B:2 * B]
            n = self.packed[2 * B]
            table = self.packed[2 * B + 1:].view(B, B)
            mask = None
            if rt.model.needs_mask:
                # unused table entries are 0, the root, an ancestor of every row: scattering
                # the whole table gives exactly the ancestor matrix
                anc = torch.zeros(B, B, dtype=torch.bool, device=dev).scatter_(1, table, True)
                rel = cols - n                                          # [C]
                in_window = (rel >= 0) & (rel < B)
                win = anc[:, rel.clamp(0, B - 1)] & in_window            # [B, C]
                mask = (cols < n).unsqueeze(0) | win                     # [B, C]
            logits = rt.forward_fn(tokens, n + depth, mask, cache, n + ar,
                                   layout=WindowLayout(n, depth, table), exit_layer=exit_layer)
            with pass_launches(getattr(rt.model, "pdl", True)):   # as the model's pass
                values, ids = top_k(logits, TOPK)
            values = values.float()
            # what a fast-path read takes to the host in ONE copy: the top k's values, then its
            # ids as float32 (exact: a vocabulary is at most 2^22, engine.model.config)
            return logits, values, ids, torch.cat([values, ids.float()], 1)

        self.run = run
        self.graph = None
        if dev.type != "cuda":      # CPU: the same bucket logic, run eagerly (tests use this)
            return
        self.graph, (self.logits, self.top_values, self.top_ids, self.top) = capture(run, dev, rt._pool)

    def replay(self, tokens: Sequence[int], depths: Sequence[int], ancestors: torch.Tensor,
               n: int) -> None:
        """Run the bucket on a window of R <= B rows at committed length n (ancestors [R, R])."""
        B, R = self.rows, len(tokens)
        h = staging(self.packed.numel(), self.pinned)
        flat = h.numpy()                                 # filled in place: NumPy on the host
        flat[:R] = tokens
        flat[B:B + R] = depths
        pad = np.arange(1, B - R + 1)
        flat[B + R:2 * B] = pad                          # padded rows: positions past the window
        flat[2 * B] = n
        a = flat[2 * B + 1:].reshape(B, B)
        fill_ancestor_table(a, depths, ancestors)
        a[np.arange(R, B), pad] = np.arange(R, B)        # padded rows see the root and themselves
        self.packed.copy_(h, non_blocking=True)
        self._run()

    def _run(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.logits, self.top_values, self.top_ids, self.top = self.run()

    def step_on(self) -> None:
        """A one-row bucket just replayed at committed length n runs again at n + 1 on its own
        top-1 token, both set on the device (engine.model.plain_queue): the same inputs as an
        upload of that token would give, so the same bits."""
        if self.rows != 1:
            raise ValueError("only a one-row bucket steps on by itself")
        self.packed[0:1].copy_(self.top_ids[0, :1])
        self.packed[2:3].add_(1)
        self._run()


class PrefillBucket:
    """One captured prefill of `rows` rows (a chunk padded with token 0 up to it) attending over
    the first `span` cache slots, on one session's cache. Host -> device: one long tensor,
    tokens [B] and the committed length n. Row i sits at position n + i and sees slots
    <= n + i; the padding rows come last, so no real row sees them, and their keys land in
    slots [n + R, n + B) past the committed length, which later tokens overwrite."""

    def __init__(self, rt: BucketOwner, cache: KVCache, rows: int, span: int):
        dev, B = rt.device, rows
        self.rows, self.span = B, span
        self.packed = torch.zeros(B + 1, dtype=torch.long, device=dev)
        self.packed[B] = span - B           # warm-up and capture: the last B slots of the span
        self.pinned = dev.type == "cuda"
        cols = torch.arange(span, device=dev)
        ar = torch.arange(B, device=dev)

        def run():
            n = self.packed[B]
            pos = n + ar
            mask = cols.unsqueeze(0) <= pos.unsqueeze(1)                  # [B, span] causal
            rt.model.forward(self.packed[:B], pos, mask, cache, pos, last_only=True)

        self.run = run
        self.graph = None
        if dev.type == "cuda":
            self.graph, _ = capture(run, dev, rt._prefill_pool)

    def replay(self, chunk: Sequence[int], n: int) -> None:
        h = staging(self.rows + 1, self.pinned)
        h[:len(chunk)] = torch.tensor(chunk)
        h[self.rows] = n
        self.packed.copy_(h, non_blocking=True)
        if self.graph is not None:
            self.graph.replay()
        else:
            self.run()
