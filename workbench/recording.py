"""Recordings: a session's events as JSON Lines, replayable without a model.

Line 1 is a header `{"specscope_recording": 1, "settings": {...}, "model": ..., "device": ...}`;
every following line is one `WindowEvent.to_dict()`; an optional last line
`{"specscope_report": {...}}` holds the run's JSON report.

The header's `specscope_recording` is the format version (FORMAT_VERSION). Every recording ever
written carries it (version 1 since the first recorder), so a header without it is no recording;
a version above FORMAT_VERSION (a newer specscope's), or one that is not a whole number >= 1, is
refused at load with one RecordingError rather than replayed as something else. The settings
(the header's and each window's) must be valid DecodeSettings whose numbers fit the window's
inputs (engine.speculation.setting_fields: the spin boxes' ranges), so a replay never clamps one.

Written without NaN or Infinity anywhere but a window's free-form `figures` (a plan's "no price
yet" is NaN, and describe() prints it); the reader accepts those there and checks every typed
float finite.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from engine.errors import ParameterError, SpecscopeError
from engine.io.jsonfile import finite_copy, read_jsonl
from engine.speculation.setting_fields import check_ranges
from engine.speculation.events import WindowEvent

from workbench.store import EventStore

FORMAT_VERSION = 1


# room for a long detailed session, and for what parsing it costs in memory (the sizes: BENCHMARKS.md,
# "Workbench timings (moved from code comments)")
MAX_BYTES = 128 << 20
MAX_NODES = 4096           # draft nodes in one window (a pass holds at most 64 rows)
MAX_LIST = 1 << 16         # any other list in an event (emitted tokens, penalty history)


class RecordingError(SpecscopeError):
    """A recording file is missing, not JSON Lines, or not a specscope recording."""


def _check_type(value: Any, tp: Any, where: str) -> None:
    """Check a JSON value against a field's annotation (the event dataclasses use int, float,
    str, bool, Any, X | None, list[X], tuple[...], dict[str, Any] and nested dataclasses)."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return
    if origin in (Union, UnionType):
        errors = []
        for option in args:
            try:
                return _check_type(value, option, where)
            except ValueError as e:
                errors.append(e)
        raise errors[-1]
    if tp is type(None):
        ok = value is None
    elif tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    elif tp is str:
        ok = isinstance(value, str)
    elif origin is dict or tp is dict:
        ok = isinstance(value, dict)
    elif origin in (list, tuple):
        if not isinstance(value, list) or len(value) > MAX_LIST:
            raise ValueError(f"{where} must be a list (of at most {MAX_LIST:,} items)")
        if origin is tuple:
            if len(value) != len(args):
                raise ValueError(f"{where} must have {len(args)} items")
            for i, (v, t) in enumerate(zip(value, args)):
                _check_type(v, t, f"{where}[{i}]")
        else:
            for i, v in enumerate(value):
                _check_type(v, args[0], f"{where}[{i}]")
        return
    elif is_dataclass(tp):
        if not isinstance(value, dict):
            raise ValueError(f"{where} must be an object")
        hints = get_type_hints(tp)
        for f in fields(tp):
            if f.name in value:
                _check_type(value[f.name], hints[f.name], f"{where}.{f.name}" if where else f.name)
            elif f.default is MISSING and f.default_factory is MISSING:
                raise ValueError(f"{where + '.' if where else ''}{f.name} is missing")
        return
    else:
        raise TypeError(f"no check for {tp!r}")   # a new field type: extend this function
    if not ok:
        raise ValueError(f"{where} is {_show(value)}, not {getattr(tp, '__name__', tp)}")


def _show(value: Any) -> str:
    text = type(value).__name__ if isinstance(value, (list, dict)) else json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_tree(d: dict) -> None:
    """The window's tree: one entry per node everywhere, parents before children (so no
    cycles), depths one below the parent's, the accepted path a path down from the root."""
    n = len(d["tokens"])
    if n > MAX_NODES:
        raise ValueError(f"{n:,} draft nodes (at most {MAX_NODES:,})")
    for key in ("texts", "parents", "depths", "provenance"):
        if len(d[key]) != n:
            raise ValueError(f"{len(d[key])} {key} for {n} draft tokens")
    for i, (p, depth) in enumerate(zip(d["parents"], d["depths"])):
        if not -1 <= p < i:
            raise ValueError(f"node {i} has parent {p} (parents come before their children)")
        if depth != (1 if p < 0 else d["depths"][p] + 1):
            raise ValueError(f"node {i} has depth {depth}, not its parent's depth + 1")
    above = -1
    for node in d["accepted_path"]:
        if not 0 <= node < n or d["parents"][node] != above:
            raise ValueError(f"the accepted path {_show(d['accepted_path'])} is not a path down the tree")
        above = node
    if len(d["rows"]) > n + 1 or any(not -1 <= r["node"] < n for r in d["rows"]):
        raise ValueError("its verify rows do not match its tree")
    if not len(d["emitted"]) == len(d["emitted_texts"]) == len(d["emitted_kinds"]):
        raise ValueError("emitted tokens, texts and kinds differ in number")
    for key in ("index", "committed_len", "depth", "width"):
        if not 0 <= d[key] <= (1 << 40 if key in ("index", "committed_len") else MAX_NODES):
            raise ValueError(f"{key} is {d[key]:,}")


