"""Triton matmul straight from packed GGUF planes: ``packed_matmul(x, w) -> x @ dequant(w).T``.

Imported lazily (by ``matmul.py``, only when ``x`` is on a GPU): Triton is not a dependency of
the package. Everything here is plain Triton (no inline asm, no TMA, no vendor libraries), so
the same source runs on NVIDIA and on AMD (ROCm, RDNA3/4 WMMA); under ``TRITON_INTERPRET=1`` it
runs on CPU tensors, which is how the tests check it.

Design
------
``x`` is ``[M, K]`` (M up to 64 per launch; more rows are done 64 at a time), the weight is
``[N, K]`` in the packed plane layout (see ``packed.py``). One program owns ``BN`` weight rows
and a contiguous range of K (all of K unless the shape is split, below). It walks its K range
one tile of ``BK = 256`` values at a time:

* it loads the tile's bytes of every plane (each weight byte is read once per call: all M
  activation rows are handled by the program that loaded the tile),
* dequantizes them in registers to the exact float32 GGUF value (``_exact`` below: integer
  bits turned into a float by OR-ing in the exponent of 2^23, then one subtract, so no
  int->float conversion instruction; the scale/min applied with one FMA, which rounds exactly
  as gguf's numpy code does), then casts to the activations' dtype,
* and for every 16-row slice of ``x`` (``NMB`` = ceil(M/16) slices, each its own float32
  accumulator) does ``acc += x_slice[16, BK] @ w_tile[BK, BN]`` with ``tl.dot`` (tensor cores
  for bf16/fp16; for float32 the backend's precision, ``dot_precision.py``: on CUDA
  ``"tf32x3"``, three TF32 tensor-core products per dot, float32 accuracy (measured 2-5e-7
  relative, like cuBLAS's float32 GEMM) at tensor-core speed, where IEEE FMAs made a float32
  pass 3.5x a bfloat16 one; on ROCm ``"bf16x6"``, six bf16 WMMA products, as accurate as
  float32 FMAs: RDNA has no float32 matrix units).

The nibble planes are not reordered in registers: a Q4 tile is dotted as two halves (the low
nibbles and the high nibbles), each against the activations gathered at the K positions those
nibbles hold. A dot only needs ``x`` and ``w`` to agree on the order of K, not K to be sorted.

Row invariance (row r of an M-row call == a 1-row call on ``x[r:r+1]``, bit for bit): the
kernel configuration (BN, BK, warps, stages, the K split) is a function of (qtype, N, K, device)
only, never of M. Each 16-row slice is an independent ``tl.dot`` of the same shape
``[16, BK] x [BK, BN]`` on the same dequantized tile, accumulated over the same K tiles in the
same order; M only decides how many of those identical slices are issued (``NMB``) and which
rows are masked to zero. A row's result depends only on its own activations (an MMA output
element is the sum over K of its own row times the weight column, in a fixed order, whatever
the other rows of the tile hold), so its bits cannot change with M. No atomics, no
data-dependent reduction order anywhere.

Split K: when ``ceil(N/BN)`` programs are too few to fill the GPU (k/v projections), K is cut
into ``S`` ranges (S from the shape and SM count, not M); each program writes its float32
partial sum to a workspace ``[S, M, N]`` and a second small kernel adds the S partials in the
fixed order s = 0..S-1 and casts. Same order for every row, so still row-invariant.

Status (bench/bench_packed_matmul.py; figures in BENCHMARKS.md, "Engine model and kernel timings (moved from code comments)"):
correct and bitwise row-invariant for M = 1..64 on every type and shape, capturable in CUDA
graphs, but well short of the memory bandwidth. The loop is a few instructions per weight
(mask-and-OR, shift for every second nibble, FMA, half a cvt) yet runs several times slower
than its issue bound: latency, not issue, limits it (few warps per SM, a wgmma wait after every dot,
bank-conflicted word loads from shared memory). Q5_K/Q6_K also round-trip the dequantized
tile through shared memory (the 5th/6th-bit merge defeats the layout propagation), which
costs them more.

ROCm (RDNA3/4): the bfloat16 weights are rounded in integer ops (RNE, ``_to_dot_type``: the
same bits; RDNA has no bf16 convert and the compiled one checks for NaN) and the Q4_K, Q4_0,
Q4_1 and Q8_0 tiles are dequantized straight into the layout of RDNA's WMMA operand
(``triton_rdna.py``: their own K order, so their own bits, row-invariant like every order here). Static counts of the gfx1201 K
loop (bench/amdgcn_mix.py, 12288x4096, bf16): 13.9 -> 8.2 instructions a weight at one row,
20.2 -> 9.5 at 64 rows, no spills; gfx1100 15.3 -> 11.7 and 33.3 -> 22.3. Then SI, ROCm's
default for Q4_K, Q4_0, Q4_1 and Q6_K8: the tiles as small integers (BASE + q, two a word by
one mask and OR), each block's scale and min applied to its dot's result
(``triton_rdna._sb_q4k_si``): gfx1201 Q4_K 8.2 -> 4.2 at one row (more at 64 rows: 9.5 ->
11.5). No RDNA card was at hand: how much faster any of it runs is not measured.

int8 path (opt-in, ``I8=1``; Q4_K with bf16/fp16 activations): integer tensor-core dots on
activations quantized per row, measured slower than the dequantizing kernel on the H200, so
off by default. See ``triton_int8.py``.

Q4_KN (opt-in at load, SPECSCOPE_Q4K_NATIVE=1: engine.model.transformer): a Q4_K weight kept
in GGUF's own 144-byte block order (engine.weights.packed.native_q4_k), so every load of a
tile is at least 4 bytes wide and aligned and the pipeliner copies all of them ahead (cp.async
on NVIDIA; Q4_K's 2-byte d / dmin loads are synchronous). Its tile unpacks the 6-bit scales in
registers and then runs Q4_K's arithmetic with Q4_K's configuration: the results are
bit-identical to Q4_K's at every row count. bench/q4k_native_ab.py times the two: on the
H200 it is SLOWER (28672x8192 at one row 113-167 us against Q4_K's 98.5; BENCHMARKS.md, "The
packed matmul, third round"), so the synchronous scale loads were not what limits Q4_K. Kept
off, for the A/B.

Modules: this one picks the configuration and launches; ``triton_tiles.py`` holds the
dequantizing kernel and its per-type tiles, ``triton_dequant.py`` the register dequantization
helpers they share, ``triton_rdna.py`` the RDNA orders, ``triton_int8.py`` the int8 path.

CUDA graphs: no host syncs, no ``.item()``, no data-dependent shapes; the only allocations are
``torch.empty`` (output and, for split shapes, the workspace), which graph capture serves from
its private pool.
"""

