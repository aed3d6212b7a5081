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
                 progress: Progress | None = None, weights: str = "auto") -> Runtime:
    """Read the file's header and tokenizer, then build each weight on the device in turn
    (`weights`: auto | packed | dequantized; see engine.model.runtime)."""
    loaded = load_model(model, progress=progress)
    rt = Runtime(loaded, device, dtype, weights=weights, progress=progress)
    if progress:
        progress("ready", 1.0)
    return rt


def draft_opener(target: Runtime, weights: str = "auto",
                 progress: Progress | None = None) -> Callable[[str], Runtime]:
    """How a Decoder opens its `--draft-model PATH`: on the target's device, in its dtype.

    Decoder(rt, ids, settings, open_model=draft_opener(rt))
    """
    return lambda path: open_runtime(path, str(target.device),
                                     getattr(target, "dtype_request", target.dtype_name),
                                     progress=progress, weights=weights)
