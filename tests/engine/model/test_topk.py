"""The GPU's top-k (engine.kernels.triton_topk), run by Triton's CPU interpreter: each row's k
best logits against a plain sort of the row (value descending, then id ascending), with ties
planted inside a chunk, across chunks and at the k-th place, -inf logits, a row shorter than a
chunk, a NaN row; and a control that ranks ties the other way and must differ.

The interpreter must be chosen before triton is imported, so the parent only starts a child
pytest on this file with TRITON_INTERPRET=1 (tests/interpreter_child.py).
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

_CHILD = os.environ.get("SPECSCOPE_TOPK_CHILD") == "1"
child_only = pytest.mark.skipif(not _CHILD, reason="runs in the interpreter child process")


@pytest.mark.skipif(_CHILD, reason="this is the child")
def test_topk_in_the_triton_interpreter():
    from interpreter_child import run_in_interpreter_child
    run_in_interpreter_child(__file__, "SPECSCOPE_TOPK_CHILD")


def sorted_top(row: torch.Tensor, k: int, lower_first: bool = True) -> tuple[list, list]:
    """A row's k best by a plain sort: value descending, ties by id (ascending, or descending
    for the control)."""
    sign = 1 if lower_first else -1
    order = sorted(range(len(row)), key=lambda i: (-float(row[i]), sign * i))[:k]
    return [float(row[i]) for i in order], order


def planted(V: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(V, generator=g)
    top = float(x.max()) + 1.0
    ids = torch.randperm(V, generator=g)[:6].tolist()      # six equal best values: the 5th
    x[ids] = top                                           # place is a tie, spread over chunks
    x[torch.randperm(V, generator=g)[:V // 10]] = float("-inf")
    x[ids] = top
    return x


@child_only
@pytest.mark.parametrize("V", [7, 300, 4096, 9000, 49152])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_each_rows_top_k_is_a_sort_of_the_row(V, dtype):
    from engine.kernels.triton_topk import topk_triton
    k = min(5, V)
    rows = torch.stack([planted(V, s) for s in range(3)]).to(dtype)
    rows[1, :] = rows[1, :1]                   # a row of one value throughout: ids 0..k-1
    values, ids = topk_triton(rows, k)
    assert values.dtype == torch.float32 and ids.dtype == torch.int64
    for r in range(3):
        want_v, want_i = sorted_top(rows[r].float(), k)
        assert ids[r].tolist() == want_i, r
        assert values[r].tolist() == want_v, r
    alone = topk_triton(rows[2:3], k)          # a row's result is its own
    assert torch.equal(alone[0], values[2:3]) and torch.equal(alone[1], ids[2:3])
    if V >= 9000:                              # the control: ties the other way round differ
        assert ids[0].tolist() != sorted_top(rows[0].float(), k, lower_first=False)[1]


@child_only
def test_nan_ranks_first_and_stays_nan():
    """A broken pass must be seen: NaN ranks above every value (as torch.topk ranks it) and
    comes back as NaN, which the decoder's finite check turns into a clear error."""
    from engine.kernels.triton_topk import topk_triton
    x = torch.randn(2, 5000)
    x[0, 4321] = float("nan")
    values, ids = topk_triton(x, 5)
    assert torch.isnan(values[0, 0]) and ids[0, 0] == 4321
    assert torch.isfinite(values[0, 1:]).all() and torch.isfinite(values[1]).all()
    assert ids[1].tolist() == sorted_top(x[1], 5)[1]
