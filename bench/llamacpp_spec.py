"""llama.cpp's speculative decoding, three ways, on the same prompts (issue 23's benchmark).

    python bench/llamacpp_spec.py --build LLAMA_CPP/build --model F.gguf \
        --config "$(specscope export --from SWEEP --format llamacpp --price-with PROFILE)" \
        [--workload code-edit,specbench:summarization,qa,rag] [--per-category 3] [--prompts N] \
        [--tokens 128] [--threads N] [--extra "-ngl 99 -fa on"] [--repeats 1] --out OUT.json

Each prompt (rendered with the model's chat template, as `specscope` encodes it) is decoded by
`llama-speculative-simple -m F -f PROMPT -n TOKENS --temp 0` with
    (a) plain        no speculation (ngram-simple with sizes 1024/1024, which never drafts:
                     the binary refuses to run without a speculative type)
    (b) spec-default --spec-default's settings: ngram-mod, n_match 24, n_min 48, n_max 64
                     (common/arg.cpp 4723-4731 of the pinned tree; llama-speculative-simple does
                     not take --spec-default itself, so its settings are passed one by one)
        ngram-simple `--spec-type ngram-simple` at its defaults (size_n 12, size_m 48)
    (c) exported     the configuration `specscope export --format llamacpp --price-with` chose on
                     llama.cpp's measured curve (its flags after `-m MODEL`; "plain decoding: ..."
                     means plain)
and its "decoded N tokens in S seconds, speed: X t/s" line is parsed (decode only: the prompt's
encoding is timed apart by llama.cpp). Variants run round-robin per prompt, so drift on a shared
machine spreads over all of them. Prints a table per category (median tok/s, (c) / (a) and (c) /
the better (b)) and writes everything, commands included, to --out. With --sweep and --profile
(the sweep and the llama.cpp profile the export was priced on) it also prints, per category, what
the export predicted for (c) (x plain, priced as the export prices: with the profile's loop
calibration, on the sweep's prompts of that category) beside what these prompts measured, and
whether they agree within 15% (issue 33; bench/llamacpp_export_check.sh runs it on held-out
prompts).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# llama-speculative-simple will not run without a speculative type ("failed to initialize
# speculative decoding"): plain decoding through its same loop is ngram-simple with sizes it can
# never meet (cur_len <= n + m + 1 -> no draft, common/ngram-map.cpp 65), so every pass is 1 row
NEVER_DRAFTS = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1024",
                "--spec-ngram-simple-size-m", "1024"]
SPEC_DEFAULT = ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "24",
                "--spec-ngram-mod-n-min", "48", "--spec-ngram-mod-n-max", "64"]
NGRAM_SIMPLE = ["--spec-type", "ngram-simple"]
BUILD = re.compile(r"build: (\d+) \(([0-9a-f]+)\)")
# the loop's own printout (llama-speculative-simple's stats and common_perf_print: where a window's
# time goes besides the pass) is parsed as the calibration parses it
from engine.tuning.llamacpp_loop import ACCEPTED, DECODED, DRAFTED, REUSED, SAMPLING  # noqa: E402


def config_flags(text: str) -> list[str]:
    """The speculative flags of an exported command (`llama-server -m MODEL --spec-type ...`),
    or [] for plain decoding."""
    text = text.strip()
    if not text or text.startswith("plain decoding"):
        return list(NEVER_DRAFTS)
    words = shlex.split(text.splitlines()[0])
    if words and not words[0].startswith("-"):
        words = words[1:]                       # the binary
    out, skip = [], False
    for i, w in enumerate(words):
        if skip:
            skip = False
            continue
        if w in ("-m", "--model"):
            skip = True
            continue
        out.append(w)
    return out


def prompt_texts(model: str, workload: str, per_category: int, limit: int | None) -> list[dict]:
    from engine.io.load import load_model
    from engine.io.workloads import load_workload
    tok = load_model(model).tokenizer
    out = []
    for spec in _workloads(workload):
        for p in load_workload(spec, per_category, limit):
            text = tok.render_chat(list(p.messages), add_generation_prompt=True)
            out.append({"id": p.id, "category": p.category or spec, "text": text,
                        "prompt_tokens": len(tok.encode(text, add_special_tokens=False))})
    return out


def _workloads(text: str) -> list[str]:
    """"code-edit,specbench:summarization,qa,rag" -> ["code-edit", "specbench:summarization,qa,rag"]."""
    parts, out = [p.strip() for p in text.split(",") if p.strip()], []
    for p in parts:
        if out and out[-1].startswith("specbench:") and ":" not in p and p not in ("code-edit", "specbench"):
            out[-1] += "," + p
        else:
            out.append(p)
    return out


def run_one(binary: Path, model: str, prompt_file: Path, tokens: int, flags: list[str],
            threads: int | None, extra: list[str], timeout_s: float) -> dict:
    cmd = [str(binary), "-m", model, "-f", str(prompt_file), "-n", str(tokens), "--temp", "0"]
    if threads is not None:
        cmd += ["-t", str(threads)]
    cmd += extra + flags
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout_s)
    log = r.stdout + "\n" + r.stderr
    m = DECODED.search(log)
    if r.returncode != 0 or not m:
        tail = " | ".join(x for x in log.strip().splitlines()[-3:])
        raise SystemExit(f"llama-speculative-simple failed (exit {r.returncode}): {shlex.join(cmd)}\n  {tail}")
    d, a, b = DRAFTED.search(log), ACCEPTED.search(log), BUILD.search(log)
    smp, reused = SAMPLING.search(log), REUSED.search(log)
    return {"tok_s": float(m.group(3)), "decoded": int(m.group(1)), "decode_s": float(m.group(2)),
            "sampling_ms": float(smp.group(1)) if smp else None,
            "graphs_reused": int(reused.group(1)) if reused else None,
            "drafted": int(d.group(1)) if d else None, "accepted": int(a.group(1)) if a else None,
            "build": f"{b.group(1)} ({b.group(2)})" if b else None,
            "wall_s": round(time.perf_counter() - t0, 3), "command": shlex.join(cmd)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True, help="llama.cpp build dir (bin/llama-speculative-simple inside)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--config", default="", help="the exported command (or its flags)")
    ap.add_argument("--config-file", default=None, help="a file holding the exported command")
    ap.add_argument("--workload", default="code-edit,specbench:summarization,qa,rag")
    ap.add_argument("--per-category", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=None, help="the first N prompts of each workload")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--extra", default="", help="more flags for every run, e.g. \"-ngl 99 -fa on\"")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--sweep", default=None,
                    help="the sweep.json the export was priced from: with --profile, calibrate the "
                         "priced window cost against these runs (specscope export --row-overhead)")
    ap.add_argument("--profile", default=None, help="the llama.cpp profile (or llama-bench JSON) it was priced on")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)

    build = Path(a.build)
    binary = next((p for p in (build / "bin" / "llama-speculative-simple", build / "llama-speculative-simple")
                   if p.is_file()), None)
    if binary is None:
        raise SystemExit(f"no llama-speculative-simple under {build} (cmake --build build --target "
                         "llama-speculative-simple)")
    config = Path(a.config_file).read_text() if a.config_file else a.config
    variants = {"plain": NEVER_DRAFTS, "spec-default": SPEC_DEFAULT, "ngram-simple": NGRAM_SIMPLE,
                "exported": config_flags(config)}
    prompts = prompt_texts(a.model, a.workload, a.per_category, a.prompts)
    extra = shlex.split(a.extra)
    runs: list[dict] = []
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    with tempfile.TemporaryDirectory() as tmp:
        for i, p in enumerate(prompts):
            f = Path(tmp) / f"{i}.txt"
            f.write_text(p["text"])
            for rep in range(a.repeats):
                for name, flags in variants.items():
                    r = run_one(binary, a.model, f, a.tokens, flags, a.threads, extra, a.timeout)
                    runs.append({"prompt": p["id"], "category": p["category"], "variant": name,
                                 "repeat": rep, "flags": flags, **r})
                    print(f"[{i + 1}/{len(prompts)}] {p['id']:<28} {name:<13} {r['tok_s']:>9.1f} tok/s "
                          f"drafted {r['drafted']} accepted {r['accepted']}", file=sys.stderr, flush=True)
    table = summarize(runs, list(variants))
    print(format_table(table, list(variants)))
    calib, versus, fit = report_fits(a.sweep, a.profile, runs, variants)
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "binary": str(binary),
           "build": next((r["build"] for r in runs if r["build"]), None), "model": a.model,
           "tokens": a.tokens, "threads": a.threads, "extra": a.extra, "variants": variants,
           "workload": a.workload, "per_category": a.per_category, "prompt_limit": a.prompts,
           "exported_config": config.strip(), "loadavg_start": load0,
           "loadavg_end": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
           "table": table, "window_cost_fit": fit, "calibration": calib, "predicted_vs_measured": versus, "runs": runs, "prompts": [{k: p[k] for k in ("id", "category", "prompt_tokens")}
                                                      for p in prompts]}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(f"written {a.out}", file=sys.stderr)
    return 0


def report_fits(sweep: str | None, profile: str | None, runs: list[dict], variants: dict) -> tuple:
    """(row calibration, predicted vs measured per category, window-cost fit), each printed;
    the first two need the sweep and the profile the export was priced on."""
    calib = calibrate(sweep, profile, runs, variants) if sweep and profile else None
    if calib:
        for x in calib["runs"]:
            print(f"{x['prompt']:<28} {x['variant']:<13} priced {x['priced_steps']:7.1f} plain steps, "
                  f"measured {x['measured_steps']:7.1f} ({x['drafted']} drafted rows)")
        print(f"calibrated: each drafted row costs {calib['row_overhead']:.3f} plain steps above "
              f"llama-bench's pass: specscope export ... --row-overhead {calib['row_overhead']:.3f}")
    pred = predicted(sweep, profile, variants["exported"]) if sweep and profile else None
    versus = predicted_vs_measured(runs, pred) if pred else None
    if versus:
        print(format_versus(versus))
    fit = window_cost_fit(runs)
    if fit:
        print(f"measured window cost, in plain steps of the same prompt and repeat: {fit['per_window']:.2f} a "
              f"window + {fit['per_drafted_row']:.2f} a drafted row (fit over {fit['runs']} runs, "
              f"{100 * fit['rel_rms']:.0f}% rms); compare the profile's ms(R)/ms(1)")
    return calib, versus, fit


def calibrate(sweep: str, profile: str, runs: list[dict], variants: dict | None = None) -> dict | None:
    from engine.cost.llamacpp_bench import load_llama_bench_json
    from engine.tuning.llamacpp_price import calibrate_row_overhead, streams_from_sweep, sweep_prompt_ids
    from engine.tuning.sweep_file import load_sweep
    res = load_sweep(sweep)
    return calibrate_row_overhead(streams_from_sweep(res, sweep_prompt_ids(res)),
                                  load_llama_bench_json(profile), runs, variants)


def predicted(sweep: str, profile: str, flags: list[str]) -> dict[str, float]:
    """What the export predicts for the exported flags, x plain per category of the sweep's
    (tuning) prompts, priced as the export prices: with the profile's loop calibration."""
    from engine.cost.llamacpp_bench import load_llama_bench_json
    from engine.tuning.llamacpp_loop import profile_calibration
    from engine.tuning.llamacpp_price import by_category, config_from_flags, price, streams_from_sweep, sweep_prompt_ids
    from engine.tuning.sweep_file import load_sweep
    cfg = config_from_flags(flags) if flags != NEVER_DRAFTS else None
    res = load_sweep(sweep)
    streams = streams_from_sweep(res, sweep_prompt_ids(res))
    if cfg is None:                     # plain decoding exported: predicted at plain's speed
        return {s.category or "all": 1.0 for s in streams}
    prof = load_llama_bench_json(profile)
    cal = profile_calibration(prof)
    row, win = (cal.row_overhead, cal.window_overhead) if cal else (0.0, 0.0)
    return by_category(price(streams, prof, [cfg], row, win)[0])


