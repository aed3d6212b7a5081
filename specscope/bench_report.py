"""The output folder of `specscope bench`: results.json, a markdown report and a bar chart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_results(result: dict[str, Any], out: Path) -> dict[str, Path | None]:
    """results.json, results.md and results.png (if matplotlib is installed) under `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    png = out / "results.png"
    note = plot_results(result, png)
    result["plot"] = None if note else png.name
    result["plot_note"] = note
    (out / "results.md").write_text(render_markdown(result), encoding="utf-8")
    (out / "results.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    return {"json": out / "results.json", "markdown": out / "results.md",
            "plot": None if note else png}


def _fmt(sp: dict[str, float] | None, digits: int = 1, suffix: str = "") -> str:
    if not sp:
        return "n/a"
    return (f"{sp['median']:.{digits}f}{suffix} ({sp['min']:.{digits}f}-{sp['max']:.{digits}f})"
            if sp["n"] > 1 else f"{sp['median']:.{digits}f}{suffix}")


def render_markdown(result: dict[str, Any]) -> str:
    rows = result["rows"]
    cfg = result["config"]
    m = result["machine"]
    refs = ["ours-ar"] + [r for r in ("transformers-greedy", "llamacpp-plain") if r in rows]
    lines = [
        f"# specscope bench: {cfg['workload']}, {result['device']}, {result['dtype']}",
        "",
        f"{result['date']} · {m['cpu']} ({m['cpu_count']} cores, {m['torch_threads']} torch threads)"
        f" · model {result['model']['name']} · {len(result['prompts'])} prompts × "
        f"{cfg['new_tokens']} new tokens × {cfg['repeats']} repeats, interleaved · greedy",
        "",
        "tok/s: median over repeats of all prompts' new tokens / their wall time, prefill "
        "included (min-max); decode tok/s: the same after each prompt's first token; "
        "speedups (of tok/s) paired per repeat.",
        "",
    ]
    named = [f"{name}: {r['label']}" for name, r in rows.items() if r.get("label") not in (None, name)]
    if named:
        lines += ["rows: " + " · ".join(named), ""]
    lines += [
        "| row | tok/s | tokens/pass | decode tok/s | first token s | "
        + " | ".join(f"× {r}" for r in refs) + " |",
        "| --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in refs) + " |",
    ]
    for name, r in rows.items():
        cells = [_fmt(r["speedup"].get(ref), 2, "×") if ref != name else "1" for ref in refs]
        lines.append(f"| {name} | {_fmt(r['tok_s'])} | {_fmt(r['tokens_per_pass'], 2)} | "
                     f"{_fmt(r['decode_tok_s'])} | {_fmt(r['first_token_s'], 2)} | "
                     + " | ".join(cells) + " |")
    lines += ["", "| goal | row | reference | target | measured | met |",
              "| --- | --- | --- | ---: | ---: | --- |"]
    for g in result["goals"]:
        meas = "n/a" if g["measured"] is None else f"{g['measured']:.2f}×"
        met = {True: "yes", False: "no", None: "n/a"}[g["met"]]
        lines.append(f"| {g['goal']} | {g['row'] or '-'} | {g['reference'] or '-'} | {g['target']}× "
                     f"| {meas} | {met} |")
    lines += ["", "| output | reference | required | identical runs |", "| --- | --- | --- | --- |"]
    for c in result["identity_checks"]:
        lines.append(f"| {c['row']} | {c['reference']} | {'yes' if c['required'] else 'no'} | "
                     f"{c['identical']}/{c['compared']} |")
    if result["skipped"]:
        lines += [""] + [f"- skipped {s['engine']}: {s['reason']}" for s in result["skipped"]]
    if result.get("plot_note"):
        lines += ["", f"- {result['plot_note']}"]
    return "\n".join(lines) + "\n"


COLORS = {"specscope": "#2b7bb9", "transformers": "#e8a33d", "llama.cpp": "#6aa84f"}


def plot_results(result: dict[str, Any], path: Path) -> str | None:
    """A bar chart of tok/s (min-max whiskers) and tokens per pass; None, or why there is none."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (pip install 'specscope[bench]')"
    rows = result["rows"]
    names = list(rows)
    colors = [COLORS.get(rows[n]["engine"], "#888888") for n in names]
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(15, 4.8),
                                     gridspec_kw={"width_ratios": [3, 3, 2]})
    for ax, key, ylabel in ((a1, "tok_s", "tok/s, prefill included"),
                            (a2, "decode_tok_s", "tok/s after the first token")):
        spans = [rows[n][key] for n in names]
        med = [sp["median"] if sp else 0.0 for sp in spans]
        err = [[m - sp["min"] if sp else 0.0 for sp, m in zip(spans, med)],
               [sp["max"] - m if sp else 0.0 for sp, m in zip(spans, med)]]
        ax.bar(names, med, yerr=err, color=colors, capsize=3)
        ax.set_ylabel(f"{ylabel} (median, min-max)")
    tpp = [rows[n]["tokens_per_pass"]["median"] if rows[n]["tokens_per_pass"] else 0 for n in names]
    a3.bar(names, tpp, color=colors)
    a3.set_ylabel("tokens per forward pass")
    for ax in (a1, a2, a3):
        ax.tick_params(axis="x", labelrotation=60, labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    cfg = result["config"]
    fig.suptitle(f"{cfg['workload']} · {result['device']} · {result['dtype']} · "
                 f"{cfg['new_tokens']} tokens × {cfg['repeats']} repeats", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
