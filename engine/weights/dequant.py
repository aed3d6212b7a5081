"""GGUF block dequantization in torch ops, bit-identical to ``gguf.quants.dequantize``.

``dequantize(raw, qtype)`` takes a tensor's bytes straight from the file, as uint8
``[rows, bytes_per_row]``, and returns float32 ``[rows, values_per_row]`` on the same device
(CPU or CUDA: only elementwise/bitwise torch ops are used).

Exactness: every product gguf forms is exact in float32 (an f16 scale has an 11-bit
significand; times a 6-bit sub-scale times a <=6-bit quant is < 24 bits), so the only
rounding is the single add/subtract of the min term (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K). We still
mirror gguf's operation order: ``(d * sc) * q - (dmin * m)``, ``d * q + m``, ``(d * sc) * q``.

Work is done in row chunks of about ``_CHUNK_VALUES`` values so that the temporaries stay
small (a few cache-sized buffers) whatever the tensor's size.

The per-type ``_*_values`` functions take a block's fields already split out (``[n, nb, len]``
views of the field, f16 fields converted to float32 ``[n, nb, 1]``) and write into an
output view ``[n, nb, block_size]``. ``packed.dequantize_packed`` calls the same functions with
its planes, so raw and packed dequantization cannot drift apart.
"""

from __future__ import annotations

import functools

import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

__all__ = [
    "SUPPORTED_TYPES",
    "dequantize",
    "qtype_of",
    "block_sizes",
    "values_per_row",
    "bytes_per_row",
]

QK_K = 256
_CHUNK_VALUES = 1 << 17  # values per row chunk (512 KiB of float32 output)
_OUTER_CHUNKS = 16  # inner chunks per outer chunk (per-block factors computed per outer chunk)

SUPPORTED_TYPES = (
    "F32", "F16", "BF16",
    "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
)


def qtype_of(qtype) -> GGMLQuantizationType:
    """A GGMLQuantizationType from an int, a name ("Q4_K") or the enum itself."""
    if isinstance(qtype, GGMLQuantizationType):
        return qtype
    if isinstance(qtype, str):
        return GGMLQuantizationType[qtype]
    return GGMLQuantizationType(int(qtype))


def block_sizes(qtype) -> tuple[int, int]:
    """(values per block, bytes per block) of a type."""
    return GGML_QUANT_SIZES[qtype_of(qtype)]


def values_per_row(qtype, nbytes: int) -> int:
    bs, ts = block_sizes(qtype)
    if nbytes % ts:
        raise ValueError(f"{qtype_of(qtype).name}: {nbytes} bytes per row is not a multiple of {ts}")
    return nbytes // ts * bs


def bytes_per_row(qtype, nvalues: int) -> int:
    bs, ts = block_sizes(qtype)
    if nvalues % bs:
        raise ValueError(f"{qtype_of(qtype).name}: {nvalues} values per row is not a multiple of {bs}")
    return nvalues // bs * ts


# --------------------------------------------------------------------------------------------
# small helpers

@functools.lru_cache(maxsize=None)
def _const_cached(values: tuple, shape: tuple, device: str) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.uint8, device=device).reshape(shape)


def _const(values, shape, device) -> torch.Tensor:
    """A small uint8 constant (shift amounts), cached per device."""
    return _const_cached(tuple(values), tuple(shape), str(device))


def f16_field(blk: torch.Tensor, off: int) -> torch.Tensor:
    """Bytes [off, off+2) of every block, as float32 [..., 1] (exact f16 -> f32)."""
    return blk[..., off:off + 2].contiguous().view(torch.float16).to(torch.float32)


