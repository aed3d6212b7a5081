"""Hostile model files and texts, second round (issue 34). Files are checked as a whole before
use (byte ranges, names and keys, sizes, value ranges, token ids, norms); templates and the
tokenizer are bounded before the work; a non-finite hidden state at the CPU head is one
NumericalError. Every check has a control: the same change made harmlessly loads and runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fuzz"))
from hostile import CONTEXT, patch_gguf, patch_safetensors, write_gguf, write_hf  # noqa: E402

from engine.errors import ModelLoadError, NumericalError, ParameterError  # noqa: E402
from engine.io.load import check_model, default_model_path, load_model  # noqa: E402

NAN = float("nan")
USER = [{"role": "user", "content": "hi"}]


def refused(path: Path, *needles: str, error: type = ModelLoadError) -> str:
    with pytest.raises(error) as e:
        load_model(path)
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < 600 and all(n in msg for n in needles), msg
    return msg


@pytest.fixture(scope="module")
def bundled() -> Path:
    return default_model_path()


# ---------------------------------------------------------------- GGUF: the file as a whole

@pytest.mark.parametrize("change, needles", [
    # two tensors on the same bytes: loaded and generated other text with exit 0
    ({"offset_of": {"blk.1.attn_q.weight": "blk.0.attn_q.weight"}}, ["blk.1.attn_q.weight", "overlap"]),
    # a relabelled type: its byte size no longer what its data takes (smaller, then larger)
    ({"types": {"blk.0.ffn_down.weight": Q.Q4_0}}, ["blk.0.ffn_down.weight", "Q4_0", "does not match its data"]),
    ({"types": {"blk.0.ffn_down.weight": Q.Q8_0}}, ["blk.0.ffn_down.weight", "Q8_0", "overlap"]),
    # a name given twice (a dict keeps the last); a metadata key given twice
    ({"rename": {"blk.1.attn_q.weight": "blk.0.attn_q.weight"}}, ["tensor 'blk.0.attn_q.weight' twice"]),
    ({"rename": {"general.finetune": "general.basename"}}, ["metadata key 'general.basename' twice"]),
])
def test_gguf_is_checked_as_a_whole(tmp_path, bundled, change, needles) -> None:
    path = patch_gguf(bundled, tmp_path / "m.gguf", **change)
    msg = refused(path, "corrupt", *needles)
    with pytest.raises(ModelLoadError) as e:        # the window's quick look refuses it too
        check_model(path)
    assert str(e.value) == msg


def test_gguf_control_the_same_patches_made_harmlessly_load(tmp_path, bundled) -> None:
    """The patching itself breaks nothing: each field rewritten with its own value loads, and
    gives the bundled model's own weights."""
    path = patch_gguf(bundled, tmp_path / "m.gguf", offset_of={"blk.1.attn_q.weight": "blk.1.attn_q.weight"},
                      types={"blk.0.ffn_down.weight": Q.Q4_1}, rename={"general.finetune": "general.finetune"})
    loaded = load_model(path)
    assert loaded.config.n_layers == 30
    assert loaded.tensor("layers.0.down").equal(load_model(bundled).tensor("layers.0.down"))


def _norm(bundled: Path, name: str = "output_norm.weight") -> np.ndarray:
    from engine.io.gguf_file import dequantize
    from engine.io.gguf_header import read_gguf
    gf = read_gguf(bundled)
    return dequantize(gf, gf.tensors[name]).numpy()


def test_a_norm_all_zero_or_not_finite_is_named(tmp_path, bundled) -> None:
    zero = patch_gguf(bundled, tmp_path / "zero.gguf",
                      values={"output_norm.weight": ("<f4", np.zeros(576, np.float32))})
    refused(zero, "output_norm.weight", "all zero")          # was: empty text, exit 0
    nan = _norm(bundled, "blk.7.attn_norm.weight")
    nan[100] = NAN
    refused(patch_gguf(bundled, tmp_path / "nan.gguf", values={"blk.7.attn_norm.weight": ("<f4", nan)}),
            "blk.7.attn_norm.weight", "NaN")
    # control: the same write with finite, non-zero values loads
    ok = patch_gguf(bundled, tmp_path / "ok.gguf", values={"output_norm.weight": ("<f4", _norm(bundled) * 2)})
    assert load_model(ok).tensor("norm").equal(load_model(bundled).tensor("norm") * 2)


