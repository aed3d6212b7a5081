"""Hostile and broken model files (issue 12): each one is refused with one ModelLoadError
naming the cause, before anything is sized from it, or (a huge claimed context) loads and runs
with memory sized for the run. Files are the tiny model of tests/fuzz/hostile.py."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fuzz"))
from hostile import (base_tensors, nested_array, shift_tensor_offset, write_gguf, write_hf,  # noqa: E402
                     write_raw_gguf)

from engine.errors import ModelLoadError, NumericalError  # noqa: E402
from engine.io.load import load_model  # noqa: E402

NAN, INF = float("nan"), float("inf")


def refused(path: Path, *needles: str) -> str:
    with pytest.raises(ModelLoadError) as e:
        load_model(path)
    msg = str(e.value)
    assert "\n" not in msg and all(n in msg for n in needles), msg
    return msg


@pytest.mark.parametrize("key, value, needles", [
    ("llama.attention.head_count", (V.UINT32, 0), ["head_count is 0"]),
    ("llama.embedding_length", (V.FLOAT32, NAN), ["embedding_length is nan"]),
    ("llama.embedding_length", (V.FLOAT32, INF), ["embedding_length is inf"]),
    ("llama.embedding_length", (V.STRING, "abc"), ["embedding_length is 'abc'"]),
    ("llama.block_count", (V.UINT64, 10 ** 12), ["block_count is 1,000,000,000,000", "sane range"]),
    ("llama.attention.head_count_kv", (V.UINT32, 3), ["multiple of n_kv_heads"]),
    ("llama.rope.freq_base", (V.FLOAT32, 0.0), ["rope_theta"]),
    ("llama.rope.freq_base", (V.FLOAT32, -10000.0), ["rope_theta"]),
    ("llama.rope.freq_base", (V.FLOAT32, NAN), ["freq_base is nan"]),
    ("llama.attention.layer_norm_rms_epsilon", (V.FLOAT32, NAN), ["epsilon is nan"]),
    ("llama.attention.layer_norm_rms_epsilon", (V.FLOAT32, -1.0), ["rms_eps"]),
    ("llama.context_length", (V.INT32, -5), ["context_length is -5"]),
    ("llama.rope.scaling.factor", (V.FLOAT32, INF), ["factor is inf"]),
    ("llama.attention.key_length", (V.UINT32, 15), ["head_dim must be even"]),
    ("general.alignment", (V.UINT32, 3), ["alignment 3"]),
    ("tokenizer.ggml.tokens", (V.ARRAY, list(range(128))), ["tokenizer.ggml.tokens must be a list of strings"]),
    ("tokenizer.ggml.merges", (V.ARRAY, ["Ġ zzz"]), ["vocabulary and merges do not fit"]),
    ("tokenizer.ggml.merges", (V.ARRAY, ["nospace"]), ["not two tokens"]),
    ("tokenizer.ggml.token_type", (V.ARRAY, [1, 2]), ["token_type has 2 entries"]),
    ("tokenizer.ggml.eos_token_id", (V.BOOL, True), ["eos_token_id is 'True'"]),
    ("tokenizer.ggml.add_bos_token", (V.ARRAY, [1, 2]), ["add_bos_token is '[1, 2]'"]),
])
def test_bad_gguf_metadata_is_one_line(tmp_path, key, value, needles) -> None:
    refused(write_gguf(tmp_path / "m.gguf", {key: value}), *needles)


def test_metadata_nested_100000_deep_is_refused(tmp_path) -> None:
    refused(write_raw_gguf(tmp_path / "m.gguf", "x.nested", nested_array(100_000)), "nested more than")


def test_nan_weights_are_named_at_load(tmp_path) -> None:
    from engine.model.runtime import Runtime
    for name in ("output_norm.weight", "blk.1.ffn_down.weight"):
        tensors = base_tensors()
        tensors[name][3] = NAN
        path = write_gguf(tmp_path / f"{name}.gguf", tensors=tensors)
        with pytest.raises(ModelLoadError, match=name.replace(".", r"\.") + " holds"):
            Runtime(load_model(path), "cpu", "float32")    # a norm already in load_model (small)


def test_nan_block_scale_of_a_packed_weight_is_named(tmp_path) -> None:
    import gguf
    from engine.model.runtime import Runtime
    tensors = base_tensors()
    q = gguf.quants.quantize(tensors["blk.0.attn_q.weight"], Q.Q8_0)
    q[5, :2] = np.frombuffer(np.float16(NAN).tobytes(), np.uint8)     # block 0's scale of row 5
    tensors["blk.0.attn_q.weight"] = q
    loaded = load_model(write_gguf(tmp_path / "m.gguf", tensors=tensors, raw_types={"blk.0.attn_q.weight": Q.Q8_0}))
    with pytest.raises(ModelLoadError, match=r"blk\.0\.attn_q\.weight holds 1 NaN"):
        Runtime(loaded, "cpu", "float32", weights="packed")


def test_tensor_offset_off_by_one_byte_is_refused(tmp_path) -> None:
    path = shift_tensor_offset(write_gguf(tmp_path / "m.gguf"), "output_norm.weight", 1)
    refused(path, "output_norm.weight", "alignment")


def test_known_but_unsupported_quant_type_is_named_as_unsupported(tmp_path) -> None:
    tensors = base_tensors()
    tensors["blk.1.ffn_up.weight"] = np.zeros((128, 66), dtype=np.uint8)   # one IQ2_XXS block a row
    msg = refused(write_gguf(tmp_path / "m.gguf", tensors=tensors, raw_types={"blk.1.ffn_up.weight": Q.IQ2_XXS}),
                  "blk.1.ffn_up.weight", "IQ2_XXS", "does not dequantize")
    assert "corrupt" not in msg


def test_tokenizer_larger_than_the_embedding_is_refused(tmp_path) -> None:
    from tiny_models import tiny_tokenizer_files
    tok = json.loads(tiny_tokenizer_files()[0])
    tok["added_tokens"] += [{"id": 128 + i, "content": f"<extra{i}>", "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True} for i in range(2)]
    refused(write_hf(tmp_path / "hf", tokenizer_json=json.dumps(tok)), "130 tokens", "128 rows")


@pytest.mark.parametrize("config, raw, needles", [
    ({"hidden_size": "abc"}, None, ["hidden_size is 'abc'"]),
    ({"hidden_size": NAN}, None, ["config.json", "holds NaN, which is not a finite number"]),
    ({"num_attention_heads": 0}, None, ["num_attention_heads is 0"]),
    ({"num_hidden_layers": 10 ** 12}, None, ["num_hidden_layers", "sane range"]),
    ({"rope_scaling": "linear"}, None, ["rope_scaling is 'linear'"]),
    ({"rope_scaling": {"rope_type": "linear", "factor": "x"}}, None, ["factor is 'x'"]),
    ({"rope_theta": -1.0}, None, ["rope_theta"]),
    ({"rms_norm_eps": 0}, None, ["rms_eps"]),
    ({"max_position_embeddings": 2.5}, None, ["max_position_embeddings is 2.5"]),
    ({"tie_word_embeddings": "false"}, None, ["tie_word_embeddings is 'false'"]),
    ({"bos_token_id": "x"}, None, []),       # the tokenizer's own bos wins: loads
    (None, [1, 2, 3], ["must be a JSON object, not a list"]),
    (None, "nested", ["nested too deeply"]),
])
def test_bad_hf_config_is_one_line(tmp_path, config, raw, needles) -> None:
    if raw == "nested":
        path = write_hf(tmp_path / "hf", {})
        (path / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    else:
        path = write_hf(tmp_path / "hf", config, raw_config=raw)
    if not needles:
        assert load_model(path).config.bos_id == 1
        return
    refused(path, *needles)


def test_index_whose_weight_map_is_a_list(tmp_path) -> None:
    path = write_hf(tmp_path / "hf")
    (path / "model.safetensors").rename(path / "model-00001.safetensors")
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": ["a", "b"]}))
    refused(path, "weight_map must map tensor names")


def test_a_huge_claimed_context_runs_with_tables_sized_for_the_run(tmp_path) -> None:
    """context_length 2^31 used to allocate a 256 GB RoPE table; the tables and the cache now
    follow what the run needs."""
    from engine.model.runtime import Runtime
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    loaded = load_model(write_gguf(tmp_path / "m.gguf", {"llama.context_length": (V.UINT32, 2 ** 31)}))
    assert loaded.config.max_context == 2 ** 31
    rt = Runtime(loaded, "cpu", "float32")
    report = Decoder(rt, [5, 6, 7, 8], DecodeSettings(draft="lookup", max_new_tokens=6)).run()
    assert report["new_tokens"] >= 1
    assert rt.model.cos.shape[0] <= 4096 and rt.default_capacity <= 4096


def test_non_finite_logits_stop_the_run_with_a_named_error(tmp_path) -> None:
    """A model whose activations overflow (here: float16 with weights that are finite but huge)
    stops with an error instead of printing the same token over and over."""
    from engine.model.runtime import Runtime
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    tensors = base_tensors()
    tensors["blk.0.ffn_down.weight"] *= 3e4          # finite in float16, overflows in the MLP
    tensors["blk.0.ffn_up.weight"] *= 3e4
    rt = Runtime(load_model(write_gguf(tmp_path / "m.gguf", tensors=tensors)), "cpu", "float16",
                 weights="dequantized")
    with pytest.raises(NumericalError, match="NaN or infinite at position 3.*float16"):
        Decoder(rt, [5, 6, 7, 8], DecodeSettings(draft="none", max_new_tokens=4)).run()
    assert math.isfinite(float(rt.model.embed.float().abs().max()))
