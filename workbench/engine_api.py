"""The few engine entry points the workbench calls, in one place.

The engine's public face is `engine.session` (open_runtime, Decoder, encode_prompt,
default_prompt); cost profiles come from `engine.cost`. Imports are lazy so the window opens (and
recordings replay) before torch is imported, and a missing optional part degrades one feature,
not the window.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


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

def card_profile(rt, progress: Callable[[str, float], None] | None = None, probe: bool = True):
    """The attached card's verify-cost profile for this model and dtype.

    A profile saved earlier (by `specscope roofline` or a previous workbench session) or a
    matching bundled reference is used as is; otherwise, when `probe` is set, a short probe runs
    (about 3 rounds, a few seconds) and is saved to the per-user cache so the next start is
    instant. None when nothing is known and probing is off.
    """
    from engine import roofline
    dtype = getattr(rt, "dtype_name", "")
    model_id = getattr(rt, "model_id", model_name(rt))
    found = roofline.resolve_profile(rt.device_name, model_id, dtype)
    if found is not None or not probe:
        return found
    return roofline.probe_profile(rt, context=512, progress=progress, save=True,
                                  repeats=3, warmup=1, budget_s=8.0)


def reference_profiles() -> list[Any]:
    """The bundled reference cards (assets/profiles/*.json) as CostProfiles; [] if unreadable."""
    try:
        from engine import cost
        refs = cost.reference_profiles()
    except Exception:                      # noqa: BLE001 - overlays are optional decoration
        return []
    return list(refs.values()) if isinstance(refs, dict) else list(refs)


def profile_from_dict(d: dict[str, Any]):
    """A CostProfile from its to_dict() form (as stored in a recording's header)."""
    from engine.cost import CostProfile
    return CostProfile.from_dict(d)
