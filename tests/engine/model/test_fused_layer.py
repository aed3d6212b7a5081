"""The fused packed layer (engine.model.fused_layer, kernels in engine.kernels.triton_fused), run by
Triton's CPU interpreter on tiny packed models: its logits against the plain forward's (the
same weights, float32), and verify rows bit-identical to one-row passes (the exactness contract).

Like tests/engine/weights/test_triton_interpret.py, the interpreter must be chosen before triton
is imported, so the parent only starts a child pytest on this file with TRITON_INTERPRET=1.
float32 activations: the interpreter's tl.dot mishandles bfloat16 (its module doc).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

_CHILD = os.environ.get("SPECSCOPE_FUSED_CHILD") == "1"
child_only = pytest.mark.skipif(not _CHILD, reason="runs in the interpreter child process")


@pytest.mark.skipif(_CHILD, reason="this is the child")
def test_fused_layer_in_the_triton_interpreter():
    from interpreter_child import run_in_interpreter_child
    run_in_interpreter_child(__file__, "SPECSCOPE_FUSED_CHILD")


@pytest.mark.slow
@pytest.mark.skipif(_CHILD, reason="this is the child")
def test_opt_in_tails_in_the_triton_interpreter():
    """The opt-in matmul tails (SPECSCOPE_TAIL=1, measured no faster) in the interpreter: `make
    test-slow` (12 s of `make test`'s 15-minute budget)."""
    from interpreter_child import run_in_interpreter_child
    run_in_interpreter_child(__file__, "SPECSCOPE_FUSED_CHILD", args=("-m", "slow"))


def _qtypes(v_type):
    from gguf import GGMLQuantizationType as Q

    def qtype_of(name, w):
        if w.ndim == 1:
            return Q.F32
        kind = name.split(".")[-2]
        if kind == "attn_v" and v_type is not None:
            return getattr(Q, v_type)
        return Q.Q8_0 if kind in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up") else (
            Q.Q4_0 if kind == "ffn_down" else Q.Q8_0)
    return qtype_of


def _runtime(path):
    from engine.io.load import load_model
    from engine.model.runtime import Runtime
    return Runtime(load_model(path), "cpu", "float32", weights="packed", cpu_kernels="exact",
                   capacity=64)


def _fuse(rt):
    from engine.model.fused_layer import FusedForward, fusable
    from engine.kernels.triton_attention import bind_layout_attention_triton
    assert fusable(rt.model)
    rt.model.fused = FusedForward(rt.model)
    rt.model.verify_attention = bind_layout_attention_triton
    rt.exact_rows = True


CASES = [("qwen3", "Q4_1"), ("qwen2", None)]


