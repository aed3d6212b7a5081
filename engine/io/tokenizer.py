"""The model's tokenizer: byte-level BPE run by the `tokenizers` library.

Two sources:
  * a GGUF's metadata (tokenizer.ggml.*): we rebuild the BPE from the vocabulary and merges and
    choose the pre-tokenizer llama.cpp uses for tokenizer.ggml.pre;
  * an HF folder: tokenizer.json as is, plus tokenizer_config.json (chat template, bos/eos,
    add_bos_token) and generation_config.json (eos ids).

    tok = loaded.tokenizer
    ids = tok.encode(tok.render_chat([{"role": "user", "content": "hi"}]), add_special_tokens=False)
    tok.token_text(ids[-1])   # 'Ċ' shown as '\\n'; a lone UTF-8 lead byte as '<0xE2>'
"""

from __future__ import annotations

import base64
import codecs
import json
import os
import re
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

import tokenizers
from tokenizers import AddedToken, Regex, decoders, pre_tokenizers
from tokenizers.models import BPE

from engine.io.chat import render_chat_template
from engine.errors import ModelLoadError, ParameterError, SpecscopeError
from engine.io.jsonfile import MiB, check_file, read_json

MAX_TOKENIZER_BYTES = 128 * MiB   # the largest real tokenizer.json files are ~35 MB
MAX_CONFIG_BYTES = 16 * MiB       # config.json / generation_config.json: a few KB


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the alphabet byte-level BPE vocabularies are spelled in)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


BYTE_TO_CHAR = _bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}
_BYTE_ALPHABET = frozenset(BYTE_TO_CHAR.values())


def _hex_bytes(err: UnicodeDecodeError) -> tuple[str, int]:
    # Bytes that are not (yet) a whole UTF-8 character are shown as <0xE2>, like llama.cpp's byte tokens.
    return "".join(f"<0x{b:02X}>" for b in err.object[err.start:err.end]), err.end


codecs.register_error("specscope_hex", _hex_bytes)

# Split patterns of llama.cpp's pre-tokenizers (llama-vocab.cpp), by tokenizer.ggml.pre.
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_DIGITS_THEN_GPT2 = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva")
_LLAMA3_FAMILY = ("llama-bpe", "llama3", "llama-v3", "falcon3", "smaug-bpe", "dbrx", "pixtral")
_QWEN2_FAMILY = ("qwen2", "deepseek-r1-qwen", "megrez")

# Control tokens llama.cpp also treats as end of generation, whatever eos_token_id says.
_END_OF_GENERATION = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                      "<|eom_id|>", "<EOT>", "<|end_of_text|>", "<｜end▁of▁sentence｜>")


# Text bounds before tokenizing: the tokenizers library takes ~230 bytes of memory a character
# (3.6M characters of prose: 0.8 GB), so 4M characters (a 1M-token context) is ~1 GB.
MAX_TOKENIZE_CHARS = 4 << 20
CHARS_PER_TOKEN = 32         # a token covers at most this many characters (or the longest token)
_NORMALIZE_STEP = 1 << 20    # characters a measuring step may produce at worst
_PROBE_TEXT = "Hello, world! 3.14 naïve café 你好 🙂\n\tdef f(x):\n    return x"
# How far a normalizer can lengthen text: each output is at most mult x input + add characters
# (Unicode's own bounds for NFC 3, NFD 4, NFKC/NFKD 18; a case change 3; Bert: Chinese
# characters spaced out, after NFD).
_GROWTH = {"NFC": 3.0, "NFD": 4.0, "NFKC": 18.0, "NFKD": 18.0, "Lowercase": 3.0, "BertNormalizer": 12.0,
           "ByteLevel": 4.0, "Strip": 1.0, "StripAccents": 1.0, "Nmt": 1.0}


