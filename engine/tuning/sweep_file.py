"""sweep.json and sweep.csv: what a sweep leaves on disk, read back for resuming, the heat map
and export.

sweep.json (one object):
    kind "specscope-sweep", version, date, config (SweepConfig.to_dict), device, dtype, weights,
    model {source, name, format}, profile (the cost profile's id, or null), prompts [{id,
    category, prompt_tokens}], ar {tok_s, tokens_per_pass, per_prompt [...], drift (AR's tok/s
    after the cells over before)}, cells [one entry
    per finished cell, in the order run: id, draft, depth, width, adaptive, ar_floor, rows,
    settings (DecodeSettings.to_dict), status "done" | "skipped", tok_s, decode_tok_s,
    tokens_per_pass, ratio_to_ar (of decode tok/s; medians over prompts; null when skipped), predicted_ratio, skip_reason,
    per_prompt [...]], planned (every cell id of the grid), best (the id of the fixed cell with
    the highest ratio to AR), adaptive_vs_best {cell id: its ratio / the best's}, skipped (how
    many cells were skipped), complete, sweep_s.

The file is rewritten whole after every cell (to a temporary name, then renamed), so a sweep
cut at any moment leaves a valid file holding every cell finished so far.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any

from engine.errors import ParameterError
from engine.io.jsonfile import MiB, dumps, read_json
from engine.tuning.grid import Cell, parse_cell

KIND = "specscope-sweep"
VERSION = 1
MAX_SWEEP_BYTES = 64 * MiB     # a sweep of a thousand cells is about a megabyte
CSV_FIELDS = ("id", "draft", "depth", "width", "adaptive", "ar_floor", "rows", "status", "tok_s",
              "decode_tok_s", "tokens_per_pass", "ratio_to_ar", "predicted_ratio", "skip_reason")


def save_sweep(result: dict[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    """Write DIR/sweep.json and DIR/sweep.csv (each atomically); return both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    js, cs = out / "sweep.json", out / "sweep.csv"
    _atomic(js, dumps(result, indent=1, ensure_ascii=False))   # no NaN: read back as written
    rows = [{"id": "ar", "draft": "none", "depth": 0, "width": 1, "adaptive": False,
             "ar_floor": False, "rows": 1, "status": "done" if result.get("ar") else "pending",
             "tok_s": (result.get("ar") or {}).get("tok_s"),
             "decode_tok_s": (result.get("ar") or {}).get("decode_tok_s"), "tokens_per_pass": 1.0 if result.get("ar") else None,
             "ratio_to_ar": 1.0 if result.get("ar") else None}]
    rows += [{k: c.get(k) for k in CSV_FIELDS} for c in result.get("cells", [])]
    tmp = cs.with_name(cs.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, cs)
    return js, cs


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def load_sweep(path: str | Path) -> dict[str, Any]:
    """A sweep.json (or the folder holding one); ParameterError, one line, for anything else."""
    p = Path(path)
    if p.is_dir():
        p = p / "sweep.json"
    if not p.is_file():
        raise ParameterError(f"no sweep file at {p}: run `specscope sweep --out DIR` first")
    d = read_json(p, "a sweep file", shape=dict, max_bytes=MAX_SWEEP_BYTES, error=ParameterError,
                  fix="run `specscope sweep --out DIR` again")
    if d.get("kind") != KIND or not isinstance(d.get("cells"), list):
        raise ParameterError(f"{p} is not a specscope sweep (no \"kind\": \"{KIND}\" with a cell list)")
    if d.get("version") != VERSION:
        raise ParameterError(f"{p} is a version {d.get('version')} sweep; this specscope reads version {VERSION}")
    for i, c in enumerate(d["cells"]):
        _check_cell(c, f"{p}: cell {i + 1}")
    return d


_CELL_FIELDS: dict[str, tuple[type, ...]] = {   # what export, resume and the heat map read
    "id": (str,), "draft": (str,), "status": (str,), "settings": (dict,), "depth": (int,),
    "width": (int,), "rows": (int,), "adaptive": (bool,), "ar_floor": (bool,)}
_CELL_FIGURES = ("tok_s", "decode_tok_s", "tokens_per_pass", "ratio_to_ar", "predicted_ratio")


