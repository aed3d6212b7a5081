"""Hostile inputs, built small: GGUF files with any metadata (typed as the test says), HF
folders, prompts and recordings. Shared by the regression corpus and the fuzz test.

The model is the tiny llama shape of tests/tiny_models.py (hidden 64, 2 layers, 4 heads, 2 kv
heads, MLP 128, vocabulary 128, context 256) with seeded random float32 weights written
directly, so no transformers import is needed and a file costs milliseconds.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

from tiny_models import CHATML, SPECIALS, tiny_tokenizer_files

V = GGUFValueType
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB, CONTEXT = 64, 2, 4, 2, 128, 128, 256
HEAD_DIM = HIDDEN // HEADS


def base_metadata(arch: str = "llama") -> dict[str, tuple[GGUFValueType, Any]]:
    """Every key of the tiny model's GGUF, as (value type, value)."""
    model = json.loads(tiny_tokenizer_files()[0])["model"]
    tokens = sorted(model["vocab"], key=model["vocab"].get)
    merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
    return {
        "general.architecture": (V.STRING, arch),
        f"{arch}.block_count": (V.UINT32, LAYERS),
        f"{arch}.context_length": (V.UINT32, CONTEXT),
        f"{arch}.embedding_length": (V.UINT32, HIDDEN),
        f"{arch}.feed_forward_length": (V.UINT32, FFN),
        f"{arch}.attention.head_count": (V.UINT32, HEADS),
        f"{arch}.attention.head_count_kv": (V.UINT32, KV_HEADS),
        f"{arch}.rope.freq_base": (V.FLOAT32, 10000.0),
        f"{arch}.attention.layer_norm_rms_epsilon": (V.FLOAT32, 1e-5),
        "tokenizer.ggml.model": (V.STRING, "gpt2"),
        "tokenizer.ggml.pre": (V.STRING, "default"),
        "tokenizer.ggml.tokens": (V.ARRAY, tokens),
        "tokenizer.ggml.token_type": (V.ARRAY, [3 if t in SPECIALS else 1 for t in tokens]),
        "tokenizer.ggml.merges": (V.ARRAY, merges),
        "tokenizer.ggml.bos_token_id": (V.UINT32, 1),
        "tokenizer.ggml.eos_token_id": (V.UINT32, 2),
        "tokenizer.ggml.add_bos_token": (V.BOOL, False),
        "tokenizer.chat_template": (V.STRING, CHATML),
    }


