"""Device and dtype selection. Nothing CUDA-only: ROCm builds of torch expose HIP through the
same torch.cuda API (torch.version.hip is set), so "cuda" below means "the accelerator"."""

from __future__ import annotations

import os
import platform
from contextlib import contextmanager
from typing import Iterator

import torch

from engine.errors import ParameterError

DEVICES = ("auto", "cpu", "cuda")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(name: str = "auto") -> torch.device:
    if name not in DEVICES:
        raise ParameterError(f"--device must be one of {', '.join(DEVICES)}, got {name!r}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ParameterError(
            "--device cuda: torch sees no GPU (CUDA or ROCm). Install a CUDA or ROCm build of torch "
            "(see the README), or use --device cpu."
        )
    return torch.device(name)


def device_type(name: str | None) -> str | None:
    """The torch device type --device NAME runs on ("cpu" / "cuda", ROCm included); None when
    NAME is unset."""
    return pick_device(name).type if name else None


def pick_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    if name not in DTYPES:
        raise ParameterError(f"--dtype must be auto or one of {', '.join(DTYPES)}, got {name!r}")
    return DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    return {v: k for k, v in DTYPES.items()}[dtype]


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        backend = "ROCm" if getattr(torch.version, "hip", None) else "CUDA"
        return f"{torch.cuda.get_device_name(device)} ({backend})"
    cpu = platform.processor() or platform.machine()
    return f"CPU {cpu} ({torch.get_num_threads()} threads of {os.cpu_count()})"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def leave_a_core_for_the_ui() -> None:
    """With a window open, the UI thread paints while the engine computes. If torch's CPU
    thread pool also spans every core, each of its parallel regions waits on a descheduled
    thread at every barrier (decoding several times slower on a 2-core machine:
    BENCHMARKS.md, "Engine model and kernel timings (moved from code comments)"). One core fewer keeps the pool's barriers cheap."""
    n = os.cpu_count() or 1
    if n > 1 and torch.get_num_threads() >= n and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(n - 1)


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run the loaders' per-tensor work (dequantize, cast) on one intra-op thread.

    The ops are small (one tensor each, ~1000 of them) and memory-bound. With two threads on a busy
    2-core machine every op waits at a barrier for a descheduled thread, and loading took many
    times longer than on one thread (BENCHMARKS.md, "Engine model and kernel timings (moved from code comments)").
    torch's thread count is process-wide, so it is restored at once.
    """
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)
