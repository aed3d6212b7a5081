"""Hugging Face model folders: config.json + model.safetensors (or a sharded index) + tokenizer files.

Runs LlamaForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM checkpoints; their weights are
already in the layout the model wants, so loading is renaming; each tensor stays a view of the
memory-mapped file until the model builds it on its device.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


from engine.model.config import (ARCHITECTURES, INT_LIMITS, ModelConfig, RopeScaling, as_float, as_int,
                                 check_weight_shapes)
from engine.errors import ModelLoadError
from engine.io.jsonfile import read_json
from engine.io.names import NameMap
from engine.io.safetensors_file import SafetensorsFile
from engine.io.tokenizer import Tokenizer
from engine.model.source import TensorSource

MAX_JSON_BYTES = 64 << 20   # config.json and the index: a few KB to a few MB in real models
_REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "n_layers", "n_heads")
_MODEL_TYPES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
_ARCH_CLASSES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}
_GLOBAL_NAMES = {"model.embed_tokens.weight": "embed", "lm_head.weight": "lm_head", "model.norm.weight": "norm"}
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm",
    "self_attn.q_proj.weight": "q", "self_attn.k_proj.weight": "k", "self_attn.v_proj.weight": "v",
    "self_attn.q_proj.bias": "q_bias", "self_attn.k_proj.bias": "k_bias", "self_attn.v_proj.bias": "v_bias",
    "self_attn.q_norm.weight": "q_norm", "self_attn.k_norm.weight": "k_norm",
    "self_attn.o_proj.weight": "o",
    "post_attention_layernorm.weight": "mlp_norm",
    "mlp.gate_proj.weight": "gate", "mlp.up_proj.weight": "up", "mlp.down_proj.weight": "down",
}


HF_NAMES = NameMap(_GLOBAL_NAMES, "model.layers.", _LAYER_NAMES)
hf_name = HF_NAMES.file_name              # 'layers.3.q' -> 'model.layers.3.self_attn.q_proj.weight'
canonical_name = HF_NAMES.canonical       # and back (None: a tensor the model does not use)


def read_config(folder: Path, tokenizer: Tokenizer | None = None) -> ModelConfig:
    path = folder / "config.json"
    raw = read_json_object(path, "the model config")
    arch = _architecture(raw, path)

    def count(key: str, field: str, default: Any = None) -> int | None:
        return _count(raw, path, key, field, default)

    hidden, n_heads = count("hidden_size", "hidden_size"), count("num_attention_heads", "n_heads")
    rope = _rope_fields(raw, path)
    theta = _real(rope, path, "rope_theta", _real(raw, path, "rope_theta", 10000.0))
    if _flag(raw, path, "mlp_bias"):
        raise ModelLoadError(f"{path}: mlp_bias=true is not supported.")
    try:
        return ModelConfig(
            arch=arch,
            vocab_size=count("vocab_size", "vocab_size"),
            hidden_size=hidden,
            intermediate_size=count("intermediate_size", "intermediate_size"),
            n_layers=count("num_hidden_layers", "n_layers"),
            n_heads=n_heads,
            n_kv_heads=count("num_key_value_heads", "n_kv_heads") or n_heads,
            head_dim=count("head_dim", "head_dim") or hidden // n_heads,
            rms_eps=_real(raw, path, "rms_norm_eps", 1e-6),
            rope_theta=theta,
            rope_scaling=_rope_scaling(rope, raw, path),
            max_context=count("max_position_embeddings", "max_context", 4096),
            tie_embeddings=_flag(raw, path, "tie_word_embeddings"),
            qkv_bias=arch == "qwen2" or _flag(raw, path, "attention_bias"),
            qk_norm=arch == "qwen3",
            bos_id=tokenizer.bos_id if tokenizer else raw.get("bos_token_id"),
            eos_ids=tokenizer.eos_ids if tokenizer else (),
        )
    except (ValueError, TypeError) as e:
        raise ModelLoadError(f"{path}: inconsistent model config: {e}") from e


def _architecture(raw: dict, path: Path) -> str:
    """'llama', 'qwen2' or 'qwen3', from model_type or else the architectures list."""
    archs = raw.get("architectures") or []
    if not isinstance(archs, list):
        archs = [archs]
    model_type = raw.get("model_type")
    arch = _MODEL_TYPES.get(model_type) if isinstance(model_type, str) else None
    arch = arch or next((_ARCH_CLASSES[a] for a in archs if isinstance(a, str) and a in _ARCH_CLASSES), None)
    if arch is None:
        raise ModelLoadError(
            f"{path}: model type {model_type!r} ({', '.join(map(str, archs)) or 'no architectures'}) is not "
            f"supported; specscope runs {', '.join(ARCHITECTURES)} models (LlamaForCausalLM, "
            "Qwen2ForCausalLM, Qwen3ForCausalLM)."
        )
    return arch


def _rope_fields(raw: dict, path: Path) -> dict:
    """rope_scaling and rope_parameters merged into one dict."""
    # transformers >= 5 writes rope_parameters {rope_theta, rope_type, ...}; older configs use
    # rope_theta + rope_scaling {type|rope_type, factor, ...}.
    rope: dict = {}
    for key in ("rope_scaling", "rope_parameters"):
        part = raw.get(key)
        if part is not None and not isinstance(part, dict):
            raise ModelLoadError(f"{path}: {key} is {part!r}; an object like "
                                 '{"rope_type": "llama3", "factor": 8.0} is needed here.')
        rope.update(part or {})
    return rope


def _count(raw: dict, path: Path, key: str, field: str, default: Any = None) -> int | None:
    """An integer field within INT_LIMITS[field]; None when absent and neither required nor defaulted."""
    v = raw.get(key, default)
    if v is None:
        if default is None and field in _REQUIRED:
            raise ModelLoadError(f"{path}: config.json lacks {key!r}; the folder is incomplete.")
        return None
    return as_int(v, f"{path}: {key}", *INT_LIMITS[field])


def _real(d: dict, path: Path, key: str, default: float) -> float:
    v = d.get(key)
    return default if v is None else as_float(v, f"{path}: {key}")


def _flag(raw: dict, path: Path, key: str) -> bool:
    v = raw.get(key)
    if v is None:
        return False
    if not isinstance(v, bool):         # "false" as a string would read as true
        raise ModelLoadError(f"{path}: {key} is {v!r}; true or false is needed here.")
    return v


def read_json_object(path: Path, what: str) -> dict:
    """A JSON object from a model folder's file, or one ModelLoadError (engine.io.jsonfile:
    missing, too large, not UTF-8, not JSON, nested too deep, non-finite, not an object)."""
    return read_json(path, what, shape=dict, max_bytes=MAX_JSON_BYTES, error=ModelLoadError)


def _rope_scaling(rope: dict, raw: dict, path: Path) -> RopeScaling:
    """rope_scaling / rope_parameters as transformers' modeling_rope_utils reads them, or a refusal."""
    kind = rope.get("rope_type") or rope.get("type") or "default"
    partial = rope.get("partial_rotary_factor", raw.get("partial_rotary_factor"))
    if partial not in (None, 1, 1.0):
        raise ModelLoadError(f"{path}: partial_rotary_factor={partial} is not supported (RoPE over whole heads).")
    if kind == "default":
        return RopeScaling()

    def num(key: str, default: float | None = None) -> float | None:
        return None if rope.get(key) is None else as_float(rope[key], f"{path}: rope {key}")

    def given_factor() -> float:     # 0 is refused (by RopeScaling), not read as 1
        v = num("factor")
        return 1.0 if v is None else v

    def count(d: dict, key: str) -> int | None:
        return None if not d.get(key) else as_int(d[key], f"{path}: {key}", *INT_LIMITS["max_context"])

    # transformers' standardize_rope_params: a top-level original_max_position_embeddings wins,
    # then rope's own, then max_position_embeddings
    original = (count(raw, "original_max_position_embeddings") or count(rope, "original_max_position_embeddings")
                or count(raw, "max_position_embeddings") or 4096)
    if kind == "llama3":
        return RopeScaling("llama3", given_factor(), num("low_freq_factor") or 1.0,
                           num("high_freq_factor") or 4.0, original)
    if kind == "linear":
        return RopeScaling("linear", given_factor())
    if kind == "yarn":
        factor = num("factor")
        if factor is None:      # DeepSeek-V3 style: the ratio of the two context lengths
            factor = (count(raw, "max_position_embeddings") or original) / original
        return RopeScaling("yarn", factor, original_max_position=original,
                           beta_fast=num("beta_fast") or 32.0, beta_slow=num("beta_slow") or 1.0,
                           mscale=num("mscale"), mscale_all_dim=num("mscale_all_dim"),
                           attention_factor=num("attention_factor"), truncate=bool(rope.get("truncate", True)))
    raise ModelLoadError(f"{path}: RoPE scaling {kind!r} is not supported (linear, llama3 and yarn are).")


