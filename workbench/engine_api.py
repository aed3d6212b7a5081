"""The few engine entry points the workbench calls, in one place.

The engine's public face is `engine.session` (open_runtime, Decoder, encode_prompt,
default_prompt); cost profiles come from `engine.cost`. Imports are lazy so the window opens (and
recordings replay) before torch is imported, and a missing optional part degrades one feature,
not the window.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def _session():
    try:
        from engine import session
        return session
    except ImportError:
        return None


def open_runtime(model: str | None, device: str, dtype: str,
                 progress: Callable[[str, float], None] | None = None):
    s = _session()
    if s is not None:
        return s.open_runtime(model, device=device, dtype=dtype, progress=progress)
    from engine.runtime import open_runtime as _open
    return _open(model, device, dtype, progress=progress)


def Decoder(rt, ids, settings, controls=None, stop=None):  # noqa: N802 - mirrors the class name
    s = _session()
    if s is not None:
        return s.Decoder(rt, ids, settings, controls=controls, stop=stop)
    from engine.decoder import Decoder as _D
    return _D(rt, ids, settings, controls=controls, stop=stop)


def encode_prompt(rt, prompt) -> list[int]:
    s = _session()
    if s is not None:
        return s.encode_prompt(rt, prompt)
    from engine.prompts import encode_prompt as _enc
    return _enc(rt.tokenizer, prompt)


def default_prompt():
    s = _session()
    if s is not None:
        return s.default_prompt()
    from engine.prompts import default_prompt as _dp
    return _dp()


def read_prompt_file(path: str | Path):
    """`.txt`: raw text; `.json`: chat messages (a list, or an object with a `messages` list)."""
    from engine.prompts import read_prompt_file as _read
    return _read(path)


def model_name(rt) -> str:
    loaded = getattr(rt, "loaded", None)
    src = getattr(loaded, "source", None) or getattr(rt, "model_id", None)
    return Path(str(src)).name if src else "model"


# ---- cost profiles -------------------------------------------------------------------------

def probe_profile(rt, progress: Callable[[str, float], None] | None = None):
    """Measure verify cost against rows on the attached card; None when engine.cost is absent."""
    try:
        from engine import cost
    except ImportError:
        return None
    for name in ("probe", "probe_profile", "measure"):
        fn = getattr(cost, name, None)
        if callable(fn):
            try:
                return fn(rt, progress=progress)
            except TypeError:
                return fn(rt)
    return None


def reference_profiles() -> list[Any]:
    """Reference cards to overlay: engine.cost's loader when present, else the bundled JSON."""
    try:
        from engine import cost
        for name in ("reference_profiles", "load_reference_profiles", "load_profiles"):
            fn = getattr(cost, name, None)
            if callable(fn):
                return list(fn())
    except ImportError:
        pass
    out: list[Any] = []
    for path in sorted((ASSETS / "profiles").glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and "profiles" in data:
            out.extend(data["profiles"])
        elif isinstance(data, list):
            out.extend(data)
        elif isinstance(data, dict):
            out.append(data)
    return out
