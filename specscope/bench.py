"""`specscope bench`: our decoder next to the engines users would pick instead, side by side.

    specscope bench [--device cpu] [--workload code-edit | specbench:summarization,rag,... | FILE.jsonl]
                    [--new-tokens 128] [--repeats 3] [--peers transformers llamacpp] [--out DIR]

Rows (specscope/peers.py): ours (AR, lookup, tree, adaptive), transformers (greedy, prompt
lookup 10 and 3) and llama.cpp (plain, prompt lookup 10 and 2). Every engine gets the same prompt
token ids. Runs interleave: for each repeat, for each prompt, every row once (in a rotating
order), so drift on a shared machine hits all rows alike. Per row: tok/s and tokens per forward
pass, the median over repeats of the per-repeat aggregate (all prompts' tokens over their wall
time) with the min-max spread, and speedups paired per repeat. Greedy outputs are checked
identical where they must be (our lookup/tree/adaptive vs our AR; transformers greedy vs our AR)
in float32; in bfloat16/float16 different kernels may flip near-ties, so there it is reported.

Output folder (specscope/bench_report.py): results.json (everything), results.md (tables),
results.png (matplotlib, if installed). run_benchmark() takes already-open runtimes and rows, so
tests inject session models.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from specscope.progress import Progress
from specscope.peers import OURS, PEERS, Row, Sample, open_rows, peer_version
from engine.cost.baseline import decode_tok_s
from engine.errors import ParameterError
from engine.io.prompts import encode_prompt
from engine.io.workloads import SPECBENCH_CATEGORIES, WorkloadPrompt, load_workload
from engine.model.runtime import Runtime
from specscope.bench_report import render_markdown, write_results

# targets for the CPU run (2 cores, float32, bundled model, code-edit prompts): (goal, row,
# reference, the speedup of row over reference to reach); every run reports them
GOALS = (
    ("tree_vs_transformers_best_lookup", "ours-tree", "transformers-pld*", 1.3),
    ("ar_vs_transformers_generate", "ours-ar", "transformers-greedy", 2.0),
    ("best_vs_llamacpp_best", "ours-*", "llamacpp-*", 0.67),
)


@dataclass(frozen=True)
class BenchConfig:
    workload: str = "code-edit"        # engine.io.workloads: code-edit, specbench[:CATS], a .jsonl
    per_category: int = 2              # Spec-Bench questions per category
    prompts: int | None = None         # keep only the first N prompts
    new_tokens: int = 128
    repeats: int = 3
    ours: tuple[str, ...] = OURS
    peers: tuple[str, ...] = PEERS
    warmup_tokens: int = 8             # one untimed run of every row first (0: none)
    threads: int | None = None         # CPU threads for every engine (None: torch's default)

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise ParameterError(msg)
        if self.new_tokens < 1:
            bad(f"--new-tokens must be >= 1, got {self.new_tokens}")
        if self.repeats < 1:
            bad(f"--repeats must be >= 1, got {self.repeats}")
        if self.per_category < 1:
            bad(f"--per-category must be >= 1, got {self.per_category}")
        if self.threads is not None and self.threads < 1:
            bad(f"--threads must be >= 1, got {self.threads}")
        if self.prompts is not None and self.prompts < 1:
            bad(f"--prompts must be >= 1, got {self.prompts}")
        for o in self.ours:
            if o not in OURS:
                bad(f"--ours takes {', '.join(OURS)}; got {o!r}")
        for p in self.peers:
            if p not in PEERS:
                bad(f"--peers takes {', '.join(PEERS)} (or none); got {p!r}")
        if not self.ours or "ar" not in self.ours:
            bad("--ours must include ar: every speedup is measured against it")


# ---------------------------------------------------------------------------------------------
# the run


def run_benchmark(cfg: BenchConfig, rt: Runtime, rows: list[Row], prompts: list[WorkloadPrompt],
                  skipped: list[dict[str, str]] | None = None,
                  progress: Callable[[str, float | None], None] | None = None,
                  extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run every row on every prompt `cfg.repeats` times, interleaved; return the result dict."""
    say = progress or (lambda *_: None)
    ids = {p.id: encode_prompt(rt.tokenizer, list(p.messages)) for p in prompts}
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    if cfg.warmup_tokens:
        first = ids[prompts[0].id]
        for i, row in enumerate(rows):
            say(f"warm-up: {row.name}", i / len(rows))
            row.run(first, min(cfg.warmup_tokens, cfg.new_tokens))
    samples: dict[str, list[dict[str, Any]]] = {r.name: [] for r in rows}
    steps, done = cfg.repeats * len(prompts) * len(rows), 0
    t_start = time.perf_counter()
    for rep in range(cfg.repeats):
        for pi, p in enumerate(prompts):
            shift = (rep * len(prompts) + pi) % len(rows)    # rotate who goes first
            for row in rows[shift:] + rows[:shift]:
                s = row.run(ids[p.id], cfg.new_tokens)
                samples[row.name].append(_sample_record(rep, p.id, s))
                if hasattr(os, "getloadavg"):    # a shared machine: how busy it was, per run
                    samples[row.name][-1]["loadavg_1m"] = round(os.getloadavg()[0], 2)
                done += 1
                say(f"rep {rep + 1}/{cfg.repeats}  {p.id[:28]} ({pi + 1}/{len(prompts)})  "
                    f"{row.name}: {samples[row.name][-1]['tok_s']:.1f} tok/s", done / steps)
    machine = machine_info(rt)
    machine["loadavg_start"] = load_start
    machine["loadavg_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    summary = {r.name: _summarize(r, samples[r.name], cfg.repeats) for r in rows}
    _add_speedups(summary, cfg.repeats)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "config": asdict(cfg),
        "machine": machine,
        "device": rt.device_name,
        "dtype": rt.dtype_name,
        "model": {"source": str(rt.loaded.source), "name": rt.model_id, "format": rt.loaded.format,
                  "arch": rt.config.arch},
        "prompts": [{"id": p.id, "category": p.category, "prompt_tokens": len(ids[p.id])}
                    for p in prompts],
        "rows": summary,
        "identity_checks": identity_checks(summary, rt.dtype_name),
        "goals": goals(summary),
        "skipped": list(skipped or []),
        "bench_s": round(time.perf_counter() - t_start, 2),
    }
    result.update(extra or {})
    return result


