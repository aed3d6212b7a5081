"""llama.cpp's side of issue 22's comparison: llama-bench on the same GGUF files, parsed.

    python3 bench/llamacpp_side.py --bin /tmp/lcpp/llama.cpp/build/bin --model M.gguf --out DIR

For each model (--model may be given twice; --tag names each, default the file's stem) it runs
llama-bench (-ngl 99 -fa 1, JSON output) twice:

    rows+tg  -p 1,2,4,8,12,16,24,32,48,64 -n 128 -d 1000 -r R   one pass of k rows at depth
             1000 for each k (a "pp of k tokens") and tg128 at depth 1000 (the depth's prompt is
             processed once and its state restored for every test and repetition)
    pp       -p 512 -n 0 -r R                                   prompt processing at depth 0

and prints: tg128 tok/s and ms a token, the pass ms by rows (median of the R samples), pp512
tok/s. Writes DIR/llamacpp_<tag>.json (parsed figures, the commands, and llama-bench's raw
JSON as it printed it) and the raw output again as DIR/llamabench_<tag>_<part>.json (a real
llama-bench JSON, byte for byte, for test fixtures). `--parts` picks rows, tg, pp.

Functions (`run_llama_bench`, `summarize`, `measure`) are what bench/gpu_speed.py calls between
its own measurements to interleave ours and llama.cpp's in one session.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROWS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
DEPTH = 1000
TG = 128
PP = 512
PARTS = ("rows", "tg", "pp")


class LlamaBenchError(RuntimeError):
    """llama-bench could not run or its output could not be read: the message says why."""


def find_llama_bench(where: str | os.PathLike) -> Path:
    """The llama-bench executable: `where` itself, or where/llama-bench, or where/bin/llama-bench
    (a build dir), or where/build/bin/llama-bench (a source tree)."""
    p = Path(where)
    for c in (p, p / "llama-bench", p / "bin" / "llama-bench", p / "build" / "bin" / "llama-bench"):
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise LlamaBenchError(f"no llama-bench executable at {p} (tried {p}/llama-bench, {p}/bin/, "
                          f"{p}/build/bin/): build llama.cpp first (bench/gpu_speed_session.sh --build)")


def run_llama_bench(exe: Path, model: Path, args: list[str], timeout: float = 300,
                    env: dict | None = None) -> dict:
    """One llama-bench run with `-o json`: {"cmd", "raw" (stdout as printed), "tests" (parsed),
    "seconds", "stderr_tail"}. Raises LlamaBenchError with llama-bench's own words on failure."""
    cmd = [str(exe), "-m", str(model), *args, "-o", "json"]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise LlamaBenchError(f"llama-bench ran past {timeout:.0f} s: {' '.join(cmd)}") from None
    except OSError as e:
        raise LlamaBenchError(f"llama-bench could not start ({e}): {' '.join(cmd)}") from None
    secs = time.perf_counter() - t0
    if r.returncode != 0:
        raise LlamaBenchError(f"llama-bench exited with {r.returncode}: {' '.join(cmd)}\n"
                              + r.stderr[-2000:])
    try:
        tests = json.loads(r.stdout)
    except json.JSONDecodeError as e:
        raise LlamaBenchError(f"llama-bench printed no JSON ({e}); stdout starts {r.stdout[:300]!r}") from None
    if not isinstance(tests, list):
        raise LlamaBenchError(f"llama-bench JSON is not a list of tests: {r.stdout[:300]!r}")
    return {"cmd": cmd, "raw": r.stdout, "tests": tests, "seconds": round(secs, 2),
            "stderr_tail": r.stderr[-1500:]}


