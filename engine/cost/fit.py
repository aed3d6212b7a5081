"""The verify-cost curve: what a pass of R rows costs, fitted to measured (rows, ms) points.

A verify pass of R rows (the root plus R-1 draft nodes) streams the weights once and pays the
launch once, so on a bandwidth-bound card it costs about one decode step until the extra rows'
arithmetic catches up with the weight stream (the knee of a roofline, Williams et al. 2009),
then grows with a compute-bound slope. `CostFit` holds that curve:

    ms(1)        = one_row_ms                        (a plain decode step, measured on its own)
    ms(R), R>=2  = max(flat_ms, intercept_ms + slope_ms_per_row * R)
                 = flat_ms + slope_ms_per_row * max(0, R - knee_rows)

Why the separate one-row point: on GPUs one row runs the BLAS GEMV path and 2+ rows the GEMM
path, and the jump is large (about 2x on the H200: BENCHMARKS.md, "Speculation and tuning
timings (moved from code comments)").
Folding row 1 into the hinge would either make plain decoding look as dear as a window (and the
chooser would speculate where it loses) or make every window look cheaper than it is. ms(1) is
exactly the plain-decode cost every speculative window is compared against, so it is the one
number that must be the measured one. Where row 1 is on the line anyway (CPU, the bundled RDNA
profiles in assets/profiles) the separate point costs nothing.

Why a hinge and not a smooth curve: it has the three numbers people reason with (flat cost,
knee, slope), it is exact for the roofline and linear forms of the bundled reference profiles,
and between probed points a piecewise-linear interpolant is as good as anything a dozen noisy
medians can support. `fit_points` fits it; engine.cost.profile wraps a fit into a device profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from engine.errors import ParameterError


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
        # one-row cost (as in the bundled R9700 and Strix Halo linear fits: every extra row
        # costs, knee = 1).
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
