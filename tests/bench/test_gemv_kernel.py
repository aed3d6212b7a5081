"""The row-at-a-time Q4_K kernel of bench/gemv_kernel.py (an experiment the benchmarks time), in
Triton's CPU interpreter: its float32 result against ``x @ dequantize_packed(W).T`` (which is
bit-identical to gguf's dequantization), and row invariance bit for bit across the rows a
program takes (R), the row count and a 1-row call. Skipped without triton (CI has none)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

_CHILD = os.environ.get("SPECSCOPE_GEMV_INTERPRET_CHILD") == "1"
ROOT = Path(__file__).resolve().parents[2]


# a refuted experiment's kernel (BENCHMARKS.md: slower than the packed kernel), not shipped:
# `make test-slow` runs it (~13 s of make test's CPU, near its 15-minute budget)
@pytest.mark.slow
@pytest.mark.skipif(_CHILD, reason="this is the child")
def test_gemv_kernel_in_the_triton_interpreter():
    sys.path.insert(0, str(ROOT / "tests"))
    from interpreter_child import run_in_interpreter_child
    run_in_interpreter_child(__file__, "SPECSCOPE_GEMV_INTERPRET_CHILD")


@pytest.mark.skipif(not _CHILD, reason="runs in the interpreter child process")
def test_matches_dequantized_float32_and_is_row_invariant():
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_packed_matmul import make_weight
    from gemv_kernel import q4k_gemv

    from engine.weights.packed import dequantize_packed
    n, k = 48, 1024                               # a partial row block (BN 32), 4 super-blocks
    w = make_weight("Q4_K", n, k, seed=3, device="cpu")
    x = torch.randn(9, k, generator=torch.Generator().manual_seed(1)).to(torch.float16)
    ref = x.double() @ dequantize_packed(w).double().T
    base = None
    for splits in (1, 2):
        for r in (1, 2, 4, 8):
            out = torch.empty(9, n, dtype=torch.float32)
            got = q4k_gemv(x, w, BN=32, T=2 if splits == 1 else 1, R=r, splits=splits, out=out)
            err = ((got.double() - ref).abs().max() / ref.abs().max()).item()
            assert err < 2e-6, (splits, r, err)
            if splits == 1:
                base = got.clone() if base is None else base
                assert torch.equal(got, base), r           # R does not change a row's bits
        if splits == 1:
            for m in (1, 3):
                one = q4k_gemv(x[:m], w, BN=32, T=2, R=1, out=torch.empty(m, n))
                assert torch.equal(one, base[:m])
    # a control that must fail: another weight gives another product
    other = make_weight("Q4_K", n, k, seed=4, device="cpu")
    assert not torch.allclose(q4k_gemv(x, other, BN=32, R=1, out=torch.empty(9, n)), base)
