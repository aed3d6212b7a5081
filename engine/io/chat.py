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
import threading
import time
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import Any, Callable, Iterator, Mapping

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.compiler import CodeGenerator, optimizeconst
from jinja2.runtime import Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEscapeFormatter, SandboxedFormatter
from markupsafe import Markup

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


def _raise_exception(message: Any) -> None:
    # the message is the template's own text: cut to one short line (a 16 MB one was echoed whole)
    raise jinja2.exceptions.TemplateError(_cut(message if isinstance(message, str) else repr(message)))


def _cut(text: str, limit: int = 0) -> str:
    """One line of at most `limit` (MAX_MESSAGE) characters, for an error message."""
    limit = limit or MAX_MESSAGE
    text = " ".join(str(text)[:limit * 4].split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


# Limits on rendering a template from a model file: a chat prompt is a few KB to a few MB.
MAX_RENDER_S = 2.0
MAX_OUTPUT = 16 << 20        # characters of output, and the size of any value a template builds
MAX_TEMPLATE = 1 << 20      # characters of template source
MAX_INT_BITS = 4096          # integers a template computes (10**9 is 30 bits)
MAX_FORMAT_WIDTH = 100_000   # a width or precision in a format spec (real templates: 2 or 4)
MAX_MESSAGE = 300            # characters of a template's own error message shown to the user
_PRINTF = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)", re.S)
_DIGITS = re.compile(r"\d+")


class _TemplateLimit(Exception):
    """A template ran too long or built something too large."""


def _weight(x: Any, budget: int = MAX_OUTPUT, depth: int = 0) -> int:
    """About how many characters x takes as text (every item of a container at least one),
    counted only up to just past `budget`. Every value a template may turn into text (output,
    `~`, a filter, a call, a format) is bounded by its weight first, so str() of a list that
    holds one 16 MB string 200 times is refused before it is built."""
    return _weigh(x, budget, depth)[0]


_memo = threading.local()       # .weights: {id: (container, weight)} while a render runs
_MEMO_ITEMS = 1 << 22           # container items the memo may keep alive (then it starts over)


def _weigh(x: Any, budget: int, depth: int) -> tuple[int, bool]:
    """(weight, whether it may be remembered). Containers a template sees cannot change (the
    sandbox is immutable), so their weight is remembered for the render: `messages|length` in
    a loop over 2,000 messages walks them once, not 2,000 times. A namespace can change: a
    container holding one is weighed afresh each time."""
    if isinstance(x, (str, bytes, bytearray)):
        return len(x), True
    if x is None or isinstance(x, (bool, float)):
        return 1, True
    if isinstance(x, int):
        return x.bit_length() // 3 + 1, True
    fixed = True
    if isinstance(x, jinja2.utils.Namespace):
        x, fixed = object.__getattribute__(x, "_Namespace__attrs"), False
    if isinstance(x, Mapping):
        items: Any = (v for kv in x.items() for v in kv)
    elif isinstance(x, (list, tuple, set, frozenset)):
        items = x
    else:
        return 1, True                          # objects, generators, Undefined, macros
    memo = getattr(_memo, "weights", None)
    if memo is not None and fixed:
        known = memo.get(id(x))
        if known is not None and known[0] is x:
            return known[1], True
    total = 1
    for item in items:
        w, ok = (1, True) if depth >= 64 else _weigh(item, budget - total, depth + 1)
        total, fixed = total + w, fixed and ok
        if total > budget:
            return total, False                 # a partial count: never remembered
    if memo is not None and fixed:
        _memo.items = getattr(_memo, "items", 0) + len(x)
        if _memo.items > _MEMO_ITEMS:
            memo.clear()
            _memo.items = len(x)
        memo[id(x)] = (x, total)
    return total, fixed


def _guard_value(x: Any, what: str = "it built a value") -> Any:
    if isinstance(x, int) and not isinstance(x, bool) and x.bit_length() > MAX_INT_BITS:
        raise _TemplateLimit(f"it computed a {x.bit_length():,}-bit integer")
    w = _weight(x)
    if w > MAX_OUTPUT:
        raise _TemplateLimit(f"{what} of more than {MAX_OUTPUT:,} characters (or items)")
    return x


def _guard_size(n: int | float, what: str) -> None:
    if n > MAX_OUTPUT:
        raise _TemplateLimit(f"{what} would build {n:,.0f} characters (the limit is {MAX_OUTPUT:,})")