from __future__ import annotations

import functools
import os

import torch
import triton

from .dot_precision import gpu_backend, ieee_code
from .pdl import matmul_pdl_kwargs, pdl_kwargs
from . import triton_fused
from .triton_fused import tail_rows
from .triton_int8 import _i8_matmul
from .triton_tiles import MAX_ROWS, _packed_mm_kernel, _sum_splits_kernel, _xperm_order

__all__ = ["packed_matmul", "packed_partials", "packed_swiglu", "swiglu_block", "kernel_config",
           "swiglu_from_partials", "packed_residual_norm", "tail_rows",
           "SUPPORTED_QTYPES", "MAX_ROWS"]

BK = 256               # K values per tile (one K-quant superblock, eight 32-blocks)

# qtype codes (constexpr in the kernel)
_Q8_0, _Q4_0, _Q4_1, _Q4_K, _Q5_K, _Q6_K, _Q6_K8, _Q4_KN = 0, 1, 2, 3, 4, 5, 6, 7
_CODES = {"Q8_0": _Q8_0, "Q4_0": _Q4_0, "Q4_1": _Q4_1, "Q4_K": _Q4_K, "Q5_K": _Q5_K, "Q6_K": _Q6_K,
          "Q6_K8": _Q6_K8, "Q4_KN": _Q4_KN}
SUPPORTED_QTYPES = tuple(_CODES)
# bytes of the first plane (the quants) per 256 weights: what the PDL prefetch sends for
_P0_BYTES = {"Q8_0": 256, "Q6_K8": 256, "Q4_KN": 144}

# the planes each type's kernel reads, in argument order
_PLANES = {
    "Q8_0": ("qs", "d"),
    "Q4_0": ("qs", "d"),
    "Q4_1": ("qs", "d", "m"),
    "Q4_K": ("qs", "d", "dmin", "sc", "mn"),
    "Q5_K": ("qs", "qh", "d", "dmin", "sc", "mn"),
    "Q6_K": ("ql", "qh", "sc", "d"),
    "Q6_K8": ("q8", "sc", "d"),
    "Q4_KN": ("blk",),
}
_SUPERBLOCK = {"Q8_0": 32, "Q4_0": 32, "Q4_1": 32, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256,
               "Q6_K8": 256, "Q4_KN": 256}


# ---------------------------------------------------------------------------------------------
# host side


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    try:
        return torch.cuda.get_device_properties(device_index).multi_processor_count
    except Exception:  # noqa: BLE001 - interpreter on CPU, or no CUDA runtime
        return 16


_KQUANTS = ("Q4_K", "Q5_K", "Q6_K", "Q4_KN")
_I8_TYPES = ("Q4_K",)
# Q4_KN (Q4_K in GGUF's block order, engine.weights.packed.native_q4_k) takes Q4_K's whole
# configuration: the same BN, JS, SB and split give the same dots in the same order, so its
# results are bit-identical to Q4_K's (only its loads differ)
_CONFIG_AS = {"Q4_KN": "Q4_K"}


