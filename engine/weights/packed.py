"""Packed GGUF linear weights: the plane layout (a contract shared with the Triton kernels).

A ``PackedWeight`` holds a weight of logical shape ``[N, K]`` (N output features, K input
features; GGUF's row = one output feature's K values) as a dict of *planes*. Every plane is a
contiguous 2-D tensor ``[N, X]``: for each row, the concatenation over that row's blocks (in
order) of one field of the block, with the field's bytes in GGUF's own order. Plane column
``c`` of row ``n`` therefore belongs to block ``c // field_len`` of that row.

Notation below: ``b`` = block index within the row, ``i`` = value index within the block,
``k = b * block_size + i`` = input-feature index; ``f32(h)`` = exact float16 -> float32.
Every formula is evaluated in float32, left to right as written: ``(d*sc)*q - (dmin*mn)``.
All products are exact in float32 (<= 23 significant bits), so the only rounding in a value is
the final subtraction/addition of the min term; any order/FMA of the *products* gives the same
bits, but the min term must be subtracted from the finished product.

Q8_0 (block 32)
    qs   int8    [N, K]      qs[n, k] is the quant of value k.
    d    float16 [N, K/32]
    w[n, k] = f32(qs[n, k]) * f32(d[n, k // 32])

Q4_0 (block 32)
    qs   uint8   [N, K/2]    16 bytes per block; byte j (0..15) of block b, i.e.
                             qs[n, 16b + j], holds value i=j in its LOW nibble and value
                             i=16+j in its HIGH nibble.
    d    float16 [N, K/32]
    q = nibble (0..15);  w = (q - 8) * f32(d)

Q4_1 (block 32)
    qs   uint8   [N, K/2]    as Q4_0
    d, m float16 [N, K/32]
    w = (q * f32(d)) + f32(m)

Q4_K (super-block 256 = 8 sub-blocks of 32)
    qs   uint8   [N, K/2]    128 bytes per super-block, GGUF order: for group g in 0..3 and
                             l in 0..31, byte qs[n, 128b + 32g + l] holds value i = 64g + l in
                             its LOW nibble (sub-block 2g) and value i = 64g + 32 + l in its
                             HIGH nibble (sub-block 2g+1).
    d    float16 [N, K/256]
    dmin float16 [N, K/256]
    sc   uint8   [N, K/32]   6-bit scale of each 32-value sub-block (0..63), sub-block
                             s = i // 32 of super-block b at column 8b + s (unpacked from
                             GGUF's 12-byte packed scales; kernels never unpack).
    mn   uint8   [N, K/32]   6-bit min of each sub-block, same indexing.
    w = (f32(d) * sc) * q - (f32(dmin) * mn)          (q = the 4-bit nibble, 0..15)

Q5_K (super-block 256)
    qs, d, dmin, sc, mn      as Q4_K (qs gives the low 4 bits of q)
    qh   uint8   [N, K/8]    32 bytes per super-block, GGUF order: bit s of
                             qh[n, 32b + l] is bit 4 of value i = 32s + l (s = sub-block).
    q = nibble | (((qh >> s) & 1) << 4)   (0..31);   w = (f32(d) * sc) * q - (f32(dmin) * mn)

Q6_K (super-block 256 = 16 groups of 16 for the scales)
    ql   uint8   [N, K/2]    128 bytes per super-block (GGUF order)
    qh   uint8   [N, K/4]    64 bytes per super-block (GGUF order)
    sc   int8    [N, K/16]   signed scale per 16 values: column 16b + i // 16
    d    float16 [N, K/256]
    For i = 128h + 32j + l (h in 0..1, j in 0..3, l in 0..31), with L = ql[n, 128b + ...],
    H = qh[n, 64b + ...] the super-block's bytes:
        low4  = (L[64h + 32*(j % 2) + l] >> (4 * (j // 2))) & 15
        high2 = (H[32h + l] >> (2 * j)) & 3
        q = (low4 | high2 << 4) - 32                         (-32..31)
    w = (f32(d) * f32(sc[i // 16])) * q

Q6_K8 (Q6_K widened at load: ``widen_q6_k``; not a GGUF type, the GPU kernels' form of Q6_K)
    q8   int8    [N, K]      q8[n, k] = the Q6_K quant of value k minus 32 (-32..31)
    sc, d                    as Q6_K
    w = (f32(d) * f32(sc[k // 16])) * q8           (the same values as the Q6_K it came from)
    8.56 bits a weight against Q6_K's 6.56: one byte a quant needs no 6-bit merge, so the
    packed kernel dequantizes it like Q8_0 (BENCHMARKS.md, "Q6_K widened to int8").

Q4_KN (Q4_K in GGUF's own block order, repacked at load: ``native_q4_k``; not a GGUF type)
    blk  uint8   [N, K/256*144]  per super-block b the 144 bytes of GGUF's block_q4_K at
                             columns 144b..144b+143: d (f16), dmin (f16), the 12 bytes of packed
                             6-bit scales/mins (``dequant.unpack_k_scales``), the 128 qs bytes.
    The values are Q4_K's; every block starts 16-byte aligned, so a kernel reads a super-block
    with loads of 4 bytes or more (Q4_K's 2-byte d / dmin planes cannot be).

``dequantize_packed`` implements exactly these formulas (sharing its arithmetic with
``dequant.dequantize``) and is bit-identical to ``gguf.quants.dequantize`` of the file bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import dequant as _dq
from .dequant import GGMLQuantizationType as _T

__all__ = ["PACKED_TYPES", "PLANE_SPECS", "PackedWeight", "pack", "dequantize_packed", "plane_shapes",
           "widen_q6_k", "native_q4_k"]

PACKED_TYPES = ("Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K")

# name -> {plane: (dtype, columns per block)}; columns per row = K / block_size * columns_per_block
PLANE_SPECS: dict[str, dict[str, tuple[torch.dtype, int]]] = {
    "Q8_0": {"qs": (torch.int8, 32), "d": (torch.float16, 1)},
    "Q4_0": {"qs": (torch.uint8, 16), "d": (torch.float16, 1)},
    "Q4_1": {"qs": (torch.uint8, 16), "d": (torch.float16, 1), "m": (torch.float16, 1)},
    "Q4_K": {"qs": (torch.uint8, 128), "d": (torch.float16, 1), "dmin": (torch.float16, 1),
             "sc": (torch.uint8, 8), "mn": (torch.uint8, 8)},
    "Q5_K": {"qs": (torch.uint8, 128), "qh": (torch.uint8, 32), "d": (torch.float16, 1),
             "dmin": (torch.float16, 1), "sc": (torch.uint8, 8), "mn": (torch.uint8, 8)},
    "Q6_K": {"ql": (torch.uint8, 128), "qh": (torch.uint8, 64), "sc": (torch.int8, 16),
             "d": (torch.float16, 1)},
    "Q6_K8": {"q8": (torch.int8, 256), "sc": (torch.int8, 16), "d": (torch.float16, 1)},
    "Q4_KN": {"blk": (torch.uint8, 144)},
}
_WIDENED = {"Q6_K8": "Q6_K", "Q4_KN": "Q4_K"}     # load-time forms -> the GGUF type they hold


def _block_size(qtype) -> int:
    name = qtype if qtype in _WIDENED else _dq.qtype_of(qtype).name
    return _dq.block_sizes(_WIDENED.get(name, name))[0]


def plane_shapes(qtype, n: int, k: int) -> dict[str, tuple[tuple[int, int], torch.dtype]]:
    """{plane: ((N, X), dtype)} of a packed weight of shape [n, k]."""
    name = qtype if qtype in _WIDENED else _dq.qtype_of(qtype).name
    bs = _block_size(name)
    if k % bs:
        raise ValueError(f"{name}: K={k} is not a multiple of {bs}")
    return {p: ((n, k // bs * c), dt) for p, (dt, c) in PLANE_SPECS[name].items()}


@dataclass(frozen=True, eq=False)
class PackedWeight:
    """A [N, K] weight kept in its GGUF quantization, split into planes (see module doc)."""

    qtype: str
    shape: tuple[int, int]
    planes: dict[str, torch.Tensor]

    def __post_init__(self):
        if self.qtype not in PLANE_SPECS:
            raise ValueError(f"PackedWeight: unsupported qtype {self.qtype!r}")
        want = plane_shapes(self.qtype, *self.shape)
        if set(want) != set(self.planes):
            raise ValueError(f"{self.qtype}: planes {sorted(self.planes)} != {sorted(want)}")
        dev = None
        for p, (shp, dt) in want.items():
            t = self.planes[p]
            if tuple(t.shape) != shp or t.dtype != dt or not t.is_contiguous():
                raise ValueError(f"{self.qtype}.{p}: got {tuple(t.shape)} {t.dtype} "
                                 f"(contiguous={t.is_contiguous()}), want {shp} {dt}")
            if dev is None:
                dev = t.device
            elif t.device != dev:
                raise ValueError(f"{self.qtype}: planes on different devices")

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.planes.values())

    @property
    def device(self) -> torch.device:
        return next(iter(self.planes.values())).device

    @property
    def block_size(self) -> int:
        return _block_size(self.qtype)

    def to(self, device) -> "PackedWeight":
        device = torch.device(device)
        if device == self.device:
            return self
        return PackedWeight(self.qtype, self.shape,
                            {p: t.to(device) for p, t in self.planes.items()})

    def __repr__(self) -> str:
        return (f"PackedWeight({self.qtype}, shape={self.shape}, nbytes={self.nbytes}, "
                f"device={self.device})")


def _field(b: torch.Tensor, off: int, length: int) -> torch.Tensor:
    """Bytes [off, off+length) of every block of b [N, nb, ts] -> contiguous uint8 [N, nb*length]."""
    n, nb = b.shape[0], b.shape[1]
    return b[..., off:off + length].reshape(n, nb * length)


def _f16_plane(b: torch.Tensor, off: int) -> torch.Tensor:
    n, nb = b.shape[0], b.shape[1]
    return b[..., off:off + 2].contiguous().view(torch.float16).reshape(n, nb)


def _k_scale_planes(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n, nb = b.shape[0], b.shape[1]
    sc, mn = _dq.unpack_k_scales(b[..., 4:16])
    return sc.reshape(n, nb * 8), mn.reshape(n, nb * 8)


def _split_q8_0(b):
    return {"qs": _field(b, 2, 32).view(torch.int8), "d": _f16_plane(b, 0)}


def _split_q4_0(b):
    return {"qs": _field(b, 2, 16), "d": _f16_plane(b, 0)}


def _split_q4_1(b):
    return {"qs": _field(b, 4, 16), "d": _f16_plane(b, 0), "m": _f16_plane(b, 2)}


def _split_q4_k(b):
    sc, mn = _k_scale_planes(b)
    return {"qs": _field(b, 16, 128), "d": _f16_plane(b, 0), "dmin": _f16_plane(b, 2),
            "sc": sc, "mn": mn}


def _split_q5_k(b):
    sc, mn = _k_scale_planes(b)
    return {"qs": _field(b, 48, 128), "qh": _field(b, 16, 32), "d": _f16_plane(b, 0),
            "dmin": _f16_plane(b, 2), "sc": sc, "mn": mn}


def _split_q6_k(b):
    return {"ql": _field(b, 0, 128), "qh": _field(b, 128, 64),
            "sc": _field(b, 192, 16).view(torch.int8), "d": _f16_plane(b, 208)}


_SPLITS = {"Q8_0": _split_q8_0, "Q4_0": _split_q4_0, "Q4_1": _split_q4_1,
           "Q4_K": _split_q4_k, "Q5_K": _split_q5_k, "Q6_K": _split_q6_k}


def pack(raw: torch.Tensor, qtype, device=None) -> PackedWeight:
    """File bytes uint8 [N, bytes_per_row] -> PackedWeight of shape [N, K].

    The repack runs on raw's device (pass ``raw.to("cuda")`` to repack on the GPU); the planes
    are then moved to ``device`` if given. raw is not modified or aliased.
    """
    name = _dq.qtype_of(qtype).name
    if name not in _SPLITS:
        raise ValueError(f"pack: {name} is not a packed type (packed: {', '.join(PACKED_TYPES)})")
    if raw.dtype != torch.uint8 or raw.dim() != 2:
        raise ValueError(f"pack: raw must be uint8 [N, bytes_per_row], got {raw.dtype} {tuple(raw.shape)}")
    n, nbytes = raw.shape
    k = _dq.values_per_row(name, nbytes)
    _, ts = _dq.block_sizes(name)
    b = raw.reshape(n, nbytes // ts, ts)
    planes = {p: t.contiguous() for p, t in _SPLITS[name](b).items()}
    w = PackedWeight(name, (n, k), planes)
    return w if device is None else w.to(device)


def widen_q6_k(w: PackedWeight) -> PackedWeight:
    """A Q6_K weight as Q6_K8 (module doc): the quants as int8 (q - 32), scales kept; on w's
    device, in slices of rows (a bounded scratch). The values are bit-identical."""
    if w.qtype != "Q6_K":
        raise ValueError(f"widen_q6_k: {w.qtype} is not Q6_K")
    n, k = w.shape
    nb = k // 256
    q8 = torch.empty((n, k), dtype=torch.int8, device=w.device)
    step = max(1, (1 << 22) // max(1, k))          # ~4 M values of scratch a slice
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        m = r1 - r0
        ql = w.planes["ql"][r0:r1].view(m, nb, 2, 2, 32).to(torch.int16)   # [.., h, a, l]
        qh = w.planes["qh"][r0:r1].view(m, nb, 2, 1, 32).to(torch.int16)   # [.., h, 1, l]
        low = torch.stack((ql & 15, ql >> 4), dim=3).view(m, nb, 2, 4, 32)  # j = a + 2 * nib
        shifts = torch.tensor([0, 2, 4, 6], dtype=torch.int16, device=w.device).view(4, 1)
        high = (qh >> shifts) & 3                                           # [.., h, j, l]
        q8[r0:r1] = ((low | (high << 4)) - 32).to(torch.int8).view(m, k)
    return PackedWeight("Q6_K8", (n, k), {"q8": q8, "sc": w.planes["sc"], "d": w.planes["d"]})


def native_q4_k(w: PackedWeight) -> PackedWeight:
    """A Q4_K weight as Q4_KN (module doc): each row's super-blocks as GGUF's 144-byte
    block_q4_K again (the scales re-packed to 6 bits), on w's device. The same values."""
    if w.qtype != "Q4_K":
        raise ValueError(f"native_q4_k: {w.qtype} is not Q4_K")
    n, k = w.shape
    nb = k // 256
    blk = torch.empty((n, nb * 144), dtype=torch.uint8, device=w.device)
    b = blk.view(n, nb, 144)
    p = w.planes
    b[..., 0:2] = p["d"].view(torch.uint8).view(n, nb, 2)
    b[..., 2:4] = p["dmin"].view(torch.uint8).view(n, nb, 2)
    sc = p["sc"].view(n, nb, 8)
    mn = p["mn"].view(n, nb, 8)
    # the inverse of dequant.unpack_k_scales
    b[..., 4:8] = (sc[..., :4] & 0x3F) | ((sc[..., 4:] >> 4) << 6)
    b[..., 8:12] = (mn[..., :4] & 0x3F) | ((mn[..., 4:] >> 4) << 6)
    b[..., 12:16] = (sc[..., 4:] & 0x0F) | ((mn[..., 4:] & 0x0F) << 4)
    b[..., 16:144] = p["qs"].view(n, nb, 128)
    return PackedWeight("Q4_KN", (n, k), {"blk": blk})


