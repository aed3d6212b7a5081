"""The precision of the Triton kernels' float32 ``tl.dot``s, per GPU backend.

A float32 dot has to be asked for by name, and the names a backend takes differ: Triton's
CUDA backend takes ``tf32``, ``tf32x3``, ``ieee``, ``bf16x3``, ``bf16x6``; its HIP backend
(RDNA3 gfx11xx, RDNA4 gfx12xx) only ``ieee``, ``bf16x3``, ``bf16x6``, and a kernel asking for
``tf32x3`` there stops at its first compile ("input_precision must be one of ('ieee', 'bf16x3',
'bf16x6')"). So the launchers ask this module, at launch time, and pass the answer to the
kernel as a constexpr:

    cuda  ``tf32x3``  three TF32 tensor-core products per dot: float32 accuracy (measured on
                      the H200: 2-5e-7 relative, like cuBLAS's float32 GEMM) at tensor-core speed.
    hip   ``bf16x6``  (``ieee`` for attention's small dots, ``F32_DOT_SMALL``)
                      six bf16 WMMA products per dot (each float32 operand split into three
                      bf16 parts): as accurate as float32 FMAs (emulated against float64: max
                      error 1.8-3.0e-7 of the largest output, ieee 2.7-3.7e-7; bf16x3 4-5e-6,
                      bench/f32_dot_precision.py). ``ieee`` compiles on RDNA too, but as FMA
                      loops that spill more in the packed kernel: 3.9-4.0 KB of scratch per
                      thread at 16 rows, 10-23 KB at 32-64 (bf16x6: 0.2-1.7 KB and 3.3-3.9 KB;
                      the AOT compile, BENCHMARKS.md "float32 dots on AMD").

The kernels take it as the int constexpr ``IEEE`` (0: 16-bit operands, else a code of
``F32_CODES``; Triton's ``if`` takes no strings) and ``triton_dot.dot_f32`` turns the code into
the precision. The choice is a function of the backend (and kernel) only, never of the shapes
or the row count, so the exactness contract (a verify row bit-identical to the one-row pass) holds for every backend.

No Triton import here: the choice is made on the host, from the torch build (a ROCm build sets
``torch.version.hip``). ``compiling_for`` lets the ahead-of-time compile check
(engine.kernels.kernel_catalog) record launches for a backend other than the local one.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

import torch

# backend -> the tl.dot input_precision of float32 operands
F32_DOT = {"cuda": "tf32x3", "hip": "bf16x6"}
# ... for the attention kernel's small dots ([16, D] x [D, 64]): on RDNA plain FMAs there
# spill less than bf16x6's splitting (2.5 vs 4.3 KB of scratch on gfx1100) and compile in
# seconds where bf16x6 took minutes (the AOT check), exact float32 either way
F32_DOT_SMALL = {"cuda": "tf32x3", "hip": "ieee"}
# precision -> the kernels' IEEE constexpr (0 means 16-bit operands): see triton_dot.dot_f32
F32_CODES = {"ieee": 1, "tf32x3": 2, "bf16x3": 3, "bf16x6": 4}

_BACKEND: contextvars.ContextVar[str | None] = contextvars.ContextVar("specscope_gpu_backend",
                                                                      default=None)


def gpu_backend() -> str:
    """'hip' on a ROCm build of torch, else 'cuda' (or what ``compiling_for`` says)."""
    forced = _BACKEND.get()
    if forced is not None:
        return forced
    return "hip" if getattr(torch.version, "hip", None) else "cuda"


def f32_dot_precision(small: bool = False) -> str:
    """The ``input_precision`` the kernels give float32 ``tl.dot``s on this backend
    (``small``: the attention kernel's dots)."""
    return (F32_DOT_SMALL if small else F32_DOT)[gpu_backend()]


def ieee_code(dtype: torch.dtype, small: bool = False) -> int:
    """The kernels' ``IEEE`` constexpr for activations of ``dtype``: 0 for 16-bit ones, else
    the code of this backend's float32 dot precision."""
    return F32_CODES[f32_dot_precision(small)] if dtype == torch.float32 else 0


@contextlib.contextmanager
def compiling_for(backend: str) -> Iterator[None]:
    """Launchers called inside pick what they would pick on ``backend`` ('cuda' or 'hip')."""
    if backend not in F32_DOT:
        raise ValueError(f"backend must be one of {', '.join(F32_DOT)}, got {backend!r}")
    token = _BACKEND.set(backend)
    try:
        yield
    finally:
        _BACKEND.reset(token)
