"""Open a model file and put it on a device: the one place that does both.

    rt = open_runtime("qwen3-8b-q4_k_m.gguf", device="auto", dtype="auto", progress=print)
    ids = encode_prompt(rt.tokenizer, prompt)
    for event in Decoder(rt, ids, settings).windows(): ...

Loading (engine.io) and the runtime (engine.model) know nothing of each other; this module sits
above both, so the command line and the workbench have one entry point.
"""

from __future__ import annotations

from typing import Callable

from engine.io.load import load_model
from engine.model.runtime import Runtime

Progress = Callable[[str, float], None]


def open_runtime(model: str | None = None, device: str = "auto", dtype: str = "auto",
                 progress: Callable[[str, float], None] | None = None) -> Runtime:
    loaded = load_model(model, progress=progress)
    if progress:
        progress("placing weights on the device", 0.95)
    rt = Runtime(loaded, device, dtype)
    if progress:
        progress("ready", 1.0)
    return rt