@child_only
@pytest.mark.parametrize("arch,v_type", CASES)
def test_fused_forward_matches_the_plain_forward(tmp_path, arch, v_type):
    """Same weights, same tokens: prefill (SDPA) and a 5-row chain (layout attention) logits
    equal the plain packed forward's to float32 rounding; a fused model refuses the plain path."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tiny_models import make_tiny_gguf
    from engine.model.runtime import chain
    path = make_tiny_gguf(arch, tmp_path / "m.gguf", qtype_of=_qtypes(v_type))
    plain, fused = _runtime(path), _runtime(path)
    _fuse(fused)
    if v_type is not None:
        assert len(fused.model.layers[0]["qkv"].parts) == 2      # q|k and v: two partial buffers
    prompt = [5, 17, 33, 9, 70, 41, 12, 3, 99, 27, 64]
    if arch == "qwen2":     # a prefill of 40 rows: the dense route (dequantize + GEMM)
        prompt = [(7 * i + 3) % 120 + 4 for i in range(40)]
        assert fused.model.fused.dense_prefill
    outs = []
    for rt in (plain, fused):
        s = rt.session(40)
        s.prefill(prompt)
        outs.append(s.verify([7, 21, 55, 8, 19], *chain(5)).logits)
    ref, got = outs
    scale = ref.abs().max()
    assert (got - ref).abs().max() <= 2e-4 * scale, ((got - ref).abs().max(), scale)
    assert torch.equal(got.argmax(-1), ref.argmax(-1))
    with pytest.raises(RuntimeError, match="interleaved"):
        fused.model.fused = None
        s.verify([7], *chain(1))


@child_only
@pytest.mark.parametrize("arch,v_type", [("llama", "Q4_1")])
def test_fused_verify_rows_equal_one_row_passes(tmp_path, arch, v_type):
    """Row i of a chain verified at committed length n equals, bit for bit, the one-row pass of
    the same token after the chain's first i tokens were committed one by one; so does a tree
    row on a side branch (its ancestors at later slots). Untied models: a tied head is a dense
    float32 matmul, which on the CPU is BLAS (not row-invariant; the GPU checks it with
    bench/gpu_exact.py). (The opt-in matmul tails, measured no faster, are checked against the
    separate kernels by test_matmul_tails_equal_their_own_kernels.)"""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tiny_models import make_tiny_gguf
    from engine.model.runtime import chain
    path = make_tiny_gguf(arch, tmp_path / "m.gguf", qtype_of=_qtypes(v_type))
    rt = _runtime(path)
    _fuse(rt)
    prompt = [5, 17, 33, 9, 70, 41, 12]
    toks = [7, 21, 55, 8, 19, 4]
    s = rt.session(40)
    s.prefill(prompt)
    window = s.verify(toks, *chain(len(toks))).logits
    alone = []
    for t in toks:
        alone.append(s.verify([t], *chain(1)).logits[0])
        s.commit([0])
    assert all(torch.equal(window[i], alone[i]) for i in range(len(toks)))
    # a tree: root, a decoy child, then the real chain under the root at later slots
    s.close()
    s = rt.session(40)
    s.prefill(prompt)
    tokens = [toks[0], 88, toks[1], toks[2]]
    depths = [0, 1, 1, 2]
    anc = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]], dtype=torch.bool)
    tree = s.verify(tokens, depths, anc).logits
    assert torch.equal(tree[0], alone[0]) and torch.equal(tree[2], alone[1]) \
        and torch.equal(tree[3], alone[2])


@child_only
@pytest.mark.parametrize("qtype", ["Q4_K", "Q6_K", "Q8_0", "Q4_0", "Q4_1"])
def test_dense_unpack_equals_gguf_dequantization(qtype):
    """The prefill's dequantization kernel gives gguf's float32 values exactly."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
    from bench_packed_matmul import make_weight       # random valid planes, sane scales
    from engine.weights.packed import dequantize_packed
    from engine.kernels.triton_unpack import dequantize_dense
    pw = make_weight(qtype, 24, 512, seed=3, device="cpu")
    out = dequantize_dense(pw, torch.empty(24, 512))
    assert torch.equal(out, dequantize_packed(pw))