def summarize(tests: list[dict]) -> dict:
    """Figures from llama-bench's JSON tests (any mix of runs):

    rows_ms {k: ms}   a pass of k rows (tests with n_prompt k, n_gen 0, at the deepest depth seen
                      for that k): the median of the samples
    tg                {n_gen, depth, tok_s, ms_per_token, samples}: the median sample
    pp                {n_prompt, depth, tok_s}: the longest prompt test at depth 0 (pp512)
    Samples of the same test in several runs are pooled before the median.
    """
    pooled: dict[tuple[int, int, int], list[float]] = {}
    info: dict = {}
    for t in tests:
        key = (int(t.get("n_prompt", 0)), int(t.get("n_gen", 0)), int(t.get("n_depth", 0)))
        pooled.setdefault(key, []).extend(float(s) for s in (t.get("samples_ns") or [t["avg_ns"]]))
        for f in ("model_filename", "model_type", "model_size", "model_n_params", "gpu_info",
                  "cpu_info", "backends", "build_commit", "n_gpu_layers", "flash_attn", "n_threads"):
            if f in t:
                info.setdefault(f, t[f])
    out: dict = {"info": info, "rows_ms": {}, "rows_depth": None, "tg": None, "pp": None,
                 "tests": {f"p{p}_n{g}_d{d}": {"median_ms": statistics.median(v) / 1e6, "samples": len(v)}
                           for (p, g, d), v in sorted(pooled.items())}}
    rows = [(p, d) for (p, g, d) in pooled if g == 0 and p > 0]
    if rows:
        depth = max(d for _, d in rows)
        out["rows_depth"] = depth
        out["rows_ms"] = {p: statistics.median(pooled[(p, 0, depth)]) / 1e6
                          for p, d in sorted(rows) if d == depth}
    tgs = [(g, d) for (p, g, d) in pooled if p == 0 and g > 0]
    if tgs:
        g, d = max(tgs, key=lambda gd: (gd[1], gd[0]))
        med = statistics.median(pooled[(0, g, d)])
        out["tg"] = {"n_gen": g, "depth": d, "tok_s": g / (med / 1e9), "ms_per_token": med / 1e6 / g,
                     "samples": len(pooled[(0, g, d)])}
    pps = [p for (p, g, d) in pooled if g == 0 and d == 0 and p > 0]
    if pps:
        p = max(pps)
        med = statistics.median(pooled[(p, 0, 0)])
        out["pp"] = {"n_prompt": p, "depth": 0, "tok_s": p / (med / 1e9), "ms": med / 1e6,
                     "samples": len(pooled[(p, 0, 0)])}
    return out


def common_args(ngl: int = 99, fa: int = 1, threads: int | None = None) -> list[str]:
    a = ["-ngl", str(ngl), "-fa", str(fa)]
    return a + (["-t", str(threads)] if threads else [])


def measure(exe: Path, model: Path, parts=PARTS, reps: int = 3, rows=ROWS, depth: int = DEPTH,
            tg: int = TG, pp: int = PP, ngl: int = 99, fa: int = 1, threads: int | None = None,
            timeout: float = 300) -> dict:
    """One round of llama.cpp's figures for one model: {"runs": {part: run}, "summary": ...}.
    A part that fails is reported under "errors" and the others still run."""
    base = common_args(ngl, fa, threads) + ["-r", str(reps)]
    runs: dict = {}
    errors: dict = {}
    if "rows" in parts or "tg" in parts:
        p = ",".join(str(r) for r in rows) if "rows" in parts else "0"
        n = str(tg) if "tg" in parts else "0"
        try:
            runs["rows_tg"] = run_llama_bench(exe, model, base + ["-p", p, "-n", n, "-d", str(depth)], timeout)
        except LlamaBenchError as e:
            errors["rows_tg"] = str(e)
    if "pp" in parts:
        try:
            runs["pp"] = run_llama_bench(exe, model, base + ["-p", str(pp), "-n", "0"], timeout)
        except LlamaBenchError as e:
            errors["pp"] = str(e)
    tests = [t for r in runs.values() for t in r["tests"]]
    return {"runs": runs, "errors": errors, "summary": summarize(tests)}


def format_summary(tag: str, s: dict) -> str:
    lines = [f"llama.cpp, {tag}: {s['info'].get('model_type', '?')}, {s['info'].get('backends', '?')}"
             f" {s['info'].get('gpu_info') or s['info'].get('cpu_info', '')}".rstrip()]
    if s.get("tg"):
        t = s["tg"]
        lines.append(f"  tg{t['n_gen']} at depth {t['depth']}: {t['tok_s']:.1f} tok/s = "
                     f"{t['ms_per_token']:.3f} ms a token ({t['samples']} samples)")
    if s.get("rows_ms"):
        rows = s["rows_ms"]
        lines.append(f"  pass of k rows at depth {s['rows_depth']}, ms (median):")
        lines.append("    " + " ".join(f"{k:>7}" for k in rows))
        lines.append("    " + " ".join(f"{v:>7.3f}" for v in rows.values()))
        if 1 in rows and 16 in rows:
            lines.append(f"    16 rows / one row: {rows[16] / rows[1]:.2f}")
    if s.get("pp"):
        p = s["pp"]
        lines.append(f"  pp{p['n_prompt']} at depth {p['depth']}: {p['tok_s']:.0f} tok/s")
    return "\n".join(lines)