@pytest.mark.parametrize("metadata, needles", [
    ({"llama.rope.scaling.type": (V.STRING, "linear"), "llama.rope.scaling.factor": (V.FLOAT32, 1e30)},
     ["rope.scaling.factor is 1e+30", "sane range"]),
    ({"llama.rope.scaling.type": (V.STRING, "yarn"), "llama.rope.scaling.factor": (V.FLOAT32, 0.0)},
     ["rope.scaling.factor is 0"]),
    ({"llama.rope.scaling.type": (V.STRING, "linear"), "llama.rope.scaling.factor": (V.FLOAT32, -4.0)},
     ["rope.scaling.factor is -4"]),
    ({"llama.rope.scaling.factor": (V.FLOAT32, 1e30)}, ["rope.scaling.factor is 1e+30"]),
    ({"llama.rope.scaling.type": (V.STRING, "yarn"), "llama.rope.scaling.factor": (V.FLOAT32, 4.0),
      "llama.rope.scaling.yarn_log_multiplier": (V.FLOAT32, 1e30)}, ["mscale_all_dim", "sane range"]),
    ({"llama.rope.scaling.type": (V.STRING, "yarn"), "llama.rope.scaling.factor": (V.FLOAT32, 4.0),
      "llama.rope.scaling.attn_factor": (V.FLOAT32, 1e30)}, ["attention_factor", "sane range"]),
])
def test_absurd_rope_scaling_in_a_gguf_is_refused(tmp_path, metadata, needles) -> None:
    refused(write_gguf(tmp_path / "m.gguf", metadata), *needles)


def test_rope_scaling_control_real_values_load(tmp_path) -> None:
    linear = load_model(write_gguf(tmp_path / "a.gguf", {"llama.rope.scaling.type": (V.STRING, "linear"),
                                                        "llama.rope.scaling.factor": (V.FLOAT32, 2.0)}))
    assert (linear.config.rope_scaling.kind, linear.config.rope_scaling.factor) == ("linear", 2.0)
    # a factor without a type is linear scaling, as llama.cpp reads it (was: silently none)
    untyped = load_model(write_gguf(tmp_path / "b.gguf", {"llama.rope.scaling.factor": (V.FLOAT32, 4.0)}))
    assert (untyped.config.rope_scaling.kind, untyped.config.rope_scaling.factor) == ("linear", 4.0)


@pytest.mark.parametrize("rope, needles", [
    ({"rope_type": "linear", "factor": 0}, ["factor is 0"]),        # was read as 1
    ({"rope_type": "linear", "factor": 1e30}, ["factor is 1e+30"]),
    ({"rope_type": "llama3", "factor": -8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 64}, ["factor is -8"]),
    ({"rope_type": "yarn", "factor": 4.0, "attention_factor": 1e30}, ["attention_factor"]),
    ({"rope_type": "yarn", "factor": 4.0, "beta_fast": 1e30}, ["beta_fast"]),
])
def test_absurd_rope_scaling_in_an_hf_config_is_refused(tmp_path, rope, needles) -> None:
    refused(write_hf(tmp_path / "hf", {"rope_scaling": rope}), "sane range", *needles)


def test_hf_rope_scaling_control_loads(tmp_path) -> None:
    cfg = load_model(write_hf(tmp_path / "hf", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}})).config
    assert cfg.rope_scaling.factor == 2.0


# ---------------------------------------------------------------- tokens inside the embedding

def test_a_token_id_past_the_embedding_is_refused(tmp_path) -> None:
    """128 tokens for a 128-row embedding, but one of them has id 100,000: the count check
    passed, and a prompt using that token indexed past the embedding."""
    from tiny_models import tiny_tokenizer_files
    tok = json.loads(tiny_tokenizer_files()[0])
    vocab = tok["model"]["vocab"]
    vocab["M"] = 100_000
    refused(write_hf(tmp_path / "bad", tokenizer_json=json.dumps(tok)), "id 100,000", "128 rows")
    vocab["M"] = 50                     # control: its own id back
    assert load_model(write_hf(tmp_path / "ok", tokenizer_json=json.dumps(tok))).tokenizer.max_id == 127


