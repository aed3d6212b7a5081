"""`specscope roofline --engine llamacpp`: llama.cpp's own pass cost by rows, by the user's
llama-bench, fitted and saved as a profile of its own (engine.cost.llamacpp_bench); then what a
drafted row and a drafted window cost in llama.cpp's own speculative loop, by the
llama-speculative-simple beside that llama-bench (engine.tuning.llamacpp_loop), kept in the
same profile for the export to price with.

    specscope roofline --engine llamacpp --llama-bench build/bin/llama-bench [--model F.gguf]
                       [--context 1024] [--threads N] [--llama-bench-args "-ngl 99 -fa 1"]
                       [--llama-spec-args "..."] [--no-loop-calibration]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import TextIO

from engine.cost.llamacpp_bench import (LLAMA_BENCH_ROWS, LLAMA_BENCH_TIMEOUT_S, bench_command,
                                        find_llama_bench,
                                        llamacpp_label, profile_from_llama_bench, run_llama_bench)
from engine.cost.probe import cache_dir, resolve_profile
from engine.cost.profile import CostProfile
from engine.errors import ParameterError
from engine.tuning.llamacpp_loop import format_calibration, profile_calibration
from specscope.progress import Progress


def add_llamacpp_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=("ours", "llamacpp"), default="ours",
                   help="ours: probe our verify pass; llamacpp: time llama.cpp's with its llama-bench")
    p.add_argument("--llama-bench", default=None, metavar="PATH",
                   help="--engine llamacpp: the llama-bench of the llama.cpp you deploy (default $LLAMA_BENCH)")
    p.add_argument("--threads", type=int, default=None,
                   help="--engine llamacpp: llama-bench -t (CPU threads; default llama-bench's)")
    p.add_argument("--llama-bench-args", default="",
                   help="--engine llamacpp: more llama-bench flags, e.g. \"-ngl 99 -fa 1\"")
    p.add_argument("--llama-bench-timeout", type=float, default=None, metavar="SECONDS",
                   help=f"--engine llamacpp: stop llama-bench after this long (default {LLAMA_BENCH_TIMEOUT_S:.0f})")
    p.add_argument("--no-loop-calibration", dest="loop_calibration", action="store_false",
                   help="--engine llamacpp: skip timing llama.cpp's speculative loop (the "
                        "llama-speculative-simple beside llama-bench, a few prompts, seconds on a GPU)")
    p.add_argument("--llama-spec-args", default=None,
                   help="--engine llamacpp: flags for llama-speculative-simple (default: llama-bench's "
                        "-ngl and -fa as it ran, e.g. \"-ngl 99 -fa on\")")


def _rows(text: str | None) -> list[int]:
    if not text:
        return list(LLAMA_BENCH_ROWS)
    try:
        rows = sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError:
        raise ParameterError(f"--rows takes comma-separated row counts like 1,2,4,8; got {text!r}") from None
    if len([r for r in rows if r >= 2]) < 2 or rows[0] < 1:
        raise ParameterError(f"--rows needs at least two row counts >= 2 for a curve, got {text!r}")
    return rows


def run_llamacpp_roofline(a: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    from engine.io.load import default_model_path
    rows = _rows(getattr(a, "rows", None))
    binary = find_llama_bench(a.llama_bench)
    model = Path(a.model).expanduser() if a.model else default_model_path()
    if not model.is_file():
        raise ParameterError(f"llama.cpp needs a .gguf file; {model} is not one")
    if a.threads is not None and a.threads < 1:
        raise ParameterError(f"--threads must be >= 1, got {a.threads}")
    try:
        extra = shlex.split(a.llama_bench_args or "")
    except ValueError as e:             # an unbalanced quote
        raise ParameterError(f"--llama-bench-args {a.llama_bench_args[:200]!r}: {e}; quote it as a shell "
                             "would, e.g. \"-ngl 99 -fa 1\"") from None
    timeout = getattr(a, "llama_bench_timeout", None)
    if timeout is not None and not 0 < timeout < float("inf"):
        raise ParameterError(f"--llama-bench-timeout must be a positive number of seconds, got {timeout}")
    cmd = bench_command(binary, model, a.context, rows, threads=a.threads, extra=extra)
    say = Progress()
    print(f"timing llama.cpp's pass by rows: {shlex.join(cmd)}", file=sys.stderr, flush=True)
    records = run_llama_bench(cmd, progress=say, timeout_s=timeout)
    profile = profile_from_llama_bench(records, a.context, command=cmd,
                                       source=f"{shlex.join(cmd)} ({records[0].get('test_time', '')})")
    profile, why_not = calibrate_profile(a, binary, model, profile, say)
    path = Path(a.out) if a.out else cache_dir() / f"{profile.id}.json"
    profile.save(path)
    raw = path.with_suffix(".llama-bench.json")
    raw.write_text(json.dumps(records, indent=1))
    print(format_llamacpp_report(profile, ours_beside(profile)), file=out)
    cal = profile_calibration(profile)
    print("\n" + "\n".join(format_calibration(cal) if cal else [f"llama.cpp's loop not calibrated: {why_not}"]),
          file=out)
    print(f"\nprofile written to {path}; llama-bench's own JSON to {raw}", file=out)
    return 0


def calibrate_profile(a: argparse.Namespace, bench: Path, model: Path, profile: CostProfile,
                      say: Progress) -> tuple[CostProfile, str]:
    """The profile with llama.cpp's loop calibration (engine.tuning.llamacpp_loop), or as it
    was and why not: skipped, no llama-speculative-simple beside llama-bench, or it failed."""
    from engine.tuning.llamacpp_loop import (LOOP_CONFIGS, LOOP_PROMPTS, LoopCalibrationError, calibrate_loop,
                                             find_speculative_simple,
                                             loop_args_from_profile, with_calibration)
    if not getattr(a, "loop_calibration", True):
        return profile, "--no-loop-calibration (the export prices on llama-bench's pass alone)"
    spec = find_speculative_simple(bench)
    if spec is None:
        why = (f"no llama-speculative-simple beside {bench} (cmake --build build --target "
               "llama-speculative-simple); the export prices on llama-bench's pass alone")
        print(f"note: {why}", file=sys.stderr)
        return profile, why
    given = getattr(a, "llama_spec_args", None)
    try:
        extra = shlex.split(given) if given is not None else loop_args_from_profile(profile)
    except ValueError as e:
        raise ParameterError(f"--llama-spec-args {given[:200]!r}: {e}") from None
    print(f"timing llama.cpp's speculative loop: {spec} on {len(LOOP_PROMPTS)} prompts, plain and {len(LOOP_CONFIGS)} n-gram settings",
          file=sys.stderr, flush=True)
    try:
        cal = calibrate_loop(spec, model, profile, threads=a.threads, extra=extra, progress=say)
    except LoopCalibrationError as e:
        print(f"note: llama.cpp's loop not calibrated: {e}", file=sys.stderr)
        return profile, str(e)
    return with_calibration(profile, cal), ""


def ours_beside(profile: CostProfile) -> CostProfile | None:
    """Our profile of the same model file, if one was probed or ships (for the side-by-side)."""
    import torch
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    for dtype in ("bfloat16", "float32"):
        for suffix in (" [packed]", ""):
            p = resolve_profile(dev, profile.model + suffix, dtype)
            if p is not None:
                return p
    return None


def format_llamacpp_report(profile: CostProfile, ours: CostProfile | None = None) -> str:
    from engine.cost.profile import describe_fit, format_break_even
    e = profile.extra
    one = ("a tg step (plain decoding)" if e.get("one_row") == "tg" else "a 1-token pp pass")
    lines = [f"{llamacpp_label(profile)} (build {e.get('build_number')}) · {profile.device.split(' · ')[0]} · "
             f"{profile.model} · depth {profile.context}", "",
             f"{'rows':>6}  {'llama.cpp ms':>12}  {'fit ms':>8}" + (f"  {'ours ms':>8}" if ours else "")]
    for r, ms in profile.points:
        lines.append(f"{r:>6}  {ms:>12.3f}  {profile.ms(r):>8.3f}" + (f"  {ours.ms(r):>8.3f}" if ours else ""))
    f = profile.fit
    lines += ["", f"row 1 is {one}" + (f"; the 1-token pp pass took {e['pp1_ms']:.3f} ms"
                                       if e.get("pp1_ms") and e.get("one_row") == "tg" else ""),
              f"fit: {describe_fit(profile)}",
              f"16 rows / one row: {profile.ms(16) / f.one_row_ms:.2f}"
              + (f" (ours: {ours.ms(16) / ours.ms(1):.2f}, {ours.id})" if ours else ""),
              "", "break-even on llama.cpp (window ms / one-row ms):", format_break_even(profile)]
    return "\n".join(lines)