# X1 (Q4_K / Q4_KN / Q5_K, one-row launches): x's one row loaded once per dot and widened to
# the 16-row dot operand in registers (triton_dequant._xload1), instead of 16 rows of which 15
# are masked. XP (the same types, any row count): x permuted on the host (one small copy per
# call) so that each dot's K order is contiguous in memory (triton_tiles._xperm_order): the x
# tile is copied as 16-byte vectors instead of 4-byte pairs. Both feed the dots the same values
# in the same order: bit-identical. Measured on the H200 (bench/x1_ab.py; BENCHMARKS.md, "The
# packed matmul, third round"): X1 slower on every shape (0.71-1.15x), so off (SPECSCOPE_X1=1
# turns it on); XP faster on the big Q4_K matrices (28672x8192 1.09x at one row, 1.28x at 16;
# gate|up 1.16x / 1.30x; down 4096x12288 0.99x / 1.20x) and slower on the small ones (o 0.87x,
# its permute copy costs more than it saves), so on by default for Q4_K weights of at least
# _XP_MIN_WEIGHTS values. On ROCm Q4_K takes the RDNA order (triton_rdna) and XP permutes x into
# that order: the gfx1201 loop then reads x as 16-byte vectors instead of 2-byte gathers (9.09
# -> 8.22 instructions a weight at one row, 9.45 against ~12 at 64; bench/amdgcn_mix.py), the
# copy's cost on the card not measured (no RDNA card here), the same size threshold as CUDA's.
# SPECSCOPE_XP=1 / 0 forces it on / off for every shape, the kernel_config keys X1 / XP
# override per call.
_X1_TYPES = ("Q4_K", "Q4_KN", "Q5_K")
_RDNA_TYPES = ("Q4_K", "Q4_0", "Q4_1", "Q8_0")     # triton_rdna's orders (ROCm, 16-bit activations)
_SI_TYPES = ("Q4_K", "Q4_0", "Q4_1", "Q6_K8")      # small-integer RDNA tiles (SI)
_X1_DEFAULT = 1 if os.environ.get("SPECSCOPE_X1", "0") == "1" else 0
_XP_DEFAULT = {"0": 0, "1": 1}.get(os.environ.get("SPECSCOPE_XP", ""))   # None: by shape
_XP_MIN_WEIGHTS = 32 << 20
# DW (Q4_K / Q5_K): d / dmin read as aligned words (triton_tiles._kscales); SPECSCOPE_DW=1 / 0
_DW_DEFAULT = 1 if os.environ.get("SPECSCOPE_DW", "0") == "1" else 0
# SF (Q4_K, CUDA): triton_sf; SPECSCOPE_SF=1 / 0
_SF_DEFAULT = 1 if os.environ.get("SPECSCOPE_SF", "0") == "1" else 0
# CUDA Q4_K's split rule (_q4k_splits); SPECSCOPE_Q4K_SPLITS=0 keeps the wave rule alone (for the A/B)
_Q4K_SPLITS = os.environ.get("SPECSCOPE_Q4K_SPLITS", "1") != "0"


def _xp_default(qtype: str, n: int, k: int) -> int:
    """Whether x is permuted for this shape by default (a function of the shape and backend
    only; either way the bits are the same)."""
    if _XP_DEFAULT is not None:
        return _XP_DEFAULT if qtype in _X1_TYPES else 0
    return int(qtype == "Q4_K" and n * k >= _XP_MIN_WEIGHTS)


def _wave_eff(programs: int, sms: int) -> float:
    return programs / (triton.cdiv(programs, sms) * sms)


