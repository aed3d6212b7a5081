"""The Triton packed-weight matmul, run by Triton's CPU interpreter (``TRITON_INTERPRET=1``).

Skipped when triton is not installed (it is not a dependency; CI has none). The kernels are
the GPU ones, executed op by op on CPU tensors: every GGUF type against a float32
``x @ dequant(W).T``, and row invariance (row r of an M-row call is bit-identical to the same
row in calls with other M, including a 1-row call) for M in {1, 2, 3, 17, 64}.

The interpreter must be chosen before triton is first imported (triton.language's own jitted
helpers are built at import), which another test may already have done in this process; so
the parent run only starts a child pytest on this file with ``TRITON_INTERPRET=1`` and checks
that it passed, and the real tests run in that child. The opt-in int8 kernel (Q4_K,
activations quantized per row) has its own test.
The interpreter's ``tl.dot`` multiplies bfloat16 as raw integers (an interpreter gap), so the
activations here are float32 and float16; bfloat16 is checked on the GPU by
bench/bench_packed_matmul.py.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
import torch

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

_CHILD = os.environ.get("SPECSCOPE_TRITON_INTERPRET_CHILD") == "1"
child_only = pytest.mark.skipif(not _CHILD, reason="runs in the interpreter child process")

from gguf import GGMLQuantizationType as _T  # noqa: E402
from gguf import quants as _gq  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K", "Q6_K8", "Q4_KN")  # Q6_K8: Q6_K widened,
# Q4_KN: Q4_K in GGUF's block order


@pytest.mark.skipif(_CHILD, reason="this is the child")
def test_kernels_in_the_triton_interpreter():
    """Run this file's tests in a fresh process with the interpreter on."""
    from interpreter_child import run_in_interpreter_child
    run_in_interpreter_child(__file__, "SPECSCOPE_TRITON_INTERPRET_CHILD")


@pytest.mark.slow
@pytest.mark.skipif(_CHILD, reason="this is the child")
def test_opt_in_kernels_in_the_triton_interpreter():
    """The opt-in kernels no default runs (int8, SF, Q4_KN: measured slower, kept for A/B on a
    card) in the interpreter: `make test-slow` (25 s of `make test`'s 15-minute budget)."""
    from interpreter_child import run_in_interpreter_child
    run_in_interpreter_child(__file__, "SPECSCOPE_TRITON_INTERPRET_CHILD", args=("-m", "slow"))


# the opt-in kernels' checks: `make test-slow` only (above)
opt_in = pytest.mark.slow


@pytest.fixture(scope="module")
def tk():
    """engine.kernels.triton_kernels, its kernels built for the interpreter (child only)."""
    assert os.environ.get("TRITON_INTERPRET") == "1"
    import engine.kernels.triton_kernels as mod
    return mod


# ---------------------------------------------------------------------------------------------
# random valid weights


def _raw_blocks(qtype: str, n: int, k: int, rng) -> np.ndarray:
    """Random GGUF blocks (uint8 [n, bytes_per_row]): random quant bytes, sane f16 scales."""
    from engine.kernels.kernel_catalog import random_blocks
    return random_blocks(qtype, n, k, rng)


def _own_planes(raw: np.ndarray, qtype: str, n: int, k: int) -> dict:
    """The packed plane layout built directly (used when engine.weights.packed is absent)."""
    bs, ts = GGML_QUANT_SIZES[_T[qtype]]
    nb = k // bs
    b = raw.reshape(n, nb, ts)

    def f16(o):
        return np.ascontiguousarray(b[:, :, o:o + 2]).view(np.float16).reshape(n, nb)

    def field(lo, hi):
        return np.ascontiguousarray(b[:, :, lo:hi]).reshape(n, -1)

    if qtype == "Q8_0":
        p = {"d": f16(0), "qs": field(2, 34).view(np.int8)}
    elif qtype == "Q4_0":
        p = {"d": f16(0), "qs": field(2, 18)}
    elif qtype == "Q4_1":
        p = {"d": f16(0), "m": f16(2), "qs": field(4, 20)}
    elif qtype in ("Q4_K", "Q5_K"):
        sc, mn = _gq.Q4_K.get_scale_min(np.ascontiguousarray(b[:, :, 4:16]).reshape(n * nb, 12))
        p = {"d": f16(0), "dmin": f16(2),
             "sc": sc.reshape(n, nb * 8).astype(np.uint8), "mn": mn.reshape(n, nb * 8).astype(np.uint8)}
        if qtype == "Q4_K":
            p["qs"] = field(16, 144)
        else:
            p["qh"] = field(16, 48)
            p["qs"] = field(48, 176)
    else:
        p = {"ql": field(0, 128), "qh": field(128, 192), "sc": field(192, 208).view(np.int8),
             "d": f16(208)}
    return {name: torch.from_numpy(np.ascontiguousarray(v)) for name, v in p.items()}