# ---------------------------------------------------------------- safetensors: the file as a whole

Q_PROJ, O_PROJ = "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.o_proj.weight"


def test_safetensors_tensors_sharing_bytes_are_refused(tmp_path) -> None:
    path = write_hf(tmp_path / "hf")
    st = path / "model.safetensors"

    def share(h: dict) -> None:          # o_proj (64 x 64) read from q_proj's bytes
        h[O_PROJ]["data_offsets"] = h[Q_PROJ]["data_offsets"]
    patch_safetensors(st, share)
    refused(path, O_PROJ, "share bytes")


def test_safetensors_duplicate_names_and_loose_bytes_are_refused(tmp_path) -> None:
    path = write_hf(tmp_path / "hf")
    st = path / "model.safetensors"

    def twice(h: dict) -> str:           # the same name twice: JSON readers keep the last
        text = json.dumps(h)
        entry = json.dumps({Q_PROJ: h[Q_PROJ]})[1:-1]
        return text[:-1] + ", " + entry + "}"
    patch_safetensors(st, twice)
    refused(path, Q_PROJ, "twice")
    path = write_hf(tmp_path / "hf2")
    with open(path / "model.safetensors", "ab") as f:     # bytes past the last tensor
        f.write(b"\0" * 64)
    refused(path, "tensors end at")


def test_safetensors_control_a_rewritten_header_loads(tmp_path) -> None:
    path = write_hf(tmp_path / "hf")
    patch_safetensors(path / "model.safetensors", lambda h: None)
    assert load_model(path).config.hidden_size == 64


# ---------------------------------------------------------------- the command line: one line, exit 2

def _generate(capsys, *args: str) -> tuple[int, str]:
    from specscope.cli import main
    capsys.readouterr()
    try:
        code = main(["generate", "--device", "cpu", "--max-new-tokens", "2", *args])
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def _one_error(code: int, err: str) -> str:
    assert code == 2 and "Traceback" not in err and "panicked" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("specscope") and "error:" in line]
    assert len(lines) == 1, err
    return lines[0]


def test_cli_hostile_gguf_and_prompt_are_one_line(tmp_path, bundled, capsys) -> None:
    overlap = patch_gguf(bundled, tmp_path / "o.gguf", offset_of={"blk.1.attn_q.weight": "blk.0.attn_q.weight"})
    assert "overlap" in _one_error(*_generate(capsys, "--model", str(overlap), "--prompt", "hi"))
    zero = patch_gguf(bundled, tmp_path / "z.gguf", values={"output_norm.weight": ("<f4", np.zeros(576, "f4"))})
    assert "all zero" in _one_error(*_generate(capsys, "--model", str(zero), "--prompt", "hi"))
    assert "lone surrogate" in _one_error(*_generate(capsys, "--prompt", "caf\udce9"))
    code, err = _generate(capsys, "--prompt", "café", "--json")     # control
    assert code == 0, err


def test_cli_norms_overflowing_to_inf_at_the_cpu_head(tmp_path, bundled, capsys) -> None:
    """Norm scales that are finite but huge: the hidden state overflows to inf before the LM
    head; on the fast CPU path the head's top-k screen found no candidate and handed back an
    empty tensor (an IndexError traceback)."""
    huge = patch_gguf(bundled, tmp_path / "h.gguf", values={"output_norm.weight": ("<f4", _norm(bundled) * 1e38)})
    line = _one_error(*_generate(capsys, "--model", str(huge), "--prompt", "hi"))
    assert "NaN or infinite" in line, line