def _q4k_of_native(w: PackedWeight, rows: slice) -> PackedWeight:
    """Rows ``rows`` of a Q4_KN weight as Q4_K planes (the split ``pack`` does)."""
    blk = w.planes["blk"][rows]
    n, nb = blk.shape[0], w.shape[1] // 256
    planes = {p: t.contiguous() for p, t in _split_q4_k(blk.reshape(n, nb, 144)).items()}
    return PackedWeight("Q4_K", (n, w.shape[1]), planes)


# planes [n, nb, len] -> (quant fields, factors) for the shared fill kernels in dequant
def _fields(w: PackedWeight, rows: slice):
    p = {name: t[rows] for name, t in w.planes.items()}
    n = next(iter(p.values())).shape[0]
    bs = w.block_size
    nb = w.shape[1] // bs

    def blk(name, per_block):
        return p[name].view(n, nb, per_block)

    def f32(name):
        return p[name].view(n, nb, 1).to(torch.float32)

    q = w.qtype
    if q == "Q8_0":
        return (blk("qs", 32),), (f32("d"),)
    if q == "Q4_0":
        return (blk("qs", 16),), (f32("d"),)
    if q == "Q4_1":
        return (blk("qs", 16),), (f32("d"), f32("m"))
    if q == "Q4_K":
        return (blk("qs", 128),), _dq.k_prep(f32("d"), f32("dmin"), blk("sc", 8), blk("mn", 8))
    if q == "Q5_K":
        return ((blk("qs", 128), blk("qh", 32)),
                _dq.k_prep(f32("d"), f32("dmin"), blk("sc", 8), blk("mn", 8)))
    if q == "Q6_K":
        return (blk("ql", 128), blk("qh", 64)), _dq.q6_k_prep(blk("sc", 16), f32("d"))
    raise ValueError(q)


