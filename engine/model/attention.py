"""Row-invariant attention for the CPU: each row's output is bit-identical whatever the window.

Lossless speculation compares a verify window's rows with the tokens one-row decode steps would
have produced. With the fast CPU kernels (bfloat16 activations, engine.weights.cpu_fast) a
float32 difference of one ulp anywhere can flip a bfloat16 rounding downstream and move a logit
by ~0.1-0.5, enough to change a greedy choice. The linear kernels are row-invariant; torch's CPU
attention is not: its flash kernel and MKL's sgemm pick their blocking (hence their summation
order) from the row count M, the key count N and even the batch count, so row r of an R-row pass
differs from the 1-row pass that decodes the same token.

`row_invariant_attention` computes the same math out of pieces whose results, measured on this
machine, depend only on the row's own inputs:

- the float32 matmuls run on oneDNN (torch.backends.mkldnn.matmul.fp32_precision = "bf16" routes
  float32 bmm there; on the AVX-512 CPU this was measured on, without AMX, oneDNN still computes
  in float32: error vs float64 2.6e-7, and 1 + 2^-12 survives; an AMX CPU may use bfloat16
  there, unchecked). Its results do not depend on M, N or the batch count (checked for M 3..192,
  N 8..2300), unlike MKL's;
- scores are computed as K @ q^T (keys as the matmul's rows): q @ K^T would make oneDNN copy K;
- the key count is padded to a multiple of `KEY_BLOCK` with masked (-inf) columns, so no call
  sees fewer than 64 keys (oneDNN picks other kernels for N < 8);
- p @ V runs in chunks of `PV_CHUNK` keys, summed in order: over 1024 keys oneDNN splits the
  reduction differently, and a chunk past a row's last key is exactly zero, so the rows of a
  longer window add exact zeros;
- softmax over the last dimension ignores trailing -inf columns bit for bit.

A row's result therefore depends only on its query, the keys before it and its padded key
count's bucket, for a chain window (a row's keys are the prefix and the rows before it). A tree
row whose ancestors are not contiguous sums its keys in another order than a one-row pass would,
so tree windows are not bitwise row-invariant (nor are they in float32 with SDPA). The tests
(tests/engine/model/test_cpu_fast_model.py) check the whole model: a chain window's rows equal
one-row passes bit for bit.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

KEY_BLOCK = 64      # key counts are padded to a multiple of this
PV_CHUNK = 1024     # keys per p @ V matmul (oneDNN splits longer reductions)


@contextmanager
def onednn_fp32_matmul() -> Iterator[None]:
    """Route float32 bmm to oneDNN for the duration (process-wide torch flag, restored after)."""
    mm = torch.backends.mkldnn.matmul
    prev = mm.fp32_precision
    mm.fp32_precision = "bf16"
    try:
        yield
    finally:
        mm.fp32_precision = prev


def padded_keys(span: int, capacity: int) -> int:
    """The key count a pass over `span` cache slots attends over (<= capacity)."""
    return min(capacity, -(-span // KEY_BLOCK) * KEY_BLOCK)


def row_invariant_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            bias: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + bias) v per kv head, row-invariant (see the module doc).

    q: [Hkv, M, D]; k, v: [Hkv, S, D] (S a multiple of KEY_BLOCK, or the cache capacity);
    bias: [M, S] additive (0 or -inf). Returns [Hkv, M, D] float32.
    """
    S = k.shape[1]
    qs = q * (q.shape[-1] ** -0.5)
    with onednn_fp32_matmul():
        scores = torch.bmm(k, qs.transpose(1, 2)).transpose(1, 2)    # [Hkv, M, S]
        p = torch.softmax(scores + bias, dim=-1)
        out = None
        for c in range(0, S, PV_CHUNK):
            part = torch.bmm(p[:, :, c:c + PV_CHUNK], v[:, c:c + PV_CHUNK])
            out = part if out is None else out + part
    return out
