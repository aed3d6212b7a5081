"""The one reader for every JSON (and JSON Lines) file specscope accepts from strangers.

Each file is checked the same way before any caller sees a value: a regular file (not a folder,
a FIFO or a device that never ends), at most `max_bytes` (stat first, then a bounded read, so a
file that grows or lies about its size cannot make us allocate more), UTF-8 (a leading BOM is
allowed), valid JSON, not nested deeper than Python's parser goes, no integer longer than
MAX_INT_DIGITS digits (Python's own limit raises a bare ValueError; without it a huge number
parses in quadratic time), no NaN / Infinity / overflowing float (1e999), no lone surrogate in a
string (`"\\ud800"` is not text and breaks the tokenizer and stdout later), and the top-level
value of the expected type. Anything else is one `error` (a SpecscopeError subclass the caller
chooses) whose message names the file, says what is wrong and, with `fix`, what to do.

    read_json(path, "the model config", shape=dict, max_bytes=..., error=ModelLoadError)
    parse_json(text, "prompt file p.json", shape=None)   # text already in memory
    read_jsonl(path, "recording", ...)                    # (line number, value) per non-blank line
    check_file(path, "the tokenizer", max_bytes=...)      # size and kind only, for other parsers
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, Iterator

from engine.errors import SpecscopeError

KiB, MiB = 1 << 10, 1 << 20
MAX_INT_DIGITS = 4300            # Python's default int_max_str_digits: no real file comes near it
DEFAULT_MAX_BYTES = 64 * MiB

_ESCAPED_SURROGATE = re.compile(r"\\[uU][dD][89a-fA-F]")

Shape = type | tuple[type, ...] | None

_TYPE_NAMES = {dict: "a JSON object", list: "a list", str: "a string", bool: "true or false",
               int: "a number", float: "a number", type(None): "null"}


def _name(t: Any) -> str:
    if isinstance(t, type):
        return _TYPE_NAMES.get(t, t.__name__)
    return _TYPE_NAMES.get(type(t), type(t).__name__)


def _join(where: str, problem: str, fix: str) -> str:
    return f"{where}: {problem}" + (f"; {fix}" if fix else "")


def check_file(path: str | os.PathLike, what: str, *, max_bytes: int = DEFAULT_MAX_BYTES,
               error: type[SpecscopeError] = SpecscopeError, fix: str = "") -> int:
    """The size of `path` if it is a regular file of at most `max_bytes`; else one `error`."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise error(_join(f"{p}", f"{what} does not exist", fix)) from None
    except OSError as e:
        raise error(_join(f"{p}", f"cannot read {what} ({e.strerror or e})", fix)) from None
    if stat.S_ISDIR(st.st_mode):
        raise error(_join(f"{p}", f"is a folder, not {what}", fix)) from None
    if not stat.S_ISREG(st.st_mode):
        raise error(_join(f"{p}", f"is not a regular file, so it cannot be {what}", fix)) from None
    if st.st_size > max_bytes:
        raise error(_join(f"{p}", f"{st.st_size:,} bytes is too large for {what} (the limit is "
                                  f"{max_bytes:,})", fix)) from None
    return st.st_size


def _read_bytes(p: Path, what: str, max_bytes: int, error: type[SpecscopeError], fix: str) -> bytes:
    check_file(p, what, max_bytes=max_bytes, error=error, fix=fix)
    try:
        with open(p, "rb") as f:
            data = f.read(max_bytes + 1)       # bounded even if the file grew since the stat
    except OSError as e:
        raise error(_join(f"{p}", f"cannot read {what} ({e.strerror or e})", fix)) from None
    if len(data) > max_bytes:
        raise error(_join(f"{p}", f"more than {max_bytes:,} bytes is too large for {what}", fix))
    return data