class _W:
    def __init__(self, qtype, shape, planes):
        self.qtype, self.shape, self.planes = qtype, shape, planes


def _weight(qtype: str, n: int, k: int, seed: int = 0):
    """(packed weight, float32 reference dequantization [n, k]) for random blocks (Q6_K8:
    Q6_K blocks widened at load, engine.weights.packed.widen_q6_k, against gguf's Q6_K)."""
    if qtype == "Q6_K8":
        from engine.weights.packed import widen_q6_k
        w, ref = _weight("Q6_K", n, k, seed)
        return widen_q6_k(w), ref
    if qtype == "Q4_KN":
        from engine.weights.packed import native_q4_k
        w, ref = _weight("Q4_K", n, k, seed)
        return native_q4_k(w), ref
    rng = np.random.default_rng(seed)
    raw = _raw_blocks(qtype, n, k, rng)
    ref = torch.from_numpy(_gq.dequantize(raw, _T[qtype]).reshape(n, k).copy())
    try:
        from engine.weights.packed import pack
    except ImportError:
        return _W(qtype, (n, k), _own_planes(raw, qtype, n, k)), ref
    return pack(torch.from_numpy(raw), qtype), ref


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()


# ---------------------------------------------------------------------------------------------


@child_only
@pytest.mark.parametrize("qtype", TYPES)
def test_matches_float32_reference_and_is_row_invariant(tk, qtype):
    n, k = 96, 512                      # K-quants: two superblocks, the paired-scale path
    w, ref = _weight(qtype, n, k)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, k, generator=g)

    # float32 activations: exact fp32 FMAs (no TF32), weights dequantized exactly
    y32 = tk.packed_matmul(x[:3], w)
    assert y32.dtype == torch.float32 and y32.shape == (3, n)
    assert _rel_err(y32, x[:3] @ ref.T) < 1e-5

    # float16 activations: weights rounded to fp16 in registers, fp32 accumulation
    xh = x.half()
    y = {m: tk.packed_matmul(xh[:m], w) for m in (64, 17, 3, 2, 1)}
    assert y[64].dtype == torch.float16 and y[64].shape == (64, n)
    want = xh.float() @ ref.T
    assert _rel_err(y[64], want) < 5e-3
    # row invariance, bit for bit: every M agrees with the 64-row call on its rows, and rows
    # from the second and fourth 16-row slices agree with 1-row calls
    for m in (17, 3, 2, 1):
        assert torch.equal(y[m], y[64][:m]), f"M={m}"
    for r in (16, 63):
        assert torch.equal(tk.packed_matmul(xh[r:r + 1], w), y[64][r:r + 1]), f"row {r}"


@child_only
def test_split_k_and_odd_shapes(tk):
    """A shape that splits K (few row blocks), an N that is not a multiple of the row block,
    an odd superblock count (one superblock per step), a 32-block type with K % 256 != 0."""
    for qtype, n, k, over in (("Q4_K", 40, 1024, {"splits": 2}), ("Q6_K", 24, 768, {}),
                              ("Q6_K8", 24, 768, {"splits": 3}),
                              ("Q4_1", 40, 288, {})):
        w, ref = _weight(qtype, n, k, seed=3)
        x = torch.randn(5, k, generator=torch.Generator().manual_seed(2))
        cfg = tk.kernel_config(qtype, n, k, 16, **over)
        y = tk.packed_matmul(x, w, **over)
        assert _rel_err(y, x @ ref.T) < 1e-5, (qtype, cfg)
        assert torch.equal(tk.packed_matmul(x[2:3], w, **over), y[2:3]), (qtype, cfg)
    assert tk.kernel_config("Q4_K", 40, 1024, 16, splits=2)["splits"] == 2


