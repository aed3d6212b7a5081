"""Prompts: raw text or chat messages, from the command line, a file or the bundled default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.assets import ASSETS
from engine.errors import ParameterError
from engine.io.chat import check_messages
from engine.io.jsonfile import parse_json
DEFAULT_PROMPT_FILE = ASSETS / "prompts" / "default.json"

Prompt = str | list[dict[str, Any]]


MAX_PROMPT_BYTES = 64 << 20     # far more than any model's context holds


def read_prompt_file(path: str | Path) -> Prompt:
    """`.txt`: raw text, no template. `.json`: a list of chat messages, or an object with a
    `messages` list, rendered with the model's chat template."""
    p = Path(path)
    if p.is_dir():
        raise ParameterError(f"prompt file {p} is a folder; give a .txt or .json file")
    if not p.is_file():
        raise ParameterError(f"prompt file {p} does not exist")
    try:
        size = p.stat().st_size
        if size > MAX_PROMPT_BYTES:
            raise ParameterError(f"prompt file {p} is {size:,} bytes, more than any model's context holds "
                                 f"(the limit is {MAX_PROMPT_BYTES:,})")
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ParameterError(f"prompt file {p} is not UTF-8 text (byte {e.start}: {e.reason}); "
                             "save it as UTF-8") from None
    except OSError as e:
        raise ParameterError(f"cannot read prompt file {p}: {e.strerror or e}") from None
    if p.suffix.lower() != ".json":
        if not text:
            raise ParameterError(f"prompt file {p} is empty")
        return text
    return parse_chat_json(text, f"prompt file {p}")


def parse_chat_json(text: str, where: str = "the prompt") -> list[dict[str, Any]]:
    """Chat messages from JSON text: a list of {"role": ..., "content": ...} messages, or an
    object with a "messages" list; each message checked (engine.io.chat.check_messages). The one
    check for a .json prompt file and the window's prompt editor. `where` starts the messages."""
    data = parse_json(text, where, what="chat messages", shape=None, error=ParameterError)
    messages = data.get("messages") if isinstance(data, dict) else data
    if not isinstance(messages, list) or not messages:
        raise ParameterError(
            f"{where}: expected a list of chat messages ({{\"role\": ..., \"content\": ...}}) "
            "or an object with a \"messages\" list"
        )
    return check_messages(messages, where)


def default_prompt() -> Prompt:
    return read_prompt_file(DEFAULT_PROMPT_FILE)


def encode_prompt(tokenizer, prompt: Prompt) -> list[int]:
    """Token ids for a prompt: chat messages go through the model's chat template."""
    for text in [prompt] if isinstance(prompt, str) else [m.get("content") for m in prompt]:
        check_text(text)
    if isinstance(prompt, list):
        text = tokenizer.render_chat(prompt, add_generation_prompt=True)
        ids = tokenizer.encode(text, add_special_tokens=False)
    else:
        ids = tokenizer.encode(prompt, add_special_tokens=True)
    if not ids:
        raise ParameterError("the prompt is empty: give some text to continue")
    return ids


def check_text(text: object, where: str = "the prompt") -> None:
    """Text that can be encoded: a lone surrogate (bytes that were not UTF-8 on the command line
    arrive as one) is one ParameterError, not a failure inside the tokenizer or on stdout."""
    if not isinstance(text, str) or text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ParameterError(f"{where} holds a lone surrogate (\\u{ord(text[e.start]):04x}) at character "
                             f"{e.start:,}, which is not text: give UTF-8 text") from None
