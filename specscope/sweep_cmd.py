"""`specscope sweep` and `specscope export`: search the speculation settings on this device,
then carry the answer out.

    specscope sweep --workload code-edit|specbench[:CATS]|FILE --drafts lookup,tree --depths 2,4,8,16
                    --widths 1,2,3 [--prompts N] [--new-tokens N] --out DIR   # DIR/sweep.json, DIR/sweep.csv
    specscope export --from DIR/sweep.json [--cell best|DRAFT:DEPTH:WIDTH] --format cli|llamacpp|vllm

The sweep itself is engine.tuning.sweep; this module parses, prints progress with the time left
on stderr and saves after every cell, so Ctrl-C leaves a valid partial sweep.json and the same
command resumes it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import threading
import time
from pathlib import Path

from engine.errors import ParameterError
from engine.io.workloads import SPECBENCH_CATEGORIES, load_workload
from engine.tuning.export import FORMATS, export_cell
from engine.tuning.eta import eta_text
from engine.tuning.grid import SweepConfig, parse_ints
from engine.tuning.sweep import plain_words
from engine.tuning.sweep_file import find_cell, load_sweep, save_sweep
from engine.speculation.settings import MATCH_RULES
from specscope.progress import Progress


def add_sweep_args(p: argparse.ArgumentParser) -> None:
    d = SweepConfig()
    p.add_argument("--workload", default=d.workload,
                   help="code-edit (default), specbench (all of "
                        f"{','.join(SPECBENCH_CATEGORIES)}), specbench:CATEGORY,... or a .jsonl file")
    p.add_argument("--drafts", default=",".join(d.drafts),
                   help="drafters, comma separated: lookup,tree (also llama.cpp's ngram-simple, "
                        "ngram-map-k, ngram-map-k4v: depth = size_m, --ngram-max = size_n)")
    p.add_argument("--ngram-min", type=int, default=d.ngram_min)
    p.add_argument("--ngram-max", type=int, default=d.ngram_max,
                   help="longest n-gram matched (llama.cpp's drafters: their size_n)")
    p.add_argument("--depths", default=",".join(map(str, d.depths)), help="draft depths, e.g. 2,4,8,16")
    p.add_argument("--widths", default=",".join(map(str, d.widths)),
                   help="tree widths, e.g. 1,2,3 (the lookup drafter has one branch)")
    p.add_argument("--prompts", type=int, default=None, help="keep only the first N prompts")
    p.add_argument("--per-category", type=int, default=d.per_category,
                   help="Spec-Bench questions per category")
    p.add_argument("--new-tokens", type=int, default=d.new_tokens)
    p.add_argument("--match", default=d.match, choices=MATCH_RULES,
                   help="which earlier occurrence the lookup drafter copies")
    p.add_argument("--no-adaptive-row", dest="adaptive", action="store_false",
                   help="leave out the adaptive row")
    p.add_argument("--skip-margin", type=float, default=d.skip_margin,
                   help="skip cells the cost profile predicts below the best so far by more than "
                        "this fraction (0: measure every cell)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads (default: torch's, all cores); on a busy machine 1 avoids "
                        "threads waiting on each other")
    p.add_argument("--out", required=True, help="folder for sweep.json and sweep.csv (resumed if present)")


def config_from_args(a: argparse.Namespace) -> SweepConfig:
    return SweepConfig(workload=a.workload,
                       drafts=tuple(x.strip() for x in a.drafts.split(",") if x.strip()),
                       depths=parse_ints("--depths", a.depths), widths=parse_ints("--widths", a.widths),
                       prompts=a.prompts, per_category=a.per_category, new_tokens=a.new_tokens,
                       match=a.match, adaptive=a.adaptive, skip_margin=a.skip_margin,
                       ngram_min=a.ngram_min, ngram_max=a.ngram_max)


def run_sweep(a: argparse.Namespace) -> int:
    from engine.session import open_runtime
    from engine.tuning.sweep import Sweep, SweepCancelled

    t0 = time.perf_counter()
    cfg = config_from_args(a)                   # validate before the slow load
    prompts = load_workload(cfg.workload, cfg.per_category, cfg.prompts)
    if a.threads is not None:
        if a.threads < 1:
            raise ParameterError(f"--threads must be >= 1, got {a.threads}")
        import torch
        torch.set_num_threads(a.threads)     # before the runtime: its device name counts them
    out = Path(a.out)
    previous = load_sweep(out) if (out / "sweep.json").is_file() else None
    say = Progress()
    rt = open_runtime(a.model, a.device, a.dtype, progress=say, weights=a.weights)
    sweep = Sweep(rt, cfg, prompts, previous=previous, stop=threading.Event(), progress=say)
    res = sweep.result
    if previous is not None:
        print(f"specscope sweep: resuming {out / 'sweep.json'}: {len(res['cells'])} of "
              f"{len(res['planned'])} cells done", file=sys.stderr)
    try:
        for step in sweep.steps():
            save_sweep(step.result, out)
            say(f"[{step.done}/{step.total}] {step.message}  ({eta_text(step.eta_s)})", step.fraction)
    except (KeyboardInterrupt, SweepCancelled):
        save_sweep(res, out)
        print(f"\nspecscope sweep: interrupted; {len(res['cells'])} of {len(res['planned'])} cells "
              f"saved in {out / 'sweep.json'}: run the same command to resume", file=sys.stderr)
        return 130
    # this command's wall time (load, probe and every cell), and how busy the machine was
    res["run_wall_s"] = round(time.perf_counter() - t0, 2)
    res["loadavg_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    js, cs = save_sweep(res, out)
    _print_summary(res)
    print(f"json: {js}\ncsv: {cs}", file=sys.stderr)
    return 0


def _print_summary(res: dict) -> None:
    """The sweep's table on stdout, its baseline named as every view names it: plain decoding's
    decode tok/s (engine.cost.baseline, measured on the sweep's own plain runs), each cell's
    ratio decode against decode, tok/s with the prefill in said so."""
    ar = res["ar"]
    print(f"baseline: {plain_words(ar)} · {res['device']} ({res['dtype']}), {len(res['prompts'])} "
          f"prompts x {res['config']['new_tokens']} tokens, {res['sweep_s']:.0f} s of decoding, "
          f"{res.get('run_wall_s', 0):.0f} s in all")
    print(f"{'cell':<22} {'tok/s':>7} {'decode':>7} {'tok/pass':>9} {'x plain':>7}   (tok/s: prefill "
          "included; decode tok/s and x plain decoding: prefill excluded)")
    for c in res["cells"]:
        if c["status"] == "skipped":
            print(f"{c['id']:<22} {'skipped':>7} {'':>7} {'':>9} {'':>7}  "
                  f"predicted {c['predicted_ratio']:.2f}x")
        else:
            mark = "  <- best" if c["id"] == res["best"] else ""
            print(f"{c['id']:<22} {c['tok_s']:>7.1f} {c['decode_tok_s']:>7.1f} "
                  f"{c['tokens_per_pass']:>9.2f} {c['ratio_to_ar']:>7.2f}{mark}")
    if ar.get("drift") is not None:
        print(f"plain decoding after the cells ran at {ar['drift']:.2f}x its decode speed before them "
              "(drift on a shared machine moves every ratio by up to that much)")
    print(f"best: {res['best']}; skipped {res['skipped']} cell(s) the cost profile predicted to lose")
    for cid, r in res["adaptive_vs_best"].items():
        print(f"{cid}: {r:.2f} of the best cell")


def add_export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="source", required=True, metavar="DIR/sweep.json",
                   help="a sweep.json (or the folder holding it)")
    p.add_argument("--cell", default="best", help="best (default) or DRAFT:DEPTH:WIDTH, e.g. tree:8:3")
    p.add_argument("--format", required=True, choices=FORMATS,
                   help="cli: our command line; llamacpp: a llama-server command; vllm: a vllm serve "
                        "command with its --speculative-config")
    p.add_argument("--price-with", metavar="PROFILE", default=None,
                   help="--format llamacpp: choose the llama.cpp configuration with the most tokens "
                        "per ms on this llama.cpp profile (specscope roofline --engine llamacpp, or a "
                        "llama-bench -o json file), acceptance replayed from the sweep's plain runs")
    p.add_argument("--row-overhead", type=float, default=None, metavar="STEPS",
                   help="--price-with: what each drafted row costs beyond llama-bench's pass, in "
                        "plain steps (default: the profile's calibration of llama.cpp's loop, "
                        "measured by roofline --engine llamacpp; given, it replaces it)")
    p.add_argument("--check-binary", metavar="PATH", default=None,
                   help="--format llamacpp: run PATH --help (your llama-server, llama-cli or "
                        "llama-speculative-simple) and name any exported flag it rejects")


def run_export(a: argparse.Namespace) -> int:
    res = load_sweep(a.source)
    if (a.price_with or a.check_binary) and a.format != "llamacpp":
        raise ParameterError("--price-with and --check-binary are for --format llamacpp")
    if a.price_with:
        from specscope.export_llamacpp import priced_llamacpp
        text, report, notes = priced_llamacpp(a, res)
        for line in report:
            print(line, file=sys.stderr)
    else:
        cell = find_cell(res, a.cell)
        ex = export_cell(cell, res, a.format)
        text, notes = ex.text, ex.notes
    print(text)
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    if a.check_binary and text.startswith("llama"):
        from engine.tuning.llamacpp_flags import check_binary
        bad = check_binary(a.check_binary, shlex.split(text))
        if bad:
            raise ParameterError(f"{a.check_binary} rejects " + "; ".join(f"{f} ({why})" for f, why in bad))
        print(f"checked: {a.check_binary} takes every flag of this command", file=sys.stderr)
    return 0
