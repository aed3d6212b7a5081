"""A sweep cell's settings as a command line for us, for llama.cpp's server, and for vLLM.

    export_cell(cell, result, "vllm").text  ->  {"method": "ngram", "num_speculative_tokens": 8, ...}

Each export also carries notes: where the other engine's semantics differ from ours, so the
nearest equivalent is not mistaken for the same thing.

Sources of the other engines' names (read 2026-12-01):
  llama.cpp: docs/speculative.md in ggml-org/llama.cpp ("Command-Line Options": --draft-max,
    --draft-min, --spec-type none|ngram-cache|ngram-simple|ngram-map-k|ngram-map-k4v|ngram-mod,
    --spec-ngram-size-n, --spec-ngram-size-m, --spec-ngram-check-rate, --spec-ngram-min-hits;
    -md / --model-draft for a draft model) and tools/server/README.md (-m / --model).
  vLLM: docs.vllm.ai/en/latest/features/speculative_decoding/n_gram/ and vllm/config/speculative.py
    (SpeculativeConfig: method "ngram", num_speculative_tokens, prompt_lookup_max,
    prompt_lookup_min "defaults to 1").
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from engine.errors import ParameterError

FORMATS = ("cli", "llamacpp", "vllm")

# every llama-server flag an export may use (docs/speculative.md and the server README above)
LLAMACPP_FLAGS = frozenset({"-m", "--model", "-md", "--model-draft", "--draft", "--draft-n",
                            "--draft-max", "--draft-min", "--draft-n-min", "--spec-type",
                            "--spec-ngram-size-n", "--spec-ngram-size-m", "--spec-ngram-check-rate",
                            "--spec-ngram-min-hits"})
LLAMACPP_SPEC_TYPES = ("none", "ngram-cache", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod")
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
    notes = []
    depth = int(s["depth"])
    # ngram-simple drafts what followed the LAST match of the current n-gram (our `recent`);
    # ngram-map-k4v drafts the most frequent continuation of a key (nearest to `frequent`)
    spec_type = "ngram-map-k4v" if s["match"] == "frequent" else "ngram-simple"
    if s["match"] == "first":
        notes.append("llama.cpp has no earliest-match rule: ngram-simple takes the last match "
                     "(our --match recent)")
    if s["match"] == "frequent":
        notes.append("ngram-map-k4v (llama.cpp calls it experimental) drafts a key's most frequent "
                     "continuation, the nearest to our --match frequent")
    notes.append(f"llama.cpp matches one n-gram size (--spec-ngram-size-n {s['ngram_max']}); we "
                 f"back off from {s['ngram_max']} to {s['ngram_min']} tokens when the longer one "
                 "has no match")
    if s["draft"] == "tree" and int(s["width"]) > 1:
        notes.append(f"llama.cpp has no token trees: only the tree's main branch (depth {depth}) "
                     f"carries over; the {int(s['width']) - 1} alternative branch(es) are dropped")
    if s["adaptive"]:
        notes.append("llama.cpp has no cost model: --draft-max caps the draft, --draft-min 0 lets "
                     "short matches through; our chooser's per-window depth and AR floor do not carry over")
    flags = ["-m", _model_path(result), "--spec-type", spec_type,
             "--spec-ngram-size-n", str(s["ngram_max"]), "--spec-ngram-size-m", str(depth),
             "--draft-max", str(depth), "--draft-min", "0"]
    return Export(shlex.join(flags), tuple(notes))


def _vllm(s: dict[str, Any], result: dict[str, Any]) -> Export:
    notes = []
    if s["match"] != "first":
        notes.append(f"vLLM's n-gram proposer takes the earliest match in the context; this cell "
                     f"was measured with --match {s['match']} (sweep with --match first to compare)")
    notes.append("vLLM tries n-gram sizes from prompt_lookup_max down to prompt_lookup_min, as we do")
    if s["draft"] == "tree" and int(s["width"]) > 1:
        notes.append(f"vLLM's ngram method drafts one chain: the tree's {int(s['width']) - 1} "
                     "alternative branch(es) are dropped (its token-tree option is for EAGLE-style drafters)")
    if s["adaptive"]:
        notes.append("vLLM's ngram method drafts a fixed num_speculative_tokens: our chooser's "
                     "per-window depth and AR floor do not carry over")
    cfg = {"method": "ngram", "num_speculative_tokens": int(s["depth"]),
           "prompt_lookup_min": int(s["ngram_min"]), "prompt_lookup_max": int(s["ngram_max"])}
    return Export(json.dumps(cfg), tuple(notes))