def f16_to_f32(h: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """float16 -> float32 like numpy: exact, and NaN payloads kept (torch's own conversion
    canonicalises NaNs on CPU). Only the NaN positions take the slow path."""
    if out is None:
        out = h.to(torch.float32)
    else:
        out.copy_(h)
    nan = torch.isnan(out)
    if bool(nan.any()):
        bits = h[nan].view(torch.int16).to(torch.int32)
        fixed = ((bits & 0x8000) << 16) | 0x7F800000 | ((bits & 0x03FF) << 13)
        out[nan] = fixed.view(torch.float32)
    return out


def _f16_rows(h: torch.Tensor) -> torch.Tensor:
    """f16_to_f32 over a [rows, cols] tensor; on CPU in row chunks, so the NaN check reads
    the chunk while it is still in cache."""
    if h.device.type != "cpu":
        return f16_to_f32(h)
    rows, cols = h.shape
    out = torch.empty((rows, cols), dtype=torch.float32)
    step = chunk_rows(cols)
    for r0 in range(0, rows, step):
        f16_to_f32(h[r0:r0 + step], out=out[r0:r0 + step])
    return out


def unpack_k_scales(scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K/Q5_K 12-byte packed 6-bit scales [..., 12] -> (sc, mn) uint8 [..., 8].

    Bytes 0-3: low 6 bits = sc[0..3], top 2 bits = sc[4..7] bits 4-5.
    Bytes 4-7: low 6 bits = mn[0..3], top 2 bits = mn[4..7] bits 4-5.
    Bytes 8-11: low nibble = sc[4..7] bits 0-3, high nibble = mn[4..7] bits 0-3.
    """
    d = scales[..., 0:4]
    m = scales[..., 4:8]
    md = scales[..., 8:12]
    sc = torch.cat([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], dim=-1)
    mn = torch.cat([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], dim=-1)
    return sc, mn


def nibbles(src: torch.Tensor) -> torch.Tensor:
    """src uint8 [..., L] -> uint8 [..., 2, L]: low nibbles, then high nibbles."""
    return torch.stack([src & 0x0F, src >> 4], dim=-2)


# --------------------------------------------------------------------------------------------
# Per-type kernels, in two halves so both the raw-bytes and the packed-planes paths share them:
#   *_prep(...)  -> per-block / per-sub-block float32 factors (computed over a large row chunk)
#   *_fill(o, quant fields..., factors...)  writes values into o [n, nb, block_size] float32
# Field tensors are [n, nb, len] uint8 views; f16 fields arrive as float32 [n, nb, 1].

def q8_0_fill(o, qs, d):
    # gguf: x.view(int8).astype(f32) * d
    o.copy_(qs.view(torch.int8))
    o.mul_(d)


def q4_0_fill(o, qs, d):
    # gguf: ((nibbles) as int8 - 8).astype(f32); d * q.  Value j = low nibble of byte j,
    # value 16 + j = high nibble of byte j.
    n, nb = o.shape[0], o.shape[1]
    o.view(n, nb, 2, 16).copy_(nibbles(qs))
    o.sub_(8.0)
    o.mul_(d)


def q4_1_fill(o, qs, d, m):
    # gguf: (d * q) + m
    n, nb = o.shape[0], o.shape[1]
    o.view(n, nb, 2, 16).copy_(nibbles(qs))
    o.mul_(d)
    o.add_(m)


def _q5_small_q(qs, qh):
    """Q5_0/Q5_1 5-bit quants uint8 [n, nb, 32]: low nibbles then high nibbles of qs, bit 4
    of value i is bit i%8 of qh byte i//8 (the little-endian uint32)."""
    n, nb = qs.shape[0], qs.shape[1]
    q = nibbles(qs).view(n, nb, 32)
    hb = (qh.unsqueeze(-1) >> _const(range(8), (8,), qs.device)) & 1  # [n, nb, 4, 8]
    q |= hb.view(n, nb, 32) << 4
    return q


def q5_0_fill(o, qs, qh, d):
    # gguf: (q as int8 - 16).astype(f32); d * q
    o.copy_(_q5_small_q(qs, qh))
    o.sub_(16.0)
    o.mul_(d)


def q5_1_fill(o, qs, qh, d, m):
    o.copy_(_q5_small_q(qs, qh))
    o.mul_(d)
    o.add_(m)


def q2_k_prep(scales, d, dmin):
    # dl = d * (sc & 15), ml = dmin * (sc >> 4), per 16 values  -> [n, nb, 16, 1] each
    dl = d * (scales & 0x0F).to(torch.float32)
    ml = dmin * (scales >> 4).to(torch.float32)
    return dl.unsqueeze(-1), ml.unsqueeze(-1)


def q2_k_fill(o, qs, dl, ml):
    # value 128h + 32j + l: (qs[32h + l] >> 2j) & 3;  dl * q - ml
    n, nb = o.shape[0], o.shape[1]
    q = (qs.view(n, nb, 2, 1, 32) >> _const((0, 2, 4, 6), (4, 1), qs.device)) & 3
    ov = o.view(n, nb, 16, 16)
    ov.copy_(q.view(n, nb, 16, 16))
    ov.mul_(dl)
    ov.sub_(ml)


def q3_k_prep(scales, d):
    n, nb = scales.shape[0], scales.shape[1]
    dev = scales.device
    ls = (scales[..., 0:8].unsqueeze(-2) >> _const((0, 4), (2, 1), dev)).reshape(n, nb, 16)
    hs = (scales[..., 8:12].unsqueeze(-2) >> _const((0, 2, 4, 6), (4, 1), dev)).reshape(n, nb, 16)
    sc = ((ls & 0x0F) | ((hs & 0x03) << 4)).view(torch.int8) - 32
    return ((d * sc.to(torch.float32)).unsqueeze(-1),)


def q3_k_fill(o, hmask, qs, dl):
    n, nb = o.shape[0], o.shape[1]
    dev = qs.device
    ql = (qs.view(n, nb, 2, 1, 32) >> _const((0, 2, 4, 6), (4, 1), dev)) & 3        # [n,nb,2,4,32]
    qh = (hmask.view(n, nb, 1, 32) >> _const(range(8), (8, 1), dev)) & 1            # [n,nb,8,32]
    qh ^= 1
    q = ql.view(n, nb, 256).view(torch.int8) - (qh.view(n, nb, 256) << 2).view(torch.int8)
    ov = o.view(n, nb, 16, 16)
    ov.copy_(q.view(n, nb, 16, 16))
    ov.mul_(dl)


def k_prep(d, dmin, sc, mn):
    # Q4_K / Q5_K: ds = d * sc, dm = dmin * mn per 32-value sub-block -> [n, nb, 8, 1] each
    ds = d * sc.to(torch.float32)
    dm = dmin * mn.to(torch.float32)
    return ds.unsqueeze(-1), dm.unsqueeze(-1)


def q4_k_fill(o, qs, ds, dm):
    # gguf: (d * sc) * q - (dmin * m); sub-block 2i = low nibbles of qs[32i:32i+32],
    # sub-block 2i+1 = their high nibbles.
    n, nb = o.shape[0], o.shape[1]
    o.view(n, nb, 4, 2, 32).copy_(nibbles(qs.view(n, nb, 4, 32)))
    ov = o.view(n, nb, 8, 32)
    ov.mul_(ds)
    ov.sub_(dm)


def q5_k_fill(o, qs, qh, ds, dm):
    # as Q4_K, with bit 4 of sub-block j's value l = bit j of qh[l]
    n, nb = o.shape[0], o.shape[1]
    q = nibbles(qs.view(n, nb, 4, 32)).view(n, nb, 8, 32)
    hb = (qh.view(n, nb, 1, 32) >> _const(range(8), (8, 1), qs.device)) & 1   # [n, nb, 8, 32]
    q |= hb << 4
    ov = o.view(n, nb, 8, 32)
    ov.copy_(q)
    ov.mul_(ds)
    ov.sub_(dm)


def q6_k_prep(sc, d):
    # ds = d * sc (int8 scale per 16 values) -> [n, nb, 16, 1]
    return ((d * sc.view(torch.int8).to(torch.float32)).unsqueeze(-1),)


def q6_k_fill(o, ql, qh, ds):
    # value 128h + 32j + l (h: half 0..1, j: 0..3, l: 0..31):
    #   low 4 bits  = (ql[64h + 32(j%2) + l] >> 4*(j//2)) & 15
    #   high 2 bits = (qh[32h + l] >> 2j) & 3
    #   (q - 32) * ds[(128h + 32j + l) // 16]
    n, nb = o.shape[0], o.shape[1]
    q = nibbles(ql.view(n, nb, 2, 64)).view(n, nb, 2, 4, 32)
    hb = (qh.view(n, nb, 2, 1, 32) >> _const((0, 2, 4, 6), (4, 1), ql.device)) & 3
    q |= hb << 4
    ov = o.view(n, nb, 16, 16)
    ov.copy_(q.view(n, nb, 16, 16).view(torch.int8))
    ov.sub_(32.0)
    ov.mul_(ds)


# --------------------------------------------------------------------------------------------
# raw blocks b [n, nb, type_size] -> (quant fields, factors)

def _raw_q8_0(b):
    return (b[..., 2:34],), (f16_field(b, 0),)


def _raw_q4_0(b):
    return (b[..., 2:18],), (f16_field(b, 0),)


def _raw_q4_1(b):
    return (b[..., 4:20],), (f16_field(b, 0), f16_field(b, 2))


def _raw_q5_0(b):
    return (b[..., 6:22], b[..., 2:6]), (f16_field(b, 0),)


def _raw_q5_1(b):
    return (b[..., 8:24], b[..., 4:8]), (f16_field(b, 0), f16_field(b, 2))


def _raw_q2_k(b):
    return (b[..., 16:80],), q2_k_prep(b[..., 0:16], f16_field(b, 80), f16_field(b, 82))


def _raw_q3_k(b):
    return (b[..., 0:32], b[..., 32:96]), q3_k_prep(b[..., 96:108], f16_field(b, 108))


def _raw_q4_k(b):
    sc, mn = unpack_k_scales(b[..., 4:16])
    return (b[..., 16:144],), k_prep(f16_field(b, 0), f16_field(b, 2), sc, mn)


def _raw_q5_k(b):
    sc, mn = unpack_k_scales(b[..., 4:16])
    return (b[..., 48:176], b[..., 16:48]), k_prep(f16_field(b, 0), f16_field(b, 2), sc, mn)


def _raw_q6_k(b):
    return (b[..., 0:128], b[..., 128:192]), q6_k_prep(b[..., 192:208], f16_field(b, 208))


_T = GGMLQuantizationType
# qtype -> (raw splitter, fill)
KERNELS = {
    _T.Q8_0: (_raw_q8_0, q8_0_fill),
    _T.Q4_0: (_raw_q4_0, q4_0_fill),
    _T.Q4_1: (_raw_q4_1, q4_1_fill),
    _T.Q5_0: (_raw_q5_0, q5_0_fill),
    _T.Q5_1: (_raw_q5_1, q5_1_fill),
    _T.Q2_K: (_raw_q2_k, q2_k_fill),
    _T.Q3_K: (_raw_q3_k, q3_k_fill),
    _T.Q4_K: (_raw_q4_k, q4_k_fill),
    _T.Q5_K: (_raw_q5_k, q5_k_fill),
    _T.Q6_K: (_raw_q6_k, q6_k_fill),
}


def fill_rows(out: torch.Tensor, qfields, factors, fill, block_size: int) -> None:
    """Run ``fill`` over ``out`` [n, values] in row chunks of about _CHUNK_VALUES values.
    qfields/factors are [n, nb, ...] tensors sliced along rows in step with out."""
    n, vpr = out.shape
    nb = vpr // block_size
    step = chunk_rows(vpr)
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        fill(out[r0:r1].view(r1 - r0, nb, block_size),
             *[f[r0:r1] for f in qfields], *[f[r0:r1] for f in factors])


def chunk_rows(values_per_row: int) -> int:
    """Rows per chunk so a chunk holds about _CHUNK_VALUES values."""
    return max(1, _CHUNK_VALUES // max(1, values_per_row))


def dequantize(raw: torch.Tensor, qtype) -> torch.Tensor:
    """uint8 [rows, bytes_per_row] (file bytes) -> float32 [rows, values_per_row], same device.

    Bit-identical to ``gguf.quants.dequantize``. F32 returns a float32 *view* of ``raw`` (as gguf
    does); every other type returns a new tensor. A 1-D ``raw`` is treated as one row and a 1-D
    result is returned.
    """
    qt = qtype_of(qtype)
    if raw.dtype != torch.uint8:
        raise TypeError(f"raw must be uint8 file bytes, got {raw.dtype}")
    squeeze = raw.dim() == 1
    if squeeze:
        raw = raw.unsqueeze(0)
    if raw.dim() != 2:
        raise ValueError(f"raw must be [rows, bytes_per_row], got shape {tuple(raw.shape)}")
    rows, nbytes = raw.shape
    vpr = values_per_row(qt, nbytes)
    if not raw.is_contiguous():
        raw = raw.contiguous()

    if qt == GGMLQuantizationType.F32:
        out = raw.view(torch.float32)
    elif qt == GGMLQuantizationType.F16:
        out = _f16_rows(raw.view(torch.float16))
    elif qt == GGMLQuantizationType.BF16:
        out = raw.view(torch.bfloat16).to(torch.float32)
    else:
        kern = KERNELS.get(qt)
        if kern is None:
            raise NotImplementedError(f"dequantize: {qt.name} is not supported")
        split, fill = kern
        bs, ts = GGML_QUANT_SIZES[qt]
        nb = nbytes // ts
        out = torch.empty((rows, vpr), dtype=torch.float32, device=raw.device)
        # outer chunks: the per-block factors (f16 scales, unpacked sub-scales) are computed for
        # _OUTER_CHUNKS inner chunks at a time, so their many small ops stay cheap
        step = chunk_rows(vpr) * _OUTER_CHUNKS
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            qfields, factors = split(raw[r0:r1].view(r1 - r0, nb, ts))
            fill_rows(out[r0:r1], qfields, factors, fill, bs)
    return out[0] if squeeze else out