def _check_version(obj: dict, where: str) -> None:
    v = obj["specscope_recording"]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise RecordingError(f"{where}: the format version is {_show(v)}, not a whole number >= 1; "
                             "open a .jsonl file saved with 'Save recording'")
    if v > FORMAT_VERSION:
        raise RecordingError(f"{where}: a version {v:,} recording (a newer specscope's); this "
                             f"specscope reads versions 1 to {FORMAT_VERSION}")


def check_settings(settings: dict) -> None:
    """A recording's settings (header or window): numbers inside the window's inputs, then valid
    DecodeSettings (ValueError, the field named)."""
    try:
        check_ranges(settings, "settings")
        from engine.speculation.settings import DecodeSettings
        DecodeSettings.from_dict(settings)
    except ParameterError as e:
        raise ValueError(str(e)) from None
    except (TypeError, ValueError) as e:       # an unknown sampler key, a string for a number
        raise ValueError(f"settings are not decode settings ({str(e)[:120]})") from None


def _checked_header(obj: dict, where: str) -> dict:
    _check_version(obj, where)
    header = {k: v for k, v in obj.items() if k != "specscope_recording"}
    for key, kind in (("settings", dict), ("card_profile", dict), ("model", str), ("device", str),
                      ("weights", str)):
        if header.get(key) is not None and not isinstance(header[key], kind):
            raise RecordingError(f"{where}: the header's {key} is {_show(header[key])}, not "
                                 f"{'an object' if kind is dict else 'text'}")
    if header.get("settings"):
        try:
            check_settings(header["settings"])
        except ValueError as e:
            raise RecordingError(f"{where}: the header's {e}") from None
    if header.get("card_profile"):
        from engine.cost.profile import CostProfile
        try:
            CostProfile.from_dict(header["card_profile"])
        except SpecscopeError:
            pass                    # a profile this version does not read: the window ignores it
        except Exception as e:      # noqa: BLE001 (numbers that break the fit: 0 ms, inf)
            raise RecordingError(f"{where}: the header's card_profile is not a cost profile "
                                 f"({type(e).__name__}: {e})") from None
    return header


def event_from_dict(obj: Any) -> WindowEvent:
    """A WindowEvent from one recording line, every field checked first (ValueError)."""
    _check_type(obj, WindowEvent, "")
    _check_tree(obj)
    if obj.get("settings"):
        check_settings(obj["settings"])
    return WindowEvent.from_dict(obj)


def _finite_event(d: dict) -> dict:
    """An event's dict with no NaN or Infinity outside `figures` (there they mean "no price"; see
    the module docstring); a typed float the decoder left non-finite is written null."""
    out = finite_copy({k: v for k, v in d.items() if k != "figures"})
    if "figures" in d:
        out["figures"] = d["figures"]
    return out


def save_recording(path: str | Path, store: EventStore) -> Path:
    path = Path(path)
    header = {"specscope_recording": FORMAT_VERSION, **store.header}
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps(finite_copy(header), ensure_ascii=False, allow_nan=False) + "\n")
        for ev in store.events:
            f.write(json.dumps(_finite_event(ev.to_dict()), ensure_ascii=False) + "\n")
        if store.report is not None:
            f.write(json.dumps({"specscope_report": finite_copy(store.report)}, ensure_ascii=False,
                               allow_nan=False) + "\n")
    return path


def load_recording(path: str | Path) -> EventStore:
    """A recording's events, or one RecordingError: not a file, too large, not UTF-8 JSON
    Lines, no header, nested too deep, a field of the wrong type, a tree that is not one."""
    path = Path(path)
    store = EventStore()
    first = True
    fix = "open a .jsonl recording saved by specscope"
    for n, obj in read_jsonl(path, "a recording", shape=None, max_bytes=MAX_BYTES, error=RecordingError,
                             fix=fix, finite=False):   # NaN in figures is ours; typed floats are checked
        if first:
            if not isinstance(obj, dict) or "specscope_recording" not in obj:
                raise RecordingError(f"{path} has no specscope header on line {n}; "
                                     "open a .jsonl file saved with 'Save recording'")
            store.header = _checked_header(obj, f"{path}, line {n}")
            first = False
        elif isinstance(obj, dict) and "specscope_report" in obj:
            report = obj["specscope_report"]
            store.report = report if isinstance(report, dict) else None
        else:
            try:
                store.append(event_from_dict(obj))
            except (TypeError, KeyError, ValueError) as e:
                raise RecordingError(f"{path}, line {n}: not a window event ({e})") from e
    if first:
        raise RecordingError(f"{path} is empty; open a .jsonl file saved with 'Save recording'")
    return store
