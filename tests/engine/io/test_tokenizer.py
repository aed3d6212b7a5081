"""Tokenizer and chat template against transformers, on the bundled GGUF and on HF tokenizer files.

One known, deliberate difference: for tokenizer.ggml.pre == "smollm", llama.cpp splits off every
digit before GPT-2's pattern (llama-vocab.cpp), as SmolLM2's own tokenizer.json does with
Digits(individual_digits=True). transformers' GGUF converter has no entry for "smollm" and uses
GPT-2's pattern alone. The vocabulary has no multi-digit tokens, so the two only differ where a
run of whitespace precedes a digit ("  12": ours 'ĠĠ','1','2', transformers 'Ġ','Ġ','1','2').
So ids are compared (a) exactly with transformers on digit-free text and (b) with transformers'
tokenizer given SmolLM2's published pre-tokenizer on all text, and (c) the difference is pinned.
"""

from __future__ import annotations

import unicodedata

import pytest
from tokenizers import pre_tokenizers

from engine.errors import ParameterError
from engine.io.gguf_file import read_gguf
from engine.io.load import default_model_path
from engine.io.tokenizer import Tokenizer
from engine.io.workloads import code_edit_rows

from tiny_models import make_tiny_hf

HARD = [
    "", " ", "  ", "\t", "\n\n\n", "   leading", "trailing   ", "a  b   c", "x\t\ty", "line1\r\nline2",
    "héllo wörld", "naïve café", "日本語のテキスト", "中文，标点。", "한국어 텍스트",
    "emoji 😀👍🏽 family 👨‍👩‍👧",
    "Ω≈ç√∫ ½ ² Ⅻ", "\u00a0nbsp\u2003em space", "def f(x):\n    return x**2  # comment\n",
    "if (a && b) { return 0; }\n\t\treturn -1;", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><repo_name>x<file_sep>", "<|im_start", "it's they're we've I'm you'll he'd IT'S",
    "12345 67.89 1e-9 0x1F", "  12", "\n  42", "a 1 b  2", "x =\t3", "¡¿", "\x00\x01\x7f", "\ufffd", "🀄",
    "ﬁ ligature", "    " * 8 + "deep()", "https://example.com/a?b=c&d=e#f", "C:\\path\\to\\file.txt",
]


def _messages() -> list[list[dict]]:
    return [r["messages"] for r in code_edit_rows()]


def _texts() -> list[str]:
    return [m["content"] for msgs in _messages() for m in msgs] + HARD


def _without_numbers(s: str) -> str:
    return "".join(c for c in s if not unicodedata.category(c).startswith("N"))


@pytest.fixture(scope="module")
def ours() -> Tokenizer:
    return Tokenizer.from_gguf_fields(read_gguf(default_model_path()).metadata)


@pytest.fixture(scope="module")
def reference():
    """transformers' tokenizer for the bundled GGUF (~4-9 s; once per module)."""
    from transformers import AutoTokenizer

    path = default_model_path()
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.fixture(scope="module")
def reference_smollm_pre(reference):
    """The same, with SmolLM2's published pre-tokenizer (what llama.cpp's "smollm" does)."""
    import copy

    ref = copy.deepcopy(reference)
    ref.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    return ref


def test_ids_equal_transformers_on_digit_free_text(ours, reference):
    for s in _texts():
        s = _without_numbers(s)
        assert ours.encode(s) == reference.encode(s), repr(s[:80])


def test_ids_equal_transformers_with_smollm_pretokenizer(ours, reference_smollm_pre):
    for s in _texts():
        assert ours.encode(s) == reference_smollm_pre.encode(s), repr(s[:80])


def test_digit_split_follows_llama_cpp(ours, reference):
    ids = ours.encode("  12")
    assert [ours.token_text(i) for i in ids] == ["  ", "1", "2"]
    assert reference.convert_ids_to_tokens(reference.encode("  12")) == ["Ġ", "Ġ", "1", "2"]


def test_decode_round_trips_and_equals_transformers(ours, reference):
    for s in _texts():
        ids = ours.encode(s)
        assert ours.decode(ids) == s == reference.decode(ids), repr(s[:80])
        assert ours.decode(ids, skip_special_tokens=True) == reference.decode(ids, skip_special_tokens=True)