def test_screened_cpu_head_refuses_non_finite_rows() -> None:
    import gguf
    import torch
    from engine.weights import pack
    from engine.weights.cpu_fast import cpu_int8_blocks_top, prepare_cpu_q8
    w = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
    packed = pack(torch.from_numpy(gguf.quants.quantize(w, Q.Q8_0)), "Q8_0")
    head = prepare_cpu_q8(packed, screen=True)
    x = torch.randn(2, 64)
    values, ids = cpu_int8_blocks_top(x, head, 5)           # control: finite rows
    assert values.shape == ids.shape == (2, 5)
    for bad in (float("inf"), NAN):
        x[1, 3] = bad
        with pytest.raises(NumericalError, match="NaN or infinite"):
            cpu_int8_blocks_top(x, head, 5)


# ---------------------------------------------------------------- templates bounded before the work

@pytest.mark.parametrize("template, needle", [
    ("{{ '%.1500000000f'|format(1.0) }}", "precision of 1500000000"),
    ("{{ '{:.1500000000f}'.format(1.0) }}", "precision of 1500000000"),
    ("{{ '%.1500000000f' % 1.0 }}", "precision of 1500000000"),
    ("{{ '{:>{w}}'.format(1, w='999999999') }}", "width or precision of 999999999"),
    ("{{ '%*d' % (100000000, 1) }}", "width or precision of 100000000"),
    ("{{ ('a' * 1000000)|replace('a', 'b' * 100) }}", "replace() would build 100,000,000"),
    ("{{ ('a' * 1000000).replace('', 'b' * 40) }}", "replace() would build"),
    ("{% set s = 'x' * 10000000 %}{{ [s, s, s] ~ '' }}", "concatenation) would build"),
    ("{% set s = 'x' * 10000000 %}{{ [s, s, s]|join }}", "more than 16,777,216"),
    ("{% set s = 'x' * 10000000 %}{{ ','.join([s, s]) }}", "more than 16,777,216"),
    ("{% set s = 'x' * 10000000 %}{{ '{0}{0}'.format(s) }}", "str.format() would build"),
    ("{% set s = 'x' * 10000000 %}{{ '%(a)s%(a)s' % {'a': s} }}", "% formatting would build"),
    ("{% set s = 'x' * 10000000 %}{{ [s, s] }}", "prints a value of more than"),
    ("{% set s = 'x' * 6000000 %}{{ [[s, s], [s, s]] * 2 }}", "repeats a value"),
    ("{{ ('\\t' * 1000000).expandtabs(1000) }}", "expandtabs() would build"),
    ("{{ ('\\n' * 1000000)|indent(100) }}", "indent filter would build"),
    ("{{ ('a' * 100000).translate({97: 'b' * 1000}) }}", "translate() would build"),
    # a namespace changes after its list was weighed: weighed again, not remembered
    ("{% set ns = namespace(x='') %}{% set l = [ns] %}{{ l|length }}{% set ns.x = 'a' * 10000000 %}"
     "{{ (l * 3)|length }}", "repeats a value 3 times"),
])
def test_template_work_is_bounded_before_it_is_done(template, needle) -> None:
    with pytest.raises(ParameterError) as e:
        from engine.io.chat import render_chat_template
        render_chat_template(template, USER)
    assert "chat template" in str(e.value) and needle in str(e.value), str(e.value)


def test_template_control_the_same_forms_at_real_sizes_render_as_jinja_does() -> None:
    """Each bounded form at a real size renders exactly as transformers' own environment."""
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from engine.io.chat import _tojson, render_chat_template
    template = ("{% for m in messages %}{{ '%.2f|%5s|%-3d|%%' % (3.14159, m.role, loop.index) }}"
                "{{ '{:>8}|{:.3f}|{!r}'.format(m.role, 2.5, m.content) }}{{ '{:{w}}'.format(1, w='4') }}"
                "{{ '%*d' % (4, 7) }}{{ m.content|replace('h', 'HH') }}{{ m.content.replace('i', 'II') }}"
                "{{ [m.role, m.content] ~ '' }}{{ [m.role, m.content]|join(', ') }}{{ ','.join([m.role]) }}"
                "{{ [m.role] * 2 }}{{ '\\ta'.expandtabs(4) }}{{ 'a\\nb'|indent(2) }}{{ m|tojson }}"
                "{{ 'ab'.translate({97: 'xy'}) }}{{ '%(r)s' % {'r': m.role} }}{{ '%.1500f'|format(1.5)|length }}"
                "{% endfor %}")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    messages = [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "hello"}]
    assert render_chat_template(template, messages) == env.from_string(template).render(messages=messages)


