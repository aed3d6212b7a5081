"""Tiny random Llama / Qwen2 / Qwen3 models on disk, for tests (reusable: `from tiny_models import ...`;
tests/conftest.py puts tests/ on sys.path).

make_tiny_hf(arch, path)   an HF folder written by transformers' save_pretrained, with a tiny
                           byte-level BPE tokenizer (128 ids, ChatML template) beside it.
make_tiny_gguf(arch, path) the same weights as a GGUF written with gguf.GGUFWriter, q/k permuted
                           for llama exactly as llama.cpp's converter does; tensor types chosen per
                           tensor (F32, F16, BF16, Q8_0, Q4_0, Q4_1) so every fast dequantizer runs.

Shapes: hidden 64, 2 layers, 4 heads, 2 kv heads, intermediate 128, vocab 128. llama has untied
embeddings; qwen2 (q/k/v biases) and qwen3 (q/k norms, head_dim 32 != 64/4) tie them.
The tokenizer covers printable ASCII, '\\n' and '\\t' only: keep test text ASCII.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

VOCAB = 128
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
          " + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
          "{% endif %}")


def tiny_config(arch: str, rope: dict | None = None, sizes: dict | None = None):
    """The transformers config of the tiny model of this architecture; rope: a RoPE scaling
    ({"rope_type": "yarn", "factor": 4.0, ...}) in transformers' rope_parameters form; sizes:
    config fields to change (hidden_size=256, ...)."""
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    common = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=256, rms_norm_eps=1e-5,
                  bos_token_id=1, eos_token_id=2)
    common.update(sizes or {})

    def theta(t: float) -> dict:
        return {"rope_theta": t} if rope is None else {"rope_parameters": dict(rope, rope_theta=t)}

    if arch == "llama":
        return LlamaConfig(**common, tie_word_embeddings=False, **theta(10000.0))
    if arch == "qwen2":
        return Qwen2Config(**common, tie_word_embeddings=True, **theta(1000000.0))
    if arch == "qwen3":
        return Qwen3Config(**common, tie_word_embeddings=True, head_dim=32, **theta(1000000.0))
    raise ValueError(f"no tiny model for {arch!r}")


def tiny_model(arch: str, seed: int = 0, rope: dict | None = None, sizes: dict | None = None):
    """A transformers model with every parameter randomised (biases and norms too, so a mix-up shows)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(arch, rope, sizes), dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model.eval()


def tiny_tokenizer_files() -> tuple[str, dict]:
    """(tokenizer.json text, tokenizer_config.json dict): byte-level BPE over ASCII + 28 merges."""
    import tokenizers
    from tokenizers import AddedToken, decoders, pre_tokenizers
    from tokenizers.models import BPE

    from engine.io.tokenizer import BYTE_TO_CHAR

    alphabet = [BYTE_TO_CHAR[b] for b in [9, 10, *range(32, 127)]]
    vocab = {t: i for i, t in enumerate(SPECIALS + alphabet)}
    merges = []
    for a, b in [("Ġ", "t"), ("h", "e"), ("Ġ", "a"), ("i", "n"), ("e", "r"), ("o", "n"), ("r", "e"),
                 ("Ġt", "he"), ("Ġ", "s"), ("e", "n"), ("Ġ", "w"), ("Ġ", "c"), ("a", "t"), ("o", "r"),
                 ("Ġ", "Ġ"), ("ĠĠ", "ĠĠ"), ("Ġ", "f"), ("i", "s"), ("Ġ", "o"), ("Ġ", "i"), ("e", "s"),
                 ("a", "n"), ("Ġ", "p"), ("Ġ", "b"), ("Ċ", "Ġ"), ("d", "e"), ("Ġ", "d"), ("l", "l")]:
        vocab[a + b] = len(vocab)
        merges.append((a, b))
    assert len(vocab) == VOCAB
    tok = tokenizers.Tokenizer(BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in SPECIALS])
    config = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>",
              "pad_token": "<|im_end|>", "add_bos_token": False, "chat_template": CHATML,
              "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 256}
    return tok.to_str(), config


def make_tiny_hf(arch: str, path: str | Path, seed: int = 0, dtype: torch.dtype = torch.float32,
                 rope: dict | None = None) -> Path:
    """Write a tiny random model of `arch` ("llama" | "qwen2" | "qwen3") as an HF folder at path."""
    path = Path(path)
    model = tiny_model(arch, seed, rope).to(dtype)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer_json, tokenizer_config = tiny_tokenizer_files()
    (path / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2), encoding="utf-8")
    return path


# ---------------------------------------------------------------- GGUF

