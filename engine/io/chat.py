"""Chat templates: a model's jinja2 template rendered exactly as transformers' apply_chat_template.

The environment copies transformers (utils/chat_template_utils.py): an immutable sandbox (templates
come from model files, i.e. from strangers), trim_blocks and lstrip_blocks, the loopcontrols
extension, a `{% generation %}` block that renders its body, a `tojson` that does not escape HTML,
and the globals raise_exception and strftime_now. Special tokens (bos_token, eos_token, ...) are
passed as variables, as transformers passes its special_tokens_map.
"""

from __future__ import annotations

import json
import re
import sys
import time
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import Any, Callable, Iterator, Mapping

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


# Limits on rendering a template from a model file: a chat prompt is a few KB to a few MB.
MAX_RENDER_S = 2.0
MAX_OUTPUT = 16 << 20        # characters of output, and of any string or list a template builds
MAX_TEMPLATE = 1 << 20      # characters of template source
MAX_INT_BITS = 4096          # integers a template computes (10**9 is 30 bits)
_WIDE_FORMAT = re.compile(r"[%:][-+#0 <>^=]*\d{8,}")


class _TemplateLimit(Exception):
    """A template ran too long or built something too large."""


def _size(x: Any) -> int:
    return len(x) if isinstance(x, (str, list, tuple, bytes)) else 0


def _guard_value(x: Any) -> Any:
    if _size(x) > MAX_OUTPUT:
        raise _TemplateLimit(f"it built a value of {_size(x):,} items (the limit is {MAX_OUTPUT:,})")
    if isinstance(x, int) and not isinstance(x, bool) and x.bit_length() > MAX_INT_BITS:
        raise _TemplateLimit(f"it computed a {x.bit_length():,}-bit integer")
    return x


def _guard_args(args: tuple, kwargs: dict) -> None:
    """Refuse counts and widths that would make a builtin allocate without bound before it
    runs ('a'.ljust(10**9), 'x'|center(10**9))."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_OUTPUT:
            raise _TemplateLimit(f"it passed {a:,} to a function (the limit is {MAX_OUTPUT:,})")


def _guard_format(spec: Any) -> None:
    if isinstance(spec, str) and _WIDE_FORMAT.search(spec):     # '%99999999d', '{:>99999999}'
        raise _TemplateLimit("it formats a value to a width of more than 10 million characters")


class _LimitedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with every operator and call that could allocate without bound
    checked first (a sandboxed template can still do `{{ 'a' * 10**10 }}`)."""

    intercepted_binops = frozenset(["*", "**", "+", "%", "//"])

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(n, int) and _size(seq) * max(n, 0) > MAX_OUTPUT:
                    raise _TemplateLimit(f"it repeats a value {n:,} times")
            if isinstance(left, int) and isinstance(right, int) \
                    and left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise _TemplateLimit("it multiplies integers too large to compute")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) \
                and abs(left) > 1 and right * max(abs(left).bit_length(), 1) > MAX_INT_BITS:
            raise _TemplateLimit(f"it raises to the power {right:,}")
        elif operator == "+" and _size(left) + _size(right) > MAX_OUTPUT:
            raise _TemplateLimit("it concatenates values larger than the limit")
        elif operator == "%":
            _guard_format(left)
        return _guard_value(super().call_binop(context, operator, left, right))

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None
        _guard_format(value.__self__)                        # 'spec'.format(...)

        def guarded(*args: Any, **kwargs: Any) -> str:
            _guard_args(args, kwargs)
            return _guard_value(wrapper(*args, **kwargs))
        return guarded

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _guard_args(args, kwargs)
        return _guard_value(super().call(__context, __obj, *args, **kwargs))