def _sample_record(rep: int, prompt_id: str, s: Sample) -> dict[str, Any]:
    n = len(s.tokens)
    ft = s.first_token_s
    decode = decode_tok_s(n, s.wall_s, ft, s.first_tokens)
    return {"repeat": rep, "prompt": prompt_id, "new_tokens": n, "wall_s": round(s.wall_s, 5),
            "tok_s": round(n / s.wall_s, 3) if s.wall_s > 0 else 0.0,
            "first_token_s": None if ft is None else round(ft, 5), "first_tokens": s.first_tokens,
            "decode_tok_s": None if decode is None else round(decode, 3),
            "forward_passes": s.forward_passes,
            "tokens_per_pass": round(n / s.forward_passes, 4) if s.forward_passes else None,
            "tokens": list(s.tokens), **s.extra}


def _spread(xs: list[float]) -> dict[str, float] | None:
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": round(statistics.median(xs), 4), "min": round(min(xs), 4),
            "max": round(max(xs), 4), "n": len(xs)}


def _per_repeat(samples: list[dict[str, Any]], repeats: int) -> list[dict[str, Any]]:
    out = []
    for rep in range(repeats):
        ss = [s for s in samples if s["repeat"] == rep]
        tokens = sum(s["new_tokens"] for s in ss)
        wall = sum(s["wall_s"] for s in ss)
        passes = [s["forward_passes"] for s in ss]
        firsts = [s["first_token_s"] for s in ss]
        # after the first token: decoding alone, prefill cost taken out (the prompts' spans summed)
        decode = (decode_tok_s(tokens, wall, sum(firsts), sum(s.get("first_tokens", 1) for s in ss))
                  if ss and None not in firsts else None)
        out.append({"repeat": rep, "new_tokens": tokens, "wall_s": round(wall, 5),
                    "tok_s": round(tokens / wall, 3) if wall > 0 else 0.0,
                    "decode_tok_s": None if decode is None else round(decode, 3),
                    "first_token_s": (round(statistics.mean(firsts), 5)
                                      if ss and None not in firsts else None),
                    "tokens_per_pass": (round(tokens / sum(passes), 4)
                                        if all(passes) and sum(passes) else None)})
    return out


