"""Issue 22's goal table filled in from a results folder (bench/gpu_speed.py `summary`).

Reads DIR/all_<big>.json and DIR/all_<small>.json (ours, with llama.cpp's figures of the same
rounds under "llamacpp"), DIR/kernels_<tag>.json (where `all` ran without its kernels part),
DIR/matmul.json, DIR/exact_summary_<small>.json and DIR/tree_vs_llamacpp.json, whichever exist;
prints the goal table (markdown, also written to DIR/summary.md) and the pass-by-rows curves of
both engines side by side; DIR/summary.json holds the same numbers. A figure whose inputs are
missing reads "not measured".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

BIG, SMALL = "8b", "bundled"
BIG_MATRICES = ("q4k_28672x8192", "q4k_gate_up_24576x4096")


def _load(p: Path) -> dict | None:
    try:
        return json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _rows(d: dict | None, *path: Any) -> Any:
    """d[path...] with int row keys tolerated as strings (JSON), or None."""
    for k in path:
        if d is None:
            return None
        if isinstance(d, dict):
            d = d.get(k, d.get(str(k)))
        else:
            return None
    return d


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def figures(out: Path, big: str = BIG, small: str = SMALL) -> dict:
    """The goal figures: {key: {"value", "detail"}} (value None when not measured)."""
    A, S = _load(out / f"all_{big}.json") or {}, _load(out / f"all_{small}.json") or {}
    for R, tag in ((A, big), (S, small)):       # the kernels table of an earlier call (--build-only)
        if "kernels" not in R:
            k = _load(out / f"kernels_{tag}.json")
            if k:
                R["kernels"] = k
    mm, ex = _load(out / "matmul.json"), _load(out / f"exact_summary_{small}.json")
    f: dict[str, dict] = {}

    def put(key: str, value: float | None, detail: str = "") -> None:
        f[key] = {"value": value, "detail": detail}

    for tag, R in ((BIG, A), (SMALL, S)):          # keys by role, whatever the files' tags
        ours = _rows(R, "decode", "decode_tok_s")
        tg = _rows(R, "llamacpp", "tg", "tok_s")
        put(f"{tag}_decode_over_tg", _ratio(ours, tg),
            f"{ours:.1f} ÷ {tg:.1f} tok/s" if ours and tg else "")
        pre = _rows(R, "prefill", "tok_s")
        pp = _rows(R, "llamacpp", "pp", "tok_s")
        put(f"{tag}_prefill_over_pp512", _ratio(pre, pp), f"{pre:.0f} ÷ {pp:.0f} tok/s" if pre and pp else "")
        one, sixteen = _rows(R, "roofline", "ms_by_rows", 1), _rows(R, "roofline", "ms_by_rows", 16)
        floor = _rows(R, "facts", "weight_floor_ms")
        put(f"{tag}_one_row_over_floor", _ratio(one, floor),
            f"{one:.3f} ms ÷ {floor:.3f} ms" if one and floor else "")
        put(f"{tag}_16_over_1", _ratio(sixteen, one), f"{sixteen:.3f} ÷ {one:.3f} ms" if one and sixteen else "")
        l16 = _rows(R, "llamacpp", "rows_ms", 16)
        put(f"{tag}_16_over_llama16", _ratio(sixteen, l16), f"{sixteen:.3f} ÷ {l16:.3f} ms" if sixteen and l16 else "")
        k = _rows(R, "kernels", "passes", 1)
        lpl = k.get("launches_per_layer") if k else None
        put(f"{tag}_launches_per_layer", lpl,
            (f"{k['launches_per_pass']:.0f} a pass" + ("" if k.get("kind") == "device" else ", CPU ops"))
            if k else "")
        g = _rows(R, "generate")
        put(f"{tag}_generate_tok_s", g.get("tok_s") if g else None,
            f"{g['new_tokens']} tokens, short prompt; decode steps alone {g.get('decode_tok_s', 0):.1f}" if g else "")
    for name in BIG_MATRICES:
        r = _rows(mm, "shapes", name)
        pct = _rows(r, "pct_peak", 1)
        put(f"matmul_{name}_pct_1row", pct,
            f"{_rows(r, 'us', 1):.1f} µs, {_rows(r, 'gbs', 1):.0f} GB/s; row-invariant "
            f"{'yes' if r.get('row_invariant') else 'NO'}" if pct is not None else "")
    tv = _load(out / "tree_vs_llamacpp.json")
    tree = _rows(tv, "summary", "tree:8:3") if tv else None
    put(f"{SMALL}_tree_over_llama_ngram", tree.get("median_ratio_vs_llama_best") if tree else None,
        f"median over {len(tv['rows'])} prompts of tree d8 w3 ÷ llama.cpp's fastest n-gram type that "
        f"prompt; {tree['median_tok_s']:.0f} vs {tv['summary']['llama_best_median_tok_s']:.0f} tok/s "
        f"(bench/tree_vs_llamacpp.py)" if tree else "")
    if ex and ex.get("forms"):
        worst = max(max(v["max_abs_chains"], v["max_abs_trees"]) for v in ex["forms"].values())
        put("exact_max_abs_diff", worst, ", ".join(f"{k}: {max(v['max_abs_chains'], v['max_abs_trees']):g}"
                                                   for k, v in ex["forms"].items()))
    else:
        put("exact_max_abs_diff", None)
    return f


# (label, key, today, goal text, met(value))
GOALS: list[tuple[str, str, str, str, Callable[[float], bool]]] = [
    ("8B-like Q4_K_M plain decoding: ours tok/s ÷ llama.cpp tg128 at depth 1000", f"{BIG}_decode_over_tg",
     "0.42-0.44", ">= 1.25 (stretch 2.0)", lambda v: v >= 1.25),
    ("8B-like one-row pass ÷ weight floor (weight bytes ÷ 4.8 TB/s)", f"{BIG}_one_row_over_floor",
     "8.5", "<= 3.0", lambda v: v <= 3.0),
    ("8B-like: pass of 16 rows ÷ one row", f"{BIG}_16_over_1", "1.17", "<= 1.15", lambda v: v <= 1.15),
    ("8B-like: our 16-row pass ÷ llama.cpp's 16-row pass", f"{BIG}_16_over_llama16", "1.11", "<= 0.5",
     lambda v: v <= 0.5),
    ("big Q4_K matrix 28672 x 8192, 1 row: % of 4.8 TB/s", f"matmul_{BIG_MATRICES[0]}_pct_1row", "25%",
     ">= 60%", lambda v: v >= 60),
    ("the 8B's gate/up fused, 24576 x 4096 (Q4_K), 1 row: % of 4.8 TB/s", f"matmul_{BIG_MATRICES[1]}_pct_1row", "",
     ">= 60%", lambda v: v >= 60),
    ("launches in a one-row pass, per layer (8B-like)", f"{BIG}_launches_per_layer", "~25", "<= 8",
     lambda v: v <= 8),
    ("bundled: plain decoding ÷ llama.cpp tg128 at depth 1000", f"{SMALL}_decode_over_tg", "0.48", ">= 1.0",
     lambda v: v >= 1.0),
    ("bundled: tree speculation ÷ llama.cpp's best n-gram speculation, same prompts",
     f"{SMALL}_tree_over_llama_ngram", "1.33", ">= 2.0", lambda v: v >= 2.0),
    ("prefill tok/s ÷ llama.cpp pp512, 8B-like", f"{BIG}_prefill_over_pp512", "", ">= 1.0", lambda v: v >= 1.0),
    ("prefill tok/s ÷ llama.cpp pp512, bundled", f"{SMALL}_prefill_over_pp512", "~0.05", ">= 1.0",
     lambda v: v >= 1.0),
    ("exact: max \\|diff\\| verify rows vs one-row pass (bf16 packed, bf16 dequantized, float32)",
     "exact_max_abs_diff", "0.0", "0.0", lambda v: v == 0.0),
]


def _fmt(v: float | None, key: str) -> str:
    if v is None:
        return "not measured"
    if "pct" in key:
        return f"{v:.0f}%"
    if "launches" in key:
        return f"{v:.1f}"
    if "exact" in key:
        return f"{v:g}"
    return f"{v:.2f}"


def goal_table(f: dict) -> str:
    lines = ["| figure | today (2026-12-02) | goal | measured | |", "| --- | ---: | ---: | ---: | --- |"]
    for label, key, today, goal, met in GOALS:
        v = f.get(key, {}).get("value")
        verdict = "" if v is None else ("met" if met(v) else "MISSED")
        detail = f.get(key, {}).get("detail", "")
        lines.append(f"| {label} | {today} | {goal} | **{_fmt(v, key)}**"
                     f"{' (' + detail + ')' if detail else ''} | {verdict} |")
    return "\n".join(lines)


def curves(out: Path, tag: str) -> str:
    """Our pass ms by rows beside llama.cpp's (pp of k tokens at the same depth)."""
    R = _load(out / f"all_{tag}.json")
    ours = _rows(R, "roofline", "ms_by_rows") or {}
    theirs = _rows(R, "llamacpp", "rows_ms") or {}
    if not ours:
        return ""
    keys = sorted({int(k) for k in ours} | {int(k) for k in theirs})
    get = lambda d, k: d.get(k, d.get(str(k)))  # noqa: E731
    lines = [f"{tag}: pass ms by rows, context {_rows(R, 'roofline', 'context')}",
             "| rows | " + " | ".join(str(k) for k in keys) + " |", "| --- |" + " ---: |" * len(keys)]
    for name, d in (("ours", ours), ("llama.cpp", theirs)):
        lines.append(f"| {name} | " + " | ".join(f"{get(d, k):.2f}" if get(d, k) else "" for k in keys) + " |")
    if theirs:
        lines.append("| ours ÷ llama.cpp | " + " | ".join(
            f"{get(ours, k) / get(theirs, k):.2f}" if get(ours, k) and get(theirs, k) else "" for k in keys) + " |")
    return "\n".join(lines)


def summarize_dir(out: Path, big: str = BIG, small: str = SMALL) -> int:
    if not out.is_dir():
        print(f"summary: no results folder {out}")
        return 2
    f = figures(out, big, small)
    text = "\n\n".join(t for t in (goal_table(f), curves(out, big), curves(out, small)) if t)
    print(text, flush=True)
    (out / "summary.md").write_text(text + "\n")
    (out / "summary.json").write_text(json.dumps(f, indent=1))
    return 0