@opt_in
@child_only
def test_int8_path_split_k(tk):
    """The opt-in int8 path (Q4_K, float16 activations quantized per row to two int8 planes):
    split K, rows past one 64-row chunk, row invariance against 1-row calls and across M."""
    w, ref = _weight("Q4_K", 40, 1024, seed=5)
    x = torch.randn(70, 1024, generator=torch.Generator().manual_seed(4)).half()
    assert tk.kernel_config("Q4_K", 40, 1024, 16)["I8"] == 0          # off by default
    y = tk.packed_matmul(x, w, splits=2, I8=1)
    assert _rel_err(y, x.float() @ ref.T) < 2e-3
    for r in (0, 5, 66):
        assert torch.equal(tk.packed_matmul(x[r:r + 1], w, splits=2, I8=1), y[r:r + 1]), r
    for m in (2, 17, 33):                                   # 16-, 32- and 64-row tiles
        assert torch.equal(tk.packed_matmul(x[:m], w, splits=2, I8=1), y[:m]), m
    y1 = tk.packed_matmul(x[:3], w, splits=2, I8=1, I8_X2=0)   # one plane: llama.cpp-like error
    assert _rel_err(y1, x[:3].float() @ ref.T) < 3e-2


@child_only
def test_integer_bf16_rounding_is_the_conversion(tk):
    """RNE (ROCm's default) rounds the dequantized weights to bfloat16 in integer ops
    (triton_dequant._bf16_bits): the bits of torch's float32 -> bfloat16 conversion for every
    value a packed weight can take: ties both ways, carries into the exponent, subnormals,
    zeros, the largest floats (overflow to infinity) and random values of every exponent. The
    config turns it on by backend only (ROCm), never by row count."""
    import triton
    import triton.language as tl

    from engine.kernels.triton_dequant import _bf16_bits
    globals()["_bf16_bits"] = _bf16_bits       # the jitted test kernel resolves it here

    @triton.jit
    def _round(src, dst, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(dst + i, _bf16_bits(tl.load(src + i)).to(tl.int16, bitcast=True))

    bits = [0x3F808000, 0x3F818000, 0x3F80_7FFF, 0x3F80_8001, 0x3FFF_8000, 0x7F7F_FFFF,
            0x7F7F_8000, 0x7F7F_7FFF, 0x0000_8000, 0x0001_8000, 0x0000_0001, 0x8000_0000,
            0x0000_0000, 0xBF80_8000, 0xBF81_8000, 0xFF7F_FFFF, 0x7F80_0000, 0xFF80_0000,
            0x007F_FFFF, 0x4B00_0000]
    g = torch.Generator().manual_seed(3)
    rand = torch.randint(0, 1 << 31, (4096 - len(bits),), generator=g, dtype=torch.int64)
    rand = rand & ~(0xFF << 23) | (torch.randint(1, 255, rand.shape, generator=g) << 23)  # no NaN
    sign = torch.randint(0, 2, rand.shape, generator=g) << 31
    allb = torch.tensor(bits + (rand | sign).tolist(), dtype=torch.int64)
    v = (allb - (allb >= 1 << 31).long() * (1 << 32)).to(torch.int32).view(torch.float32)
    out = torch.empty(len(v), dtype=torch.int16)
    _round[(1,)](v, out, N=len(v))
    assert torch.equal(out, v.to(torch.bfloat16).view(torch.int16))
    from engine.kernels.dot_precision import compiling_for
    assert tk.kernel_config("Q4_K", 48, 1024, 16)["RNE"] == 0
    with compiling_for("hip"):
        assert tk.kernel_config("Q4_K", 48, 1024, 16)["RNE"] == 1
    # float16 / float32 activations take the plain conversion either way: the same products
    x = torch.randn(3, 1024, generator=g).half()
    w, _ = _weight("Q4_K", 48, 1024, seed=7)
    assert torch.equal(tk.packed_matmul(x, w, RNE=1), tk.packed_matmul(x, w, RNE=0))


@child_only
def test_rdna_order_matches_reference_and_is_row_invariant(tk):
    """RDNA (ROCm's default for Q4_K, Q4_0, Q4_1, Q8_0): the superblock dequantized in the order of RDNA's WMMA
    operand, its own K order (triton_rdna). Against gguf's float32 dequantization, bit-identical
    across row counts (1..64, every 16-row slice), with x gathered in that order or permuted by
    the host (XP: the same dots on the same values, so the same bits), split or not, two
    superblocks a step or one, 32- or 64-row blocks; on by backend only."""
    from engine.kernels.dot_precision import compiling_for
    assert tk.kernel_config("Q4_K", 128, 1024, 16)["RDNA"] == 0
    with compiling_for("hip"):
        assert tk.kernel_config("Q4_K", 128, 1024, 16)["RDNA"] == 1
        assert tk.kernel_config("Q5_K", 128, 1024, 16)["RDNA"] == 0
    g = torch.Generator().manual_seed(11)
    for n, k, over in ((128, 1024, {}), (96, 512, {"splits": 2}), (64, 512, {"SB": 2}),
                       (64, 768, {"BN": 32})):
        w, ref = _weight("Q4_K", n, k, seed=n + k)
        xh = torch.randn(64, k, generator=g).half()
        y = {m: tk.packed_matmul(xh[:m], w, RDNA=1, XP=0, **over) for m in (64, 17, 1)}
        assert _rel_err(y[64], xh.float() @ ref.T) < 5e-3, (n, k, over)
        for m in (17, 1):
            assert torch.equal(y[m], y[64][:m]), (n, k, over, m)
        assert torch.equal(tk.packed_matmul(xh[40:41], w, RDNA=1, XP=0, **over), y[64][40:41]), (n, k, over)
        for m in (1, 64):
            assert torch.equal(tk.packed_matmul(xh[:m], w, RDNA=1, XP=1, **over), y[m]), (n, k, over, m)
        assert torch.equal(tk.packed_partials(xh[:5], w, RDNA=1, XP=1, **over),
                           tk.packed_partials(xh[:5], w, RDNA=1, XP=0, **over)), (n, k, over)
    # a control: the same weights through the NVIDIA order differ in their last bits somewhere
    # (another K order in the dots), so the checks above see which order ran
    assert not torch.equal(tk.packed_matmul(xh, w, RDNA=0, XP=0, BN=32), y[64])
    # Q4_0 / Q4_1 (the bundled model's type) and Q8_0 (its LM head): K a multiple of 256 or
    # not (576: a masked tile)
    for qt in ("Q4_0", "Q4_1", "Q8_0"):
        with compiling_for("hip"):
            assert tk.kernel_config(qt, 128, 1024, 16)["RDNA"] == 1
        for n, k in ((128, 1024), (64, 576)):
            w, ref = _weight(qt, n, k, seed=k)
            xh = torch.randn(64, k, generator=g).half()
            y = {m: tk.packed_matmul(xh[:m], w, RDNA=1) for m in (64, 17, 1)}
            assert _rel_err(y[64], xh.float() @ ref.T) < 5e-3, (qt, n, k)
            assert torch.equal(y[17], y[64][:17]) and torch.equal(y[1], y[64][:1]), (qt, n, k)
            assert torch.equal(tk.packed_matmul(xh[40:41], w, RDNA=1), y[64][40:41]), (qt, n, k)
        assert not torch.equal(tk.packed_matmul(xh, w, RDNA=0), y[64]), qt


@child_only
def test_rdna_small_integers_match_reference_and_are_row_invariant(tk):
    """SI (ROCm's default for Q4_K, Q4_0, Q4_1, Q6_K8): each 32-block (Q6_K8: 16) dotted as
    BASE + q (bf16 128 + q, fp16 1024 + q)
    with its scale and min applied to the dot's result and x's sum (triton_rdna._sb_q4k_si).
    Against gguf's float32 dequantization (no less accurate than the dequantizing RDNA tile),
    bit-identical across row counts (1..64, a 16-row slice alone), x permuted by the host
    (XP) or gathered, split or not, two superblocks a step; a control: the dequantizing RDNA
    order gives other bits, so the checks see which ran."""
    from engine.kernels.dot_precision import compiling_for
    q = torch.arange(16, dtype=torch.int16)        # the tile's bits: BASE | q is BASE + q
    assert torch.equal((q | 0x4300).view(torch.bfloat16).float(), 128.0 + q.float())
    assert torch.equal((q | 0x6400).view(torch.float16).float(), 1024.0 + q.float())
    with compiling_for("hip"):
        assert tk.kernel_config("Q4_K", 128, 1024, 16)["SI"] == 1
        assert tk.kernel_config("Q8_0", 128, 1024, 16)["SI"] == 0
        assert tk.kernel_config("Q6_K8", 128, 1024, 16)["SI"] == 1
    assert tk.kernel_config("Q4_K", 128, 1024, 16)["SI"] == 0
    g = torch.Generator().manual_seed(12)
    for n, k, over in ((96, 512, {"splits": 2}), (64, 512, {"SB": 2})):
        w, ref = _weight("Q4_K", n, k, seed=n + k + 1)
        xh = torch.randn(64, k, generator=g).half()
        y = {m: tk.packed_matmul(xh[:m], w, RDNA=1, SI=1, XP=0, **over) for m in (64, 17, 1)}
        deq = tk.packed_matmul(xh, w, RDNA=1, SI=0, XP=0, **over)
        want = xh.float() @ ref.T
        assert _rel_err(y[64], want) < 5e-3 and _rel_err(y[64], want) <= 1.25 * _rel_err(deq, want)
        assert torch.equal(y[17], y[64][:17]) and torch.equal(y[1], y[64][:1]), (n, k, over)
        assert torch.equal(tk.packed_matmul(xh[40:41], w, RDNA=1, SI=1, XP=0, **over), y[64][40:41])
        for m in (1, 64):
            assert torch.equal(tk.packed_matmul(xh[:m], w, RDNA=1, SI=1, XP=1, **over), y[m]), (n, k, m)
        assert not torch.equal(deq, y[64])
    # Q4_0 / Q4_1 (the bundled model's type): a block a dot; K a multiple of 256 or not (576:
    # the last tile's dead blocks add nothing)
    for qt, shapes in (("Q4_0", ((64, 576),)), ("Q4_1", ((64, 512), (64, 576)))):
        with compiling_for("hip"):
            assert tk.kernel_config(qt, 128, 1024, 16)["SI"] == 1
        for n, k in shapes:
            w, ref = _weight(qt, n, k, seed=k + 3)
            xh = torch.randn(64, k, generator=g).half()
            y = {m: tk.packed_matmul(xh[:m], w, RDNA=1, SI=1) for m in (64, 17, 1)}
            deq = tk.packed_matmul(xh, w, RDNA=1, SI=0)
            want = xh.float() @ ref.T
            assert _rel_err(y[64], want) < 5e-3 and _rel_err(y[64], want) <= 1.25 * _rel_err(deq, want)
            assert torch.equal(y[17], y[64][:17]) and torch.equal(y[1], y[64][:1]), (qt, n, k)
            assert torch.equal(tk.packed_matmul(xh[40:41], w, RDNA=1, SI=1), y[64][40:41]), (qt, n, k)
            assert not torch.equal(deq, y[64]), (qt, n, k)
    # Q6_K8 (a Q4_K_M file's Q6_K layers, widened at load): a 16-value group a dot
    from engine.weights.packed import widen_q6_k
    w6, ref = _weight("Q6_K", 64, 512, seed=9)
    w = widen_q6_k(w6)
    xh = torch.randn(64, 512, generator=g).half()
    y = {m: tk.packed_matmul(xh[:m], w, RDNA=1, SI=1) for m in (64, 17, 1)}
    deq = tk.packed_matmul(xh, w, SI=0)
    want = xh.float() @ ref.T
    assert _rel_err(y[64], want) < 5e-3 and _rel_err(y[64], want) <= 1.25 * _rel_err(deq, want)
    assert torch.equal(y[17], y[64][:17]) and torch.equal(y[1], y[64][:1])
    assert torch.equal(tk.packed_matmul(xh[40:41], w, RDNA=1, SI=1), y[64][40:41])
    assert not torch.equal(deq, y[64])


@opt_in
@child_only
def test_sf_folded_scales_match_reference_and_are_row_invariant(tk):
    """SF (engine.kernels.triton_sf, opt-in: SPECSCOPE_SF=1): Q4_K's sub-block scale folded into
    fp16 small integers, 0x6400 + sc q = 1024 + sc q for every sc q a Q4_K weight can hold, two
    a word with no carry between the halves; x made fp16 per row and superblock by an exact
    power of two (its values in the dots' order, its sums). Against gguf's float32
    dequantization no less accurate than the dequantizing tile, bit-identical across row counts
    (1, 17, 64, a row alone), split or not, two superblocks a step, half-superblock dots; a row
    beyond fp16's range stays finite and right, one holding inf gives a non-finite output (no
    silent value); a control: the dequantizing tile gives other bits."""
    from engine.kernels.triton_sf import sf_prepare
    v = torch.arange(946, dtype=torch.int32)                 # sc q <= 63 x 15
    assert torch.equal((v + 0x6400).to(torch.int16).view(torch.float16).float(), 1024.0 + v.float())
    q0, q1, sc = torch.meshgrid(torch.arange(16), torch.arange(16), torch.arange(64), indexing="ij")
    word = ((q0 | (q1 << 16)) * sc + 0x64006400).to(torch.int64)
    assert torch.equal(word & 0xFFFF, 0x6400 + q0 * sc) and torch.equal(word >> 16, 0x6400 + q1 * sc)
    g = torch.Generator().manual_seed(21)
    x = torch.randn(3, 512, generator=g).to(torch.bfloat16)
    x[1, :256] *= 1e6                                        # past fp16's 65504
    xh, aux = sf_prepare(x, 8)
    xi = aux.view(torch.float32)[..., 9]
    assert torch.equal(torch.log2(xi), torch.log2(xi).round()) and xh.isfinite().all()
    p = torch.arange(256)
    val = 64 * ((p // 2) % 4) + 32 * ((p // 128) % 2) + 4 * ((p // 16) % 8) + 2 * (p % 2) + (p // 8) % 2
    assert torch.equal(xh.float().view(3, 2, 256) * xi[..., None], x.float().view(3, 2, 256)[..., val])
    sums = aux[..., :8].contiguous().view(torch.float16).float().view(3, 2, 8, 2).sum(-1) * 32 * xi[..., None]
    assert torch.allclose(sums, x.float().view(3, 2, 8, 32).sum(-1), rtol=1e-5, atol=1e-3)
    for n, k, over in ((96, 512, {"splits": 2}), (64, 512, {"SB": 2})):
        w, ref = _weight("Q4_K", n, k, seed=n + k + 5)
        xh = torch.randn(64, k, generator=g).half()
        y = {m: tk.packed_matmul(xh[:m], w, SF=1, **over) for m in (64, 17, 1)}
        deq = tk.packed_matmul(xh, w, SF=0, XP=0, **over)
        want = xh.float() @ ref.T
        assert _rel_err(y[64], want) < 5e-3 and _rel_err(y[64], want) <= 1.25 * _rel_err(deq, want)
        assert torch.equal(y[17], y[64][:17]) and torch.equal(y[1], y[64][:1]), (n, k, over)
        assert torch.equal(tk.packed_matmul(xh[40:41], w, SF=1, **over), y[64][40:41]), (n, k, over)
        assert torch.equal(tk.packed_partials(xh[:17], w, SF=1, **over), tk.packed_partials(xh, w, SF=1, **over)[:, :17])
        assert not torch.equal(deq, y[64])
    w, ref = _weight("Q4_K", 64, 512, seed=23)
    xb = torch.randn(2, 512, generator=g).to(torch.bfloat16)
    xb[0] *= 1e6
    xb[1, 7] = float("inf")
    y = tk.packed_matmul(xb, w, SF=1)
    assert y[0].isfinite().all() and _rel_err(y[0:1], xb[0:1].float() @ ref.T) < 8e-3
    assert not y[1].isfinite().all()


@child_only
def test_config_does_not_depend_on_rows(tk):
    """The launch configuration is a function of the weight shape only (row invariance)."""
    import inspect
    assert "m" not in inspect.signature(tk.kernel_config).parameters
    cfg = tk.kernel_config("Q4_K", 28672, 8192, 132)
    assert cfg["splits"] >= 1 and cfg["n_tiles"] % cfg["splits"] == 0


@opt_in
@child_only
def test_q4_kn_is_bit_identical_to_q4_k(tk):
    """Q4_KN (Q4_K in GGUF's block order, engine.weights.packed.native_q4_k) only loads
    differently: its products equal Q4_K's bit for bit at every row count, split or not, one or
    two superblocks a step, either way of reading the scales (HDR), in the SwiGLU epilogue and
    as partials; its dequantization too."""
    from engine.weights.packed import dequantize_packed, native_q4_k
    w, _ = _weight("Q4_K", 48, 1024, seed=7)
    wn = native_q4_k(w)
    assert torch.equal(dequantize_packed(wn), dequantize_packed(w))
    assert tk.kernel_config("Q4_KN", 48, 1024, 16) == tk.kernel_config("Q4_K", 48, 1024, 16)
    g = torch.Generator().manual_seed(8)
    x = torch.randn(64, 1024, generator=g)
    for dtype in (torch.float16, torch.float32):
        xd = x.to(dtype)
        for over in ({}, {"splits": 2}, {"SB": 2, "JS": 4}, {"HDR": 0}):
            for m in (1, 17, 64):       # opt-in (SPECSCOPE_Q4K_NATIVE=1): three row counts
                if dtype == torch.float32 and m != 17:
                    continue
                a = tk.packed_matmul(xd[:m], w, **over)
                b = tk.packed_matmul(xd[:m], wn, **over)
                assert torch.equal(a, b), (dtype, over, m)
        assert torch.equal(tk.packed_partials(xd[:5], wn), tk.packed_partials(xd[:5], w)), dtype
    # SwiGLU: in the epilogue (one K tile: never split) and from split partials
    assert tk.swiglu_block(wn, torch.device("cpu")) == tk.swiglu_block(w, torch.device("cpu"))
    for n, k, splits in ((128, 256, 1), (128, 512, 2)):
        assert tk.kernel_config("Q4_KN", n, k, 16)["splits"] == splits
        wg, _ = _weight("Q4_K", n, k, seed=9)
        wgn = native_q4_k(wg)
        xh = torch.randn(17, k, generator=g).half()
        for m in (1, 3, 16, 17):
            assert torch.equal(tk.packed_swiglu(xh[:m], wgn), tk.packed_swiglu(xh[:m], wg)), (n, k, m)


@child_only
def test_one_row_x_loads_are_bit_identical(tk):
    """X1 (a one-row launch loads x's row once and widens it to the 16-row dot operand in
    registers) and XP (x permuted by the host to the dots' K order, 16-byte loads) feed the dots
    the same values in the same order: a one-row call with X1 / XP on equals the plain one-row
    call and row 0 of a 17-row call (and of a 64-row call: Q4_K in float16), bit for bit; split K,
    one or two superblocks a step,
    half-superblock dots (JS 4), Q5_K, the SwiGLU epilogue and split partials."""
    assert tk.kernel_config("Q4_K", 48, 1024, 16)["X1"] == 0          # off by default
    assert tk.kernel_config("Q4_K", 48, 1024, 16)["XP"] == 0
    w, _ = _weight("Q4_K", 48, 1024, seed=11)
    # (Q4_KN, opt-in, is Q4_K's bits by test_q4_kn_is_bit_identical_to_q4_k: make test-slow)
    ws = {"Q4_K": w, "Q5_K": _weight("Q5_K", 48, 1024, seed=12)[0]}
    g = torch.Generator().manual_seed(12)
    x = torch.randn(64, 1024, generator=g)
    # the suite's time: X1 and XP are off by default, so float32 runs one type and one split,
    # and the other types skip the half-superblock dots (2026-12-07: 21 s of the interpreter)
    for dtype in (torch.float16, torch.float32):
        xd = x.to(dtype)
        for qt, ww in ws.items():
            if dtype == torch.float32 and qt != "Q4_K":
                continue
            for over in ({}, {"splits": 2}, {"SB": 2, "JS": 4}, {"JS": 4}):
                if qt != "Q4_K" and over.get("JS") == 4:
                    continue
                if dtype == torch.float32 and over != {"splits": 2}:
                    continue
                # 64 rows for Q4_K in float16 alone (the suite's time): the 8B's type, whose
                # windows reach 64 rows; the other types and float32 at 1 and 17
                rows = (1, 17, 64) if qt == "Q4_K" and dtype == torch.float16 else (1, 17)
                ref = {m: tk.packed_matmul(xd[:m], ww, X1=0, XP=0, **over) for m in rows}
                for m in rows[1:]:
                    assert torch.equal(ref[1], ref[m][:1]), (qt, dtype, over, m)
                for x1, xp in ((0, 1), (1, 1)):      # X1 alone is off by default and in (1, 1)
                    got = tk.packed_matmul(xd[:1], ww, X1=x1, XP=xp, **over)
                    assert torch.equal(got, ref[1]), (qt, dtype, over, x1, xp)
                    if xp:     # XP at more rows: the same bits too
                        assert torch.equal(tk.packed_matmul(xd[:17], ww, X1=x1, XP=xp, **over),
                                           ref[17]), (qt, dtype, over, x1, xp)
                assert torch.equal(tk.packed_partials(xd[:1], ww, X1=1, **over),
                                   tk.packed_partials(xd[:1], ww, X1=0, **over)), (qt, dtype, over)
    # SwiGLU at one row (the fused layer's gate|up): in the epilogue (unsplit) and from split
    # partials; X1 / XP come from SPECSCOPE_X1 / SPECSCOPE_XP there, so set the defaults
    for n, k, splits in ((128, 256, 1), (128, 512, 2)):
        wg, _ = _weight("Q4_K", n, k, seed=13)
        assert tk.kernel_config("Q4_K", n, k, 16)["splits"] == splits
        xh = torch.randn(17, k, generator=g).half()
        want = tk.packed_swiglu(xh, wg)
        for x1, xp in ((1, 0), (0, 1), (1, 1)):
            old = tk._X1_DEFAULT, tk._XP_DEFAULT
            tk._X1_DEFAULT, tk._XP_DEFAULT = x1, xp
            tk._config.cache_clear()
            try:
                assert tk.kernel_config("Q4_K", n, k, 16)["X1"] == x1
                got = tk.packed_swiglu(xh[:1], wg)
            finally:
                tk._X1_DEFAULT, tk._XP_DEFAULT = old
                tk._config.cache_clear()
            assert torch.equal(got, want[:1]), (n, k, x1, xp)


@child_only
def test_inputs_written_in_the_xp_order_give_the_same_bits(tk, dtype=torch.float16):
    """XP_FUSED (engine.model.fused_layer): the norm before gate|up and the SwiGLU before down
    write their outputs in the next matmul's XP order (``xp_dest``), and that matmul skips its
    own copy (``xp_in``). Every output must equal the unfused path's bit for bit, moved to those
    columns: the norm (both sums of squares), the matmul's partials, the residual norm after it,
    the SwiGLU epilogue (and its split fallback), at 1 and 17 rows; float16, the GPU's 16-bit
    path (float32 passes too: ~10 s more of the suite). The control: x in the natural order
    given as ``xp_in`` gives other bits."""
    from engine.kernels import triton_fused as tf
    xp = {"XP": 1}
    w_gu, _ = _weight("Q4_K", 512, 512, seed=11)      # gate|up: 256 outputs, down's K
    w_dn, _ = _weight("Q4_K", 512, 256, seed=12)
    cpu = torch.device("cpu")
    from engine.kernels.xp_order import xp_dest
    assert xp_dest(w_gu, dtype, cpu, XP=0) is None
    assert xp_dest(_weight("Q8_0", 64, 512)[0], dtype, cpu, XP=1) is None
    d_gu, d_dn = xp_dest(w_gu, dtype, cpu, **xp), xp_dest(w_dn, dtype, cpu, **xp)
    assert sorted(d_gu.tolist()) == list(range(512)) and d_gu.tolist() != list(range(512))
    g = torch.Generator().manual_seed(3)
    for m in (1, 17):
        x = torch.randn(m, 512, generator=g).to(dtype)
        cfg = tk.kernel_config("Q4_K", 512, 512, 16, **xp)
        shape, perm = tk._xperm_order(m, 512, cfg["JS"])
        x_xp = x.reshape(shape).permute(perm).reshape(m, 512)
        assert torch.equal(x_xp[:, d_gu.long()], x)               # dest inverts the matmul's copy
        want = tk.packed_partials(x, w_gu, **xp)
        assert torch.equal(tk.packed_partials(x_xp, w_gu, xp_in=True, **xp), want)
        assert not torch.equal(tk.packed_partials(x, w_gu, xp_in=True, **xp), want)   # control
        # the norm: natural, then into gate|up's order
        for of in (False, True):
            xr, h = torch.randn(m, 512, generator=g).to(dtype), torch.empty(m, 512, dtype=dtype)
            nw = torch.rand(512, generator=g).to(dtype)
            xr2, h2 = xr.clone(), torch.empty_like(h)
            tf.residual_norm(want, xr, h, nw, 1e-6, order_free=of)
            tf.residual_norm(want, xr2, h2, nw, 1e-6, order_free=of, dest=d_gu)
            assert torch.equal(xr2, xr) and torch.equal(h2[:, d_gu.long()], h), of
        # the SwiGLU epilogue into down's order, and the split fallback (h scaled: random
        # blocks' products overflow float16 otherwise)
        h = (h.float() / 64).to(dtype)
        h_xp = torch.empty_like(h)
        h_xp[:, d_gu.long()] = h
        for splits in (1, 2):
            o = dict(xp, splits=splits)
            act = tk.packed_swiglu(h, w_gu, **o)
            act2 = tk.packed_swiglu(h_xp, w_gu, xp_in=True, dest=d_dn, **o)
            assert torch.equal(act2[:, d_dn.long()], act) and act.isfinite().all(), splits
        # down's residual norm from act in its order, h into gate|up's
        xr, nw = torch.randn(m, 512, generator=g).to(dtype), torch.rand(512, generator=g).to(dtype)
        xr2, h, h2 = xr.clone(), torch.empty(m, 512, dtype=dtype), torch.empty(m, 512, dtype=dtype)
        tk.packed_residual_norm(act, w_dn, xr, h, nw, 1e-6, **xp)
        tk.packed_residual_norm(act2, w_dn, xr2, h2, nw, 1e-6, xp_in=True, dest=d_gu, **xp)
        assert torch.equal(xr2, xr) and torch.equal(h2[:, d_gu.long()], h) and h.isfinite().all()
    with pytest.raises(ValueError, match="XP order"):
        tk.packed_partials(x, w_gu, xp_in=True, XP=0)
