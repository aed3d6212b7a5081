"""Every Triton kernel the engine launches, in every configuration it launches it.

One list, shared by the ahead-of-time compile check (``tests/engine/model/test_kernel_catalog.py``
in ``make test``; ``specscope doctor --compile-for gfx1100,gfx1151,gfx1201``), the doctor's
on-device checks and ``bench/amdgcn_mix.py``. A *site* is one launcher (the host function that
issues ``kernel[grid](...)``) with

* ``configs(target, scope)``: calls of the launcher on meta tensors, one per configuration it
  picks on that target (the launcher's own configuration function enumerates them, never a copy
  of its rules); ``engine.kernels.kernel_aot.record`` captures the launches they issue, so the
  compile check sees exactly the kernels, constexprs and options a real call launches;
* ``smoke(device, dtypes=DTYPES)``: the launcher on tiny real inputs, with the reference it
  must match (the doctor runs it on the user's card). References are computed in float64 on
  the CPU from the same (rounded) inputs, by plain torch ops that share no code with the
  engine's CPU paths, so a check never depends on how this CPU rounds float32 products
  (oneDNN's bfloat16 mode on AMX / AVX512-BF16 CPUs, measured off by ~1e-2). ``dtypes`` picks
  the activation dtypes checked (the Triton interpreter's ``tl.dot`` cannot do bfloat16).

``scope`` (each config function's docstring says exactly what it yields):

    full     every configuration: packed type x dtype x row class NMB 1..4 x the shape classes
             the configuration function yields (row block, split K, superblocks per step, K a
             multiple of 256 or not); the int8 path's tiles; attention per head layout x graph
             bucket class x dtype; dense per shape x M class x dtype. ~400 compiles a target:
             ``specscope doctor --compile-for T --full`` and ``pytest -m slow``.
    quick    a cross-section reaching every type, dtype, row class and shape class (a Latin
             square, ~36 a target): ``specscope doctor --compile-for T``.
    kernels  every kernel once in float32 and once in a 16-bit dtype (~25 a target; gfx1151's
             packed matmul and attention in 16-bit alone, ``_skip_in_kernels``): what ``make
             test`` compiles for gfx1100, gfx1151, gfx1201 and sm_90 (~75 s on 2 cores).

A config function must yield at least one call per kernel in every scope: the test checks that
each launched kernel compiles for each target in ``kernels``.

Adding a kernel
---------------
1. Launch it from a host function as usual (``my_kernel[grid](...)``), importing Triton lazily.
2. Write ``_my_configs(target, scope)`` yielding ``(label, call)`` pairs, ``call()`` running
   your launcher on meta tensors for one configuration (use ``_meta`` and, for sizes, your
   launcher's configuration function with ``target.units``; float32 launches pick their dot
   precision through ``engine.kernels.dot_precision.ieee_code``, and ``triton_dot.dot_f32``
   issues the dot); and ``_my_smoke(device, dtypes=DTYPES)`` returning
   ``[(label, got, want, tolerance)]`` (tolerance relative to ``want``'s largest magnitude;
   0 means bit for bit; ``want`` a float64 reference, or another launch for invariance).
3. Append ``Site("my kernel", _my_configs, _my_smoke)`` to ``SITES`` (``backends=("cuda",)``
   for a path the engine takes on one backend alone: the other's targets leave it out).
``test_every_launched_kernel_is_in_the_catalog`` scans ``engine/`` for ``name[grid](`` launches
of ``@triton.jit`` kernels and fails until each one shows up in some site's recorded launches.

Imported lazily (the doctor, the tests, bench scripts): nothing here runs when the engine decodes.
The one module of engine.kernels that imports engine.weights (the layers contract in
pyproject.toml names that exception): its checks launch the kernels on real packed weights and
compare them with the weights' torch dequantization.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from engine.kernels.dot_precision import compiling_for
from engine.kernels.kernel_aot import Launch, Target, compile_key, record

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
ROW_CLASSES = (1, 17, 33, 49)          # NMB = ceil(M / 16) = 1..4 (33 and 49: the wide stages)

# (N, K) of the linear weights of models the users run (q, k/v, gate/up, down, LM head), and a
# Llama-2-7B-like down projection whose K has an odd superblock count (43)
MODEL_SHAPES = (
    (576, 576), (192, 576), (1536, 576), (576, 1536), (49152, 576),              # SmolLM2-135M
    (4096, 4096), (1024, 4096), (12288, 4096), (4096, 12288), (151936, 4096),    # Qwen3-8B
    (11008, 4096), (4096, 11008),                                                # Llama-2-7B
)
# attention: (query heads, kv heads, head size) of SmolLM2-135M, Qwen3-8B, Llama-2-7B, Qwen2.5-7B
HEAD_LAYOUTS = ((9, 3, 64), (32, 8, 128), (32, 32, 128), (28, 4, 128))

SCOPES = ("full", "quick", "kernels")
Call = Callable[[], object]
Smoke = list[tuple[str, torch.Tensor, torch.Tensor, float]]


@dataclass(frozen=True)
class Site:
    name: str
    configs: Callable[[Target, str], Iterator[tuple[str, Call]]]
    smoke: Callable[..., Smoke]         # smoke(device, dtypes=DTYPES)
    backends: tuple[str, ...] = ("cuda", "hip")      # where the engine can take this path


def _no_smoke(device: torch.device, dtypes=DTYPES) -> Smoke:
    """No check of its own: its kernel runs in another site's smoke (the int8 path in the
    packed matmul's, the dense prefill unpack in the fused layer's)."""
    return []


def _tolerances(dtypes) -> list[tuple[torch.dtype, float]]:
    """(dtype, relative tolerance) of the smoke checks, for the dtypes asked for."""
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 5e-3}
    return [(d, tol[d]) for d in DTYPES if d in dtypes]


def _skip_in_kernels(t: Target, scope: str, dtype: torch.dtype) -> bool:
    """The ``kernels`` scope compiles gfx1151's packed matmul and attention in 16-bit dtypes
    only: their float32 tiles (bf16x6 dots) are gfx1100's on the same gfx11 lowering and took
    ~72 of the scope's ~224 s of compiles on 2 cores (measured 2026-12-06: 59 s the Q4_K tile,
    13 s attention). ``quick`` and ``full`` compile them for gfx1151 too."""
    return scope == "kernels" and t.name == "gfx1151" and dtype == torch.float32


def _meta(*shape, dtype=torch.float32) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# ---------------------------------------------------------------------------------------------
# packed matmul (engine.kernels.triton_kernels.packed_matmul)


def _meta_packed(qtype: str, n: int, k: int, device="meta"):
    from engine.weights import PackedWeight, plane_shapes
    return PackedWeight(qtype, (n, k), {p: torch.empty(s, dtype=d, device=device)
                                        for p, (s, d) in plane_shapes(qtype, n, k).items()})


def packed_shape_classes(qtype: str, units: int, i8: bool = False,
                         backend: str = "cuda") -> list[tuple[str, int, int, dict]]:
    """One (class, N, K, config) per distinct configuration ``kernel_config`` picks for the
    model shapes on a ``backend`` card with ``units`` compute units (the configuration as that
    backend's launches take it: x permuted or not, bf16 rounding): the class names what differs (row
    block and warps, split K or not, superblocks per step, K a multiple of 256 or not). Each
    class keeps its shape with the most K tiles per program: the software pipeliner only
    stages loads (shared memory) when the loop has trips to overlap."""
    from engine.kernels import triton_kernels as tk
    sb = tk._SUPERBLOCK[qtype]
    seen: dict = {}
    for n, k in MODEL_SHAPES:
        if k % sb:
            continue
        with compiling_for(backend):
            cfg = tk.kernel_config(qtype, n, k, units, **({"I8": 1} if i8 else {}))
        split = " split" if cfg["splits"] > 1 else ""
        if i8:
            cls = "int8" + split
        else:
            cls = (f"BN{cfg['BN']}w{cfg['num_warps']}s{cfg['num_stages']}{split}"
                   + (f" SB{cfg['SB']}" if qtype.endswith("_K") else "")
                   + ("" if k % 256 == 0 else " K%256"))
        if cls not in seen or cfg["tiles_per_split"] > seen[cls][3]["tiles_per_split"]:
            seen[cls] = (cls, n, k, cfg)
    return list(seen.values())


def _packed_configs(t: Target, scope: str) -> Iterator[tuple[str, Call]]:
    """full: type x shape class x dtype x NMB. quick: per (type a, dtype b) one launch, class
    (a + b) mod classes and NMB (a + 2b) mod 4 + 1 (a Latin square: every dtype meets every
    NMB, every type meets every dtype and up to three classes). kernels: one row slice (the
    decode path) in float32 (Q4_K) and in bfloat16 (Q4_KN's tile), and 4 row slices (the most
    shared memory) in bfloat16 (Q6_K); the RDNA orders in bfloat16 (Q4_K 4 slices, Q4_1 one)."""
    from engine.kernels import triton_kernels as tk
    for a, qtype in enumerate(tk.SUPPORTED_QTYPES):
        classes = packed_shape_classes(qtype, t.units, backend=t.backend)
        for b, dtype in enumerate(DTYPES):
            for c, (cls, n, k, cfg) in enumerate(classes):
                for m in ROW_CLASSES:
                    nmb = (m + 15) // 16
                    if scope == "quick" and (c != (a + b) % len(classes)
                                             or nmb != (a + 2 * b) % 4 + 1):
                        continue
                    if scope == "kernels" and (qtype, _dt(dtype), c, nmb) not in (
                            ("Q4_K", "float32", len(classes) - 1, 1), ("Q6_K", "bfloat16", 0, 4),
                            ("Q4_KN", "bfloat16", len(classes) - 1, 1),
                            # the RDNA orders (ROCm's 16-bit default): Q4_K, Q4_1
                            ("Q4_K", "bfloat16", 0, 4), ("Q4_1", "bfloat16", 0, 1)):
                        continue
                    if _skip_in_kernels(t, scope, dtype):
                        continue
                    label = f"{qtype} {_dt(dtype)} NMB{nmb} {n}x{k} {cls}"
                    yield label, (lambda m=m, k=k, n=n, q=qtype, d=dtype, c=cfg:
                                  tk.packed_matmul(_meta(m, k, dtype=d), _meta_packed(q, n, k), **c))


def _i8_configs(t: Target, scope: str) -> Iterator[tuple[str, Call]]:
    """full: dtype x 16/32/64-row tile x split or not x residual plane or not. quick:
    bfloat16 32-row tile with the residual, float16 64-row tile without; kernels: the first."""
    from engine.kernels import triton_kernels as tk
    for qtype in tk._I8_TYPES:
        classes = packed_shape_classes(qtype, t.units, i8=True, backend=t.backend)
        for c, (cls, n, k, cfg) in enumerate(classes):
            for dtype in (torch.bfloat16, torch.float16):
                for m in (1, 17, 33):              # 16-, 32- and 64-row tiles
                    for x2 in (1, 0):
                        keep = [(0, "bfloat16", 17, 1), (len(classes) - 1, "float16", 33, 0)]
                        if scope != "full" and (c, _dt(dtype), m, x2) not in keep[:2 if scope == "quick" else 1]:
                            continue
                        label = f"{qtype} {_dt(dtype)} M{m} {n}x{k} {cls} X2={x2}"
                        yield label, (lambda m=m, k=k, n=n, q=qtype, d=dtype, c=cfg, x2=x2:
                                      tk.packed_matmul(_meta(m, k, dtype=d), _meta_packed(q, n, k),
                                                       **dict(c, I8_X2=x2)))


def random_blocks(qtype: str, n: int, k: int, rng):
    """Random GGUF blocks, uint8 [n, bytes per row]: random quant bytes, sane f16 scales
    (rng: a numpy Generator). What the smoke checks and the interpreter tests multiply."""
    import numpy as np
    from gguf import GGMLQuantizationType
    from gguf.constants import GGML_QUANT_SIZES

    bs, ts = GGML_QUANT_SIZES[GGMLQuantizationType[qtype]]
    nb = k // bs
    raw = rng.integers(0, 256, size=(n, nb, ts), dtype=np.uint8)

    def f16(off, lo, hi):
        v = rng.uniform(lo, hi, size=(n, nb)).astype(np.float16)
        raw[:, :, off:off + 2] = v.view(np.uint8).reshape(n, nb, 2)

    scales = {"Q8_0": [(0, 1e-3, 1e-2)], "Q4_0": [(0, 1e-2, 2e-2)],
              "Q4_1": [(0, 1e-2, 2e-2), (2, -0.1, 0.0)], "Q4_K": [(0, 1e-3, 3e-3), (2, 1e-3, 3e-3)],
              "Q5_K": [(0, 1e-3, 3e-3), (2, 1e-3, 3e-3)], "Q6_K": [(208, 1e-4, 3e-4)]}
    for off, lo, hi in scales[qtype]:
        f16(off, lo, hi)
    return raw.reshape(n, nb * ts)


def random_packed(qtype: str, n: int, k: int, seed: int = 0):
    """(packed weight, float32 dequantization [n, k]) of `random_blocks` (Q6_K8: Q6_K blocks
    widened as the GPU loader does; Q4_KN: Q4_K blocks in GGUF's order, ``native_q4_k``)."""
    import numpy as np

    from engine.weights import dequantize_packed, native_q4_k, pack, widen_q6_k
    if qtype == "Q6_K8":
        w8 = widen_q6_k(random_packed("Q6_K", n, k, seed)[0])
        return w8, dequantize_packed(w8)
    if qtype == "Q4_KN":
        wn = native_q4_k(random_packed("Q4_K", n, k, seed)[0])
        return wn, dequantize_packed(wn)
    w = pack(torch.from_numpy(random_blocks(qtype, n, k, np.random.default_rng(seed))), qtype)
    return w, dequantize_packed(w)


def _rows_and_row_alone(label: str, w, xd: torch.Tensor, ref: torch.Tensor, tol: float,
                        **override) -> Smoke:
    """packed_matmul of xd's 17 rows against float64 (x @ ref^T), and its row 16 alone bit for
    bit against that row of the 17-row call."""
    from engine.kernels import triton_kernels as tk
    got = tk.packed_matmul(xd, w, **override)
    one = tk.packed_matmul(xd[16:17], w, **override)
    return [(f"{label} 17 rows", got.float().cpu(), xd.cpu().double() @ ref.double().T, tol),
            (f"{label} row 16 alone", one.float().cpu(), got[16:17].float().cpu(), 0.0)]


def _packed_smoke(device: torch.device, dtypes=DTYPES) -> Smoke:
    from engine.kernels import triton_kernels as tk
    out = []
    g = torch.Generator().manual_seed(1)
    for qtype in tk.SUPPORTED_QTYPES:
        w, ref = random_packed(qtype, 96, 512)
        w = w.to(device)
        x = torch.randn(17, 512, generator=g)
        for dtype, tol in _tolerances(dtypes):
            out += _rows_and_row_alone(f"{qtype} {_dt(dtype)}", w, x.to(device, dtype), ref, tol)
    if torch.float16 in dtypes:
        w, ref = random_packed("Q4_K", 40, 1024, seed=5)
        xd = torch.randn(5, 1024, generator=g).to(device, torch.float16)
        got = tk.packed_matmul(xd, w.to(device), splits=2, I8=1)
        out.append(("Q4_K int8 float16 split K", got.float().cpu(),
                    xd.cpu().double() @ ref.double().T, 2e-3))
    return out


def _sf_configs(t: Target, scope: str) -> Iterator[tuple[str, Call]]:
    """SF (Q4_K's scales folded into fp16 small integers, triton_sf; opt-in SPECSCOPE_SF=1, CUDA
    only): its x kernel and its tile. full: every Q4_K shape class whose K is a multiple of 256 x
    bfloat16 and float16 x NMB 1..4; quick: the first class at NMB 1 in bfloat16 and the last at
    NMB 4 in float16; kernels: the first of those."""
    from engine.kernels import triton_kernels as tk
    classes = [c for c in packed_shape_classes("Q4_K", t.units, backend=t.backend) if c[2] % 256 == 0]
    keep = [(0, "bfloat16", 1), (len(classes) - 1, "float16", 4)]
    for c, (cls, n, k, cfg) in enumerate(classes):
        for dtype in (torch.bfloat16, torch.float16):
            for m in ROW_CLASSES:
                nmb = (m + 15) // 16
                if scope != "full" and (c, _dt(dtype), nmb) not in keep[:2 if scope == "quick" else 1]:
                    continue
                yield (f"Q4_K SF {_dt(dtype)} NMB{nmb} {n}x{k} {cls}",
                       lambda m=m, k=k, n=n, d=dtype, c=cfg:
                       tk.packed_matmul(_meta(m, k, dtype=d), _meta_packed("Q4_K", n, k), **dict(c, SF=1)))


def _sf_smoke(device: torch.device, dtypes=DTYPES) -> Smoke:
    """SF's tile against float64 on 17 rows of random Q4_K blocks (two splits of K), and its row
    16 alone bit for bit, in the 16-bit dtypes asked for."""
    w, ref = random_packed("Q4_K", 96, 1024, seed=7)
    w = w.to(device)
    x = torch.randn(17, 1024, generator=torch.Generator().manual_seed(8))
    out = []
    for dtype, tol in _tolerances(dtypes):
        if dtype != torch.float32:          # float32 keeps the dequantizing tile
            out += _rows_and_row_alone(f"Q4_K SF {_dt(dtype)}", w, x.to(device, dtype), ref, tol,
                                       SF=1, splits=2)
    return out


# ---------------------------------------------------------------------------------------------
# dense row-invariant matmul (engine.kernels.triton_dense.dense_matmul)


def _dense_configs(t: Target, scope: str) -> Iterator[tuple[str, Call]]:
    """full: two model shapes and an odd K x dtype x M in (1, 16, 17) (Triton specializes
    M == 1 and M % 16 == 0). quick: each dtype at M = 17; kernels: float32 only."""
    from engine.kernels.triton_dense import dense_matmul
    for n, k in ((49152, 576), (4096, 4096), (96, 200)):
        for dtype in DTYPES:
            for m in (1, 16, 17):
                if scope != "full" and ((n, m) != (49152, 17)
                                        or (scope == "kernels" and dtype != torch.float32)):
                    continue
                yield (f"{_dt(dtype)} M{m} {n}x{k}",
                       lambda m=m, n=n, k=k, d=dtype: dense_matmul(_meta(m, k, dtype=d),
                                                                   _meta(n, k, dtype=d)))


def _dense_smoke(device: torch.device, dtypes=DTYPES) -> Smoke:
    from engine.kernels.triton_dense import dense_matmul
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(17, 200, generator=g), torch.randn(96, 200, generator=g)
    out = []
    for dtype, tol in _tolerances(dtypes):
        xd, wd = x.to(device, dtype), w.to(device, dtype)
        want = xd.cpu().double() @ wd.cpu().double().T
        got = dense_matmul(xd, wd)
        out.append((f"{_dt(dtype)} 17x200 @ 200x96", got.float().cpu(), want, tol))
        out.append((f"{_dt(dtype)} row 5 alone", dense_matmul(xd[5:6], wd).float().cpu(),
                    got[5:6].float().cpu(), 0.0))
    return out


# ---------------------------------------------------------------------------------------------
# layout-invariant attention (engine.kernels.triton_attention.layout_attention_triton)


def _attention_configs(t: Target, scope: str) -> Iterator[tuple[str, Call]]:
    from engine.kernels.catalog_attention import attention_configs     # (catalog_tails' pattern)
    return attention_configs(t, scope)


def _attention_smoke(device: torch.device, dtypes=DTYPES) -> Smoke:
    from engine.kernels.catalog_attention import attention_smoke
    return attention_smoke(device, dtypes)


# ---------------------------------------------------------------------------------------------
# the fused packed layer (engine.kernels.triton_fused; engine.model.fused_layer) and the dense
# prefill's dequantization (engine.kernels.triton_unpack)

HIDDEN = (576, 4096)                   # residual widths of the MODEL_SHAPES models
GATE_UP = ((3072, 576), (24576, 4096), (22016, 4096))


def _splits(qtype: str, n: int, k: int, units: int) -> int:
    from engine.kernels import triton_kernels as tk
    return tk.kernel_config(qtype, n, k, units)["splits"]


def _fused_configs(t: Target, scope: str) -> Iterator[tuple[str, Call]]:
    """full: every split count the model shapes give each kernel (and 0 / 1: the first norm,
    the dense prefill) x dtype, q/k norm and bias variants per head layout, the SwiGLU epilogue
    and the unsplit partials per type and gate|up shape. quick: float32 and bfloat16, one of
    each. kernels (make test): one launch of each kernel in bfloat16 (the packed matmul's
    SwiGLU and partial-sum variants are the packed matmul kernel, compiled by its own site)."""
    from engine.kernels import triton_fused as tf
    from engine.kernels import triton_kernels as tk
    few = scope != "full"
    dtypes = {"full": DTYPES, "quick": (torch.float32, torch.bfloat16)}.get(scope, (torch.bfloat16,))
    norm_s = sorted({0, 1} | {_splits(q, n, k, t.units) for q in tk.SUPPORTED_QTYPES
                              for n, k in MODEL_SHAPES if n in HIDDEN and k % tk._SUPERBLOCK[q] == 0})
    for dtype in dtypes:
        for hid in HIDDEN:
            for S in norm_s:
                if few and (hid, S) not in ((4096, 1), (576, 0))[:1 if scope == "kernels" else 2]:
                    continue
                yield (f"residual norm {_dt(dtype)} {hid} S{S}",
                       lambda hid=hid, S=S, d=dtype: tf.residual_norm(
                           _meta(S, 3, hid) if S else None, _meta(3, hid, dtype=d),
                           _meta(3, hid, dtype=d), _meta(hid, dtype=d), 1e-6))
        for a, (hq, hkv, d) in enumerate(HEAD_LAYOUTS):
            variants = ((1, 1, False, False), (2, 4, True, False), (1, 2, False, True))
            for sa, sb, qkn, bias in variants:
                if few and (a, sa) != (1, 2):
                    continue
                na = (hq + hkv) * d

                def call(hq=hq, hkv=hkv, d=d, sa=sa, sb=sb, qkn=qkn, bias=bias, dt=dtype, na=na):
                    kv = _meta(2, hkv, 2048, d, dtype=dt)
                    tf.qkv_rope(_meta(sa, 3, na), _meta(sb, 3, hkv * d), na,
                                _meta((hq + 2 * hkv) * d, dtype=dt) if bias else None,
                                _meta(d, dtype=dt) if qkn else None, _meta(d, dtype=dt) if qkn else None,
                                _meta(2048, d, dtype=dt), _meta(2048, d, dtype=dt),
                                _meta(3, dtype=torch.long), _meta(3, dtype=torch.long),
                                _meta(3, hq, d, dtype=dt), kv[0], kv[1], 1e-6)
                yield f"qkv rope {_dt(dtype)} heads {hq}/{hkv}x{d} S{sa}/{sb} norm={qkn} bias={bias}", call
        from engine.kernels.catalog_tails import tail_configs
        yield from tail_configs(t, scope, dtype)
        yield from _xp_order_configs(scope, dtype)
        if scope == "kernels":
            continue
        for a, qtype in enumerate(tk.SUPPORTED_QTYPES):
            for n, k in GATE_UP:
                if k % tk._SUPERBLOCK[qtype] or (few and (qtype, n) not in (("Q4_K", 24576), ("Q4_1", 3072))):
                    continue
                yield (f"SwiGLU {qtype} {_dt(dtype)} {n}x{k}",
                       lambda n=n, k=k, q=qtype, d=dtype: tk.packed_swiglu(_meta(1, k, dtype=d),
                                                                          _meta_packed(q, n, k)))
                yield (f"partials {qtype} {_dt(dtype)} {n // 2}x{k}",
                       lambda n=n, k=k, q=qtype, d=dtype: tk.packed_partials(_meta(1, k, dtype=d),
                                                                            _meta_packed(q, n // 2, k)))
    for dtype in dtypes:
        for S in (1, 2, 4):
            if few and S != 2:
                continue
            yield (f"reduce SwiGLU {_dt(dtype)} S{S}",
                   lambda S=S, d=dtype: tf.reduce_swiglu(_meta(S, 3, 3072), 32,
                                                         _meta(3, 1536, dtype=d)))


def _xp_order_configs(scope: str, dtype: torch.dtype) -> Iterator[tuple[str, Call]]:
    """XP_FUSED (engine.model.fused_layer): the residual norm writing h into the next matmul's
    XP order (every scope), and gate|up's SwiGLU epilogue writing into down's (not in
    `kernels`: the packed matmul kernel, compiled by its own site)."""
    from engine.kernels import triton_fused as tf
    from engine.kernels import triton_kernels as tk
    yield (f"residual norm {_dt(dtype)} 4096 S1 into the XP order",
           lambda d=dtype: tf.residual_norm(_meta(1, 3, 4096), _meta(3, 4096, dtype=d),
                                            _meta(3, 4096, dtype=d), _meta(4096, dtype=d), 1e-6,
                                            dest=_meta(4096, dtype=torch.int32)))
    if scope != "kernels":
        yield (f"SwiGLU Q4_K {_dt(dtype)} 24576x4096 into the XP order",
               lambda d=dtype: tk.packed_swiglu(_meta(1, 4096, dtype=d),
                                                _meta_packed("Q4_K", 24576, 4096), xp_in=True,
                                                dest=_meta(12288, dtype=torch.int32)))


def _unpack_configs(t: Target, scope: str) -> Iterator[tuple[str, Call]]:
    """Every type dequantize_dense takes, to bfloat16 (and float16, float32 in full)."""
    from engine.kernels.triton_unpack import DENSE_TYPES, dequantize_dense
    for qtype in DENSE_TYPES:
        if scope == "kernels" and qtype not in ("Q4_K", "Q6_K", "Q4_1", "Q4_KN"):   # one per kernel
            continue
        for dtype in (DTYPES if scope == "full" else (torch.bfloat16,)):
            yield (f"unpack {qtype} to {_dt(dtype)}",
                   lambda q=qtype, d=dtype: dequantize_dense(_meta_packed(q, 64, 512),
                                                             _meta(64, 512, dtype=d)))


def swiglu_reference(ws: torch.Tensor, hb: int) -> torch.Tensor:
    """silu(gate) * up in float64 from the partials ws [S, M, N] of a gate|up product whose
    columns are interleaved in blocks of hb (block b: gate columns b*hb.., then up columns
    b*hb..): [M, N / 2], what engine.kernels.triton_fused.reduce_swiglu computes."""
    S, m, n = ws.shape
    blocks = ws.cpu().double().sum(0).view(m, n // (2 * hb), 2, hb)
    gate, up = blocks[:, :, 0].reshape(m, n // 2), blocks[:, :, 1].reshape(m, n // 2)
    return torch.nn.functional.silu(gate) * up


def _fused_smoke(device: torch.device, dtypes=DTYPES) -> Smoke:
    """float32 (the layer's kernels take the activations' dtype; float32 reaches each)."""
    if torch.float32 not in dtypes:
        return []
    from engine.kernels import triton_fused as tf
    from engine.kernels import triton_kernels as tk
    from engine.kernels.triton_unpack import DENSE_TYPES, dequantize_dense
    g = torch.Generator().manual_seed(4)
    out = []
    x, ws, w = torch.randn(3, 256, generator=g), torch.randn(2, 3, 256, generator=g), torch.rand(256, generator=g)
    want_x = x.double() + ws[0].double() + ws[1].double()
    want_h = want_x * torch.rsqrt(want_x.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    xd, hd = x.to(device), torch.empty(3, 256, device=device)
    tf.residual_norm(ws.to(device), xd, hd, w.to(device), 1e-6)
    out += [("residual + norm: x", xd.cpu(), want_x, 1e-5), ("residual + norm: h", hd.cpu(), want_h, 1e-5)]
    # gate|up partials [S=2, M=2, N=256] interleaved in blocks of 32 (4 blocks of gate, 4 of up)
    gu = torch.randn(2, 2, 256, generator=g)
    got = tf.reduce_swiglu(gu.to(device), 32, torch.empty(2, 128, device=device))
    out.append(("SwiGLU of interleaved partials", got.cpu(), swiglu_reference(gu, 32), 1e-5))
    for qtype in DENSE_TYPES:
        pw, ref = random_packed(qtype, 32, 512)
        got = dequantize_dense(pw.to(device), torch.empty(32, 512, device=device))
        out.append((f"unpack {qtype}", got.cpu(), ref, 0.0))
    pw, ref = random_packed("Q4_K", 64, 512, seed=6)
    xs = torch.randn(2, 512, generator=g).to(device)
    y = tk.packed_partials(xs, pw.to(device)).sum(0).cpu()
    out.append(("packed partials Q4_K", y, xs.cpu().double() @ ref.double().T, 1e-5))
    from engine.kernels.catalog_tails import tail_smoke
    out += tail_smoke(device, g, dtypes)
    return out


# ---------------------------------------------------------------------------------------------
# each row's top k of a pass's logits (engine.kernels.triton_topk.topk_triton)


def _topk_configs(t: Target, scope: str) -> Iterator[tuple[str, Call]]:
    """Every scope: the top 5 (engine.model.graphs.TOPK) of the graph buckets' logits, 1 and 16 rows of the bundled model's 49,152
    (12 chunks) and a 151,936 vocabulary (Qwen3), in float32 and bfloat16 (the kernels take
    the row count and the vocabulary as runtime values: one compile a dtype and chunk count
    class)."""
    from engine.kernels.triton_topk import topk_triton
    for dtype in (torch.float32, torch.bfloat16):
        for rows, vocab in ((1, 49152), (16, 151936)):
            if scope == "kernels" and (dtype == torch.float32) != (rows == 1):
                continue
            yield (f"{_dt(dtype)} {rows} rows of {vocab}",
                   lambda rows=rows, vocab=vocab, dtype=dtype: topk_triton(_meta(rows, vocab, dtype=dtype), 5))


def _topk_smoke(device: torch.device, dtypes=DTYPES) -> Smoke:
    """Rows of 20,000 logits with six equal best values (the 5th place a tie, across chunks):
    the top 5 values and ids against a float64 sort (value descending, then id ascending)."""
    from engine.kernels.triton_topk import topk_triton
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 20000, generator=g)
    for r in range(3):
        x[r, torch.randperm(20000, generator=g)[:6]] = 5.0 + r
    out = []
    for dtype, _ in _tolerances(dtypes):
        xd = x.to(dtype)
        want = xd.double().sort(dim=1, descending=True, stable=True)    # stable: equal values by id
        values, ids = topk_triton(xd.to(device), 5)
        out.append((f"{_dt(dtype)} top 5 values", values.double().cpu(), want.values[:, :5], 0.0))
        out.append((f"{_dt(dtype)} top 5 ids", ids.double().cpu(), want.indices[:, :5].double(), 0.0))
    return out


# ---------------------------------------------------------------------------------------------

def _order_configs(t: Target, scope: str) -> Iterator[tuple[str, Call]]:
    """Every scope: the chain of increments that checks launch order (engine.kernels.pdl)."""
    from engine.kernels.pdl import increments
    yield "increments", lambda: increments(torch.empty(1024, dtype=torch.int32, device="meta"), 2)


def _order_smoke(device: torch.device, dtypes=DTYPES) -> Smoke:
    """32 dependent launches (16 of them in a graph replayed twice), with programmatic
    dependent launch where the card takes it: each saw the one before it complete."""
    from engine.kernels.pdl import chain_in_graph, pdl_on
    x = torch.zeros(1, device=device)
    got = chain_in_graph(device).double()
    how = "overlapping (PDL)" if pdl_on(x) else "one after another"
    return [(f"48 increments, launched {how}", got, torch.full_like(got, 48.0), 0.0)]


SITES = (
    Site("packed matmul", _packed_configs, _packed_smoke),
    Site("packed matmul, int8 path", _i8_configs, _no_smoke),
    Site("packed matmul, SF (opt-in)", _sf_configs, _sf_smoke, backends=("cuda",)),
    Site("dense matmul", _dense_configs, _dense_smoke),
    Site("attention", _attention_configs, _attention_smoke),
    Site("fused layer", _fused_configs, _fused_smoke),
    Site("dense prefill unpack", _unpack_configs, _no_smoke),
    Site("top-k", _topk_configs, _topk_smoke),
    Site("launch order", _order_configs, _order_smoke),
)


def launches(target: Target, scope: str = "full",
             sites: tuple[Site, ...] = SITES) -> list[Launch]:
    """Every distinct launch (one per compile) the sites issue on ``target``."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    from engine.kernels.pdl import compiling_pdl
    out: dict = {}
    # CUDA cards from compute capability 9.0 launch with PDL (engine.kernels.pdl)
    with compiling_pdl(target.backend == "cuda" and int(target.arch) >= 90):
        for site in sites:
            if target.backend not in site.backends:
                continue
            for label, call in site.configs(target, scope):
                for launch in record(call, target.backend, f"{site.name}: {label}"):
                    out.setdefault(compile_key(launch, target), launch)
    return list(out.values())