def predicted_vs_measured(runs: list[dict], pred: dict[str, float]) -> dict[str, dict]:
    """Per category: predicted x plain (tuning prompts) beside measured (these prompts: median
    over prompts and repeats of exported tok/s over the same prompt and repeat's plain)."""
    out = {}
    for c in sorted({r["category"] for r in runs}):
        ratios = []
        for r in runs:
            if r["category"] != c or r["variant"] != "exported":
                continue
            plain = next((x for x in runs if x["variant"] == "plain" and x["prompt"] == r["prompt"]
                          and x["repeat"] == r["repeat"]), None)
            if plain and plain["tok_s"]:
                ratios.append(r["tok_s"] / plain["tok_s"])
        p = pred.get(c, pred.get("all"))
        m = statistics.median(ratios) if ratios else None
        out[c] = {"predicted": p, "measured": round(m, 3) if m else None, "prompts": len(ratios),
                  "measured_over_predicted": round(m / p, 3) if m and p else None,
                  "within_15pct": bool(m and p and abs(m / p - 1) <= 0.15)}
    return out


def format_versus(versus: dict[str, dict]) -> str:
    lines = [f"{'category':<16}{'predicted':>10}{'measured':>10}{'meas/pred':>10}  within 15%   "
             "(exported x plain; predicted on the sweep's prompts, measured on these)"]
    for c, v in versus.items():
        p, m, q = v["predicted"], v["measured"], v["measured_over_predicted"]
        lines.append(f"{c:<16}{p if p is not None else float('nan'):>10.2f}{m if m else float('nan'):>10.2f}"
                     f"{q if q else float('nan'):>10.2f}  {'yes' if v['within_15pct'] else 'NO'}")
    return "\n".join(lines)