def _weight_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it."""
    index = folder / "model.safetensors.index.json"
    single = folder / "model.safetensors"
    if index.is_file():
        weight_map = read_json_object(index, "the safetensors index").get("weight_map")
        if not isinstance(weight_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
            raise ModelLoadError(f"{index}: weight_map must map tensor names to file names.")
        files = {name: folder / f for name, f in weight_map.items()}
        for f in set(files.values()):
            try:
                inside, present = f.resolve().parent == folder.resolve(), f.is_file()
            except (OSError, ValueError):   # a name with a NUL byte, a loop of links
                inside, present = False, False
            if not inside:
                raise ModelLoadError(f"{index} names {f.name!r} outside the model folder; refusing it.")
            if not present:
                raise ModelLoadError(f"{f} is missing (listed in {index.name}); download the whole model.")
        return files
    if single.is_file():
        return {name: single for name in SafetensorsFile(single).tensors}
    others = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pth"))
    hint = f" (found {', '.join(others)}: convert them to safetensors)" if others else ""
    raise ModelLoadError(f"{folder} has no model.safetensors or model.safetensors.index.json{hint}.")


def load_hf_folder(folder: Path, progress: Callable[[str, float], None]
                   ) -> tuple[ModelConfig, dict[str, TensorSource], Tokenizer, str]:
    progress("reading config and tokenizer", 0.0)
    tokenizer_json = folder / "tokenizer.json"
    if not tokenizer_json.is_file():
        raise ModelLoadError(f"{folder} has no tokenizer.json; download the model's tokenizer files too.")
    tokenizer = Tokenizer.from_files(
        tokenizer_json, folder / "tokenizer_config.json", generation_config_json=folder / "generation_config.json",
        config_json=folder / "config.json", chat_template_jinja=folder / "chat_template.jinja",
    )
    cfg = read_config(folder, tokenizer)
    files = _weight_files(folder)

    by_canonical: dict[str, str] = {}
    for name in files:
        canon = canonical_name(name)
        if canon is not None:
            by_canonical[canon] = name
        elif name.startswith("model.layers.") and name.endswith(".bias"):
            raise ModelLoadError(f"{files[name]}: tensor {name} (a bias) is not supported by specscope's "
                                 f"{cfg.arch} model; this variant cannot be run.")
    if cfg.tie_embeddings:
        by_canonical.pop("lm_head", None)

    opened: dict[Path, SafetensorsFile] = {}
    sources: dict[str, TensorSource] = {}
    for canon, name in by_canonical.items():
        f = files[name]
        if f not in opened:
            opened[f] = SafetensorsFile(f)
        if name not in opened[f].tensors:
            raise ModelLoadError(f"{f}: tensor {name} is listed in the index but not in the file. "
                                 "Download the model again.")
    shapes = {canon: opened[files[name]].shape(name) for canon, name in by_canonical.items()}
    check_weight_shapes(cfg, shapes, folder, hf_name)
    for canon, name in by_canonical.items():
        sources[canon] = opened[files[name]].source(name)
    kinds = sorted({s.qtype for s in sources.values()})
    progress("header read", 1.0)
    return cfg, sources, tokenizer, "+".join(kinds)
