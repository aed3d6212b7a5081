"""engine.weights.cpu_fast: 4-bit GGUF weights on torch's int4pack CPU matmul (approximate, row-invariant)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from engine.weights.cpu_fast import CPU_FAST_TYPES, cpu_fast_linear, prepare_cpu

pytestmark = pytest.mark.skipif(not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"),
                                reason="this torch has no CPU int4pack matmul")

_spec = importlib.util.spec_from_file_location("_packed_tests", Path(__file__).with_name("test_packed.py"))
_tp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tp)
_weight, rel_err = _tp._weight, _tp.rel_err

# bfloat16 activations, scales/zeros and output: a few 1e-3 is what this path can do
TOL = 1e-2


@pytest.mark.parametrize("name", CPU_FAST_TYPES)
@pytest.mark.parametrize("n,k", [(200, 512), (576, 1536)])  # 200: N padded to a multiple of 16
def test_accuracy_vs_float32(name, n, k):
    w, W = _weight(name, n, k, seed=20)
    cw = prepare_cpu(w)
    x = torch.randn(9, k, generator=torch.Generator().manual_seed(5))
    y = cpu_fast_linear(x, cw)
    assert y.dtype == torch.float32 and y.shape == (9, n)
    err = rel_err(y, x @ W.T)
    assert err < TOL
    assert err > 0  # it really is the approximate bf16 path, not a float32 copy


@pytest.mark.parametrize("name", CPU_FAST_TYPES)
def test_row_invariance(name):
    k = 512
    w, _ = _weight(name, 208, k, seed=21)
    cw = prepare_cpu(w)
    x = torch.randn(64, k, generator=torch.Generator().manual_seed(6))
    single = torch.cat([cpu_fast_linear(x[r:r + 1], cw) for r in range(64)])
    for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 33, 48, 63, 64):
        assert torch.equal(cpu_fast_linear(x[:m], cw), single[:m]), f"M={m}"


def test_dtypes_and_shapes():
    w, W = _weight("Q4_1", 64, 256, seed=22)
    cw = prepare_cpu(w)
    x = torch.randn(2, 3, 256, generator=torch.Generator().manual_seed(7))
    y = cpu_fast_linear(x, cw)
    assert y.shape == (2, 3, 64)
    assert torch.equal(y.reshape(6, 64), cpu_fast_linear(x.reshape(6, 256), cw))
    yb = cpu_fast_linear(x.to(torch.bfloat16), cw)
    assert yb.dtype == torch.bfloat16
    assert cpu_fast_linear(x, cw, out_dtype=torch.bfloat16).dtype == torch.bfloat16
    assert cw.nbytes < w.nbytes * 1.5


def test_rejects_other_types():
    for name in ("Q8_0", "Q5_K", "Q6_K"):
        w, _ = _weight(name, 16, 256, seed=23)
        with pytest.raises(ValueError):
            prepare_cpu(w)


def test_q8_0_int8_blocks_match_and_are_row_invariant():
    """A Q8_0 weight (the bundled model's tied LM head) as int8 column blocks: near the float32
    product, and every row's result bit-identical whatever the row count (the bfloat16 F.linear
    it replaces is not, on CPUs without AVX512-BF16: 0.06 off on a 2-row window there)."""
    from engine.weights.cpu_fast import cpu_int8_blocks_linear, prepare_cpu_q8
    w, W = _weight("Q8_0", 208, 576, seed=24)
    cw = prepare_cpu_q8(w)
    assert cw.nbytes < 208 * 576 * 1.2                   # one byte a weight plus the scales
    x = torch.randn(33, 576, generator=torch.Generator().manual_seed(8)).to(torch.bfloat16)
    y = cpu_int8_blocks_linear(x, cw)
    assert y.dtype == torch.bfloat16 and y.shape == (33, 208)
    assert rel_err(y.float(), x.float() @ W.T) < TOL
    single = torch.cat([cpu_int8_blocks_linear(x[r:r + 1], cw) for r in range(33)])
    for m in (2, 3, 5, 8, 9, 17, 33):
        assert torch.equal(cpu_int8_blocks_linear(x[:m], cw), single[:m]), f"M={m}"
    with pytest.raises(ValueError):
        prepare_cpu_q8(_weight("Q4_0", 16, 256, seed=25)[0])


def test_dense_row_blocks_are_row_invariant():
    """A dense bfloat16 weight in a fast-path verify pass (a head of another type): 8-row
    blocks, so a row's bits do not depend on the row count or its place in the block."""
    from engine.weights import invariant_dense
    g = torch.Generator().manual_seed(9)
    w = torch.randn(4096, 576, generator=g).to(torch.bfloat16)
    x = torch.randn(33, 576, generator=g).to(torch.bfloat16)
    single = torch.cat([invariant_dense(x[r:r + 1], w) for r in range(33)])
    for m in (2, 3, 7, 8, 9, 17, 33):
        assert torch.equal(invariant_dense(x[:m], w), single[:m]), f"M={m}"
    assert rel_err(single.float(), x.float() @ w.float().T) < TOL