def window_cost_fit(runs: list[dict]) -> dict | None:
    """What a window of llama.cpp's real loop costs: decode time over the same prompt and
    repeat's plain per-token time = a * windows + b * drafted rows (least squares over the
    speculative runs; windows = decoded - accepted, as each emits its accepted drafts plus one).
    llama-bench's prompt pass computes one row of logits; a verify pass computes and samples
    every row's, so b can exceed the pp curve's slope."""
    import numpy as np
    X, y = [], []
    for r in runs:
        if r["variant"] == "plain" or r["drafted"] is None:
            continue
        plain = next((x for x in runs if x["variant"] == "plain" and x["prompt"] == r["prompt"]
                      and x["repeat"] == r["repeat"]), None)
        if plain is None or not plain["decoded"]:
            continue
        X.append([r["decoded"] - r["accepted"], r["drafted"]])
        y.append(r["decode_s"] / (plain["decode_s"] / plain["decoded"]))
    if len(X) < 3:
        return None
    A, b = np.array(X, float), np.array(y)
    coef, *_ = np.linalg.lstsq(A, b, rcond=None)
    rms = float(np.sqrt(np.mean(((A @ coef - b) / b) ** 2)))
    return {"per_window": round(float(coef[0]), 3), "per_drafted_row": round(float(coef[1]), 3),
            "runs": len(X), "rel_rms": round(rms, 3)}


