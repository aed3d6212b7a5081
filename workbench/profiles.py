"""Cost curves for the roofline view, from `engine.cost.CostProfile`s.

A curve is a verify-pass cost against rows: the probed points (if any), the fitted `ms(rows)`,
the knee and how far the fit vouches for itself. Plain dicts in the reference-profile format
(assets/profiles/*.json) are read through `CostProfile.from_dict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Curve:
    label: str
    points: list[tuple[float, float]]          # (rows, ms) as probed
    ms: Callable[[int], float]                 # the fitted model, rows >= 1
    knee: float | None                         # rows where extra rows stop being nearly free
    max_rows: int = 64                         # how far the model is drawn
    profile: Any = None

    def one_row_ms(self) -> float:
        return float(self.ms(1))


def curve_from_profile(p: Any, label: str | None = None) -> Curve | None:
    """A Curve from a CostProfile (or its dict form); None for nothing usable."""
    if p is None:
        return None
    if isinstance(p, dict):
        from engine.cost.profile import CostProfile
        p = CostProfile.from_dict(p)
    fit = getattr(p, "fit", None)
    pts = [(float(r), float(ms)) for r, ms in (getattr(p, "points", ()) or ())]
    knee = getattr(fit, "knee_rows", None)
    # a knee at or below 2 rows means "no flat part" (every extra row costs): nothing to mark
    knee = float(knee) if knee is not None and knee > 2.0 + 1e-9 else None
    max_rows = getattr(fit, "max_rows", None) or 0
    max_rows = int(max(max_rows, max((r for r, _ in pts), default=0), 2 * (knee or 0), 64 if not pts else 0))
    if label is None:
        dev, model = str(getattr(p, "device", "")), str(getattr(p, "model", ""))
        label = f"{dev} · {model}" if dev and model else str(getattr(p, "id", "profile"))
    return Curve(label, pts, lambda r, p=p: float(p.ms(max(1, int(round(r))))), knee, max_rows, p)