def dequantize_packed(w: PackedWeight, rows: slice | None = None,
                      out: torch.Tensor | None = None) -> torch.Tensor:
    """float32 [n, K] of the rows ``rows`` (a unit-step slice; all rows if None), on w's device.

    Bit-identical to ``gguf.quants.dequantize`` of the bytes w was packed from. ``out`` (float32
    [n, K], contiguous) may be given to reuse a buffer.
    """
    if rows is None:
        rows = slice(0, w.shape[0])
    start, stop, step = rows.indices(w.shape[0])
    if step != 1:
        raise ValueError("dequantize_packed: rows must be a unit-step slice")
    rows = slice(start, stop)
    n = max(0, stop - start)
    k = w.shape[1]
    if out is None:
        out = torch.empty((n, k), dtype=torch.float32, device=w.device)
    elif out.shape != (n, k) or out.dtype != torch.float32 or not out.is_contiguous():
        raise ValueError(f"dequantize_packed: out must be contiguous float32 {(n, k)}")
    if n == 0:
        return out
    if w.qtype == "Q4_KN":
        return dequantize_packed(_q4k_of_native(w, rows), out=out)
    if w.qtype == "Q6_K8":
        r = slice(start, stop)
        ds = w.planes["d"][r].to(torch.float32).repeat_interleave(16, dim=1) * \
            w.planes["sc"][r].to(torch.float32)                              # [n, K/16]
        ov = out.view(n, k // 16, 16)
        ov.copy_(w.planes["q8"][r].view(n, k // 16, 16))
        ov.mul_(ds.unsqueeze(-1))
        return out
    fill = _dq.KERNELS[_T[w.qtype]][1]
    step = _dq.chunk_rows(k) * _dq._OUTER_CHUNKS
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        qfields, factors = _fields(w, slice(start + r0, start + r1))
        _dq.fill_rows(out[r0:r1], qfields, factors, fill, w.block_size)
    return out