def write_side(out: Path, tag: str, rounds: list[dict]) -> dict:
    """DIR/llamacpp_<tag>.json from one or more rounds of `measure`, and the raw JSON of each
    run as DIR/llamabench_<tag>_<part>[_<round>].json. Returns the pooled result."""
    out.mkdir(parents=True, exist_ok=True)
    tests = [t for rd in rounds for r in rd["runs"].values() for t in r["tests"]]
    res = {"date": time.strftime("%Y-%m-%d %H:%M"), "tag": tag, "summary": summarize(tests),
           "rounds": [{"summary": rd["summary"], "errors": rd["errors"],
                       "runs": {k: {f: v[f] for f in ("cmd", "seconds", "raw", "stderr_tail")}
                                for k, v in rd["runs"].items()}} for rd in rounds]}
    for i, rd in enumerate(rounds):
        for part, run in rd["runs"].items():
            suffix = "" if len(rounds) == 1 else f"_{i}"
            (out / f"llamabench_{tag}_{part}{suffix}.json").write_text(run["raw"])
    (out / f"llamacpp_{tag}.json").write_text(json.dumps(res, indent=1))
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--bin", required=True, help="llama-bench, or the build dir holding bin/llama-bench")
    ap.add_argument("--model", action="append", required=True, help="a GGUF file (repeatable)")
    ap.add_argument("--tag", action="append", default=None, help="a name for each --model, in order")
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated: rows, tg, pp")
    ap.add_argument("--reps", type=int, default=3, help="llama-bench -r (default 3)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the whole measurement, pooled")
    ap.add_argument("--rows", default=",".join(map(str, ROWS)))
    ap.add_argument("--depth", type=int, default=DEPTH)
    ap.add_argument("--tg", type=int, default=TG)
    ap.add_argument("--pp", type=int, default=PP)
    ap.add_argument("--ngl", type=int, default=99)
    ap.add_argument("--fa", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None, help="llama-bench -t (CPU runs)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per llama-bench run")
    a = ap.parse_args(argv)
    try:
        parts = tuple(p for p in a.parts.split(",") if p)
        bad = [p for p in parts if p not in PARTS]
        if bad or not parts:
            raise LlamaBenchError(f"--parts takes {', '.join(PARTS)}; got {a.parts!r}")
        try:
            rows = tuple(int(r) for r in a.rows.split(",") if r)
        except ValueError:
            raise LlamaBenchError(f"--rows takes comma-separated row counts; got {a.rows!r}") from None
        tags = a.tag or []
        if len(tags) > len(a.model):
            raise LlamaBenchError("more --tag than --model")
        tags += [Path(m).stem for m in a.model[len(tags):]]
        missing = [m for m in a.model if not Path(m).is_file()]
        if missing:
            raise LlamaBenchError(f"no model file {', '.join(missing)}")
        exe = find_llama_bench(a.bin)
    except LlamaBenchError as e:
        print(f"llamacpp_side: {e}", file=sys.stderr)
        return 2
    rc = 0
    for model, tag in zip(a.model, tags):
        rounds = []
        for i in range(a.rounds):
            t0 = time.perf_counter()
            rd = measure(exe, Path(model), parts, a.reps, rows, a.depth, a.tg, a.pp, a.ngl, a.fa,
                         a.threads, a.timeout)
            print(f"[{time.strftime('%H:%M:%S')}] llama.cpp {tag} round {i + 1}/{a.rounds}: "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
            for part, err in rd["errors"].items():
                print(f"  {part} FAILED: {err}", file=sys.stderr, flush=True)
                rc = 1
            rounds.append(rd)
        res = write_side(Path(a.out), tag, rounds)
        print(format_summary(tag, res["summary"]), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