def _guard_args(args: tuple | list, kwargs: Mapping) -> None:
    """Refuse counts and widths that would make a builtin allocate without bound before it
    runs ('a'.ljust(10**9), 'x'|center(10**9)), and inputs too large to turn into text."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_OUTPUT:
            raise _TemplateLimit(f"it passed {a:,} to a function (the limit is {MAX_OUTPUT:,})")
        _guard_value(a, "it passed a value")


def _guard_width(digits: str) -> None:
    if len(digits) > 7 or int(digits) > MAX_FORMAT_WIDTH:
        shown = digits if len(digits) <= 12 else digits[:12] + "..."
        raise _TemplateLimit(f"it formats a value to a width or precision of {shown} characters "
                             f"(the limit is {MAX_FORMAT_WIDTH:,})")


def _guard_spec(spec: Any) -> None:
    """A str.format spec ('>10', '.2f'): every number in it is a fill, a width or a precision."""
    if isinstance(spec, str):
        for m in _DIGITS.finditer(spec):
            _guard_width(m.group())


def _guard_printf(fmt: Any, args: Any) -> None:
    """`fmt % args` (the % operator and the format filter), checked before it runs: each
    width and precision (a '*' one comes from the arguments), and the whole result's size."""
    if not isinstance(fmt, str) or "%" not in fmt:
        return
    values = list(args.values()) if isinstance(args, Mapping) else list(args) if isinstance(args, tuple) else [args]
    largest = max((_weight(v) for v in values), default=0)
    size = len(fmt)
    for m in _PRINTF.finditer(fmt):
        width, precision, conversion = m.groups()
        if conversion == "%":
            continue
        for digits in (width, precision):
            if digits == "*":
                for v in values:
                    if isinstance(v, int) and not isinstance(v, bool):
                        _guard_width(str(abs(v)))
            elif digits:
                _guard_width(digits)
        size += max(int(width) if width and width != "*" else 0,
                    int(precision) if precision and precision != "*" else 0) + largest + 32
        _guard_size(size, "its % formatting")


def _guard_str_method(obj: Any, args: tuple, kwargs: dict) -> tuple:
    """Bound what a str method builds before it runs: replace, join, expandtabs and translate
    can make far more than they are given. Returns the arguments (join's iterable, read
    within the bound, as a list)."""
    s, name = getattr(obj, "__self__", None), getattr(obj, "__name__", "")
    if not isinstance(s, str):
        return args
    if name == "replace" and len(args) >= 2:
        _guard_replace(s, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("count", -1))
    elif name == "join" and args:
        items = _bounded_list(args[0], "its join()")
        _guard_size(sum(map(_weight, items)) + len(s) * max(len(items) - 1, 0), "its join()")
        args = (items, *args[1:])
    elif name == "expandtabs":
        tab = args[0] if args else kwargs.get("tabsize", 8)
        if isinstance(tab, int):
            _guard_size(len(s) + s.count("\t") * max(tab, 0), "its expandtabs()")
    elif name == "translate" and args and isinstance(args[0], Mapping):
        longest = max((_weight(v) for v in args[0].values()), default=1)
        _guard_size(len(s) * max(longest, 1), "its translate()")
    return args


def _guard_replace(s: Any, old: Any, new: Any, count: Any = -1) -> None:
    if isinstance(old, str) and isinstance(new, str) and len(new) > len(old):
        s = s if isinstance(s, str) else str(s)
        n = s.count(old) if old else len(s) + 1
        if isinstance(count, int) and count >= 0:
            n = min(n, count)
        _guard_size(len(s) + n * (len(new) - len(old)), "its replace()")


def _bounded_list(items: Any, what: str) -> list:
    """An iterable as a list, read only while its items' total weight stays within bounds."""
    if isinstance(items, (list, tuple)):
        return list(items)
    out, total = [], 0
    for item in items:
        total += _weight(item) + 1
        _guard_size(total, what)
        out.append(item)
    return out