def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute: HF rotate_half rows -> ggml's interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_GGUF_LAYER = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_tensors(arch: str, seed: int = 0, sizes: dict | None = None) -> dict[str, np.ndarray]:
    """The tiny model's weights under GGUF names (float32, q/k permuted for llama)."""
    cfg = tiny_config(arch, sizes=sizes)
    out = {}
    for name, t in tiny_model(arch, seed, sizes=sizes).state_dict().items():
        w = t.numpy().astype(np.float32)
        if name == "model.embed_tokens.weight":
            out["token_embd.weight"] = w
        elif name == "model.norm.weight":
            out["output_norm.weight"] = w
        elif name == "lm_head.weight":
            if not cfg.tie_word_embeddings:
                out["output.weight"] = w
        else:
            _, _, i, rest = name.split(".", 3)
            if arch == "llama" and rest.startswith("self_attn.q_proj"):
                w = llama_cpp_permute(w, cfg.num_attention_heads)
            elif arch == "llama" and rest.startswith("self_attn.k_proj"):
                w = llama_cpp_permute(w, cfg.num_key_value_heads)
            out[f"blk.{i}.{_GGUF_LAYER[rest]}"] = w
    return out


def default_qtype(name: str, w: np.ndarray):
    """A spread of tensor types over the tiny model, so each fast dequantizer is exercised."""
    from gguf import GGMLQuantizationType as Q

    if w.ndim == 1:
        return Q.F32
    kinds = {"attn_q": Q.Q4_0, "attn_k": Q.Q4_1, "attn_v": Q.F16, "attn_output": Q.BF16,
             "ffn_gate": Q.Q8_0, "ffn_up": Q.F32, "ffn_down": Q.Q4_1}
    return kinds.get(name.split(".")[-2], Q.Q8_0)  # token_embd, output: Q8_0


def _random_q4_k(shape: tuple, seed: int) -> np.ndarray:
    """Random Q4_K blocks for a [n, k] weight (k % 256 == 0): uint8 [n, k / 256 * 144], the
    scales d and dmin small (weights of order 0.1), every other byte random."""
    import gguf
    n, k = shape
    size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q4_K][1]
    raw = np.random.default_rng(seed + n + k).integers(0, 256, (n * (k // 256), size), dtype=np.uint8)
    raw[:, 0:4] = np.array([2e-4, 1e-4], dtype=np.float16).view(np.uint8)
    return raw.reshape(n, k // 256 * size)


def make_tiny_gguf(arch: str, path: str | Path, seed: int = 0, *, qtype_of=default_qtype,
                   tensors: dict[str, np.ndarray] | None = None, metadata_overrides: dict | None = None,
                   gguf_arch: str | None = None, sizes: dict | None = None) -> Path:
    """Write the tiny model of `arch` as a GGUF file; returns path. sizes: tiny_config's.

    tensors: replace the weights (e.g. drop one to test a missing tensor); qtype_of(name, w) picks
    each tensor's type (a gguf.GGMLQuantizationType; integer numpy arrays are written as is);
    metadata_overrides: {"feed_forward_length": 100} overrides `{arch}.` keys (floats are written
    as float32, strings as strings, the rest as uint32).
    """
    import gguf
    from gguf import GGMLQuantizationType as Q

    path = Path(path)
    cfg = tiny_config(arch, sizes=sizes)
    name = gguf_arch or arch
    w = gguf.GGUFWriter(str(path), name)
    meta = {
        "block_count": cfg.num_hidden_layers, "context_length": cfg.max_position_embeddings,
        "embedding_length": cfg.hidden_size, "feed_forward_length": cfg.intermediate_size,
        "attention.head_count": cfg.num_attention_heads, "attention.head_count_kv": cfg.num_key_value_heads,
        "rope.freq_base": float(cfg.rope_parameters["rope_theta"]),
        "attention.layer_norm_rms_epsilon": float(cfg.rms_norm_eps),
    }
    if arch == "qwen3":
        meta["attention.key_length"] = cfg.head_dim
        meta["attention.value_length"] = cfg.head_dim
    meta.update(metadata_overrides or {})
    for k, v in meta.items():
        if isinstance(v, float):
            w.add_float32(f"{name}.{k}", v)
        elif isinstance(v, str):
            w.add_string(f"{name}.{k}", v)
        else:
            w.add_uint32(f"{name}.{k}", int(v))
    tokenizer_json, tokenizer_config = tiny_tokenizer_files()
    model = json.loads(tokenizer_json)["model"]
    tokens = sorted(model["vocab"], key=model["vocab"].get)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in model["merges"]])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(tokenizer_config["chat_template"])

    for tname, arr in (gguf_tensors(arch, seed, sizes) if tensors is None else tensors).items():
        if arr.dtype.kind in "iu":
            w.add_tensor(tname, arr)
            continue
        qt = qtype_of(tname, arr)
        if qt == Q.F32:
            w.add_tensor(tname, arr.astype(np.float32))
        elif qt == Q.F16:
            w.add_tensor(tname, arr.astype(np.float16))
        elif qt == Q.Q4_K:      # gguf-py has no Q4_K quantizer: random blocks of the shape
            w.add_tensor(tname, _random_q4_k(arr.shape, seed), raw_dtype=qt)
        else:
            w.add_tensor(tname, gguf.quants.quantize(arr, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
