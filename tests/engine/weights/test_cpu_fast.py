"""engine.weights.cpu_fast: 4-bit GGUF weights on torch's int4pack CPU matmul (approximate, row-invariant)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from engine.weights import PackedWeight
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


def _near_tie_q8(n: int, k: int, copies: int, seed: int):
    """A Q8_0 weight whose first `copies` rows are one row with its block scales nudged by
    up to 8 float16 ulps and its last block's scale set 4-10x higher (a different requantization
    grid for each copy), and x = that row with the last block zeroed: those rows' exact
    products are the top ones by far and differ from each other by less than what requantizing
    a row moves them."""
    w, _ = _weight("Q8_0", n, k, seed=seed)
    g = torch.Generator().manual_seed(seed)
    qs, d = w.planes["qs"].clone(), w.planes["d"].clone()
    qs[:copies] = qs[0]
    ulps = torch.randint(-8, 9, (copies, k // 32), generator=g, dtype=torch.int16)
    d[:copies] = (d[0].view(torch.int16) + ulps).view(torch.float16)     # f16: ~1e-3 a ulp
    d[:copies, -1] *= (4 + 6 * torch.rand(copies, generator=g)).half()
    w = PackedWeight("Q8_0", (n, k), {"qs": qs, "d": d})
    row = (qs[0].view(torch.int8).float().view(k // 32, 32) * d[0].float().unsqueeze(1))
    row[-1] = 0
    return w, row.view(1, k)


def test_q8_0_screened_top_k_is_the_full_products_top_k():
    """cpu_int8_blocks_top: each row's top 5 (ids, and values bit for bit) of the full int8-block
    product, ties to the lower id, with the screen's bound holding for every output. Rows aimed
    at 16 near-identical weight rows make the screen's own top 5 wrong, also re-scored exactly
    (the control: a screen without the bound)."""
    from engine.weights.cpu_fast import cpu_int8_blocks_linear, cpu_int8_blocks_top, prepare_cpu_q8
    n, k = 3000, 576
    w, row = _near_tie_q8(n, k, copies=16, seed=27)
    cw = prepare_cpu_q8(w, screen=True)
    assert cw.nbytes < n * k * 2.1                       # blocks + screen: two bytes a weight
    g = torch.Generator().manual_seed(11)
    x = torch.cat([torch.randn(24, k, generator=g), row * (1 + 0.1 * torch.randn(8, k, generator=g)),
                   row.repeat(2, 1)])
    full = cpu_int8_blocks_linear(x, cw).float()
    ref_v, ref_i = torch.sort(full, dim=1, descending=True, stable=True)
    vals, ids = cpu_int8_blocks_top(x, cw, 5)
    assert torch.equal(ids, ref_i[:, :5]) and torch.equal(vals, ref_v[:, :5])
    # the bound: |screen - exact| <= ||x|| beta for every output
    xb = x.to(torch.bfloat16)
    screen = torch.ops.aten._weight_int8pack_mm(xb, cw.screen.q, cw.screen.d).float()
    err = (screen - full).abs() / (xb.double().norm(dim=1, keepdim=True).float() * cw.screen.beta)
    assert err.max() <= 1.0 and err.max() > 1e-4      # holds, and is not vacuous
    assert not torch.equal(screen[24:].topk(5).indices, ref_i[24:, :5])   # the screen alone errs
    # the control: the screen's own top 5, re-scored exactly (no bound) comes out wrong
    naive = screen.topk(5).indices
    rescored = full.gather(1, naive)
    naive_ids = naive.gather(1, torch.sort(rescored, dim=1, descending=True, stable=True).indices)
    assert not torch.equal(naive_ids, ref_i[:, :5])
    for m in (1, 2, 9):                                  # rows alone and in windows agree
        assert torch.equal(cpu_int8_blocks_top(x[24:24 + m], cw, 5)[1], ids[24:24 + m])
    with pytest.raises(ValueError, match="no screen"):
        cpu_int8_blocks_top(x, prepare_cpu_q8(w), 5)


def test_q8_0_blocks_of_some_rows_equal_those_rows_of_the_full_product():
    """CpuInt8Blocks.rows: a product over a subset of the weight's rows is bit for bit those
    columns of the full product, whatever the subset's size (the screen's exact step relies on it)."""
    from engine.weights.cpu_fast import cpu_int8_blocks_linear, prepare_cpu_q8
    w, _ = _weight("Q8_0", 1000, 576, seed=28)
    cw = prepare_cpu_q8(w)
    x = torch.randn(9, 576, generator=torch.Generator().manual_seed(12))
    full = cpu_int8_blocks_linear(x, cw)
    g = torch.Generator().manual_seed(13)
    for size in (1, 2, 5, 15, 16, 17, 33, 64, 100, 257, 999):
        idx = torch.randperm(1000, generator=g)[:size].sort().values
        assert torch.equal(cpu_int8_blocks_linear(x, cw.rows(idx)), full[:, idx]), size