class _FormatLimits:
    """str.format / format_map: each field's spec checked before it is formatted, and the
    result's size after each field (so '{0}{0}{0}...' of a large value stops early)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._built = 0

    def format_field(self, value: Any, format_spec: str) -> Any:
        _guard_spec(format_spec)
        _guard_value(value, "it formats a value")
        out = super().format_field(value, format_spec)    # type: ignore[misc]
        self._built += len(out)
        _guard_size(self._built, "its str.format()")
        return out


class _LimitedFormatter(_FormatLimits, SandboxedFormatter):
    pass


class _LimitedEscapeFormatter(_FormatLimits, SandboxedEscapeFormatter):
    pass


class _LimitedCodeGenerator(CodeGenerator):
    """`a ~ b` (jinja's Concat) through the environment's limited_concat, not a bare str()."""

    @optimizeconst
    def visit_Concat(self, node: jinja2.nodes.Concat, frame: Any) -> None:
        self.write("environment.limited_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _finalize(value: Any) -> Any:
    """Every `{{ ... }}` value, before jinja turns it into text."""
    return _guard_value(value, "it prints a value")


class _LimitedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with every operator and call that could allocate without bound
    checked first (a sandboxed template can still do `{{ 'a' * 10**10 }}`): the size of what an
    operation would build is bounded before it runs, from its inputs' sizes."""

    intercepted_binops = frozenset(["*", "**", "+", "%", "//"])
    code_generator_class = _LimitedCodeGenerator

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(n, int) and not isinstance(seq, int) and _weight(seq) * max(n, 0) > MAX_OUTPUT:
                    raise _TemplateLimit(f"it repeats a value {n:,} times")
            if isinstance(left, int) and isinstance(right, int) \
                    and left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise _TemplateLimit("it multiplies integers too large to compute")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) \
                and abs(left) > 1 and right * max(abs(left).bit_length(), 1) > MAX_INT_BITS:
            raise _TemplateLimit(f"it raises to the power {right:,}")
        elif operator == "+" and not isinstance(left, (int, float)) \
                and _weight(left) + _weight(right) > MAX_OUTPUT:
            raise _TemplateLimit("it concatenates values larger than the limit")
        elif operator == "%":
            _guard_printf(left, right)
        return _guard_value(super().call_binop(context, operator, left, right))

    def limited_concat(self, parts: tuple) -> str:
        _guard_size(sum(_weight(p) for p in parts), "its ~ (concatenation)")
        return _guard_value("".join(map(str, parts)))

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        if super().wrap_str_format(value) is None:     # not a str's format / format_map
            return None
        f_self = value.__self__
        is_map = value.__name__ == "format_map"
        formatter = (_LimitedEscapeFormatter(self, escape=f_self.escape) if isinstance(f_self, Markup)
                     else _LimitedFormatter(self))

        def guarded(*args: Any, **kwargs: Any) -> str:
            _guard_args(args, kwargs)
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                args, kwargs = (), args[0]
            formatter._built = 0
            return _guard_value(type(f_self)(formatter.vformat(f_self, args, kwargs)))
        return guarded

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _guard_args(args, kwargs)
        args = _guard_str_method(__obj, args, kwargs)
        return _guard_value(super().call(__context, __obj, *args, **kwargs))


def _guarded_filter(name: str, f: Callable) -> Callable:
    skip = 2 if hasattr(f, "jinja_pass_arg") else 1      # the context / environment, the value

    def filt(*args: Any, **kwargs: Any) -> Any:
        head, value, rest = args[:skip - 1], args[skip - 1] if len(args) >= skip else None, args[skip:]
        _guard_args(args[skip - 1:], kwargs)
        if name == "format":
            _guard_printf(value, dict(kwargs) if kwargs else tuple(rest))
        elif name == "replace" and len(rest) >= 2:
            _guard_replace(value, rest[0], rest[1], rest[2] if len(rest) > 2 else kwargs.get("count"))
        elif name == "join" and value is not None and not isinstance(value, Undefined):
            items = _bounded_list(value, "its join filter")
            sep = rest[0] if rest else kwargs.get("d", "")
            _guard_size(sum(map(_weight, items)) + _weight(sep) * max(len(items) - 1, 0), "its join filter")
            args = (*head, items, *rest)
        elif name == "indent" and isinstance(value, str):
            width = rest[0] if rest else kwargs.get("width", 4)
            _guard_size(len(value) + (value.count("\n") + 1) * (width if isinstance(width, int) else _weight(width)),
                        "its indent filter")
        elif name == "wordwrap" and isinstance(value, str):
            width = rest[0] if rest else kwargs.get("width", 79)
            wrap = rest[2] if len(rest) > 2 else kwargs.get("wrapstring")
            lines = len(value) // max(width if isinstance(width, int) else 1, 1) + 1
            _guard_size(len(value) + lines * _weight(wrap if wrap is not None else "\n"), "its wordwrap filter")
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
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols],
        finalize=_finalize,
    )
    env.globals.pop("lipsum", None)     # lipsum(n=10**6): megabytes of text; no chat template uses it
    env.filters["tojson"] = _tojson
    env.filters = {name: _guarded_filter(name, f) for name, f in env.filters.items()}
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise ParameterError(f"the model's chat template does not parse (line {e.lineno}: {_cut(e.message or '')}); "
                             "pass the prompt as plain text instead of chat messages") from e
    except Exception as e:  # noqa: BLE001 (nested too deep, a constant too large to print, ...)
        raise ParameterError(f"the model's chat template does not compile ({type(e).__name__}: {_cut(str(e), 200)}); "
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
    _memo.weights, _memo.items = {}, 0
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
        raise ParameterError(f"the model's chat template rejected these messages: {_cut(str(e))}") from e
    except Exception as e:  # noqa: BLE001 (code from a model file: any error is the template's)
        raise ParameterError(f"the model's chat template failed on these messages ({type(e).__name__}: "
                             f"{_cut(str(e), 200)}); pass the prompt as plain text (--prompt or a .txt file)") from None
    finally:
        _memo.weights = None
    return "".join(parts)