def _decode(data: bytes, where: str, what: str, error: type[SpecscopeError], fix: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(_join(where, f"is not a text file (not UTF-8 text at byte {e.start}: {e.reason}), "
                                 f"so it cannot be {what}", fix)) from None
    return text[1:] if text.startswith("\ufeff") else text


def _refuse_constant(name: str) -> Any:
    raise _BadValue(f"holds {name}, which is not a finite number")


class _BadValue(ValueError):
    pass


def _parse_int(s: str) -> int:
    if len(s) > MAX_INT_DIGITS + 1:
        raise _BadValue(f"holds a number with {len(s):,} digits (more than {MAX_INT_DIGITS:,})")
    return int(s)


def _parse_float(s: str) -> float:
    if len(s) > MAX_INT_DIGITS + 1:
        raise _BadValue(f"holds a number written with {len(s):,} characters")
    x = float(s)
    if not math.isfinite(x):
        raise _BadValue(f"holds {s[:40]}, which overflows to infinity")
    return x


_FINITE = {"parse_constant": _refuse_constant, "parse_float": _parse_float}


def _bad_string(value: Any) -> str | None:
    """Where a container holds a string with a lone surrogate, or None. Iterative: any depth."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                return f"holds a lone surrogate (\\u{ord(v[e.start]):04x}), which is not text"
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return None


def parse_json(text: str | bytes, where: str, *, what: str = "JSON", shape: Shape = dict,
               error: type[SpecscopeError] = SpecscopeError, fix: str = "", finite: bool = True) -> Any:
    """The value of JSON `text` (already in memory), checked as the module says; `where` starts
    the message (a file name, "prompt file p.json", "line 3 of r.jsonl"). finite=False lets
    NaN and Infinity through (recordings: the caller checks its typed fields itself)."""
    if isinstance(text, (bytes, bytearray)):
        text = _decode(bytes(text), where, what, error, fix)
    else:
        if text.startswith("\ufeff"):
            text = text[1:]
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                raise error(_join(where, f"holds a lone surrogate (\\u{ord(text[e.start]):04x}), which is "
                                         "not text", fix)) from None
    try:
        value = json.loads(text, parse_int=_parse_int, **(_FINITE if finite else {}))
    except _BadValue as e:
        raise error(_join(where, str(e), fix)) from None
    except json.JSONDecodeError as e:
        raise error(_join(where, f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})", fix)) from None
    except RecursionError:
        raise error(_join(where, "JSON nested too deeply", fix)) from None
    except ValueError as e:     # anything else json or int() refuses
        raise error(_join(where, f"not valid JSON ({str(e)[:200]})", fix)) from None
    if shape is not None and not isinstance(value, shape) or isinstance(value, bool) and shape in (int, float):
        raise error(_join(where, f"{what} must be {_shape_name(shape)}, not {_name(value)}", fix))
    if _ESCAPED_SURROGATE.search(text):       # else no string can hold one: skip the walk
        bad = _bad_string(value)
        if bad:
            raise error(_join(where, bad, fix))
    return value


def _shape_name(shape: Shape) -> str:
    if isinstance(shape, tuple):
        return " or ".join(dict.fromkeys(_name(t) for t in shape))
    return _name(shape)


def read_json(path: str | os.PathLike, what: str, *, shape: Shape = dict,
              max_bytes: int = DEFAULT_MAX_BYTES, error: type[SpecscopeError] = SpecscopeError,
              fix: str = "", finite: bool = True) -> Any:
    """The JSON value in the file at `path`, checked as the module says."""
    p = Path(path)
    data = _read_bytes(p, what, max_bytes, error, fix)
    return parse_json(_decode(data, str(p), what, error, fix), str(p), what=what, shape=shape,
                      error=error, fix=fix, finite=finite)


def read_jsonl(path: str | os.PathLike, what: str, *, shape: Shape = dict,
               max_bytes: int = DEFAULT_MAX_BYTES, max_line_bytes: int | None = None,
               error: type[SpecscopeError] = SpecscopeError, fix: str = "",
               finite: bool = True) -> Iterator[tuple[int, Any]]:
    """(line number, value) for each non-blank line of the JSON Lines file at `path`, each line
    checked as the module says; the whole file at most `max_bytes`, a line at most
    `max_line_bytes` (default: the whole limit). Lines are read one at a time."""
    p = Path(path)
    check_file(p, what, max_bytes=max_bytes, error=error, fix=fix)
    line_cap = max_bytes if max_line_bytes is None else max_line_bytes
    total = 0
    try:
        f = open(p, "rb")
    except OSError as e:
        raise error(_join(f"{p}", f"cannot read {what} ({e.strerror or e})", fix)) from None
    with f:
        n = 0
        while True:
            try:
                raw = f.readline(line_cap + 1)
            except OSError as e:
                raise error(_join(f"{p}", f"cannot read {what} ({e.strerror or e})", fix)) from None
            if not raw:
                return
            n += 1
            total += len(raw)
            if total > max_bytes:
                raise error(_join(f"{p}", f"more than {max_bytes:,} bytes is too large for {what}", fix))
            if len(raw.rstrip(b"\r\n")) > line_cap:
                raise error(_join(f"{p}, line {n}", f"longer than {line_cap:,} bytes, too long for {what}", fix))
            where = f"{p}, line {n}"
            text = _decode(raw, where, what, error, fix)
            if n == 1 and text.startswith("\ufeff"):
                text = text[1:]
            if not text.strip():
                continue
            yield n, parse_json(text, where, what=f"each line of {what}", shape=shape, error=error, fix=fix,
                              finite=finite)


def finite_copy(value: Any) -> Any:
    """`value` with every NaN / infinite float replaced by None (null): what our writers pass to
    json.dumps, so a file we write is never one read_json refuses (a sweep cell's ratio of 0/0, an
    infinite fit figure). Recursive over dicts, lists and tuples; other values are returned as is."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_copy(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """json.dumps of `finite_copy(value)` with allow_nan=False: no NaN or Infinity is ever written."""
    return json.dumps(finite_copy(value), allow_nan=False, **kwargs)
