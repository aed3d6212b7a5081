"""Write random-weight GGUF models of real shapes, in real quantization mixes, for tests and benchmarks.

    python bench/make_model.py --shape qwen3-8b --recipe Q4_K_M --out /tmp/m/q4km.gguf
    python bench/make_model.py --shape qwen3-8b --recipe BF16   --out /tmp/m/bf16.gguf

gguf's writer cannot quantize K-quants, but random bytes are valid K-quant (and Q4_0/Q4_1/Q8_0)
blocks once each block's float16 scales are set to sane values, which is what this does. The
values are noise, but every byte is laid out as llama.cpp lays it out, so loading, packing,
the kernels and their cost are exercised as on a real download. Tensors are generated and written
one at a time (the writer streams), so an 8B model needs no more memory than its largest tensor.

The tokenizer is copied from a real GGUF (--tokenizer-from; default: the bundled SmolLM2, whose
49,152-token vocabulary is the vocab of the qwen3-8b shape here).

Recipes: Q4_K_M as llama.cpp's llama_model_quantize assigns it (Q4_K for most linear weights;
Q6_K for the output, and for attn_v / ffn_down in the first and last eighth of the layers and
every third layer in between), Q4_0, Q4_1, Q8_0, Q6_K, Q5_K (Q5_K_M-like: Q6_K where Q4_K_M has
it), BF16 and F16 (no quantization).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q, GGUFWriter, LlamaFileType  # noqa: E402


@dataclass(frozen=True)
class Shape:
    arch: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    vocab: int
    context: int = 8192
    tied: bool = False


SHAPES = {
    # an 8B-like model: Qwen3-8B's transformer (7.35 B parameters) with a 49,152-token vocabulary
    "qwen3-8b": Shape("qwen3", 4096, 36, 32, 8, 128, 12288, 49152, 40960),
    # a few hundred MB, for CPU tests of the streaming loader
    "small": Shape("llama", 1024, 8, 16, 4, 64, 4096, 49152, 4096),
    "tiny": Shape("llama", 256, 2, 4, 2, 64, 512, 49152, 2048, tied=True),
    # the bundled SmolLM2-135M's transformer (random weights): its kernels' shapes on a device
    # the bundled file is not carried to
    "smollm2-135m": Shape("llama", 576, 30, 9, 3, 64, 1536, 49152, 8192, tied=True),
}

# (offset of each float16 field in a block, typical magnitude) for sane random blocks
F16_FIELDS = {
    Q.Q8_0: ((0, 2e-4),), Q.Q4_0: ((0, 3e-3),), Q.Q4_1: ((0, 3e-3), (2, -2e-2)),
    Q.Q4_K: ((0, 6e-5), (2, 6e-5)), Q.Q5_K: ((0, 3e-5), (2, 3e-5)), Q.Q6_K: ((208, 1e-5),),
}
FILE_TYPES = {"Q4_K_M": LlamaFileType.MOSTLY_Q4_K_M, "Q5_K_M": LlamaFileType.MOSTLY_Q5_K_M,
              "Q4_0": LlamaFileType.MOSTLY_Q4_0, "Q4_1": LlamaFileType.MOSTLY_Q4_1,
              "Q8_0": LlamaFileType.MOSTLY_Q8_0, "Q6_K": LlamaFileType.MOSTLY_Q6_K,
              "BF16": LlamaFileType.MOSTLY_BF16, "F16": LlamaFileType.MOSTLY_F16}


def more_bits(layer: int, n_layers: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers and every third one."""
    return layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2


def tensor_type(recipe: str, name: str, layer: int, n_layers: int) -> Q:
    if recipe in ("BF16", "F16"):
        return Q.BF16 if recipe == "BF16" else Q.F16
    if recipe in ("Q4_0", "Q4_1", "Q8_0", "Q6_K"):
        return Q[recipe]
    base = Q.Q4_K if recipe == "Q4_K_M" else Q.Q5_K
    if name == "output.weight":
        return Q.Q6_K
    if name.endswith(("attn_v.weight", "ffn_down.weight")) and more_bits(layer, n_layers):
        return Q.Q6_K
    return base


