"""The model host: the one loaded model of a window's session, and what it was loaded for.

A window owns one ModelHost and hands it to its one GeneratorWorker (workbench.worker), whose
jobs (the live run, a sweep, a race) run one at a time on the worker's thread, each taking the
model from here: a Reset, a sweep after a run or a race after a sweep does not load it again.
The host is only touched on that thread (and by `preload`, before any job runs), so it needs no
lock. Tests and benchmarks that load a model once hand it to the host with `preload`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

Progress = Callable[[str, float], None]


@dataclass(frozen=True)
class RuntimeSpec:
    model: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    weights: str = "auto"       # auto | packed | dequantized (quantized GGUF weights)


@dataclass(frozen=True)
class RuntimeInfo:
    """What the window shows of a loaded model."""
    model: str
    device: str
    dtype: str
    weights: str
    load_s: float
    activation_dtype: str = ""     # what the matmuls compute in (the int4 CPU kernels: bfloat16)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "device": self.device, "dtype": self.dtype, "weights": self.weights,
                "activation_dtype": self.activation_dtype or self.dtype, "load_s": self.load_s}


def model_name(rt) -> str:
    return Path(str(rt.model_id)).name


def activation_dtype(rt) -> str:
    """The dtype the model's matmuls compute in (a runtime without the notion: its dtype)."""
    return getattr(rt, "activation_dtype", None) or rt.dtype_name


class ModelHost:
    def __init__(self) -> None:
        self.spec: RuntimeSpec | None = None
        self.rt = None
        self.profiles: dict[RuntimeSpec, Any] = {}     # each spec's card cost profile, once known

    def preload(self, spec: RuntimeSpec, rt) -> None:
        """Use an already loaded runtime for `spec` (tests and benchmarks load it once)."""
        self.spec, self.rt = spec, rt

    def loaded(self, spec: RuntimeSpec) -> bool:
        return self.rt is not None and self.spec == spec

    def runtime(self, spec: RuntimeSpec, progress: Progress) -> tuple[Any, RuntimeInfo]:
        """The model for `spec`, loaded now if another (or none) is loaded; and what it is."""
        t0 = time.perf_counter()
        if not self.loaded(spec):
            from engine.session import open_runtime
            self.spec = self.rt = None           # free the old model before loading
            rt = open_runtime(spec.model, spec.device, spec.dtype, progress=progress, weights=spec.weights)
            self.spec, self.rt = spec, rt
            progress("model ready", 1.0)
        rt = self.rt
        return rt, RuntimeInfo(model_name(rt), rt.device_name, rt.dtype_name, rt.weights_label,
                               time.perf_counter() - t0, activation_dtype(rt))