def _normalizer_growth(normalizer: Any) -> tuple[float, float]:
    """(mult, add): a normalized text is at most mult x its length + add characters."""
    if normalizer is None:
        return 1.0, 0.0
    try:
        return _growth(json.loads(normalizer.__getstate__()), 0)
    except Exception:  # noqa: BLE001 (a normalizer we cannot read: measured on every text)
        return float(MAX_TOKENIZE_CHARS), 0.0


def _growth(spec: Any, depth: int) -> tuple[float, float]:
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind == "Sequence" and depth < 32:
        mult, add = 1.0, 0.0
        for part in spec.get("normalizers") or []:
            m, a = _growth(part, depth + 1)
            mult, add = mult * m, add * m + a
        return mult, add
    if kind == "Replace":
        content = len(str(spec.get("content", "")))
        pattern = spec.get("pattern") or {}
        literal = pattern.get("String") if isinstance(pattern, dict) else None
        if literal:                                 # each match of len(literal) becomes content
            return max(1.0, content / len(literal)), 0.0
        return content + 1.0, float(content)        # a regex may match between every character
    if kind == "Prepend":
        return 1.0, float(len(str(spec.get("prepend", ""))))
    if kind == "Precompiled":                       # sentencepiece's map: a match becomes a piece
        return float(max(1, _longest_piece(spec.get("precompiled_charsmap")))), 0.0
    return _GROWTH.get(kind, 18.0), 0.0


def _longest_piece(charsmap: Any) -> int:
    """The longest replacement in a sentencepiece precompiled charsmap (a u32 trie size, the
    trie, then the NUL-separated replacements); its whole size if it does not parse."""
    try:
        blob = base64.b64decode(charsmap) if isinstance(charsmap, str) else bytes(charsmap or b"")
        trie = int.from_bytes(blob[:4], "little")
        pieces = blob[4 + trie:]
        return max((len(p.decode("utf-8", "replace")) for p in pieces.split(b"\0")), default=0)
    except Exception:  # noqa: BLE001
        return len(str(charsmap))


@contextmanager
def _tokenizer_call(what: str, quiet: bool = True) -> Iterator[None]:
    """A failure inside the tokenizers library as one ModelLoadError: it raises bare
    Exceptions, and pyo3's PanicException (a BaseException) when its Rust code panics (a
    model's regex that fails on some text). `quiet`: Rust's panic hook writes its message (and,
    under RUST_BACKTRACE, a backtrace) straight to file descriptor 2 before pyo3 raises, so fd 2
    goes to a temporary file meanwhile; anything else written there is passed on."""
    try:
        with _stderr_held(quiet):
            yield
    except (KeyboardInterrupt, SystemExit, GeneratorExit, SpecscopeError):
        raise
    except BaseException as e:  # noqa: BLE001
        why = " ".join(str(e).split())
        raise ModelLoadError(f"the model's tokenizer failed {what} ({type(e).__name__}: "
                             f"{why[:200] + '...' if len(why) > 200 else why}); its tokenizer is broken: "
                             "download the model's tokenizer files again") from None


_STDERR_LOCK = threading.Lock()     # one redirection at a time: two threads would restore each other's


@contextmanager
def _stderr_held(hold: bool) -> Iterator[None]:
    """File descriptor 2 redirected to a temporary file for the block; its content is written
    back unless the block raised (then it is a panic's message, said in our own error)."""
    if not hold:
        yield
        return
    with _STDERR_LOCK, _stderr_to_file():
        yield


@contextmanager
def _stderr_to_file() -> Iterator[None]:
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):     # no fd 2 (a GUI without a console)
        saved = -1
    if saved < 0:
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        failed = True
        try:
            yield
            failed = False
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if not failed:
                held.seek(0)
                text = held.read()
                if text:
                    os.write(2, text)