def random_blocks(rows: int, cols: int, qtype: Q, rng: np.random.Generator) -> np.ndarray:
    """uint8 [rows, bytes per row]: random quant bytes, float16 scales set to sane values."""
    block, size = GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    for off, mag in F16_FIELDS[qtype]:
        scale = (rng.random(nb, dtype=np.float32) * 0.5 + 0.75) * mag
        raw[:, off:off + 2] = scale.astype(np.float16).view(np.uint8).reshape(nb, 2)
    return raw.reshape(rows, cols // block * size)


def tensors(s: Shape):
    """(gguf name, shape [out, in] or [n], layer) in llama.cpp's order."""
    yield "token_embd.weight", (s.vocab, s.hidden), -1
    for i in range(s.layers):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", (s.hidden,), i
        yield p + "attn_q.weight", (s.heads * s.head_dim, s.hidden), i
        yield p + "attn_k.weight", (s.kv_heads * s.head_dim, s.hidden), i
        yield p + "attn_v.weight", (s.kv_heads * s.head_dim, s.hidden), i
        if s.arch == "qwen3":
            yield p + "attn_q_norm.weight", (s.head_dim,), i
            yield p + "attn_k_norm.weight", (s.head_dim,), i
        yield p + "attn_output.weight", (s.hidden, s.heads * s.head_dim), i
        yield p + "ffn_norm.weight", (s.hidden,), i
        yield p + "ffn_gate.weight", (s.inter, s.hidden), i
        yield p + "ffn_up.weight", (s.inter, s.hidden), i
        yield p + "ffn_down.weight", (s.hidden, s.inter), i
    yield "output_norm.weight", (s.hidden,), -1
    if not s.tied:
        yield "output.weight", (s.vocab, s.hidden), -1


def make(name: str, shape: tuple[int, ...], qtype: Q, rng: np.random.Generator) -> np.ndarray:
    if len(shape) == 1:                                  # norms: float32 near 1
        return (1.0 + 0.1 * rng.standard_normal(shape[0])).astype(np.float32)
    rows, cols = shape
    if qtype in (Q.BF16, Q.F16):
        # random bit patterns, fast for billions of weights: random sign and mantissa, exponent
        # chosen so magnitudes lie in [1/128, 1/16) (bfloat16: bias 127, 7 mantissa bits;
        # float16: bias 15, 10 mantissa bits)
        bits = rng.integers(0, 1 << 16, size=(rows, cols), dtype=np.uint16)
        if qtype == Q.BF16:
            exp = (120 + (bits & 3)).astype(np.uint16) << 7
            w = (bits & 0x807F) | exp
        else:
            exp = (8 + (bits & 3)).astype(np.uint16) << 10
            w = (bits & 0x83FF) | exp
        return w.view(np.uint8).reshape(rows, cols * 2) if qtype == Q.BF16 else w.view(np.float16)
    return random_blocks(rows, cols, qtype, rng)


def tokenizer_fields(path: Path) -> dict:
    from engine.io.gguf_file import read_gguf
    return {k: v for k, v in read_gguf(path).metadata.items() if k.startswith("tokenizer.")}


def _add_fields(w: GGUFWriter, fields: dict) -> None:
    for k, v in fields.items():
        if isinstance(v, list):
            w.add_array(k, v)
        elif isinstance(v, str):
            w.add_string(k, v)
        elif isinstance(v, bool):
            w.add_bool(k, v)
        elif isinstance(v, int):
            w.add_uint32(k, v)
        else:
            w.add_float32(k, v)


def write_model(out: Path, shape: Shape, recipe: str, tokenizer_from: Path | None = None,
                seed: int = 0, progress=print) -> Path:
    from engine.io.load import default_model_path

    rng = np.random.default_rng(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(out), shape.arch)
    w.add_file_type(int(FILE_TYPES[recipe]))
    w.add_name(f"random {shape.arch} {recipe}")
    a = shape.arch
    w.add_uint32(f"{a}.context_length", shape.context)
    w.add_uint32(f"{a}.embedding_length", shape.hidden)
    w.add_uint32(f"{a}.block_count", shape.layers)
    w.add_uint32(f"{a}.feed_forward_length", shape.inter)
    w.add_uint32(f"{a}.attention.head_count", shape.heads)
    w.add_uint32(f"{a}.attention.head_count_kv", shape.kv_heads)
    w.add_uint32(f"{a}.attention.key_length", shape.head_dim)
    w.add_uint32(f"{a}.attention.value_length", shape.head_dim)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{a}.rope.freq_base", 1000000.0)
    _add_fields(w, tokenizer_fields(tokenizer_from or default_model_path()))
    plan = []
    for name, shp, layer in tensors(shape):
        qt = Q.F32 if len(shp) == 1 else tensor_type(recipe, name, layer, shape.layers)
        if name == "token_embd.weight" and recipe in ("Q4_K_M", "Q5_K_M"):
            qt = Q.Q4_K if recipe == "Q4_K_M" else Q.Q5_K
        plan.append((name, shp, qt))
        if qt == Q.F32:
            w.add_tensor_info(name, shp, np.dtype(np.float32), 4 * shp[0])
        else:
            block, size = GGML_QUANT_SIZES[qt]
            nbytes = shp[0] * shp[1] // block * size
            w.add_tensor_info(name, (shp[0], shp[1] // block * size), np.dtype(np.uint8), nbytes, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    t0 = time.perf_counter()
    for i, (name, shp, qt) in enumerate(plan):
        w.write_tensor_data(make(name, shp, qt, rng))
        if progress and (i % 50 == 0 or i == len(plan) - 1):
            progress(f"  wrote {i + 1}/{len(plan)} tensors ({time.perf_counter() - t0:.1f} s)")
    w.close()
    return out


def write_tokenizer(out: Path, tokenizer_from: Path | None = None) -> Path:
    """A GGUF holding only a tokenizer (no tensors, ~2 MB): what --tokenizer-from needs on a
    machine without the bundled model (bench/gpu_speed_session.sh carries it to the device)."""
    from engine.io.load import default_model_path
    out.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(out), "llama")
    _add_fields(w, tokenizer_fields(tokenizer_from or default_model_path()))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-8b")
    ap.add_argument("--recipe", choices=sorted(FILE_TYPES), default="Q4_K_M")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer-from", default=None, help="a GGUF whose tokenizer to copy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-only", action="store_true",
                    help="write only the tokenizer (of --tokenizer-from) to --out: a ~2 MB GGUF")
    a = ap.parse_args()
    if a.tokenizer_only:
        out = write_tokenizer(Path(a.out), Path(a.tokenizer_from) if a.tokenizer_from else None)
        print(f"{out}: {out.stat().st_size / 1e6:.1f} MB (tokenizer only)")
        return
    out = write_model(Path(a.out), SHAPES[a.shape], a.recipe,
                      Path(a.tokenizer_from) if a.tokenizer_from else None, a.seed)
    print(f"{out}: {out.stat().st_size / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
