"""Cost curves for the roofline view, from whatever profiles exist.

A curve is a verify-pass cost against rows: measured points, a model `ms(rows)` and a knee. It is
built from an `engine.cost.CostProfile` (points, ms(rows), knee_rows) or from a reference-profile
dict (kinds "measured", "roofline", "linear_fit", as in assets/profiles/ and the seeds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Curve:
    label: str
    points: list[tuple[float, float]]          # (rows, ms) as measured or as the source states
    ms: Callable[[float], float] | None        # the fitted model
    knee: float | None                         # rows where extra rows stop being nearly free
    max_rows: float = 64.0                     # how far the model is drawn

    def one_row_ms(self) -> float | None:
        if self.ms is not None:
            return float(self.ms(1))
        pts = [ms for r, ms in self.points if r == 1]
        return pts[0] if pts else None


def _interp(points: list[tuple[float, float]]) -> Callable[[float], float]:
    pts = sorted(points)

    def f(r: float) -> float:
        if r <= pts[0][0]:
            return pts[0][1]
        for (r0, m0), (r1, m1) in zip(pts, pts[1:]):
            if r <= r1:
                return m0 + (m1 - m0) * (r - r0) / (r1 - r0)
        (r0, m0), (r1, m1) = pts[-2], pts[-1]
        return m1 + (m1 - m0) * (r - r1) / (r1 - r0)
    return f


def _knee_from_points(points: list[tuple[float, float]]) -> float | None:
    """The last row count whose cost stays within 10% of the flat part (rows >= 2)."""
    pts = sorted(p for p in points if p[0] >= 2)
    if len(pts) < 3:
        return None
    flat = pts[0][1]
    knee = pts[0][0]
    for r, ms in pts:
        if ms <= flat * 1.10:
            knee = r
        else:
            break
    return knee


def curve_from_dict(d: dict[str, Any]) -> Curve | None:
    label = d.get("id") or d.get("label") or d.get("device", "profile")
    if d.get("device") and d.get("model"):
        label = f"{d['device']} · {d['model']}"
    kind = d.get("kind")
    if "ms_by_rows" in d or "points" in d:
        raw = d.get("points") or [(float(r), float(ms)) for r, ms in d["ms_by_rows"].items()]
        pts = [(float(r), float(ms)) for r, ms in raw]
        if len(pts) < 2:
            return None
        knee = d.get("knee_rows") or _knee_from_points(pts)
        return Curve(label, pts, _interp(pts), knee, max(r for r, _ in pts))
    if kind == "roofline":
        floor, per = float(d["decode_ms"]), float(d["compute_ms_per_candidate"])
        knee = float(d.get("knee_rows") or floor / per)
        f = lambda r, floor=floor, per=per: max(floor, per * r)  # noqa: E731
        pts = [(1.0, floor), (knee, floor)]
        return Curve(label, pts, f, knee, max(64.0, 2 * knee))
    if kind == "linear_fit":
        base, per = float(d["base_ms"]), float(d["ms_per_extra_row"])
        lo, hi = d.get("fit_valid_rows", [1, 8])
        f = lambda r, base=base, per=per: base + per * (r - 1)  # noqa: E731
        pts = [(float(r), f(r)) for r in range(int(lo), int(hi) + 1)]
        return Curve(label, pts, f, None, float(hi))
    return None


def curve_from_profile(p: Any, label: str | None = None) -> Curve | None:
    """An engine.cost.CostProfile (duck-typed) or a dict."""
    if p is None:
        return None
    if isinstance(p, dict):
        return curve_from_dict(p)
    pts = [(float(r), float(ms)) for r, ms in getattr(p, "points", []) or []]
    ms = getattr(p, "ms", None)
    knee = getattr(p, "knee_rows", None)
    if label is None:
        dev, model = getattr(p, "device", ""), getattr(p, "model", "")
        label = " · ".join(x for x in (str(dev), str(model)) if x) or getattr(p, "id", "this card")
    if not pts and ms is None:
        return None
    return Curve(label, pts, ms if callable(ms) else (_interp(pts) if len(pts) > 1 else None),
                 float(knee) if knee else (_knee_from_points(pts) if pts else None),
                 max([r for r, _ in pts] + [64.0]))