def summarize(runs: list[dict], variants: list[str]) -> dict:
    """{category: {variant: median tok/s, ..., 'c/a', 'c/b'}} plus 'all'."""
    cats = sorted({r["category"] for r in runs}) + ["all"]
    out = {}
    for c in cats:
        row = {}
        for v in variants:
            xs = [r["tok_s"] for r in runs if r["variant"] == v and (c == "all" or r["category"] == c)]
            row[v] = round(statistics.median(xs), 2) if xs else None
        if row.get("plain") and row.get("exported"):
            row["c/a"] = round(row["exported"] / row["plain"], 3)
        best_b = max((row[v] for v in ("spec-default", "ngram-simple") if row.get(v)), default=None)
        if best_b and row.get("exported"):
            row["c/b"] = round(row["exported"] / best_b, 3)
        out[c] = row
    return out


def format_table(table: dict, variants: list[str]) -> str:
    head = f"{'category':<16}" + "".join(f"{v:>14}" for v in variants) + f"{'(c)/(a)':>9}{'(c)/(b)':>9}"
    lines = [head + "   (median decode tok/s)"]
    for c, row in table.items():
        lines.append(f"{c:<16}" + "".join(f"{row[v]:>14.1f}" if row.get(v) else f"{'-':>14}" for v in variants)
                     + f"{row.get('c/a', float('nan')):>9.2f}{row.get('c/b', float('nan')):>9.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
