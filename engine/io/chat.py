"""Chat templates: a model's jinja2 template rendered exactly as transformers' apply_chat_template.

The environment copies transformers (utils/chat_template_utils.py): an immutable sandbox (templates
come from model files, i.e. from strangers), trim_blocks and lstrip_blocks, the loopcontrols
extension, a `{% generation %}` block that renders its body, a `tojson` that does not escape HTML,
and the globals raise_exception and strftime_now. Special tokens (bos_token, eos_token, ...) are
passed as variables, as transformers passes its special_tokens_map.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any, Mapping

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.errors import ParameterError


class _GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for training masks; we only render it."""

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Any) -> str:
        return caller()


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=8)
def compile_chat_template(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise ParameterError(f"the model's chat template does not parse (line {e.lineno}: {e.message}); "
                             "pass the prompt as plain text instead of chat messages") from e


def render_chat_template(template: str | None, messages: list[dict], *, add_generation_prompt: bool = True,
                         special_tokens: Mapping[str, str | None] | None = None) -> str:
    """Render messages ([{"role": ..., "content": ...}, ...]) the way transformers would."""
    if not template:
        raise ParameterError("this model has no chat template, so chat messages cannot be formatted: "
                             "pass the prompt as plain text (--prompt or a .txt file)")
    if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise ParameterError('chat messages must be a list of objects like {"role": "user", "content": "..."}')
    variables = {k: v for k, v in (special_tokens or {}).items() if v is not None}
    try:
        return compile_chat_template(template).render(
            messages=messages, tools=None, documents=None, add_generation_prompt=add_generation_prompt,
            **variables,
        )
    except jinja2.TemplateError as e:  # raise_exception(), or a template tripping over the messages
        raise ParameterError(f"the model's chat template rejected these messages: {e}") from e