@lru_cache(maxsize=1)
def _base_tensors() -> dict[str, np.ndarray]:
    g = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return (g.standard_normal(shape) * 0.05).astype(np.float32)

    t = {"token_embd.weight": w(VOCAB, HIDDEN), "output_norm.weight": 1 + w(HIDDEN),
         "output.weight": w(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"blk.{i}."
        t |= {p + "attn_norm.weight": 1 + w(HIDDEN), p + "attn_q.weight": w(HEADS * HEAD_DIM, HIDDEN),
              p + "attn_k.weight": w(KV_HEADS * HEAD_DIM, HIDDEN), p + "attn_v.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
              p + "attn_output.weight": w(HIDDEN, HEADS * HEAD_DIM), p + "ffn_norm.weight": 1 + w(HIDDEN),
              p + "ffn_gate.weight": w(FFN, HIDDEN), p + "ffn_up.weight": w(FFN, HIDDEN),
              p + "ffn_down.weight": w(HIDDEN, FFN)}
    return t


def base_tensors() -> dict[str, np.ndarray]:
    return {k: v.copy() for k, v in _base_tensors().items()}


def write_gguf(path: str | Path, metadata: dict[str, tuple[GGUFValueType, Any] | None] | None = None,
               tensors: dict[str, np.ndarray] | None = None,
               raw_types: dict[str, GGMLQuantizationType] | None = None) -> Path:
    """The tiny model as a GGUF at path. metadata: keys to set ((type, value)) or drop (None) on
    top of base_metadata(); arrays are typed by their first item (a nested list by its first
    item too). tensors: replaces the weights; raw_types: tensors whose bytes are given as is."""
    path = Path(path)
    meta = base_metadata()
    for k, v in (metadata or {}).items():
        if v is None:
            meta.pop(k, None)
        else:
            meta[k] = v
    arch = meta.get("general.architecture", (V.STRING, "llama"))[1]
    w = GGUFWriter(str(path), arch if isinstance(arch, str) else "llama", use_temp_file=False)
    w.kv_data[0].clear()                     # the writer's own general.architecture: ours instead
    for k, (vtype, value) in meta.items():
        w.add_key_value(k, value, vtype, sub_type=_sub_type(value) if vtype == V.ARRAY else None)
    for name, arr in (base_tensors() if tensors is None else tensors).items():
        raw = (raw_types or {}).get(name)
        if raw is not None:
            w.add_tensor(name, arr, raw_dtype=raw)
        else:
            w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _sub_type(value: list) -> GGUFValueType | None:
    if not value:
        return V.UINT32
    first = value[0]
    if isinstance(first, list):
        return V.ARRAY
    if isinstance(first, str):
        return V.STRING
    if isinstance(first, bool):
        return V.BOOL
    if isinstance(first, float):
        return V.FLOAT32
    return V.INT64 if any(abs(x) >= 2 ** 31 for x in value if isinstance(x, int)) else V.INT32


def nested_array(depth: int) -> bytes:
    """The bytes of a GGUF metadata value: an array of one array of ... `depth` deep (a
    writer would recurse that deep itself)."""
    level = int(V.ARRAY).to_bytes(4, "little") + (1).to_bytes(8, "little")    # item type, count
    return (int(V.ARRAY).to_bytes(4, "little") + level * depth
            + int(V.UINT8).to_bytes(4, "little") + (0).to_bytes(8, "little"))


def write_raw_gguf(path: str | Path, key: str, value_bytes: bytes) -> Path:
    """A GGUF (version 3) holding one metadata key whose type and value are given as bytes."""
    name = key.encode()
    head = b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") + (1).to_bytes(8, "little")
    Path(path).write_bytes(head + len(name).to_bytes(8, "little") + name + value_bytes)
    return Path(path)


def shift_tensor_offset(path: str | Path, tensor: str, by: int = 1) -> Path:
    """Move one tensor's data offset in the header by `by` bytes (no longer aligned)."""
    data = bytearray(Path(path).read_bytes())
    name = tensor.encode()
    at = data.index(len(name).to_bytes(8, "little") + name) + 8 + len(name)
    n_dims = int.from_bytes(data[at:at + 4], "little")
    off = at + 4 + 8 * n_dims + 4
    value = int.from_bytes(data[off:off + 8], "little") + by
    data[off:off + 8] = value.to_bytes(8, "little")
    Path(path).write_bytes(bytes(data))
    return Path(path)


def write_hf(path: str | Path, config: dict[str, Any] | None = None, *, raw_config: Any = None,
             tokenizer_json: str | None = None) -> Path:
    """The tiny model as an HF folder: config.json (base keys updated by `config`, or
    `raw_config` written as it is), model.safetensors, tokenizer.json and tokenizer_config.json."""
    from safetensors.numpy import save_file

    from engine.io.gguf_file import canonical_name
    from engine.io.hf import hf_name

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
           "intermediate_size": FFN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
           "num_key_value_heads": KV_HEADS, "vocab_size": VOCAB, "max_position_embeddings": CONTEXT,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "bos_token_id": 1, "eos_token_id": 2}
    cfg.update(config or {})
    (path / "config.json").write_text(json.dumps(cfg if raw_config is None else raw_config))
    save_file({hf_name(canonical_name(k)): v for k, v in _base_tensors().items()}, str(path / "model.safetensors"))
    tok_json, tok_config = tiny_tokenizer_files()
    (path / "tokenizer.json").write_text(tok_json if tokenizer_json is None else tokenizer_json)
    (path / "tokenizer_config.json").write_text(json.dumps(tok_config))
    return path


# ---------------------------------------------------------------- a GGUF's header, patched in place
# (a writer refuses duplicate names and keys and computes offsets itself: these change the bytes)

def _record(data: bytes | bytearray, name: str) -> int:
    """Where the string `name` (its 8-byte length, then its bytes) first appears in a GGUF:
    the start of a metadata key's record, or of a tensor's info."""
    raw = name.encode()
    return bytes(data).index(len(raw).to_bytes(8, "little") + raw)


def _tensor_fields(data: bytes | bytearray, name: str) -> tuple[int, int]:
    """(where the tensor's type is, where its offset is) in its info record."""
    at = _record(data, name) + 8 + len(name.encode())
    n_dims = int.from_bytes(data[at:at + 4], "little")
    type_at = at + 4 + 8 * n_dims
    return type_at, type_at + 4


def patch_gguf(src: str | Path, dst: str | Path, *, offset_of: dict[str, str] | None = None,
               types: dict[str, int] | None = None, rename: dict[str, str] | None = None,
               values: dict[str, tuple[str, np.ndarray]] | None = None) -> Path:
    """A copy of the GGUF at src, changed: offset_of {tensor: other} gives tensor the other's
    data offset; types {tensor: GGML type} relabels tensors; rename {old: new} renames a tensor
    or a metadata key (same length: the header's size stays); values {tensor: (dtype, array)}
    overwrites an unquantized tensor's data."""
    data = bytearray(Path(src).read_bytes())
    for name, other in (offset_of or {}).items():
        _, to = _tensor_fields(data, name)
        _, frm = _tensor_fields(data, other)
        data[to:to + 8] = data[frm:frm + 8]
    for name, qtype in (types or {}).items():
        at, _ = _tensor_fields(data, name)
        data[at:at + 4] = int(qtype).to_bytes(4, "little")
    for old, new in (rename or {}).items():
        assert len(old.encode()) == len(new.encode()), (old, new)
        at = _record(data, old) + 8
        data[at:at + len(new.encode())] = new.encode()
    if values:
        from engine.io.gguf_header import read_gguf
        infos = read_gguf(Path(src)).tensors
        for name, (dtype, arr) in values.items():
            raw = np.ascontiguousarray(arr, dtype=dtype).tobytes()
            assert len(raw) == infos[name].n_bytes, (name, len(raw), infos[name].n_bytes)
            data[infos[name].offset:infos[name].offset + len(raw)] = raw
    Path(dst).write_bytes(bytes(data))
    return Path(dst)


def patch_safetensors(path: str | Path, change: Any) -> Path:
    """Rewrite a safetensors file's JSON header in place: change(header dict) edits it, or
    returns the header's new text (for duplicate keys, which a dict cannot hold)."""
    path = Path(path)
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    text = change(header)
    raw = (json.dumps(header) if text is None else text).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data[8 + n:])
    return path