def _pre_tokenizer(pre: str | None) -> tuple[Any, bool]:
    """(pre-tokenizer, ignore_merges) matching llama.cpp for tokenizer.ggml.pre."""
    if pre in _DIGITS_THEN_GPT2:
        # llama.cpp splits off every digit (\p{N}) first, then applies GPT-2's pattern; this is
        # also SmolLM2's own tokenizer.json (Digits(individual_digits) + ByteLevel).
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]), False
    if pre in _LLAMA3_FAMILY:
        split = _LLAMA3_SPLIT
    elif pre in _QWEN2_FAMILY:
        split = _QWEN2_SPLIT
    else:  # "default", "gpt-2", unknown: GPT-2's own pattern
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), False
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), \
        pre in _LLAMA3_FAMILY  # llama.cpp sets ignore_merges for Llama 3, as its tokenizer.json does


def _gguf_vocabulary(md: Mapping[str, Any], source: str) -> tuple[list[str], list[str], list[int]]:
    """A GGUF's tokens, merges and token types, checked: a byte-level BPE ('gpt2'), lists of the
    right kinds, one type per token."""
    kind = md.get("tokenizer.ggml.model")
    tokens = md.get("tokenizer.ggml.tokens")
    merges = md.get("tokenizer.ggml.merges")
    if kind != "gpt2":
        raise ModelLoadError(
            f"{source}: tokenizer type {kind!r} is not supported from a GGUF (only byte-level BPE, 'gpt2', "
            "as used by Llama 3, SmolLM and Qwen). Use the model's Hugging Face folder instead."
        )
    if not tokens or not merges:
        raise ModelLoadError(f"{source}: the GGUF lacks tokenizer.ggml.tokens or tokenizer.ggml.merges; "
                             "re-convert it with a current llama.cpp.")
    types = md.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    for key, items, kind in (("tokens", tokens, str), ("merges", merges, str), ("token_type", types, int)):
        if not isinstance(items, list) or not all(isinstance(t, kind) and not isinstance(t, bool) for t in items):
            raise ModelLoadError(f"{source}: tokenizer.ggml.{key} must be a list of "
                                 f"{'strings' if kind is str else 'integers'}; the file is corrupt.")
    if len(types) != len(tokens):
        raise ModelLoadError(f"{source}: tokenizer.ggml.token_type has {len(types)} entries for "
                             f"{len(tokens)} tokens; the file is corrupt.")
    return tokens, merges, types


def _gguf_backend(tokens: list[str], merges: list[str], types: list[int], pre: str | None,
                  source: str) -> tokenizers.Tokenizer:
    """The byte-level BPE for a GGUF's vocabulary, its control and user-defined tokens added."""
    # Tokens are stored in the byte alphabet ('Ġ' for a space); a few files spell some in plain
    # UTF-8, which we respell as transformers does.
    vocab = {}
    for i, t in enumerate(tokens):
        vocab[t if set(t) <= _BYTE_ALPHABET else "".join(BYTE_TO_CHAR[b] for b in t.encode())] = i
    pre_tokenizer, ignore_merges = _pre_tokenizer(pre)
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    if not all(len(p) == 2 for p in pairs):
        raise ModelLoadError(f"{source}: a tokenizer merge is not two tokens separated by a space; "
                             "the file is corrupt.")
    try:
        backend = tokenizers.Tokenizer(BPE(vocab, pairs, ignore_merges=ignore_merges, fuse_unk=False))
    except Exception as e:  # tokenizers raises bare Exceptions (a merge naming an unknown token)
        raise ModelLoadError(f"{source}: the tokenizer's vocabulary and merges do not fit together "
                             f"({e}); the file is corrupt.") from e
    backend.pre_tokenizer = pre_tokenizer
    backend.decoder = decoders.ByteLevel()
    # token_type 3 = control (<|im_start|>), 4 = user defined (<think>): matched whole in text.
    # A control token spelled outside the byte alphabet is a known llama.cpp mislabel; skipped
    # (as transformers does) so the vocabulary does not grow past the embedding.
    backend.add_special_tokens([AddedToken(t, normalized=False, special=True)
                                for t, k in zip(tokens, types) if k == 3 and set(t) <= _BYTE_ALPHABET])
    backend.add_tokens([AddedToken(t, normalized=False, special=False)
                        for t, k in zip(tokens, types) if k == 4 and t in vocab])
    return backend