@functools.lru_cache(maxsize=None)
def _config(qtype: str, n: int, k: int, sms: int, override: tuple, backend: str) -> dict:
    qtype = _CONFIG_AS.get(qtype, qtype)
    sb = 2 if qtype in _KQUANTS and (k // 256) % 2 == 0 else 1
    cfg = _base_config(qtype, n, k, sms)
    cfg.update(dict(override))
    if qtype in _KQUANTS and (k // 256) % 2 == 0:
        sb = cfg.get("SB", sb)
    n_tiles = triton.cdiv(k, 256 * sb)
    if cfg.get("I8", 0) and qtype in _I8_TYPES:
        n_blocks = triton.cdiv(n, cfg.get("I8_BN", 64))
    else:
        n_blocks = triton.cdiv(n, cfg["BN"])
    if "splits" not in cfg:
        cfg["splits"] = _auto_splits(n_blocks, n_tiles, sms)
        if qtype == "Q4_K" and backend == "cuda" and _Q4K_SPLITS:
            cfg["splits"] = max(cfg["splits"], _q4k_splits(n_blocks, n_tiles, sms))
    if n_tiles % cfg["splits"]:
        raise ValueError(f"splits={cfg['splits']} does not divide {n_tiles} tiles")
    cfg.update(SB=sb, n_tiles=n_tiles, tiles_per_split=n_tiles // cfg["splits"])
    # The x tiles of every 16-row slice are staged in shared memory for each pipeline stage,
    # so 3-4 slices get one stage fewer. Pipeline depth only changes when loads are issued,
    # not any arithmetic or its order: rows stay bit-identical across M.
    cfg.setdefault("num_stages_wide", min(cfg["num_stages"], 2))
    # the int8 path (Q4_K, bf16/fp16 activations; opt-in with I8=1): see _q4k_i8_kernel.
    # Measured slower than the dequantizing kernel on the H200 (module docstring), so off by
    # default. Only the split count matters for its bits (it fixes the float summation
    # order); the tile shape may follow the row count because every integer dot is exact and
    # all float ops are elementwise.
    cfg.setdefault("I8", 0)
    if cfg["I8"]:
        _i8_defaults(cfg)
    cfg.setdefault("JS", 4 if qtype in ("Q4_K", "Q5_K") else 8)
    cfg.setdefault("X1", _X1_DEFAULT if qtype in _X1_TYPES else 0)
    cfg.setdefault("XP", _xp_default(qtype, n, k))
    # RNE: bfloat16 weights rounded in integer ops on ROCm (triton_dequant._to_dot_type):
    # RDNA has no bf16 conversion instruction and its compiled one checks for NaN, ~5.5
    # instructions a weight against ~2.5; the same bits (the bench: bench/amdgcn_mix.py)
    cfg.setdefault("RNE", int(backend == "hip"))
    # RDNA: the tiles of _RDNA_TYPES in the order of RDNA's WMMA operand (triton_rdna), ROCm's
    # default: no register shuffle between the dequantization and the dot (16-bit
    # activations; its own K order, so its own bits, row-invariant as every order here)
    cfg.setdefault("RDNA", int(backend == "hip" and qtype in _RDNA_TYPES + _SI_TYPES))
    # SI: RDNA tiles of Q4_K, Q4_0, Q4_1 and Q6_K8 as small integers, each block's scale and
    # min applied to its dot (triton_rdna._sb_q4k_si, _tile_q4_01_si, _tile_q6k8_si): gfx1201
    # Q4_K 8.2 -> 4.2 instructions a weight at one row, 9.0 -> 5.4 at 17, even at 33, 9.5 ->
    # 11.5 at 64; Q4_1 9.2 -> 4.0 at one row, 11.5 -> 12.3 at 64; Q6_K8 11.4 (spilling) -> 6.0
    # at one row, 15.6 (884 B spilled) -> 22.2 (none) at 64; gfx1100 fewer at every row count
    # and no spills (bench/amdgcn_mix.py; BENCHMARKS.md). Its own bits, row-invariant; ROCm's
    # default for those types
    cfg.setdefault("SI", int(backend == "hip" and qtype in _SI_TYPES))
    # SF: Q4_K's sub-block scales folded into small-integer fp16 weights, x made fp16 once a
    # call (triton_sf; 16-bit activations, NVIDIA's order; its own bits, row-invariant)
    cfg.setdefault("SF", _SF_DEFAULT if qtype == "Q4_K" and backend == "cuda" else 0)
    # DW: Q4_K / Q5_K's f16 d / dmin read as aligned words (triton_tiles._kscales): the same
    # values; only where the planes hold an even count (the last word inside them)
    cfg.setdefault("DW", _DW_DEFAULT)
    if qtype not in ("Q4_K", "Q5_K") or (n * (k // 256)) % 2:
        cfg["DW"] = 0
    return cfg


def _base_config(qtype: str, n: int, k: int, sms: int) -> dict:
    """Row block, warps and stages for an n x k weight of qtype, before the caller's override."""
    if qtype == "Q4_K":
        # measured best at 1 and 16 rows on every Q4_K shape of an 8B-like model
        # (bench/sweep_matmul_configs.py; BENCHMARKS.md, "Engine model and kernel timings (moved from code comments)"):
        # faster than the 128-row blocks; whole superblocks per dot (JS 8), one superblock a tile
        return {"BN": 64, "num_warps": 4, "num_stages": 3, "JS": 8, "SB": 1}
    if qtype == "Q6_K":
        # same sweep: wide blocks for the split (few-block) shapes, 64-row blocks with two
        # stages for the LM head
        # (64-row launches of the wide blocks take one stage: two need 233 KB of shared memory,
        # over the H200's 227 KB; the AOT compile check found it)
        return ({"BN": 128, "num_warps": 8, "num_stages": 2, "num_stages_wide": 1}
                if triton.cdiv(n, 128) < sms else {"BN": 64, "num_warps": 4, "num_stages": 2})
    if qtype == "Q6_K8":
        # Q6_K widened to int8 (engine.weights.packed.widen_q6_k), the sweep's best on the H200
        # (BENCHMARKS.md): the LM head 64-row blocks, 2 stages; down 64-row blocks split K in
        # 4; the small v (1024 x 4096) 64-row blocks: 128-row ones were 8% faster there but
        # need 72-80 KB of shared memory for 16-bit tiles, over RDNA's 64 KB
        if triton.cdiv(n, 64) >= sms:
            return {"BN": 64, "num_warps": 4, "num_stages": 2}
        if n * k >= (32 << 20) and (k // 256) % 4 == 0:
            return {"BN": 64, "num_warps": 4, "num_stages": 3, "splits": 4}
        return {"BN": 64, "num_warps": 4, "num_stages": 3}
    if triton.cdiv(n, 128) >= sms // 2 and qtype != "Q5_K":
        # two stages and half-width dots keep ~126 registers and ~70 KB of shared memory per
        # 256-thread program, so two programs share an SM
        return {"BN": 128, "num_warps": 8, "num_stages": 3}
    return {"BN": 64, "num_warps": 4, "num_stages": 3}


def _auto_splits(n_blocks: int, n_tiles: int, sms: int) -> int:
    """How many ways to split K. Only when the row blocks alone leave SMs idle: the partial sums
    cost S * M * N * 8 bytes of traffic. The count divides the tile count (equal splits)."""
    splits = 1
    if n_blocks < sms:
        for s in range(2, min(n_tiles, 16) + 1):
            if n_tiles % s == 0 and n_blocks * (s // 2 if s > 2 else 1) < sms and \
                    _wave_eff(n_blocks * s, sms) > _wave_eff(n_blocks * splits, sms) + 0.02:
                splits = s
    return splits


def _q4k_splits(n_blocks: int, n_tiles: int, sms: int) -> int:
    """CUDA's Q4_K: the fewest splits (up to 4, dividing the tile count) that give at least 1.5
    programs an SM. A one-row launch of few row blocks is latency-bound at one program an SM;
    measured on the H100 (bench/sf_ab.py --variants, BENCHMARKS.md "SF"): 4 splits against
    the wave rule's 1-2 made o 4096x4096 1.10x, q|k|v 6144x4096 1.06x, down 4096x12288 1.09x
    at one row (1.03-1.09x at 16, 1.06-1.25x at 32); 8 splits, or splits of gate|up
    24576x4096 (384 blocks), slower. A function of the shape: rows stay bit-identical."""
    for s in range(1, 5):
        if n_tiles % s == 0 and n_blocks * s * 2 >= 3 * sms:
            return s
    return max(s for s in range(1, 5) if n_tiles % s == 0)


def _i8_defaults(cfg: dict) -> None:
    """The int8 path's settings the override left out."""
    cfg.setdefault("I8_X2", 1)      # the residual int8 plane: ~16-bit activations
    # (BN, warps, stages) for 16-, 32- and 64-row tiles
    cfg.setdefault("I8_BN", 64)
    cfg.setdefault("I8_WARPS", 4)
    cfg.setdefault("I8_STAGES", 3)
    cfg.setdefault("I8_BN32", cfg["I8_BN"])
    cfg.setdefault("I8_WARPS32", cfg["I8_WARPS"])
    cfg.setdefault("I8_STAGES32", cfg["I8_STAGES"])
    cfg.setdefault("I8_BN64", 64)
    cfg.setdefault("I8_WARPS64", 4)
    cfg.setdefault("I8_STAGES64", 2)


def _stages(cfg: dict, m: int, hip: bool, ieee: int) -> int:
    """Pipeline stages of an m-row launch (see packed_matmul: ROCm's 64 KB of LDS)."""
    stages = cfg["num_stages"] if m <= 32 else cfg["num_stages_wide"]
    if hip:
        return 1 if ieee or m > 32 else min(stages, 2) if m > 16 else stages
    return stages


def kernel_config(qtype: str, n: int, k: int, sms: int, **override) -> dict:
    """The launch configuration of a shape: a function of (qtype, N, K, SM count, backend)
    only, never of the number of activation rows (that is what makes the result row-invariant).
    ``override`` (BN, num_warps, num_stages, splits; I8 and the I8_* tile keys of the int8
    path; HDR, how Q4_KN's tile reads its packed scales: loads only, the same bits; RNE, bf16
    weights rounded in integer ops, default on ROCm: the same bits; RDNA, the WMMA-ordered
    tiles of triton_rdna, default on ROCm: their own bits; SI, those tiles (and Q6_K8's) as
    small integers, default on ROCm for Q4_K, Q4_0, Q4_1, Q6_K8: their own bits; DW, Q4_K /
    Q5_K's scales read as words, default SPECSCOPE_DW: the same bits; MAXNREG, a register cap (CUDA); X1, the
    one-row x load of Q4_K / Q4_KN / Q5_K, default SPECSCOPE_X1, and XP, x permuted to the
    dots' K order, default SPECSCOPE_XP: loads only, the same bits; SF, Q4_K's scales folded
    into fp16 small integers (triton_sf), default SPECSCOPE_SF (off): its own bits) is for
    benchmarks. CUDA's Q4_K split count follows _q4k_splits (SPECSCOPE_Q4K_SPLITS=0: the wave
    rule alone)."""
    return dict(_config(qtype, n, k, sms, tuple(sorted(override.items())), gpu_backend()))


def _qtype(w) -> str:
    return getattr(w.qtype, "name", str(w.qtype)).upper().split(".")[-1]


def _sms(x: torch.Tensor) -> int:
    return device_sms(x.device)


def device_sms(device: torch.device) -> int:
    """The SM count the configuration of a launch on `device` takes (16 off CUDA)."""
    return _sm_count(device.index or 0) if device.type == "cuda" else 16


def _operands(x: torch.Tensor, w, override: dict) -> tuple:
    """Checked (qtype, n, k, x2 [M, K] contiguous rows, the kernel's six plane arguments, cfg)."""
    qtype = _qtype(w)
    if qtype not in _CODES:
        raise NotImplementedError(f"packed_matmul: no Triton kernel for {qtype}")
    n, k = (int(s) for s in w.shape)
    if x.shape[-1] != k:
        raise ValueError(f"packed_matmul: x has K={x.shape[-1]}, weight is {n}x{k}")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise TypeError(f"packed_matmul: unsupported activation dtype {x.dtype}")
    if k % _SUPERBLOCK[qtype]:
        raise ValueError(f"packed_matmul: {qtype} needs K to be a multiple of {_SUPERBLOCK[qtype]}")
    x2 = x.reshape(-1, k)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    planes = [w.planes[name] for name in _PLANES[qtype]]
    for p in planes:
        if not p.is_contiguous():
            raise ValueError("packed_matmul: planes must be contiguous")
    planes = planes + [planes[0]] * (6 - len(planes))
    if qtype == "Q8_0":
        planes[0] = planes[0].view(torch.uint8)
    if qtype == "Q6_K":
        planes[2] = planes[2].view(torch.int8)
    if qtype == "Q6_K8":
        planes[0] = planes[0].view(torch.uint8)
    return qtype, n, k, x2, planes, kernel_config(qtype, n, k, _sms(x), **override)


_FEWER_STAGES: dict[tuple, int] = {}     # (qtype, n, k, row slices, dtype) -> stages that fit


def _variant_kwargs(cfg: dict, qtype: str, m: int, dtype: torch.dtype, ieee: int, rdna: bool,
                    si: bool, xp: bool, sf: bool) -> dict:
    """The launch's optional constexprs and options (_launch): each named only when on, so a
    launch without them compiles as before they existed."""
    kw: dict = {}
    if qtype == "Q4_KN":
        kw["HDR"] = cfg.get("HDR", 1)
    # a one-row launch (the same bits as the 16-row slice: see _X1_DEFAULT)
    if m == 1 and cfg.get("X1") and qtype in _X1_TYPES and not rdna:
        kw["X1"] = True
    if rdna:
        kw["RDNA"] = 2 if si else True
    if xp:
        kw["XP"] = True
    if sf:
        kw["SF"] = True
    if cfg.get("DW"):
        kw["DW"] = True
    # a register cap (CUDA; benchmarks: more programs an SM, spills)
    if cfg.get("MAXNREG") and gpu_backend() == "cuda":
        kw["maxnreg"] = cfg["MAXNREG"]
    # bf16 weights rounded in integer ops (ROCm; the same bits: _config)
    if cfg.get("RNE") and dtype == torch.bfloat16 and not ieee:
        kw["RNE"] = True
    return kw


def _variants(qtype: str, k: int, cfg: dict, ieee: int) -> tuple[bool, bool, bool, bool]:
    """(rdna, si, sf, xp): the tile variants a launch of this shape, configuration and dot
    precision (``ieee_code`` of the activations' dtype) runs."""
    rdna = (bool(cfg.get("RDNA")) and (qtype in _RDNA_TYPES or (qtype in _SI_TYPES and bool(cfg.get("SI"))))
            and not ieee and (k % 256 == 0 or qtype != "Q4_K"))
    si = rdna and bool(cfg.get("SI")) and qtype in _SI_TYPES
    sf = bool(cfg.get("SF")) and qtype == "Q4_K" and not ieee and not rdna and k % 256 == 0
    xp = bool(cfg.get("XP")) and qtype in _X1_TYPES and k % 256 == 0 and not sf
    return rdna, si, sf, xp


def _launch(x2, planes, qtype, n, k, cfg, dst, som, sop, split: bool, swiglu: bool = False,
            tail: tuple | None = None, xp_in: bool = False, odst: torch.Tensor | None = None) -> None:
    """The dequantizing kernel over x2's rows, 64 at a time: dst rows follow x2's (stride som;
    split partials at stride sop). tail: the step that reads the partials, run by the launch's
    last program (triton_fused.tail_args). xp_in: x2 is already in the XP order
    (``xp_order.xp_dest``).
    odst (with swiglu): the epilogue writes output column c at column odst[c]."""
    grid = (triton.cdiv(n, cfg["BN"]), cfg["splits"])
    # float32: exact dequantization and this backend's float32 dot precision (a nonzero code,
    # dot_precision.py); 0 for 16-bit activations
    ieee = ieee_code(x2.dtype)
    rdna, si, sf, xp = _variants(qtype, k, cfg, ieee)
    if xp_in and not xp:
        raise ValueError(f"packed matmul: x given in the XP order, but {qtype} {n}x{k} does not "
                         "read that order here")
    aux = None
    if sf:
        # x' (fp16, the dots' K order) and its sums, once for every row (triton_sf)
        from engine.kernels.triton_sf import sf_prepare
        x2, aux = sf_prepare(x2, cfg["JS"])
    if xp and not xp_in:
        shape, perm = _xperm_order(x2.shape[0], k, cfg["JS"], rdna, si)
        x2 = x2.reshape(shape).permute(perm).reshape(x2.shape[0], k)      # a contiguous copy
    for r0 in range(0, x2.shape[0], MAX_ROWS):
        xc = x2[r0:r0 + MAX_ROWS]
        m = xc.shape[0]
        nmb = triton.cdiv(m, 16)
        key = (qtype, n, k, nmb, x2.dtype)
        # ROCm: RDNA gives a workgroup 64 KB of shared memory; with the H200's 2-3 pipeline
        # stages float32 tiles need 114-164 KB, 16-bit K-quant tiles of 4 row slices 72-80 KB
        # and of 2 slices (3 stages) 72 KB (the AOT compile check, engine.kernels.kernel_catalog):
        # there, one stage for float32 and 3-4 slices, two for 2 slices. Stages move loads, not
        # arithmetic: the bits do not change.
        stages = _stages(cfg, m, gpu_backend() == "hip", ieee)
        targs, tkw = triton_fused.tail_args(tail, dst, m, MAX_ROWS)
        pdl = matmul_pdl_kwargs(xc, k // cfg["splits"] * _P0_BYTES.get(qtype, 128) // 256)
        pl = planes if aux is None else [*planes[:5], aux[r0:r0 + MAX_ROWS]]
        while True:
            try:
                _packed_mm_kernel[grid](
                    xc, dst[r0 * som:], *pl, m, n, k, xc.stride(0), som, sop,
                    k // 4, k // 8, k // 16, k // 32, k // 256,  # plane row strides (specialized)
                    *targs, odst if odst is not None else dst, **tkw, **pdl,
                    **({"ODST": True} if odst is not None else {}),
                    TPS=cfg["tiles_per_split"], QT=_CODES[qtype], BN=cfg["BN"], NMB=nmb,
                    SPLIT=split, EVEN_K=k % 256 == 0, IEEE=ieee,
                    SB=cfg["SB"], JS=cfg["JS"], SWIGLU=swiglu, num_warps=cfg["num_warps"],
                    num_stages=_FEWER_STAGES.get(key, stages),
                    **_variant_kwargs(cfg, qtype, m, x2.dtype, ieee, rdna, si, xp, sf))
                break
            except triton.runtime.errors.OutOfResources:
                # a wide variant that does not fit the card's shared memory: one pipeline
                # stage fewer (when loads are issued changes, no arithmetic: rows stay exact)
                now = _FEWER_STAGES.get(key, stages)
                if now <= 1:
                    raise
                _FEWER_STAGES[key] = now - 1


def packed_partials(x: torch.Tensor, w, xp_in: bool = False, **override) -> torch.Tensor:
    """The split-K partial sums of ``x @ dequant(w).T``: float32 [S, M, N] (S = the shape's
    split count, 1 when unsplit), to be added in the order s = 0..S-1 by whatever reads them
    (engine.kernels.triton_fused: the sum fused with the next step). x: [M, K]; xp_in: x's
    columns are in the order ``xp_order.xp_dest(w, ...)`` gives (the same bits)."""
    qtype, n, k, x2, planes, cfg = _operands(x, w, override)
    m = x2.shape[0]
    ws = torch.empty((cfg["splits"], m, n), dtype=torch.float32, device=x.device)
    if m:
        _launch(x2.contiguous(), planes, qtype, n, k, cfg, ws.view(-1), n, m * n, True,
                xp_in=xp_in)
    return ws


def packed_residual_norm(x: torch.Tensor, w, xres: torch.Tensor, h: torch.Tensor,
                         norm_w: torch.Tensor, eps: float, tail: bool | None = None,
                         xp_in: bool = False, dest: torch.Tensor | None = None,
                         **override) -> None:
    """xres [M, N] += x @ dequant(w).T (its split partials added in the order s = 0, 1, ...),
    then h [M, N] = RMSNorm(xres) * norm_w: triton_fused.residual_norm over packed_partials,
    whose bits it gives. With tails (tail: default triton_fused.TAILS) and up to
    tail_rows(N) rows the residual and norm run in the matmul's tail: one launch.
    xp_in: x in w's XP order (``xp_order.xp_dest``); dest: h's column c is written at dest[c]
    (the next matmul's XP order; the separate norm kernel then, not the tail). ``override``:
    see ``kernel_config``."""
    qtype, n, k, x2, planes, cfg = _operands(x, w, override)
    m = x2.shape[0]
    if m == 0:
        return
    on = triton_fused.TAILS if tail is None else tail
    if m > tail_rows(n, on) or dest is not None:
        triton_fused.residual_norm(packed_partials(x2, w, xp_in, **override), xres, h, norm_w,
                                   eps, order_free=on, dest=dest)
        return
    ws = torch.empty((cfg["splits"], m, n), dtype=torch.float32, device=x.device)
    _launch(x2.contiguous(), planes, qtype, n, k, cfg, ws.view(-1), n, m * n, True,
            tail=(1, xres, h, norm_w, eps, n, 1, cfg["splits"]), xp_in=xp_in)


def swiglu_in_epilogue(w, device: torch.device) -> bool:
    """Whether ``packed_swiglu`` of this gate|up weight on ``device`` runs the SwiGLU in the
    matmul's epilogue (the shape unsplit), where its output can go straight into the next
    matmul's XP order (``dest``); a split shape would move it with one more launch."""
    n, k = (int(s) for s in w.shape)
    return kernel_config(_qtype(w), n, k, device_sms(device))["splits"] == 1


def swiglu_block(w, device: torch.device) -> int:
    """The interleave block HB of a gate|up weight for ``packed_swiglu`` on ``device``: half the
    kernel's row block for the shape (a function of the shape and the device only)."""
    n, k = (int(s) for s in w.shape)
    return kernel_config(_qtype(w), n, k, device_sms(device))["BN"] // 2


def packed_swiglu(x: torch.Tensor, w, tail: bool | None = None, xp_in: bool = False,
                  dest: torch.Tensor | None = None, **override) -> torch.Tensor:
    """silu(gate) * up for a gate|up weight interleaved in blocks of ``swiglu_block(w)`` rows
    (gate rows bHB.. then up rows bHB.., block after block). x: [M, K] -> [M, N/2] in x.dtype:
    in the matmul's epilogue when the shape is not split, else partials and one reduction (in
    the matmul's tail for few rows when tail, default triton_fused.TAILS). xp_in: x in w's XP
    order (``xp_order.xp_dest``); dest: output column c at column dest[c] (the next matmul's XP
    order: written so by the epilogue, else permuted after). ``override``: see
    ``kernel_config``."""
    qtype, n, k, x2, planes, cfg = _operands(x, w, override)
    m = x2.shape[0]
    out = torch.empty((m, n // 2), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    if cfg["splits"] == 1:
        _launch(x2.contiguous(), planes, qtype, n, k, cfg, out.view(-1), n // 2, 0, False,
                swiglu=True, xp_in=xp_in, odst=dest)
        return out
    if m <= tail_rows(n // 2, tail):     # few rows: the SwiGLU in the matmul's tail, one launch
        ws = torch.empty((cfg["splits"], m, n), dtype=torch.float32, device=x.device)
        _launch(x2.contiguous(), planes, qtype, n, k, cfg, ws.view(-1), n, m * n, True,
                tail=(2, None, out, None, 0.0, n // 2, cfg["BN"] // 2, cfg["splits"]), xp_in=xp_in)
    else:
        swiglu_from_partials(packed_partials(x2, w, xp_in, **override), cfg["BN"] // 2, out)
    if dest is None:
        return out
    moved = torch.empty_like(out)
    moved[:, dest.long()] = out
    return moved


def swiglu_from_partials(ws: torch.Tensor, hb: int, out: torch.Tensor) -> torch.Tensor:
    """out [M, N/2] = silu(gate) * up from the partial sums ws [S, M, N] of a gate|up product
    whose columns are interleaved in blocks of hb (``packed_swiglu``)."""
    from engine.kernels.triton_fused import reduce_swiglu
    return reduce_swiglu(ws, hb, out)


def packed_matmul(x: torch.Tensor, w, **override) -> torch.Tensor:
    """``x @ dequant(w).T`` for ``x`` [..., K] (bf16/fp16/fp32, on the GPU, or on the CPU under
    ``TRITON_INTERPRET=1``) and a packed weight ``w`` (``.qtype``, ``.shape`` (N, K),
    ``.planes``). Returns [..., N] in ``x.dtype``. ``override``: see ``kernel_config``."""
    qtype, n, k, x2, planes, cfg = _operands(x, w, override)
    lead = x.shape[:-1]
    m_all = x2.shape[0]
    out = torch.empty((m_all, n), dtype=x.dtype, device=x.device)
    if m_all == 0:
        return out.reshape(*lead, n)
    if x.dtype != torch.float32 and qtype in _I8_TYPES and cfg["I8"] and k % 256 == 0:
        _i8_matmul(x2, w, qtype, n, k, cfg, out)
        return out.reshape(*lead, n)
    splits = cfg["splits"]
    if splits == 1:
        _launch(x2, planes, qtype, n, k, cfg, out.view(-1), n, 0, False)
        return out.reshape(*lead, n)
    for r0 in range(0, m_all, MAX_ROWS):
        xc = x2[r0:r0 + MAX_ROWS]
        m = xc.shape[0]
        ws = torch.empty((splits, m, n), dtype=torch.float32, device=x.device)
        _launch(xc, planes, qtype, n, k, cfg, ws.view(-1), n, m * n, True)
        mn = m * n
        blk = 1024
        _sum_splits_kernel[(triton.cdiv(mn, blk),)](
            ws, out[r0:r0 + m], mn, ws.stride(0), S=splits, BLOCK=blk, num_warps=4, **pdl_kwargs(ws))
    return out.reshape(*lead, n)
