"""What a verify pass costs on a device, as a function of its rows.

A verify pass of R rows (the root plus R-1 draft nodes) streams the weights once and pays the
launch once, so on a bandwidth-bound card it costs about one decode step until the extra rows'
arithmetic catches up with the weight stream (the roofline knee, seed 000), then grows with a
compute-bound slope. This module fits that curve to measured points, holds it as a `CostProfile`,
and derives what the decoder and the workbench need from it: the knee, the break-even table
(tokens a window of R rows must emit to beat plain decoding, seed 002 section 05) and what-if
pricing of a recorded run on another card.

The cost model (`CostFit`):

    ms(1)        = one_row_ms                        (a plain decode step, measured on its own)
    ms(R), R>=2  = max(flat_ms, intercept_ms + slope_ms_per_row * R)
                 = flat_ms + slope_ms_per_row * max(0, R - knee_rows)

Why the separate one-row point: on GPUs one row runs the BLAS GEMV path and 2+ rows the GEMM
path, and the jump is large (H200, SmolLM2 shape: 1.37 ms for 1 row, ~2.5 ms for 2..64 rows).
Folding row 1 into the hinge would either make plain decoding look as dear as a window (and the
chooser would speculate where it loses) or make every window look cheaper than it is. ms(1) is
exactly the plain-decode cost every speculative window is compared against, so it is the one
number that must be the measured one. Where row 1 is on the line anyway (CPU, the seed's RDNA
fits) the separate point costs nothing.

Why a hinge and not a smooth curve: it has the three numbers people reason with (flat cost,
knee, slope), it is exact for the seeds' figures, and between probed points a piecewise-linear
interpolant is as good as anything a dozen noisy medians can support.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from engine.assets import ASSETS
from engine.errors import ParameterError, SpecscopeError

KINDS = ("measured", "roofline", "linear_fit")

# Reference profiles ship next to the engine package in the source tree (assets/profiles/*.json).
REFERENCE_DIR = ASSETS / "profiles"

# Break-even rows shown when a profile has no probed points of its own.
DEFAULT_TABLE_ROWS = (2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64)


@dataclass(frozen=True)
class CostFit:
    """The fitted verify-cost curve (see the module docstring for the formula)."""

    flat_ms: float               # cost of a pass of 2..knee rows
    slope_ms_per_row: float      # cost of each row past the knee (0: no knee seen)
    knee_rows: float | None      # where the compute line crosses the flat part; None: past max probed rows
    one_row_ms: float            # a plain decode step
    max_rows: int | None = None  # largest row count the fit vouches for; None: extrapolate freely
    rms_rel: float | None = None  # relative RMS residual of the fit (None: parametric, not fitted)

    def __post_init__(self) -> None:
        for name in ("flat_ms", "one_row_ms"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ParameterError(f"cost fit: {name} must be a positive number of ms, got {v}")
        if not (math.isfinite(self.slope_ms_per_row) and self.slope_ms_per_row >= 0):
            raise ParameterError(f"cost fit: slope must be >= 0 ms/row, got {self.slope_ms_per_row}")
        if self.knee_rows is not None and not (math.isfinite(self.knee_rows) and self.knee_rows >= 0):
            raise ParameterError(f"cost fit: knee must be a row count >= 0, got {self.knee_rows}")
        if self.max_rows is not None and self.max_rows < 1:
            raise ParameterError(f"cost fit: max_rows must be >= 1, got {self.max_rows}")

    @property
    def intercept_ms(self) -> float:
        """Intercept of the compute-bound line ms = intercept + slope * rows."""
        if self.knee_rows is None:
            return self.flat_ms
        return self.flat_ms - self.slope_ms_per_row * self.knee_rows

    def ms(self, rows: int) -> float:
        if rows < 1:
            raise ParameterError(f"a verify pass has at least 1 row, got {rows}")
        if rows == 1:
            return self.one_row_ms
        if self.knee_rows is None:
            return self.flat_ms
        return self.flat_ms + self.slope_ms_per_row * max(0.0, rows - self.knee_rows)

    def rows_within(self, frac: float) -> int | None:
        """Largest row count whose pass costs at most (1 + frac) x a 2-row pass: the practical
        row budget. Where a tiny slope starts at row 2 (H200, small models) the knee says 'no
        free rows' while this says how many rows are nearly free. None: unbounded (no slope).
        """
        if self.slope_ms_per_row <= 0 or self.knee_rows is None:
            return self.max_rows
        limit = (1.0 + frac) * self.ms(2)
        return max(2, int(math.floor(self.knee_rows + (limit - self.flat_ms) / self.slope_ms_per_row + 1e-9)))

    def to_dict(self) -> dict[str, Any]:
        return {"flat_ms": self.flat_ms, "slope_ms_per_row": self.slope_ms_per_row,
                "knee_rows": self.knee_rows, "one_row_ms": self.one_row_ms,
                "intercept_ms": self.intercept_ms, "max_rows": self.max_rows,
                "rms_rel": self.rms_rel}


# ---------------------------------------------------------------------------------------------
# Fitting


def _wls(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, float]:
    """Weighted least squares: coefficients and weighted SSE. X: [n, p], y, w: [n]."""
    sw = np.sqrt(w)
    coef, *_ = np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)
    res = y - X @ coef
    return coef, float(np.sum(w * res * res))


def _hinge(r: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float, float | None, float]:
    """Best (flat, slope, knee, sse) of y = flat + slope * max(0, r - knee), slope >= 0.

    Exact over the knee, not a grid: for a knee inside the gap (r[j], r[j+1]) the model is a
    constant on the left points and a free line on the right ones, so the best such knee is the
    crossing of the two separate least-squares fits if it falls inside the gap; otherwise the
    optimum sits on a data point, and a knee on a data point is a 2-parameter linear fit.
    knee None means "flat over every probed row" (slope 0); knee r[0] means "a line throughout".
    """
    n = len(r)
    ones = np.ones(n)
    flat = float(np.sum(w * y) / np.sum(w))
    best = (flat, 0.0, None, float(np.sum(w * (y - flat) ** 2)))
    # knee on a data point (needs a point to its right)
    for j in range(n - 1):
        h = np.maximum(0.0, r - r[j])
        (c, b), sse = _wls(np.stack([ones, h], 1), y, w)
        if b > 0 and sse < best[3]:
            best = (float(c), float(b), float(r[j]), sse)
    # knee strictly inside a gap: constant left of it (>= 2 points: one point alone is no
    # evidence of a flat part, and noise would often buy one), line (>= 2 points) right of it
    for j in range(1, n - 2):
        L, R = slice(0, j + 1), slice(j + 1, n)
        c = float(np.sum(w[L] * y[L]) / np.sum(w[L]))
        sse_l = float(np.sum(w[L] * (y[L] - c) ** 2))
        (a, b), sse_r = _wls(np.stack([ones[R], r[R]], 1), y[R], w[R])
        if b <= 0:
            continue
        k = (c - a) / b
        if r[j] < k < r[j + 1] and sse_l + sse_r < best[3]:
            best = (c, float(b), float(k), sse_l + sse_r)
    return best


def _predict(r: np.ndarray, flat: float, slope: float, knee: float | None) -> np.ndarray:
    if knee is None:
        return np.full_like(r, flat)
    return flat + slope * np.maximum(0.0, r - knee)


def _bic(sse: float, n: int, p: int) -> float:
    return n * math.log(sse / n + 1e-12) + p * math.log(max(n, 2))


def fit_points(points: Iterable[tuple[int, float]]) -> CostFit:
    """Fit the cost model to measured (rows, ms) points (repeated row counts: their median).

    Least squares on relative error (timing noise scales with the time), made robust to the odd
    disturbed measurement by three rounds of Huber reweighting; the hinge is kept over a flat
    line only if it wins by BIC, so pure noise does not invent a knee.

    >>> f = fit_points([(1, 1.0), (2, 2.0), (8, 2.0), (16, 2.0), (32, 4.0), (64, 8.0)])
    >>> round(f.knee_rows, 3), round(f.slope_ms_per_row, 3), f.one_row_ms
    (16.0, 0.125, 1.0)
    """
    by_rows: dict[int, list[float]] = {}
    for rows, ms in points:
        if int(rows) != rows or rows < 1:
            raise ParameterError(f"cost points need whole row counts >= 1, got {rows}")
        if not (math.isfinite(ms) and ms > 0):
            raise ParameterError(f"cost points need positive finite times, got {ms} ms at {rows} rows")
        by_rows.setdefault(int(rows), []).append(float(ms))
    if not by_rows:
        raise ParameterError("cannot fit a cost curve to no points: probe at least one row count")
    all_r = np.array(sorted(by_rows), dtype=float)
    all_y = np.array([float(np.median(by_rows[int(k)])) for k in all_r])
    one = float(all_y[0]) if all_r[0] == 1 else None

    # Row 1 gets its own number (GEMV path); the hinge is fitted on 2+ rows when there are enough.
    sel = all_r >= 2 if (one is not None and np.sum(all_r >= 2) >= 3) else np.ones(len(all_r), bool)
    r, y = all_r[sel], all_y[sel]
    w0 = 1.0 / (y * y)
    w = w0
    for _ in range(4):
        flat, slope, knee, _sse = _hinge(r, y, w)
        e = (y - _predict(r, flat, slope, knee)) / y
        s = 1.4826 * float(np.median(np.abs(e)))
        if s <= 1e-9:
            break
        w = w0 * np.minimum(1.0, 2.0 * s / np.maximum(np.abs(e), 1e-300))
    n = len(r)
    sse_hinge = float(np.sum(w0 * (y - _predict(r, flat, slope, knee)) ** 2))
    flat0 = float(np.sum(w * y) / np.sum(w))
    sse_flat = float(np.sum(w0 * (y - flat0) ** 2))
    if knee is not None and _bic(sse_flat, n, 1) <= _bic(sse_hinge, n, 3):
        flat, slope, knee = flat0, 0.0, None
    if knee is not None and knee <= r[0] and not sel.all():
        # The knee is somewhere in [1, first fitted row]: place it where the line meets the
        # one-row cost (the seeds' RDNA fits: every extra row costs, knee = 1).
        intercept = flat - slope * knee
        knee = float(min(max((one - intercept) / slope, 1.0), r[0]))
        flat = intercept + slope * knee
    rms = float(math.sqrt(np.mean(((y - _predict(r, flat, slope, knee)) / y) ** 2)))
    if one is None:
        one = float(_predict(np.array([1.0]), flat, slope, knee)[0])
    # With a knee the compute line extrapolates soundly; a curve still flat at the last probed
    # row says nothing about what lies beyond it.
    max_rows = None if knee is not None else int(all_r[-1])
    return CostFit(flat_ms=float(flat), slope_ms_per_row=float(slope), knee_rows=knee,
                   one_row_ms=one, max_rows=max_rows, rms_rel=rms)


# ---------------------------------------------------------------------------------------------
# Profiles


@dataclass(frozen=True)
class CostProfile:
    """A device's verify cost for one model: the points (if measured) and the fit.

    kind "measured": `points` are (rows, median ms) and `fit` comes from `fit_points`.
    kind "roofline": seed 000's form, ms = max(decode_ms, compute_ms_per_candidate * rows).
    kind "linear_fit": seed 002's form, ms = base_ms + ms_per_extra_row * (rows - 1), valid up
    to a stated row count (beyond it a different kernel route runs that nobody measured).
    `extra` carries the source's other figures (ar_tok_s, spec_tok_s, ...) untouched.
    """

    id: str
    device: str
    model: str
    dtype: str
    context: int | None
    points: tuple[tuple[int, float], ...]
    fit: CostFit
    source: str
    kind: str = "measured"
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ParameterError(f"cost profile {self.id!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")

    # -- pricing
    def ms(self, rows: int) -> float:
        """Predicted ms of one verify pass of `rows` rows (1 row = a plain decode step)."""
        return self.fit.ms(rows)

    @property
    def ar_ms(self) -> float:
        return self.fit.one_row_ms

    @property
    def max_rows(self) -> int | None:
        return self.fit.max_rows

    def break_even(self, rows: int) -> float:
        """Tokens a window of `rows` rows must emit to match plain decoding: ms(R) / ms(1)."""
        return self.ms(rows) / self.ms(1)

    def break_even_table(self, rows: Sequence[int] | None = None) -> list[tuple[int, float, float]]:
        """(rows, window ms, tokens to break even) for each row count (default: probed rows)."""
        if rows is None:
            rows = [r for r, _ in self.points if r >= 2] or list(DEFAULT_TABLE_ROWS)
            if self.max_rows is not None:
                rows = [r for r in rows if r <= self.max_rows] or list(range(2, self.max_rows + 1))
        return [(int(r), self.ms(int(r)), self.break_even(int(r))) for r in rows]

    # -- serialisation
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "device": self.device, "model": self.model,
                             "dtype": self.dtype, "context": self.context, "source": self.source,
                             "kind": self.kind}
        f = self.fit
        if self.kind == "roofline":
            d.update(decode_ms=f.flat_ms, compute_ms_per_candidate=f.slope_ms_per_row)
        elif self.kind == "linear_fit":
            d.update(base_ms=f.one_row_ms, ms_per_extra_row=f.slope_ms_per_row,
                     fit_valid_rows=[1, f.max_rows] if f.max_rows is not None else None)
        else:
            d["ms_by_rows"] = {str(r): ms for r, ms in self.points}
        d.update(self.extra)
        d["fit"] = f.to_dict()          # derived; written for readers, recomputed on load
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CostProfile":
        try:
            kind = d.get("kind", "measured")
            ctx = d.get("context")
            base = dict(id=str(d["id"]), device=str(d.get("device", "unknown")),
                        model=str(d.get("model", "unknown")), dtype=str(d.get("dtype", "unknown")),
                        context=None if ctx is None else int(ctx), source=str(d.get("source", "")),
                        kind=kind)
            used = set(base) | {"fit", "knee_rows"}
            if kind == "roofline":
                decode, per = float(d["decode_ms"]), float(d["compute_ms_per_candidate"])
                used |= {"decode_ms", "compute_ms_per_candidate"}
                # compute line through the origin: ms = per * rows, knee = decode / per
                fit = CostFit(flat_ms=decode, slope_ms_per_row=per, knee_rows=decode / per,
                              one_row_ms=decode)
                points: tuple[tuple[int, float], ...] = ()
            elif kind == "linear_fit":
                b, per = float(d["base_ms"]), float(d["ms_per_extra_row"])
                valid = d.get("fit_valid_rows")
                used |= {"base_ms", "ms_per_extra_row", "fit_valid_rows"}
                fit = CostFit(flat_ms=b, slope_ms_per_row=per, knee_rows=1.0, one_row_ms=b,
                              max_rows=None if valid is None else int(valid[1]))
                points = ()
            elif kind == "measured":
                raw = d["ms_by_rows"]
                used.add("ms_by_rows")
                points = tuple(sorted((int(k), float(v)) for k, v in raw.items()))
                fit = fit_points(points)
            else:
                raise ParameterError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        except (KeyError, TypeError, ValueError) as e:
            raise SpecscopeError(
                f"cost profile {d.get('id', '?')!r} is malformed ({type(e).__name__}: {e}); "
                "re-run `specscope roofline` to write a fresh one") from None
        extra = {k: v for k, v in d.items() if k not in used}
        return cls(points=points, fit=fit, extra=extra, **base)

    @classmethod
    def from_json(cls, text: str) -> "CostProfile":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecscopeError(f"cost profile is not valid JSON ({e}); re-run `specscope roofline`") from None
        return cls.from_dict(d)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.to_json() + "\n")
        tmp.replace(path)   # atomic: a reader never sees half a profile
        return path

    @classmethod
    def load(cls, path: str | Path) -> "CostProfile":
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as e:
            raise SpecscopeError(f"cannot read cost profile {path}: {e.strerror}") from None
        return cls.from_json(text)


def profile_from_points(points: Sequence[tuple[int, float]], *, id: str, device: str, model: str,
                        dtype: str, context: int | None, source: str,
                        extra: dict[str, Any] | None = None) -> CostProfile:
    """A "measured" profile from probe points (rows, median ms)."""
    pts = tuple(sorted((int(r), float(ms)) for r, ms in points))
    return CostProfile(id=id, device=device, model=model, dtype=dtype, context=context,
                       points=pts, fit=fit_points(pts), source=source, kind="measured",
                       extra=dict(extra or {}))


def reference_profiles(directory: str | Path | None = None) -> dict[str, CostProfile]:
    """The bundled reference profiles (assets/profiles/*.json), by id."""
    d = Path(directory) if directory is not None else REFERENCE_DIR
    out: dict[str, CostProfile] = {}
    for p in sorted(d.glob("*.json")):
        prof = CostProfile.load(p)
        out[prof.id] = prof
    return out


def reference_profile(profile_id: str) -> CostProfile:
    refs = reference_profiles()
    if profile_id not in refs:
        raise ParameterError(f"no reference cost profile {profile_id!r}; known: {', '.join(sorted(refs))}")
    return refs[profile_id]


# ---------------------------------------------------------------------------------------------
# What-if pricing


def windows_of(events: Iterable[Any]) -> list[tuple[int, int]]:
    """(rows, emitted tokens) of each recorded WindowEvent (or its dict form)."""
    out = []
    for e in events:
        d = e if isinstance(e, dict) else e.to_dict()
        out.append((1 + len(d["tokens"]), len(d["emitted"])))
    return out


def what_if(windows: Sequence[tuple[int, int]], profile: CostProfile) -> dict[str, Any]:
    """Price a recorded run's windows on `profile`: its time and tok/s there, and plain AR's.

    windows: (rows, emitted) per window; a plain decode step is (1, 1). AR on the same profile
    emits the same tokens at ms(1) each. Speedup = ar_ms / total_ms.
    """
    total_ms = 0.0
    tokens = 0
    for rows, emitted in windows:
        if rows < 1 or not 1 <= emitted <= rows:
            raise ParameterError(
                f"a window of {rows} rows emits between 1 and {rows} tokens, got {emitted}")
        total_ms += profile.ms(int(rows))
        tokens += int(emitted)
    ar_ms = tokens * profile.ar_ms
    beyond = [r for r, _ in windows if profile.max_rows is not None and r > profile.max_rows]
    return {
        "profile": profile.id,
        "device": profile.device,
        "windows": len(windows),
        "tokens": tokens,
        "total_ms": total_ms,
        "tok_s": 1000.0 * tokens / total_ms if total_ms else 0.0,
        "ar_ms": ar_ms,
        "ar_tok_s": 1000.0 / profile.ar_ms,
        "speedup": ar_ms / total_ms if total_ms else 0.0,
        "tokens_per_window": tokens / len(windows) if windows else 0.0,
        # windows larger than the profile vouches for were priced by extrapolation
        "extrapolated_windows": len(beyond),
    }


def describe_fit(profile: CostProfile) -> str:
    """One human line: flat part, knee, slope, the row budget and the one-row cost."""
    f = profile.fit
    if f.knee_rows is None:
        shape = f"flat {f.flat_ms:.3f} ms up to {f.max_rows} rows (no knee within the probed rows)"
    elif f.knee_rows <= 2.0 + 1e-9:
        shape = (f"no flat part: {f.ms(2):.3f} ms at 2 rows, then +{f.slope_ms_per_row:.4g} ms per "
                 f"row ({100 * f.slope_ms_per_row / f.ms(2):.2g}% of a 2-row pass)")
    else:
        shape = (f"flat {f.flat_ms:.3f} ms up to the knee at {f.knee_rows:.1f} rows, "
                 f"then +{f.slope_ms_per_row:.4g} ms/row")
    budget = f.rows_within(0.1)
    shape += (f"; a window costs <= 10% over 2 rows up to {budget} rows" if budget is not None
              else "; no row limit seen within 10% of 2 rows")
    one = f"one row (plain decode) {f.one_row_ms:.3f} ms"
    if f.one_row_ms < 0.9 * f.flat_ms:
        one += f", {f.flat_ms / f.one_row_ms:.2f}x below the multi-row line (GEMV path)"
    return f"{shape}; {one}"


def format_break_even(profile: CostProfile, rows: Sequence[int] | None = None) -> str:
    """The break-even table as aligned text."""
    lines = [f"{'rows':>6}  {'drafts':>6}  {'window ms':>10}  {'tokens to beat AR':>17}"]
    for r, ms, be in profile.break_even_table(rows):
        lines.append(f"{r:>6}  {r - 1:>6}  {ms:>10.3f}  {be:>17.2f}")
    return "\n".join(lines)