def test_a_long_chat_still_renders() -> None:
    """2,000 messages, `messages|length` on each: each value's size is remembered for the render
    (immutable), not walked 2,000 times (which ran past the render's time limit)."""
    from engine.io.chat import render_chat_template
    messages = [{"role": "user", "content": f"message {i} " * 10} for i in range(2000)]
    out = render_chat_template("{% for m in messages %}{% if messages|length > 1 %}{{ m.content }}{% endif %}"
                               "{% endfor %}", messages)
    assert out == "".join(m["content"] for m in messages)


def test_a_templates_own_error_message_is_cut_to_one_short_line() -> None:
    from engine.io.chat import render_chat_template
    with pytest.raises(ParameterError) as e:
        render_chat_template("{{ raise_exception('no system role\\n' + 'x' * 16000000) }}", USER)
    msg = str(e.value)
    assert "no system role" in msg and "\n" not in msg and len(msg) < 400, msg[:500]


# ---------------------------------------------------------------- the tokenizer bounded before the work

def _tokenizer(pre_tokenizer: dict | None = None, normalizer: dict | None = None):
    import tokenizers
    from tiny_models import tiny_tokenizer_files
    from engine.io.tokenizer import Tokenizer
    tok = json.loads(tiny_tokenizer_files()[0])
    if pre_tokenizer:
        tok["pre_tokenizer"] = pre_tokenizer
    if normalizer:
        tok["normalizer"] = normalizer
    backend = tokenizers.Tokenizer.from_str(json.dumps(tok))
    return Tokenizer(backend, bos_id=None, eos_ids=(), add_bos=False, chat_template=None, special_tokens={})


def test_a_tokenizer_that_panics_is_one_message(capfd) -> None:
    tok = _tokenizer({"type": "Split", "pattern": {"Regex": "((a+)+)+$"}, "behavior": "Isolated", "invert": False})
    assert tok.encode("hello") == _tokenizer().encode("hello")           # control: plain text
    with pytest.raises(ModelLoadError, match="tokenizer failed on this text .PanicException"):
        tok.encode("a" * 5000 + "x")                                     # Rust: retry-limit-in-match
    assert "panicked" not in capfd.readouterr().err                      # Rust's own report held back


def test_a_normalizer_that_multiplies_text_is_bounded() -> None:
    tok = _tokenizer(normalizer={"type": "Replace", "pattern": {"String": " "}, "content": "x" * 1000})
    with pytest.raises(ParameterError, match="expands this prompt of 20,000 characters"):
        tok.encode(" " * 20_000)                                         # 20 M characters once normalized
    assert len(tok.encode("a b")) > 2                                    # control: it still tokenizes


def test_a_prompt_longer_than_the_context_can_hold_is_refused_before_tokenizing(tmp_path) -> None:
    loaded = load_model(write_gguf(tmp_path / "m.gguf"))
    tok = loaded.tokenizer
    assert tok.max_tokens == CONTEXT

    class Spy:                          # the Rust tokenizer, failing the test if it is reached
        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            return getattr(self.real, name)

        def encode(self, *a, **k):
            raise AssertionError("tokenized")

    tok._backend = Spy(tok._backend)
    limit = CONTEXT * tok._token_chars
    with pytest.raises(ParameterError, match=f"{limit + 1:,} characters long.*context of {CONTEXT} tokens"):
        tok.encode("a" * (limit + 1))
    with pytest.raises(ModelLoadError, match="AssertionError: tokenized"):   # control: a text that may fit
        tok.encode("a" * limit)


def test_a_lone_surrogate_is_one_message(tokenizer) -> None:
    with pytest.raises(ParameterError, match=r"lone surrogate \(U\+D800\) at character 3"):
        tokenizer.encode("ab\ud800c")
    with pytest.raises(ParameterError, match="lone surrogate"):
        tokenizer.encode(tokenizer.render_chat([{"role": "user", "content": "x\udfff"}]), add_special_tokens=False)
    assert tokenizer.encode("ab\U0001F642c")                             # control: a real astral character
