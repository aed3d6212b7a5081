"""A device's verify-cost profile, and what the decoder and the workbench derive from it.

A `CostProfile` is a `CostFit` (engine.cost.fit: the curve and the fitting) plus where it came
from: device, model, dtype, the probed points. From it come the break-even table (tokens a
window of R rows must emit to beat plain decoding, ms(R) / ms(1): Leviathan et al. 2023 take a
verify pass of any width to cost one step, the measured curve drops that assumption) and
what-if pricing of a recorded run on another card. Profiles round-trip through JSON; the bundled
references live in assets/profiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from engine.assets import ASSETS
from engine.cost.fit import CostFit, fit_points
from engine.errors import ParameterError, SpecscopeError
from engine.io.jsonfile import MiB, dumps, parse_json, read_json

KINDS = ("measured", "roofline", "linear_fit")

# Reference profiles ship next to the engine package in the source tree (assets/profiles/*.json).
REFERENCE_DIR = ASSETS / "profiles"
MAX_PROFILE_BYTES = 16 * MiB      # a profile is a few KB
_REFRESH = "re-run `specscope roofline` to write a fresh one"

# Break-even rows shown when a profile has no probed points of its own.
DEFAULT_TABLE_ROWS = (2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64)


@dataclass(frozen=True)
class CostProfile:
    """A device's verify cost for one model: the points (if measured) and the fit.

    kind "measured": `points` are (rows, median ms) and `fit` comes from `fit_points`.
    kind "roofline": ms = max(decode_ms, compute_ms_per_candidate * rows), the form of the
    RX 9070 XT reference (assets/profiles/rx9070xt-qwen3.5-9b.json).
    kind "linear_fit": ms = base_ms + ms_per_extra_row * (rows - 1), valid up to a stated row
    count (beyond it a different kernel route runs that nobody measured), the form of the R9700
    and Strix Halo references.
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
        return dumps(self.to_dict(), indent=1)     # no NaN or Infinity: read back as written

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
        except (KeyError, IndexError, TypeError, ValueError, ArithmeticError, AttributeError) as e:
            raise SpecscopeError(     # ArithmeticError: a roofline's 0 ms per candidate, 1e308 / 1e-308
                f"cost profile {str(d.get('id', '?'))[:60]!r} is malformed ({type(e).__name__}: {e}); "
                "re-run `specscope roofline` to write a fresh one") from None
        extra = {k: v for k, v in d.items() if k not in used}
        return cls(points=points, fit=fit, extra=extra, **base)

    @classmethod
    def from_json(cls, text: str, where: str = "cost profile") -> "CostProfile":
        return cls.from_dict(parse_json(text, where, what="a cost profile", shape=dict, error=SpecscopeError,
                                        fix=_REFRESH))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.to_json() + "\n")
        tmp.replace(path)   # atomic: a reader never sees half a profile
        return path

    @classmethod
    def load(cls, path: str | Path) -> "CostProfile":
        return cls.from_dict(read_json(path, "a cost profile", shape=dict, max_bytes=MAX_PROFILE_BYTES,
                                       error=SpecscopeError, fix=_REFRESH))


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
    """Price a recorded run's windows on `profile`: its time and tok/s there, and plain decoding's.

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


BEAT = "tokens to beat plain decoding"     # the break-even column, in every table of it


def format_break_even(profile: CostProfile, rows: Sequence[int] | None = None) -> str:
    """The break-even table as aligned text."""
    lines = [f"{'rows':>6}  {'drafts':>6}  {'window ms':>10}  {BEAT:>29}"]
    for r, ms, be in profile.break_even_table(rows):
        lines.append(f"{r:>6}  {r - 1:>6}  {ms:>10.3f}  {be:>29.2f}")
    return "\n".join(lines)