def _guarded_filter(name: str, f: Callable) -> Callable:
    skip = 2 if hasattr(f, "jinja_pass_arg") else 1      # the context / environment, the value

    def filt(*args: Any, **kwargs: Any) -> Any:
        _guard_args(args[skip:], kwargs)
        if name == "format":
            _guard_format(args[skip - 1])
        return _guard_value(f(*args, **kwargs))

    if hasattr(f, "jinja_pass_arg"):                      # keep pass_context & co. markers
        filt.jinja_pass_arg = f.jinja_pass_arg           # type: ignore[attr-defined]
    return filt


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise _TemplateLimit in whatever Python code the render is running once `seconds` have
    passed: a line tracer, so two nested range(100000) loops, a recursive macro or a slow
    filter (wordwrap over megabytes) stop after `seconds`. A normal chat render runs a few
    thousand lines, so the tracer costs it about a millisecond."""
    end = time.monotonic() + seconds

    def local(frame: Any, event: str, arg: Any) -> Any:
        if time.monotonic() > end:
            raise _TemplateLimit(f"it ran for more than {seconds:g} s")
        return local

    previous = sys.gettrace()
    sys.settrace(local)
    try:
        yield
    finally:
        sys.settrace(previous)


@lru_cache(maxsize=8)
def compile_chat_template(template: str) -> jinja2.Template:
    env = _LimitedSandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.filters = {name: _guarded_filter(name, f) for name, f in env.filters.items()}
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise ParameterError(f"the model's chat template does not parse (line {e.lineno}: {e.message}); "
                             "pass the prompt as plain text instead of chat messages") from e
    except Exception as e:  # noqa: BLE001 (nested too deep, a constant too large to print, ...)
        raise ParameterError(f"the model's chat template does not compile ({type(e).__name__}: {str(e)[:200]}); "
                             "pass the prompt as plain text instead of chat messages") from None


def check_messages(messages: Any, where: str = "chat messages") -> list[dict]:
    """Chat messages as the templates expect them: a list of {"role": str, "content": str}.
    Content given as a list of text parts ([{"type": "text", "text": "..."}]) is joined into
    one string; any other content (a number, null, an image part) is refused."""
    shape = 'a list of chat messages like {"role": "user", "content": "..."}'
    if not isinstance(messages, list) or not messages:
        raise ParameterError(f"{where}: expected {shape}")
    out = []
    for i, m in enumerate(messages, 1):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or "content" not in m:
            raise ParameterError(f"{where}: message {i} is not an object with a text \"role\" and a "
                                 f"\"content\"; expected {shape}")
        content = m["content"]
        if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                             and isinstance(p.get("text"), str) for p in content):
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise ParameterError(f"{where}: message {i} has content {_show(content)}; give text "
                                 '(a string, or a list of {"type": "text", "text": "..."} parts)')
        out.append({**m, "content": content})
    return out


def _show(x: Any) -> str:
    text = json.dumps(x) if isinstance(x, (int, float, type(None), bool)) else type(x).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def render_chat_template(template: str | None, messages: list[dict], *, add_generation_prompt: bool = True,
                         special_tokens: Mapping[str, str | None] | None = None) -> str:
    """Render messages ([{"role": ..., "content": ...}, ...]) the way transformers would, within
    MAX_RENDER_S seconds and MAX_OUTPUT characters; any failure is one ParameterError."""
    if not template:
        raise ParameterError("this model has no chat template, so chat messages cannot be formatted: "
                             "pass the prompt as plain text (--prompt or a .txt file)")
    if not isinstance(template, str):
        raise ParameterError(f"the model's chat template is a {type(template).__name__}, not text: "
                             "pass the prompt as plain text (--prompt or a .txt file)")
    if len(template) > MAX_TEMPLATE:
        raise ParameterError(f"the model's chat template is {len(template):,} characters long (real ones "
                             f"are a few thousand; the limit is {MAX_TEMPLATE:,}): pass the prompt as plain text")
    messages = check_messages(messages)
    variables = {k: v for k, v in (special_tokens or {}).items() if v is not None}
    compiled = compile_chat_template(template)
    parts: list[str] = []
    size = 0
    try:
        with _deadline(MAX_RENDER_S):
            for chunk in compiled.generate(messages=messages, tools=None, documents=None,
                                           add_generation_prompt=add_generation_prompt, **variables):
                size += len(chunk)
                if size > MAX_OUTPUT:
                    raise _TemplateLimit(f"its output passed {MAX_OUTPUT:,} characters")
                parts.append(chunk)
    except _TemplateLimit as e:
        raise ParameterError(f"the model's chat template was stopped: {e}; pass the prompt as plain "
                             "text (--prompt or a .txt file)") from None
    except jinja2.TemplateError as e:  # raise_exception(), or a template tripping over the messages
        raise ParameterError(f"the model's chat template rejected these messages: {e}") from e
    except Exception as e:  # noqa: BLE001 (code from a model file: any error is the template's)
        raise ParameterError(f"the model's chat template failed on these messages ({type(e).__name__}: "
                             f"{str(e)[:200]}); pass the prompt as plain text (--prompt or a .txt file)") from None
    return "".join(parts)