@child_only
def test_dense_unpack_of_q4_kn_equals_q4_k():
    """Q4_KN (Q4_K in GGUF's block order, the opt-in GPU form) unpacks to Q4_K's exact values."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
    from bench_packed_matmul import make_weight
    from engine.weights.packed import dequantize_packed, native_q4_k
    from engine.kernels.triton_unpack import dequantize_dense
    pw = make_weight("Q4_K", 24, 768, seed=4, device="cpu")
    out = dequantize_dense(native_q4_k(pw), torch.empty(24, 768))
    assert torch.equal(out, dequantize_packed(pw))
    out = dequantize_dense(native_q4_k(pw), torch.empty(24, 768, dtype=torch.float16))
    assert torch.equal(out, dequantize_dense(pw, torch.empty(24, 768, dtype=torch.float16)))


@pytest.mark.slow       # the tails are opt-in (SPECSCOPE_TAIL=1): make test-slow
@child_only
@pytest.mark.parametrize("qtype,n,k", [("Q4_1", 512, 512), ("Q4_K", 256, 1024)])
def test_matmul_tails_equal_their_own_kernels(qtype, n, k):
    """The residual + norm and the SwiGLU run in a split matmul's tail for few rows: x, h and
    the SwiGLU equal the partials summed by their own kernels bit for bit (split counts 1-4),
    and the norm equals float64's to float32 rounding. Control: more rows than a tail takes
    run the separate kernels, and a bf16 row rounded otherwise would differ."""
    from engine.kernels import triton_fused as tf
    from engine.kernels import triton_kernels as tk
    from engine.kernels.kernel_catalog import random_packed
    g = torch.Generator().manual_seed(11)
    pw, ref = random_packed(qtype, n, k, seed=2)
    gu, _ = random_packed(qtype, 2 * n, k, seed=3)
    splits = tk.kernel_config(qtype, n, k, tk._sms(torch.empty(0)))["splits"]
    seen = set()
    for m in (2, tk.tail_rows(n, True) + 1):
        a = torch.randn(m, k, generator=g)
        x0, nw = torch.randn(m, n, generator=g), torch.rand(n, generator=g)
        xa, ha = x0.clone(), torch.empty(m, n)
        tk.packed_residual_norm(a, pw, xa, ha, nw, 1e-6, tail=True)
        xb, hb = x0.clone(), torch.empty(m, n)
        tf.residual_norm(tk.packed_partials(a, pw), xb, hb, nw, 1e-6, order_free=True)
        assert torch.equal(xa, xb) and torch.equal(ha, hb)
        xr = x0.double() + a.double() @ ref.double().T
        want = xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + 1e-6) * nw.double()
        assert (ha.double() - want).abs().max() <= 1e-5 * want.abs().max()
        cfg = tk.kernel_config(qtype, 2 * n, k, tk._sms(a))
        got = tk.packed_swiglu(a, gu, tail=True)
        assert torch.equal(got, tk.swiglu_from_partials(tk.packed_partials(a, gu), cfg["BN"] // 2,
                                                        torch.empty(m, n)))
        seen.add(m <= tk.tail_rows(n, True))
        gu_splits = cfg["splits"]
    assert seen == {True, False}
    assert splits > 1 and gu_splits > 1      # the tails add partials


if _CHILD:
    import triton
    import triton.language as tl
    from engine.kernels.triton_fused import _sum_squares

    @triton.jit
    def _sum_squares_kernel(x_ptr, o_ptr, N, RB: tl.constexpr, TB: tl.constexpr):
        r = tl.program_id(0) * RB + tl.arange(0, RB)
        c = tl.arange(0, TB)
        x = tl.load(x_ptr + r[:, None] * N + c[None, :], mask=c[None, :] < N, other=0.0)
        tl.store(o_ptr + r, _sum_squares(x))


@child_only
def test_norm_sum_of_squares_is_order_free_and_exact_enough():
    """_sum_squares (the norm's order-free sum): float64's sum to float32 rounding on rows of
    mixed scale, 0 for a zero row, inf and NaN where the float sum gives them; and a row in a
    tile of 8 rows gets the bits it gets alone."""
    k = _sum_squares_kernel
    g = torch.Generator().manual_seed(5)
    x = torch.randn(8, 300, generator=g) * torch.logspace(-15, 15, 8)[:, None]
    x[1] = 0
    x[2, 3] = 1e4          # one large value over small ones
    x[5, 7] = float("inf")
    x[6, 9] = float("nan")
    tiled, alone = torch.empty(8), torch.empty(8)
    k[(1,)](x, tiled, 300, RB=8, TB=512)
    k[(8,)](x, alone, 300, RB=1, TB=512)
    assert torch.equal(tiled.nan_to_num(), alone.nan_to_num())
    want = x.double().pow(2).sum(-1)
    ok = [0, 2, 3, 4, 7]
    assert torch.allclose(tiled[ok].double(), want[ok], rtol=2e-7, atol=0)
    assert tiled[1] == 0 and tiled[5] == float("inf") and tiled[6].isnan()


@child_only
def test_fused_forward_writes_the_xp_order_for_gate_up_and_down(tmp_path, monkeypatch):
    """XP_FUSED's wiring: a model whose gate|up and down are Q4_K (hidden 256, FFN 512) with XP
    forced on gets the norm before gate|up and the SwiGLU before down in those matmuls' orders
    (FusedForward.xp); a prefill and a 5-row chain give the same logits, bit for bit, as the
    same model with every matmul permuting its own x (xp off), and as the plain forward to
    float32 rounding."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from gguf import GGMLQuantizationType as Q
    from tiny_models import make_tiny_gguf
    from engine.kernels import triton_kernels as tk
    from engine.model.runtime import chain
    monkeypatch.setattr(tk, "_XP_DEFAULT", 1)
    tk._config.cache_clear()

    def qtype_of(name, w):
        kind = name.split(".")[-2]
        return Q.F32 if w.ndim == 1 else Q.Q4_K if kind in ("ffn_gate", "ffn_up", "ffn_down") else Q.Q8_0
    path = make_tiny_gguf("llama", tmp_path / "m.gguf", qtype_of=qtype_of,
                          sizes=dict(hidden_size=256, intermediate_size=512, num_hidden_layers=1))
    plain, rt = _runtime(path), _runtime(path)
    _fuse(rt)
    assert all(a is not None and b is not None for a, b in rt.model.fused.xp)
    prompt, toks = [5, 17, 33, 9, 70, 41, 12], [7, 21, 55, 8, 19]
    got = {}
    for xp in ("on", "off"):
        if xp == "off":
            rt.model.fused.xp = [(None, None)] * len(rt.model.fused.xp)
        s = rt.session(40)
        s.prefill(prompt)
        got[xp] = s.verify(toks, *chain(len(toks))).logits
        s.close()
    tk._config.cache_clear()
    assert torch.equal(got["on"], got["off"])
    s = plain.session(40)
    s.prefill(prompt)
    want = s.verify(toks, *chain(len(toks))).logits
    assert (got["on"] - want).abs().max() <= 1e-3 * want.abs().max()