def test_special_tokens_match_whole(ours):
    assert ours.encode("<|im_start|>user\nhi<|im_end|>")[:1] == [1]
    assert ours.encode("<|im_end|>") == [2] and ours.encode("<|endoftext|>") == [0]
    assert ours.decode([1, 2, 0], skip_special_tokens=True) == ""
    assert (ours.bos_id, ours.add_bos, ours.eos_ids[0], ours.vocab_size) == (1, False, 2, 49152)
    assert ours.encode("hi", add_special_tokens=True) == ours.encode("hi", add_special_tokens=False)


def test_chat_template_equals_transformers(ours, reference):
    conversations = _messages() + [
        [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"},
         {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3? ünïcødé 😀"}],
    ]
    for messages in conversations:
        for add_generation_prompt in (True, False):
            want = reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
            assert ours.render_chat(messages, add_generation_prompt) == want
    text = ours.render_chat(conversations[0])
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")


def test_chat_errors_are_parameter_errors(ours):
    with pytest.raises(ParameterError):
        ours.render_chat([{"content": "no role"}])
    strict = Tokenizer.from_gguf_fields({**read_gguf(default_model_path()).metadata, "tokenizer.chat_template":
                                         "{{ raise_exception('roles must alternate') }}"})
    with pytest.raises(ParameterError, match="roles must alternate"):
        strict.render_chat([{"role": "user", "content": "x"}])
    none = Tokenizer.from_gguf_fields({k: v for k, v in read_gguf(default_model_path()).metadata.items()
                                       if k != "tokenizer.chat_template"})
    with pytest.raises(ParameterError, match="no chat template"):
        none.render_chat([{"role": "user", "content": "x"}])


def test_token_text(ours):
    # Whole-character tokens show exactly what they decode to; partial UTF-8 shows as <0xNN>.
    partial = 0
    for i in range(ours.vocab_size):
        decoded, shown = ours.decode([i]), ours.token_text(i)
        if "\ufffd" not in decoded:
            assert shown == decoded, i
        elif shown != decoded:  # (a few tokens really are U+FFFD)
            assert "<0x" in shown and "\ufffd" not in shown, i
            partial += 1
    assert partial > 100
    ids = ours.encode("😀")
    assert "".join(ours.token_text(i) for i in ids) == "<0xF0><0x9F><0x98><0x80>"
    assert ours.token_text(ids[0]) is ours.token_text(ids[0])  # cached
    assert ours.token_text(1) == "<|im_start|>"


def test_hf_files_saved_by_transformers_load_identically(tmp_path, reference):
    """from_files on the tokenizer.json / tokenizer_config.json transformers writes for this model."""
    reference.save_pretrained(tmp_path)
    tok = Tokenizer.from_files(tmp_path / "tokenizer.json", tmp_path / "tokenizer_config.json",
                               chat_template_jinja=tmp_path / "chat_template.jinja")
    for s in _texts():
        assert tok.encode(s) == reference.encode(s), repr(s[:80])
    messages = _messages()[0]
    assert tok.render_chat(messages) == reference.apply_chat_template(messages, tokenize=False,
                                                                      add_generation_prompt=True)
    assert (tok.bos_id, tok.add_bos, tok.eos_ids[0]) == (1, False, 2)


def test_tiny_model_tokenizer_equals_transformers(tmp_path):
    from transformers import AutoTokenizer

    folder = make_tiny_hf("llama", tmp_path / "tiny")
    ref = AutoTokenizer.from_pretrained(folder)
    tok = Tokenizer.from_files(folder / "tokenizer.json", folder / "tokenizer_config.json",
                               generation_config_json=folder / "generation_config.json",
                               config_json=folder / "config.json")
    assert tok.vocab_size == 128 and (tok.bos_id, tok.eos_ids) == (1, (2, 0))
    for s in ["hello the world", "  indented\n\tline", "<|im_start|>user\nx<|im_end|>", "a=b+c; // ~!"]:
        assert tok.encode(s) == ref.encode(s) and tok.decode(tok.encode(s)) == s
    messages = [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "hello"}]
    assert tok.render_chat(messages) == ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_pretokenizer_patterns_match_transformers():
    """Our copies of llama.cpp's split patterns equal the ones transformers uses for the same names."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS

    from engine.io import tokenizer as t

    assert t._LLAMA3_SPLIT == GGUF_PRE_TOKENIZER_SPLITS["llama-bpe"]
    assert t._QWEN2_SPLIT == GGUF_PRE_TOKENIZER_SPLITS["qwen2"]
