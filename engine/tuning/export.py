"""A sweep cell's settings as a command line for us, for llama.cpp's server, and for vLLM.

    export_cell(cell, result, "vllm").text  ->  vllm serve MODEL --speculative-config '{"method": "ngram", ...}'

Each export also carries notes: where the other engine's semantics differ from ours, so the
nearest equivalent is not mistaken for the same thing.

llama.cpp: engine.tuning.llamacpp_export (flags and notes of the pinned tree, llama.cpp 0c1e570;
priced on llama.cpp's own curve there too). vLLM (read 2026-12-02): docs.vllm.ai
features/speculative_decoding/n_gram ("method": "ngram", num_speculative_tokens,
prompt_lookup_max, prompt_lookup_min) and suffix decoding ("method": "suffix", Arctic Inference's
suffix trees ranked by frequency); features/quantization/gguf ("GGUF support has migrated to OOT
vllm-gguf-plugin", in-tree support deprecated in vllm#39583).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from engine.errors import ParameterError
from engine.tuning.llamacpp_export import cell_export
from engine.tuning.llamacpp_flags import LLAMACPP_FLAGS, LLAMACPP_SPEC_TYPES  # noqa: F401 (re-exported)

FORMATS = ("cli", "llamacpp", "vllm")

# the keys of vLLM's speculative_config for its n-gram proposer
VLLM_NGRAM_KEYS = ("method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max")


@dataclass(frozen=True)
class Export:
    text: str                   # what to paste: a command line, one line of flags, or JSON
    notes: tuple[str, ...]      # where the other engine differs from what was measured


def export_cell(cell: dict[str, Any], result: dict[str, Any], fmt: str) -> Export:
    """`cell`: an entry of sweep.json's cells; `result`: the sweep (model, dtype)."""
    if fmt not in FORMATS:
        raise ParameterError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    s = cell["settings"]
    return {"cli": _cli, "llamacpp": _llamacpp, "vllm": _vllm}[fmt](s, result)


def _model_path(result: dict[str, Any]) -> str:
    return str((result.get("model") or {}).get("source") or "MODEL.gguf")


def _cli(s: dict[str, Any], result: dict[str, Any]) -> Export:
    args = ["specscope", "generate", "--model", _model_path(result)]
    if result.get("dtype"):
        args += ["--dtype", result["dtype"]]
    args += ["--draft", s["draft"], "--depth", str(s["depth"]), "--width", str(s["width"]),
             "--ngram-min", str(s["ngram_min"]), "--ngram-max", str(s["ngram_max"]),
             "--match", s["match"], "--adaptive" if s["adaptive"] else "--no-adaptive",
             "--ar-floor" if s["ar_floor"] else "--no-ar-floor"]
    return Export(shlex.join(args), (f"measured on {result.get('device', '?')}: another device "
                                     "has another best cell (sweep there)",))


def _llamacpp(s: dict[str, Any], result: dict[str, Any]) -> Export:
    text, notes = cell_export(s, _model_path(result))
    return Export(text, notes)


def _vllm(s: dict[str, Any], result: dict[str, Any]) -> Export:
    notes = []
    model = _model_path(result)
    if s["match"] != "first":
        notes.append(f"vLLM's n-gram proposer takes the earliest match in the context; this cell "
                     f"was measured with --match {s['match']} (sweep with --match first to compare)")
    if s["match"] == "frequent":
        notes.append('for frequency-ranked drafts vLLM has suffix decoding: "method": "suffix" '
                     "(Arctic Inference's suffix trees; pip install arctic-inference)")
    notes.append("vLLM tries n-gram sizes from prompt_lookup_max down to prompt_lookup_min, as we do")
    if s["draft"] == "tree" and int(s["width"]) > 1:
        notes.append(f"vLLM's ngram method drafts one chain: the tree's {int(s['width']) - 1} "
                     "alternative branch(es) are dropped (its token-tree option is for EAGLE-style drafters)")
    if s["adaptive"]:
        notes.append("vLLM's ngram method drafts a fixed num_speculative_tokens: our chooser's "
                     "per-window depth and AR floor do not carry over")
    if model.lower().endswith(".gguf"):
        notes.append("a GGUF model needs vLLM's GGUF plugin (pip install vllm-gguf-plugin: GGUF left "
                     "vLLM's tree, vllm#39583) and --tokenizer with the base model's Hugging Face repo")
    cfg = {"method": "ngram", "num_speculative_tokens": int(s["depth"]),
           "prompt_lookup_min": int(s["ngram_min"]), "prompt_lookup_max": int(s["ngram_max"])}
    return Export(shlex.join(["vllm", "serve", model, "--speculative-config", json.dumps(cfg)]),
                  tuple(notes))
