"""Ahead-of-time compiles of the engine's Triton kernels for GPU targets, with no GPU.

Triton compiles for a named target without a device: ``triton.compile(ASTSource(fn, signature,
constexprs, attrs), target=GPUTarget("hip", "gfx1201", 32))`` returns AMDGCN and a code object
on a CPU-only machine. This module turns a *launch* into exactly the compile the JIT would run
for it on that target:

* ``record(call)`` runs ``call()`` (a launcher such as ``packed_matmul`` on meta tensors) with
  every ``kernel[grid](...)`` launch captured instead of run: the kernel, its arguments (tensors
  kept as dtype, byte offset and size) and its launch options;
* ``compile_launch(launch, target)`` binds those arguments with Triton's own binder for the
  target's backend (the same specialization a real launch gets: pointer alignment, integer
  divisibility by 16, integers equal to 1, constexprs), compiles, and checks what would stop the
  launch on a card: the compile itself, and shared memory (LDS) beyond the target's limit.

Results are cached in-process (a key per compile), and Triton's on-disk cache keeps them
between runs. Imported lazily (by the catalog, the doctor and the tests): Triton is not a
dependency of the package, and nothing here runs when the engine decodes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from engine.kernels.dot_precision import compiling_for


@dataclass(frozen=True)
class Target:
    """A GPU to compile for. ``units``: the compute units (CUs / SMs) of a representative card,
    which the launchers' configuration functions take; ``lds``: shared memory per program."""

    name: str
    backend: str           # "hip" or "cuda"
    arch: str | int        # "gfx1201" or 90
    units: int
    lds: int
    card: str

    def gpu_target(self):
        from triton.backends.compiler import GPUTarget
        return GPUTarget(self.backend, self.arch, 32)


TARGETS = {t.name: t for t in (
    Target("gfx1100", "hip", "gfx1100", 96, 64 << 10, "RX 7900 XTX (RDNA3)"),
    Target("gfx1101", "hip", "gfx1101", 60, 64 << 10, "RX 7800 XT (RDNA3)"),
    Target("gfx1102", "hip", "gfx1102", 32, 64 << 10, "RX 7600 (RDNA3)"),
    Target("gfx1151", "hip", "gfx1151", 40, 64 << 10, "Strix Halo Radeon 8060S (RDNA3.5)"),
    Target("gfx1200", "hip", "gfx1200", 32, 64 << 10, "RX 9060 XT (RDNA4)"),
    Target("gfx1201", "hip", "gfx1201", 64, 64 << 10, "RX 9070 XT / Radeon AI PRO R9700 (RDNA4)"),
    Target("sm_80", "cuda", 80, 108, 163 << 10, "A100"),
    Target("sm_89", "cuda", 89, 128, 99 << 10, "RTX 4090"),
    Target("sm_90", "cuda", 90, 132, 227 << 10, "H100 / H200"),
)}
USER_TARGETS = ("gfx1100", "gfx1151", "gfx1201")     # the users' cards (DESIGN.md, Hardware)
CHECK_TARGETS = USER_TARGETS + ("sm_90",)           # and the card the project measures on