def _summarize(row: Row, samples: list[dict[str, Any]], repeats: int) -> dict[str, Any]:
    reps = _per_repeat(samples, repeats)
    per_prompt = {}
    for pid in dict.fromkeys(s["prompt"] for s in samples):
        ss = [s for s in samples if s["prompt"] == pid]
        per_prompt[pid] = {"tok_s": _spread([s["tok_s"] for s in ss]),
                           "tokens_per_pass": _spread([s["tokens_per_pass"] for s in ss])}
    notes = []
    if row.engine == "specscope":
        notes.append("forward passes are verify windows; the prefill of prompt[:-1] is one more")
    return {"engine": row.engine, "label": row.label, "params": row.params,
            "tok_s": _spread([r["tok_s"] for r in reps]),
            "decode_tok_s": _spread([r["decode_tok_s"] for r in reps]),
            "first_token_s": _spread([r["first_token_s"] for r in reps]),
            "tokens_per_pass": _spread([r["tokens_per_pass"] for r in reps]),
            "per_repeat": reps, "per_prompt": per_prompt, "samples": samples, "notes": notes}


def _add_speedups(summary: dict[str, dict[str, Any]], repeats: int) -> None:
    """speedup[row][ref]: row's aggregate tok/s over ref's, paired repeat by repeat (both ran
    the same prompts in the same stretch of time), median and min-max over repeats."""
    for name, row in summary.items():
        row["speedup"] = {}
        for ref_name, ref in summary.items():
            if ref_name == name:
                continue
            ratios = [a["tok_s"] / b["tok_s"] for a, b in zip(row["per_repeat"], ref["per_repeat"])
                      if b["tok_s"] > 0]
            row["speedup"][ref_name] = _spread(ratios)


# which outputs must match which: (row, reference, why). Greedy speculation changes the cost of
# a token, never the token, so our drafted rows must reproduce our AR exactly; transformers runs
# the same dequantized weights in the same dtype, so its greedy generate must match our AR.
IDENTITY_PAIRS = (
    ("ours-lookup", "ours-ar", "ours", "speculation must not change greedy output"),
    ("ours-tree", "ours-ar", "ours", "speculation must not change greedy output"),
    ("ours-adaptive", "ours-ar", "ours", "speculation must not change greedy output"),
    ("transformers-greedy", "ours-ar", "parity", "same weights, dtype and greedy rule"),
    ("transformers-pld10", "transformers-greedy", "info", "transformers' own lookup vs its generate"),
    ("transformers-pld3", "transformers-greedy", "info", "transformers' own lookup vs its generate"),
    ("llamacpp-pld10", "llamacpp-plain", "info", "llama.cpp's own lookup vs its plain run"),
    ("llamacpp-pld2", "llamacpp-plain", "info", "llama.cpp's own lookup vs its plain run"),
    ("llamacpp-plain", "ours-ar", "info", "llama.cpp computes in the quantized format, "
                                          "we in the dequantized dtype: near-ties may differ"),
)


def identity_checks(summary: dict[str, dict[str, Any]], dtype: str) -> list[dict[str, Any]]:
    out = []
    for name, ref, kind, why in IDENTITY_PAIRS:
        if name not in summary or ref not in summary:
            continue
        required = kind != "info" and dtype == "float32"
        if kind != "info" and not required:
            why += f"; not required in {dtype}, where kernels of different row counts may flip near-ties"
        refs = {(s["repeat"], s["prompt"]): s["tokens"] for s in summary[ref]["samples"]}
        mismatches = []
        compared = 0
        for s in summary[name]["samples"]:
            other = refs.get((s["repeat"], s["prompt"]))
            if other is None:
                continue
            compared += 1
            if s["tokens"] != other:
                first = next((i for i, (a, b) in enumerate(zip(s["tokens"], other)) if a != b),
                             min(len(s["tokens"]), len(other)))
                mismatches.append({"repeat": s["repeat"], "prompt": s["prompt"],
                                   "first_difference": first, "length": len(s["tokens"]),
                                   "reference_length": len(other)})
        out.append({"row": name, "reference": ref, "required": required, "why": why,
                    "compared": compared, "identical": compared - len(mismatches),
                    "all_identical": not mismatches, "mismatches": mismatches})
    return out


def _pick(summary: dict[str, dict[str, Any]], pattern: str) -> str | None:
    """The named row, or the fastest (median tok/s) row matching `prefix*`."""
    if not pattern.endswith("*"):
        return pattern if pattern in summary else None
    names = [n for n in summary if n.startswith(pattern[:-1])]
    return max(names, key=lambda n: summary[n]["tok_s"]["median"], default=None)