def _check_cell(c: Any, where: str) -> None:
    """One cell of a sweep read from disk: the fields the readers use, of their types; its
    settings valid DecodeSettings inside the window's inputs; its figures numbers or null.
    ParameterError naming the cell and the field otherwise."""
    from engine.speculation.setting_fields import check_ranges
    from engine.speculation.settings import DecodeSettings
    if not isinstance(c, dict):
        raise ParameterError(f"{where} is not an object; run `specscope sweep --out DIR` again")
    for key, kinds in _CELL_FIELDS.items():
        v = c.get(key)
        if key in ("id", "status", "settings", "adaptive") or v is not None:
            if not isinstance(v, kinds) or (bool not in kinds and isinstance(v, bool)):
                raise ParameterError(f"{where}: {key} is {type(v).__name__ if v is not None else 'missing'}, "
                                     f"not {'text' if kinds == (str,) else kinds[0].__name__}")
    if c["status"] not in ("done", "skipped"):
        raise ParameterError(f"{where}: status is {c['status'][:40]!r}, not done or skipped")
    for key in _CELL_FIGURES:
        v = c.get(key)
        if v is not None and not _finite(v):
            raise ParameterError(f"{where}: {key} is {type(v).__name__}, not a number or null")
    if c["status"] == "done" and c.get("ratio_to_ar") is not None and c.get("rows") is None:
        raise ParameterError(f"{where}: a measured cell without its rows")
    try:
        check_ranges(c["settings"], f"{where}'s settings")
        DecodeSettings.from_dict(c["settings"])
    except ParameterError as e:
        if str(e).startswith(where):
            raise
        raise ParameterError(f"{where}'s settings: {e}") from None
    except (TypeError, ValueError) as e:
        raise ParameterError(f"{where}: its settings are not decode settings ({str(e)[:120]})") from None


def measured(result: dict[str, Any], adaptive: bool | None = False) -> list[dict[str, Any]]:
    """The cells that ran (not skipped); adaptive None: both kinds."""
    return [c for c in result.get("cells", []) if c.get("status") == "done"
            and _finite(c.get("ratio_to_ar")) and (adaptive is None or c["adaptive"] == adaptive)]


def _finite(x: Any) -> bool:
    """A measured figure: a finite number (a NaN or infinite ratio, from a 0 ms or 0 tok/s run,
    is no measurement, so such a cell is never the best, nor exported as it)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def best_cell(result: dict[str, Any]) -> dict[str, Any] | None:
    """The fixed cell with the highest measured ratio to AR (ties: the fewer rows)."""
    cells = [c for c in measured(result) if c.get("tok_s") is None or _finite(c["tok_s"])]
    return max(cells, key=lambda c: (c["ratio_to_ar"], -c["rows"]), default=None)


def find_cell(result: dict[str, Any], spec: str = "best") -> dict[str, Any]:
    """The cell `spec` names: best, or DRAFT:DEPTH:WIDTH (adaptive:DRAFT:DEPTH:WIDTH)."""
    if spec == "best":
        c = best_cell(result)
        if c is None:
            raise ParameterError("the sweep has no measured cell yet: resume it first")
        return c
    want: Cell = parse_cell(spec)
    for c in result.get("cells", []):
        if c["id"] == want.id:
            if c.get("status") != "done":
                raise ParameterError(f"cell {want.id} was skipped ({c.get('skip_reason')}); "
                                     "choose a measured cell")
            return c
    ids = ", ".join(c["id"] for c in measured(result, None)) or "none"
    raise ParameterError(f"the sweep has no cell {want.id}; measured cells: {ids}")


def summarize(result: dict[str, Any]) -> None:
    """Fill best, adaptive_vs_best and skipped from the cells (in place)."""
    best = best_cell(result)
    result["best"] = best["id"] if best else None
    result["adaptive_vs_best"] = {
        c["id"]: round(c["ratio_to_ar"] / best["ratio_to_ar"], 4)
        for c in measured(result, True)} if best and best["ratio_to_ar"] else {}
    result["skipped"] = sum(c.get("status") == "skipped" for c in result.get("cells", []))