def _check_gguf_ids(md: Mapping[str, Any], source: str) -> None:
    """The special token ids are ints (not bools) and add_bos_token a bool."""
    for key in ("bos_token_id", "eos_token_id", "eot_token_id", "eom_token_id", "unknown_token_id",
                "padding_token_id", "add_bos_token"):
        v = md.get(f"tokenizer.ggml.{key}")
        flag = key == "add_bos_token"
        if v is not None and (isinstance(v, bool) != flag or not isinstance(v, int)):
            raise ModelLoadError(f"{source}: tokenizer.ggml.{key} is {str(v)[:40]!r}; "
                                 f"{'true or false' if flag else 'a token id'} is needed here. The file is corrupt.")


class Tokenizer:
    """Text <-> token ids for one model, plus its chat template."""

    def __init__(self, backend: tokenizers.Tokenizer, *, bos_id: int | None, eos_ids: tuple[int, ...],
                 add_bos: bool, chat_template: str | None, special_tokens: Mapping[str, str | None]):
        self._backend = backend
        self.vocab_size: int = backend.get_vocab_size(with_added_tokens=True)
        self.bos_id = bos_id
        self.eos_ids = eos_ids
        self.add_bos = add_bos
        self.chat_template = chat_template
        self.special_tokens = dict(special_tokens)  # bos_token, eos_token, ... for the template
        added = backend.get_added_tokens_decoder()
        self._added_text = {i: t.content for i, t in added.items()}
        self.special_ids = frozenset(i for i, t in added.items() if t.special)
        self._byte_level = "ByteLevel" in repr(backend.decoder)
        self._texts: dict[int, str] = {}
        vocab = backend.get_vocab(with_added_tokens=True)
        self.max_id: int = max(vocab.values(), default=-1)   # ids may skip: the loader checks the largest
        # The model's context in tokens (set by engine.io.load): a text longer than it can hold,
        # at _token_chars characters a token, is refused before it is tokenized.
        self.max_tokens: int | None = None
        self._token_chars = max(CHARS_PER_TOKEN, max(map(len, vocab), default=0))
        self._growth = _normalizer_growth(backend.normalizer)
        with _tokenizer_call("on a plain sample text"):     # a regex that panics: refused at load
            backend.decode(backend.encode(_PROBE_TEXT, add_special_tokens=False).ids)

    @property
    def backend(self) -> tokenizers.Tokenizer:
        return self._backend

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids; special tokens written in the text (<|im_start|>) match whole. BOS only if add_bos.

        The text is bounded before the tokenizer sees it (ParameterError): valid Unicode (no lone
        surrogate), no longer than the model's context can hold (max_tokens), and no more than
        MAX_TOKENIZE_CHARS once normalized (a normalizer may multiply it). A failure inside the
        tokenizer (a panic in its Rust code) is one ModelLoadError."""
        self._check_text(text)
        with _tokenizer_call("on this text"):
            ids = self._backend.encode(text, add_special_tokens=False).ids
        if add_special_tokens and self.add_bos and self.bos_id is not None:
            ids.insert(0, self.bos_id)
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        with _tokenizer_call("to decode tokens", quiet=False):     # per window: no fd games
            return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def _check_text(self, text: str) -> None:
        if not isinstance(text, str):
            raise ParameterError(f"the prompt is a {type(text).__name__}, not text")
        n = len(text)
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:     # '\ud800': from JSON escapes or undecodable argv bytes
                raise ParameterError(f"the prompt holds a lone surrogate (U+{ord(text[e.start]):04X}) at character "
                                     f"{e.start + 1:,}, which is not valid Unicode text: save it as UTF-8") from None
        if self.max_tokens is not None and n > self.max_tokens * self._token_chars:
            raise ParameterError(
                f"the prompt is {n:,} characters long, more than the model's context of {self.max_tokens:,} tokens "
                f"can hold ({self._token_chars} characters a token at most): shorten it")
        if n > MAX_TOKENIZE_CHARS:
            raise ParameterError(f"the prompt is {n:,} characters long; specscope tokenizes at most "
                                 f"{MAX_TOKENIZE_CHARS:,}: shorten it")
        grow, add = self._growth
        if n * grow + add <= MAX_TOKENIZE_CHARS:
            return
        # this normalizer could expand the text past the limit: measure it, a bounded piece at a time
        step, total = max(1, int(_NORMALIZE_STEP // grow)), 0
        normalizer = self._backend.normalizer
        with _tokenizer_call("on this text"):
            for i in range(0, n, step):
                total += len(normalizer.normalize_str(text[i:i + step]))
                if total > MAX_TOKENIZE_CHARS:
                    break
        if total > MAX_TOKENIZE_CHARS:
            raise ParameterError(
                f"the model's tokenizer expands this prompt of {n:,} characters to more than "
                f"{MAX_TOKENIZE_CHARS:,} (its normalizer can multiply text {grow:,.0f}-fold): shorten it")

    def token_text(self, token_id: int) -> str:
        """The text one token stands for, for display (cached: views call this per token)."""
        text = self._texts.get(token_id)
        if text is None:
            text = self._texts[token_id] = self._token_text(token_id)
        return text

    def _token_text(self, token_id: int) -> str:
        if token_id in self._added_text:
            return self._added_text[token_id]
        piece = self._backend.id_to_token(token_id)
        if piece is None:
            return f"<id {token_id}>"  # an id past the vocabulary (models often pad their embedding)
        if self._byte_level:
            data = b"".join(bytes([CHAR_TO_BYTE[c]]) if c in CHAR_TO_BYTE else c.encode() for c in piece)
        elif m := re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", piece):  # sentencepiece byte fallback
            data = bytes([int(m.group(1), 16)])
        else:
            data = piece.replace("\u2581", " ").encode()
        return data.decode("utf-8", errors="specscope_hex")

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The chat messages as the model's template formats them (identical to transformers)."""
        return render_chat_template(self.chat_template, messages, add_generation_prompt=add_generation_prompt,
                                    special_tokens=self.special_tokens)

    # ------------------------------------------------------------ construction

    @classmethod
    def from_gguf_fields(cls, md: Mapping[str, Any], source: str = "the GGUF file") -> Tokenizer:
        """Build from GGUF metadata (tokenizer.ggml.* and tokenizer.chat_template)."""
        tokens, merges, types = _gguf_vocabulary(md, source)
        backend = _gguf_backend(tokens, merges, types, md.get("tokenizer.ggml.pre"), source)
        _check_gguf_ids(md, source)

        def token(key: str) -> str | None:
            i = md.get(f"tokenizer.ggml.{key}")
            return tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else None

        bos_id = md.get("tokenizer.ggml.bos_token_id")
        eos = [md.get(f"tokenizer.ggml.{k}") for k in ("eos_token_id", "eot_token_id", "eom_token_id")]
        eos += [i for i, (t, k) in enumerate(zip(tokens, types)) if k == 3 and t in _END_OF_GENERATION]
        return cls(
            backend,
            bos_id=bos_id if isinstance(bos_id, int) else None,
            eos_ids=tuple(dict.fromkeys(i for i in eos if isinstance(i, int) and 0 <= i < len(tokens))),
            add_bos=bool(md.get("tokenizer.ggml.add_bos_token", False)),
            chat_template=md.get("tokenizer.chat_template"),
            special_tokens={"bos_token": token("bos_token_id"), "eos_token": token("eos_token_id"),
                            "unk_token": token("unknown_token_id"), "pad_token": token("padding_token_id")},
        )

    @classmethod
    def from_files(cls, tokenizer_json: str | Path, tokenizer_config_json: str | Path | None = None, *,
                   generation_config_json: str | Path | None = None, config_json: str | Path | None = None,
                   chat_template_jinja: str | Path | None = None) -> Tokenizer:
        """Build from an HF folder's files (only tokenizer.json is required)."""
        check_file(tokenizer_json, "a tokenizer.json", max_bytes=MAX_TOKENIZER_BYTES, error=ModelLoadError,
                   fix="download the model's tokenizer.json again")
        try:
            backend = tokenizers.Tokenizer.from_file(str(tokenizer_json))
        except BaseException as e:  # noqa: BLE001 bare Exceptions for unreadable JSON, PanicException
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            why = " ".join(str(e).split())
            raise ModelLoadError(f"{tokenizer_json}: cannot read the tokenizer ({why[:200]}). "
                                 "Download the model's tokenizer.json again.") from None
        tcfg = _read_json(tokenizer_config_json)
        gen = _read_json(generation_config_json)
        mcfg = _read_json(config_json)

        def content(v: Any) -> str | None:  # "<s>" or {"content": "<s>", ...}
            return v.get("content") if isinstance(v, dict) else v if isinstance(v, str) else None

        special = {k: content(tcfg.get(k)) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
        bos_id = backend.token_to_id(special["bos_token"]) if special["bos_token"] else None
        if bos_id is None and isinstance(mcfg.get("bos_token_id"), int):
            bos_id = mcfg["bos_token_id"]
        eos: list[Any] = [backend.token_to_id(special["eos_token"]) if special["eos_token"] else None]
        for source in (gen, mcfg):
            v = source.get("eos_token_id")
            eos += v if isinstance(v, list) else [v]
        vocab_size = backend.get_vocab_size(with_added_tokens=True)
        added = backend.get_added_tokens_decoder()
        eos += [i for i, t in added.items() if t.special and t.content in _END_OF_GENERATION]
        add_bos = tcfg.get("add_bos_token")
        if add_bos is not None and not isinstance(add_bos, bool):   # "false" would read as true
            raise ModelLoadError(f"{tokenizer_config_json}: add_bos_token is {str(add_bos)[:40]!r}; true or "
                                 "false is needed here.")
        if add_bos is None and bos_id is not None:  # no flag: does tokenizer.json's post-processor add it?
            with _tokenizer_call("on a plain sample text"):
                with_special = backend.encode("a", add_special_tokens=True).ids
                add_bos = len(with_special) > len(backend.encode("a", add_special_tokens=False).ids) \
                    and with_special[0] == bos_id
        template = tcfg.get("chat_template")
        if chat_template_jinja is not None and Path(chat_template_jinja).is_file():
            try:
                template = Path(chat_template_jinja).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise ModelLoadError(f"{chat_template_jinja}: cannot read the chat template ({e}).") from e
        if isinstance(template, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default") or next(iter(named.values()), None)
        return cls(
            backend,
            bos_id=bos_id,
            eos_ids=tuple(dict.fromkeys(i for i in eos if isinstance(i, int) and 0 <= i < vocab_size)),
            add_bos=bool(add_bos),
            chat_template=template if isinstance(template, str) else None,
            special_tokens=special,
        )


def _read_json(path: str | Path | None) -> dict:
    """tokenizer_config.json, generation_config.json or config.json: {} when absent, else the
    object engine.io.jsonfile reads (one ModelLoadError for anything bad, a non-object included)."""
    if path is None or not Path(path).exists():
        return {}
    name = Path(path).name
    return read_json(path, name, shape=dict, error=ModelLoadError, fix="download the file again",
                     max_bytes=MAX_TOKENIZER_BYTES if name.startswith("tokenizer") else MAX_CONFIG_BYTES)
