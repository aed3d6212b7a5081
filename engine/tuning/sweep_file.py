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
import json
import os
from pathlib import Path
from typing import Any

from engine.errors import ParameterError
from engine.io.jsonfile import MiB, read_json
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
    _atomic(js, json.dumps(result, indent=1, ensure_ascii=False))
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
    return d


def measured(result: dict[str, Any], adaptive: bool | None = False) -> list[dict[str, Any]]:
    """The cells that ran (not skipped); adaptive None: both kinds."""
    return [c for c in result.get("cells", []) if c.get("status") == "done"
            and c.get("ratio_to_ar") is not None and (adaptive is None or c["adaptive"] == adaptive)]


def best_cell(result: dict[str, Any]) -> dict[str, Any] | None:
    """The fixed cell with the highest measured ratio to AR (ties: the fewer rows)."""
    cells = measured(result)
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
