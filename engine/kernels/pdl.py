"""Programmatic dependent launch (PDL): a pass's kernels start before the one ahead has ended.

A one-row pass of the bundled model is ~280 launches of 1.5-4 microseconds each, and on the
H100 a launch costs its kernel's whole ramp (blocks scheduled, the first loads sent to DRAM)
after the kernel ahead has drained. With PDL (CUDA, compute capability 9.0 and later: Hopper,
Blackwell), a kernel launched with ``launch_pdl=True`` may be scheduled while the kernel ahead
still runs, once every program of that one has passed ``pdl_wait``. It then:

1. sends for what no launch of the pass writes (its weights: ``l2_prefetch``, into L2);
2. waits (``griddepcontrol.wait``) until the kernel ahead has ended and its writes are
   visible, and only then reads activations or stores anything;
3. lets the kernel after it be scheduled (``griddepcontrol.launch_dependents``).

Every kernel launched with PDL waits in every program before its first read of a buffer and
its first store, so each kernel still sees the one ahead complete, and, by induction, every
launch before that one: the order of reads and writes is the stream's, and no bit changes
(the arithmetic is the same code; the GPU exactness check compares a used runtime's tokens
with a fresh one's). Launches that are not ours (torch's) are ordinary stream launches.

ROCm has no such launch: there, and on older CUDA cards, on the CPU and in Triton's
interpreter, the kernels compile without it (PDL a constexpr False). SPECSCOPE_PDL=0 turns it
off (for measuring); SPECSCOPE_PDL=1 launches with PDL but without the weight prefetch.

Imported lazily, with the kernels: Triton is optional.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from typing import Iterator

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from engine.kernels.dot_precision import gpu_backend
from engine.kernels.pass_launch import pass_pdl

# 0: off; 1: PDL launches; 2 (the default): PDL launches whose matmuls prefetch their first
# weight lines. Either only for the models engine.kernels.pass_launch says gain
def _mode(text: str) -> int:
    if text.strip() in ("", "0", "1", "2"):
        return int(text.strip() or 0)
    import warnings
    warnings.warn(f"SPECSCOPE_PDL={text!r} is not 0, 1 or 2: programmatic dependent launch stays off",
                  RuntimeWarning, stacklevel=2)
    return 0


MODE = _mode(os.environ.get("SPECSCOPE_PDL", "2"))
_CAPABLE: dict[int, bool] = {}
# the AOT compile's answer for the target it compiles for (engine.kernels.kernel_aot)
_COMPILING: contextvars.ContextVar[bool | None] = contextvars.ContextVar("specscope_pdl", default=None)


@contextlib.contextmanager
def compiling_pdl(on: bool) -> Iterator[None]:
    """Launchers called inside (on meta tensors, for an AOT compile) launch as a card with PDL
    (``on``) or without it would."""
    token = _COMPILING.set(on)
    try:
        yield
    finally:
        _COMPILING.reset(token)


def pdl_on(t: torch.Tensor) -> bool:
    """Whether kernels reading ``t`` launch with PDL (a CUDA card of compute capability >= 9,
    not ROCm, SPECSCOPE_PDL not 0, and inside a model's pass, a model that launches with it:
    engine.kernels.pass_launch)."""
    if MODE <= 0 or gpu_backend() != "cuda" or pass_pdl() is False:
        return False
    if _COMPILING.get() is not None:
        return _COMPILING.get()
    if t.device.type != "cuda":
        return False
    i = t.device.index if t.device.index is not None else torch.cuda.current_device()
    ok = _CAPABLE.get(i)
    if ok is None:
        if torch.cuda.get_device_capability(i)[0] < 9:
            ok = _CAPABLE[i] = False
        elif torch.cuda.is_current_stream_capturing():
            return False        # no probe inside a capture (the warm-up before it probes)
        else:
            ok = _CAPABLE[i] = _probe(torch.device("cuda", i))
    return ok


def increments(x: torch.Tensor, n: int, kw: dict | None = None) -> torch.Tensor:
    """n launches, each adding 1 to every value of x (int32, a multiple of 128 values) after the
    one before it has (kw: the launch keywords, default pdl_kwargs(x))."""
    kw = pdl_kwargs(x) if kw is None else kw
    for _ in range(n):
        _probe_kernel[(x.numel() // 128,)](x, **kw)
    return x


def chain_in_graph(device: torch.device, kw: dict | None = None) -> torch.Tensor:
    """16 increments run eagerly, then 16 captured in a graph and replayed twice: 48 in every
    value when each launch saw the one before it complete (on the CPU of a copy)."""
    x = torch.zeros(1024, dtype=torch.int32, device=device)
    increments(x, 16, kw)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        increments(x, 16, kw)
    g.replay()
    g.replay()
    return x.cpu()


def _probe(device: torch.device) -> bool:
    """Whether PDL launches run, in order, eagerly and inside a captured graph, on this card,
    driver and torch (a chain of 16 dependent increments; any error or a wrong count: no)."""
    try:
        with torch.cuda.device(device):
            ok = bool((chain_in_graph(device, {"PDL": True, "launch_pdl": True}) == 48).all())
    except Exception as e:  # noqa: BLE001 - any failure means: launch without PDL
        ok, why = False, f"{type(e).__name__}: {e}"
    else:
        why = "a wrong count"
    if not ok:
        import warnings
        warnings.warn(f"programmatic dependent launch is off on {device} ({why}): kernels launch "
                      "one after another", RuntimeWarning, stacklevel=3)
    return ok


def pdl_kwargs(t: torch.Tensor) -> dict:
    """The launch keywords of a kernel taking ``PDL: tl.constexpr`` (none where PDL is off)."""
    return {"PDL": True, "launch_pdl": True} if pdl_on(t) else {}


# SPECSCOPE_PDL_LATE=1 (a bench key): matmuls let the kernel after them be scheduled after their
# K loop instead of at their start (pdl_late). Measured on the H100 (BENCHMARKS.md, "The packed
# matmul, fifth round"): the 8B-like decode 209 tok/s with it, 210 with PDL's early trigger and
# 221 with PDL off, so not what costs that model its ~5%; off
_LATE = os.environ.get("SPECSCOPE_PDL_LATE", "0") == "1"


def matmul_pdl_kwargs(t: torch.Tensor, row_bytes: int, cap: int = 8) -> dict:
    """pdl_kwargs, and PFL: how many 128-byte lines of each weight row's range (``row_bytes``
    of the quants) a matmul program sends for before it waits: the first ``cap`` at most, a
    power of two (none with SPECSCOPE_PDL=1)."""
    kw = pdl_kwargs(t)
    if kw and _LATE:
        kw["PDL"] = 2
    if kw and MODE >= 2 and row_bytes > 0:
        kw["PFL"] = min(cap, triton.next_power_of_2(triton.cdiv(row_bytes, 128)))
    return kw


@triton.jit
def pdl_wait(PDL: tl.constexpr):
    """The kernel ahead has ended and its writes are visible; the kernel after may start. Call
    it in every program before the first read of anything a launch writes and the first store.
    PDL 2 (a matmul with SPECSCOPE_PDL_LATE=1): the kernel after may start only once this
    program has streamed its weights (``pdl_late``)."""
    if PDL:
        gdc_wait()
        if PDL != 2:
            gdc_launch_dependents()


@triton.jit
def pdl_late(PDL: tl.constexpr):
    """A PDL 2 matmul's programs let the kernel after be scheduled here, after their K loop
    (a bench key: dependents' programs held resident through a multi-wave matmul's tail may
    slow it; the 8B-like model's pass lost 4-7% with the early trigger, BENCHMARKS.md)."""
    if PDL == 2:
        gdc_launch_dependents()


@triton.jit
def _probe_kernel(x_ptr, PDL: tl.constexpr = False):
    pdl_wait(PDL)
    i = tl.program_id(0) * 128 + tl.arange(0, 128)
    tl.store(x_ptr + i, tl.load(x_ptr + i) + 1)


@triton.jit
def l2_prefetch(ptrs):
    """Ask for the 128-byte lines holding ``ptrs`` (any block of pointers) to be brought into L2;
    nothing is read into registers. CUDA only (PTX)."""
    tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def prefetch_weights(p0, rn, pid_s, K4, K8, K256, QT: tl.constexpr, TPS: tl.constexpr,
                     SB: tl.constexpr, PFL: tl.constexpr, PDL: tl.constexpr):
    """A matmul launched early (PDL, ``engine.kernels.pdl``): L2 requests for the first PFL
    128-byte lines of rows rn's range in the first weight plane (the quants: [N, K/2] bytes for
    the 4-bit types, [N, K] for Q8_0 and Q6_K8, 144 bytes a superblock for Q4_KN), clamped to
    the program's split and to the row; then the wait, before anything is read or stored."""
    if PFL > 0:
        _l2_lines(p0, rn, pid_s, K4, K8, K256, QT, TPS, SB, PFL)
    pdl_wait(PDL)


@triton.jit
def _l2_lines(p0, rn, pid_s, K4, K8, K256, QT: tl.constexpr, TPS: tl.constexpr,
              SB: tl.constexpr, PFL: tl.constexpr):
    if QT == 7:
        rs = K256 * 144
        TB: tl.constexpr = 144 * SB
    elif QT == 0 or QT == 6:
        rs = K4 * 4
        TB: tl.constexpr = 256 * SB
    else:
        rs = K8 * 4
        TB: tl.constexpr = 128 * SB
    off = pid_s * (TPS * TB) + tl.minimum(128 * tl.arange(0, PFL), TPS * TB - 1)
    off = tl.minimum(off, rs - 1)
    base = p0.to(tl.pointer_type(tl.int8))
    l2_prefetch(base + rn[:, None].to(tl.int64) * rs + off[None, :])
