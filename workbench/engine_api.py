"""The few engine entry points the workbench calls, in one place.

Imports are lazy so that the window opens (and recordings replay) before torch is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

Progress = Callable[[str, float], None]


def open_runtime(model: str | None, device: str, dtype: str, progress: Progress | None = None,
                 weights: str = "auto"):
    from engine.session import open_runtime as _open
    return _open(model, device, dtype, progress=progress, weights=weights)


def Decoder(rt, ids, settings, controls=None, stop=None):  # noqa: N802 - mirrors the class name
    from engine.session import draft_opener
    from engine.speculation.decoder import Decoder as _Decoder
    return _Decoder(rt, ids, settings, controls=controls, stop=stop, open_model=draft_opener(rt))


def encode_prompt(rt, prompt) -> list[int]:
    from engine.io.prompts import encode_prompt as _encode
    return _encode(rt.tokenizer, prompt)


def default_prompt():
    from engine.io.prompts import default_prompt as _default
    return _default()


def read_prompt_file(path: str | Path):
    """`.txt`: raw text; `.json`: chat messages (a list, or an object with a `messages` list)."""
    from engine.io.prompts import read_prompt_file as _read
    return _read(path)


def model_name(rt) -> str:
    return Path(str(rt.model_id)).name


def card_profile(rt, progress: Progress | None = None, probe: bool = True):
    """The attached card's verify-cost profile for this model and dtype: a saved or bundled one,
    else (when `probe` is set) a short probe, about 3 rounds, saved for the next start. None when
    nothing is known and probing is off."""
    from engine.cost.probe import card_profile as _card_profile
    return _card_profile(rt, progress=progress, probe=probe, repeats=3, warmup=1, budget_s=8.0)


def reference_profiles() -> list[Any]:
    """The bundled reference cards (assets/profiles/*.json) as CostProfiles."""
    from engine.cost.profile import reference_profiles as _refs
    return list(_refs().values())


def profile_from_dict(d: dict[str, Any]):
    """A CostProfile from its to_dict() form (as stored in a recording's header)."""
    from engine.cost.profile import CostProfile
    return CostProfile.from_dict(d)