def parse_targets(text: str) -> list[Target]:
    """'gfx1100,gfx1151,gfx1201' -> Targets; a ValueError naming the bad one and the known ones."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise ValueError(f"no target given; known targets: {', '.join(TARGETS)}")
    bad = [n for n in names if n not in TARGETS]
    if bad:
        raise ValueError(f"unknown target {bad[0]!r}; known targets: {', '.join(TARGETS)}")
    return [TARGETS[n] for n in dict.fromkeys(names)]


# ---------------------------------------------------------------------------------------------
# recording launches


class _TensorArg:
    """What the binder needs of a tensor: its dtype, its address modulo alignment (the byte
    offset into its storage; allocations are aligned) and its size (HIP buffer ops)."""

    def __init__(self, t: torch.Tensor):
        self.dtype = t.dtype
        self._offset = t.storage_offset() * t.element_size()
        self._bytes = t.untyped_storage().nbytes()

    def data_ptr(self) -> int:
        return self._offset

    def ptr_range(self) -> int:
        return self._bytes

    def __repr__(self) -> str:
        return f"<{self.dtype} +{self._offset}>"


@dataclass(frozen=True, eq=False)
class Launch:
    """One ``kernel[grid](*args, **kwargs)`` as a launcher issued it (tensors as _TensorArg)."""

    kernel: Any
    args: tuple
    kwargs: dict
    label: str = ""

    @property
    def name(self) -> str:
        return kernel_name(self.kernel)


def kernel_name(kernel) -> str:
    """'engine.kernels.triton_tiles._packed_mm_kernel'."""
    return f"{kernel.fn.__module__}.{kernel.fn.__qualname__}"


_RECORDING = threading.Lock()


def record(call: Callable[[], object], backend: str, label: str = "") -> list[Launch]:
    """The launches ``call()`` issues on ``backend`` ('hip' / 'cuda'), none of them run. Call it
    with meta tensors: the launchers' host code (allocations, strides) runs on them as on a GPU."""
    from triton.runtime.jit import JITFunction

    got: list[Launch] = []

    def capture(self, *args, grid, warmup, **kwargs):
        args = tuple(_TensorArg(a) if isinstance(a, torch.Tensor) else a for a in args)
        kwargs = {k: _TensorArg(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        got.append(Launch(self, args, kwargs, label))

    with _RECORDING:
        run = JITFunction.run
        JITFunction.run = capture
        try:
            with compiling_for(backend):
                call()
        finally:
            JITFunction.run = run
    return got


# ---------------------------------------------------------------------------------------------
# compiling


@dataclass
class Compiled:
    """One compile: ``error`` is None when it compiled and fits the target."""

    target: str
    kernel: str
    label: str
    seconds: float
    error: str | None = None
    shared: int = 0
    asm: dict = field(default_factory=dict, repr=False)   # 'amdgcn' / 'ptx' text

    @property
    def ok(self) -> bool:
        return self.error is None


_BINDERS: dict = {}
_CACHE: dict = {}
_CACHE_LOCK = threading.Lock()


def _bind(launch: Launch, target: Target):
    """(signature, constexprs, attrs, options) as Triton's JIT computes them for this launch."""
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    kernel = launch.kernel
    key = (id(kernel), target.name)
    if key not in _BINDERS:
        backend = make_backend(target.gpu_target())
        _BINDERS[key] = (backend, create_function_from_signature(kernel.signature, kernel.params,
                                                                 backend), kernel)
    backend, binder, _ = _BINDERS[key]
    kwargs = dict(launch.kwargs, debug=False, instrumentation_mode="")
    bound, specialization, options = binder(*launch.args, **kwargs)
    return kernel._pack_args(backend, kwargs, bound, specialization, options)


def compile_key(launch: Launch, target: Target, bound=None) -> tuple:
    """What tells two compiles apart (``bound``: ``_bind``'s result, if already computed)."""
    options, signature, constexprs, attrs = bound or _bind(launch, target)
    opts = tuple(sorted((k, repr(v)) for k, v in options.__dict__.items()))
    return (launch.name, target.name, tuple(signature.items()),
            tuple(sorted((k, repr(v)) for k, v in constexprs.items())),
            tuple(sorted((k, repr(v)) for k, v in attrs.items())), opts)


def compile_launch(launch: Launch, target: Target, keep_asm: bool = False) -> Compiled:
    """Compile one launch for ``target`` the way its JIT would (cached in-process)."""
    import triton
    from triton.compiler import ASTSource

    bound = _bind(launch, target)
    key = compile_key(launch, target, bound)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
    if hit is not None and (hit.asm or not keep_asm or not hit.ok):
        return hit
    options, signature, constexprs, attrs = bound
    t0 = time.perf_counter()
    res = Compiled(target.name, launch.name, launch.label, 0.0)
    try:
        ck = triton.compile(ASTSource(launch.kernel, signature, constexprs, attrs),
                            target=target.gpu_target(), options=options.__dict__)
        res.shared = int(ck.metadata.shared)
        if res.shared > target.lds:
            res.error = (f"needs {res.shared} bytes of shared memory, the target has "
                         f"{target.lds}: the launch would fail (out of resources)")
        if keep_asm:
            res.asm = {k: ck.asm[k] for k in ("amdgcn", "ptx") if k in ck.asm}
    except Exception as e:  # noqa: BLE001 - any compiler error is the finding
        res.error = _one_line(e)
    res.seconds = time.perf_counter() - t0
    with _CACHE_LOCK:
        _CACHE[key] = res
    return res


def _one_line(e: BaseException) -> str:
    """A compiler error in one line: the innermost cause (Triton wraps the error of a helper
    in the error of each caller), its last meaningful line."""
    while e.__cause__ is not None:
        e = e.__cause__
    text = getattr(e, "error_message", None) or str(e)
    lines = [s.strip() for s in str(text).splitlines() if s.strip() and set(s.strip()) != {"^"}]
    return f"{type(e).__name__}: {lines[-1][:300]}" if lines else type(e).__name__