def goals(summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The GOALS, measured where both rows ran (set for the CPU run; reported always)."""
    out = []
    for gid, row_pat, ref_pat, target in GOALS:
        row, ref = _pick(summary, row_pat), _pick(summary, ref_pat)
        if row is None or ref is None:
            out.append({"goal": gid, "target": target, "row": row, "reference": ref,
                        "measured": None, "met": None, "note": "a row did not run"})
            continue
        sp = summary[row]["speedup"][ref]
        out.append({"goal": gid, "target": target, "row": row, "reference": ref,
                    "measured": sp["median"] if sp else None,
                    "spread": [sp["min"], sp["max"]] if sp else None,
                    "met": bool(sp and sp["median"] >= target)})
    return out


def machine_info(rt: Runtime) -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"node": platform.node(), "platform": platform.platform(), "cpu": cpu,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "torch": torch.__version__,
            "device_name": rt.device_name,
            "peers": {p: peer_version(p) for p in PEERS}}
    if rt.device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(rt.device)
        info["hip"] = getattr(torch.version, "hip", None)
        info["cuda"] = torch.version.cuda
    return info


# ---------------------------------------------------------------------------------------------
# the command


def add_bench_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    d = BenchConfig()
    p.add_argument("--workload", default=d.workload,
                   help="code-edit (default), specbench (all of "
                        f"{','.join(SPECBENCH_CATEGORIES)}), specbench:CATEGORY,... or a .jsonl "
                        "file of prompts (one {\"messages\": [...]} a line)")
    p.add_argument("--per-category", type=int, default=d.per_category,
                   help="Spec-Bench questions per category")
    p.add_argument("--prompts", type=int, default=None, help="keep only the first N prompts")
    p.add_argument("--new-tokens", type=int, default=d.new_tokens)
    p.add_argument("--repeats", type=int, default=d.repeats)
    p.add_argument("--peers", nargs="*", default=list(d.peers),
                   help=f"any of {', '.join(PEERS)} (space or comma separated; none: ours only)")
    p.add_argument("--ours", default=",".join(d.ours),
                   help=f"our rows, comma separated, of {', '.join(OURS)}")
    p.add_argument("--warmup-tokens", type=int, default=d.warmup_tokens,
                   help="tokens of the untimed warm-up run of every row (0: none)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for every engine (default: torch's, all cores); on a busy "
                        "machine 1 avoids threads waiting on each other")
    p.add_argument("--out", default=None,
                   help="output folder (default: bench/results/bench_<device>_<workload>)")
    return p


def config_from_args(a: argparse.Namespace) -> BenchConfig:
    peers = tuple(x for v in (a.peers or []) for x in v.split(",") if x and x != "none")
    return BenchConfig(workload=a.workload, per_category=a.per_category, prompts=a.prompts,
                       new_tokens=a.new_tokens, repeats=a.repeats, peers=peers,
                       ours=tuple(x for x in a.ours.split(",") if x),
                       warmup_tokens=max(0, a.warmup_tokens), threads=a.threads)


def run_bench(a: argparse.Namespace) -> int:
    cfg = config_from_args(a)                  # validate before the slow loads
    prompts = load_workload(cfg.workload, cfg.per_category, cfg.prompts)
    from engine.session import open_runtime
    if cfg.threads:
        torch.set_num_threads(cfg.threads)    # before the runtime: its device name counts them
    say = Progress()
    say("loading the model", None)
    rt = open_runtime(a.model, a.device, a.dtype, weights=a.weights)
    longest = max(len(encode_prompt(rt.tokenizer, list(p.messages))) for p in prompts)
    n_ctx = 1 << (longest + cfg.new_tokens + 64).bit_length()
    rows, skipped, extra = open_rows(rt, cfg.ours, cfg.peers, n_ctx, say)
    extra["command"] = "specscope " + " ".join(sys.argv[1:])
    result = run_benchmark(cfg, rt, rows, prompts, skipped, say, extra)
    slug = Path(cfg.workload).stem.replace(":", "-").replace(",", "-")
    out = Path(a.out) if a.out else Path("bench") / "results" / f"bench_{rt.device.type}_{slug}"
    paths = write_results(result, out)
    print(render_markdown(result))
    for k in ("json", "markdown", "plot"):
        if paths.get(k):
            print(f"{k}: {paths[k]}", file=sys.stderr)
    if result.get("plot_note"):
        print(result["plot_note"], file=sys.stderr)
    failed = [c for c in result["identity_checks"] if c["required"] and not c["all_identical"]]
    for c in failed:
        print(f"specscope bench: {c['row']} differs from {c['reference']} on "
              f"{len(c['mismatches'])} of {c['compared']} runs ({c['why']})", file=sys.stderr)
    return 1 if failed else 0
