"""`specscope roofline`: probe verify cost against rows, print the fit and the break-even table,
save the profile (the probe itself is engine.cost.probe)."""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from typing import Any, Callable, TextIO

from engine.cost.probe import (CPU_BUDGET_S, CPU_REPEATS, CPU_ROWS, CPU_WARMUP, DEFAULT_CONTEXT,
                               GPU_BUDGET_S, GPU_REPEATS, GPU_ROWS, GPU_WARMUP, MIN_REPEATS,
                               ProbeProgress, VerifyTimer, device_type, profile_path, run_probe)
from engine.cost.draft_cost import (default_exit_layers, draft_model_cost,
                                    format_draft_break_even, format_exit_break_even)
from engine.cost.profile import CostProfile, describe_fit, format_break_even
from engine.errors import ParameterError


def _parse_rows(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        rows = sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError:
        raise ParameterError(f"--rows takes comma-separated row counts like 1,2,4,8; got {text!r}") from None
    if not rows or rows[0] < 1:
        raise ParameterError(f"--rows needs row counts >= 1, got {text!r}")
    return rows


def add_roofline_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Options of `specscope roofline`. --model/--device/--dtype are added only if the CLI has
    not already added them as common options."""
    have = parser._option_string_actions   # argparse has no public "has option" query
    if "--model" not in have:
        parser.add_argument("--model", default=None, help="a .gguf file or HF folder (default: bundled SmolLM2)")
    if "--device" not in have:
        parser.add_argument("--device", default="auto", help="auto | cpu | cuda (ROCm shows up as cuda)")
    if "--dtype" not in have:
        parser.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 | float16")
    parser.add_argument("--context", type=int, default=DEFAULT_CONTEXT,
                        help=f"KV context each pass attends over (default {DEFAULT_CONTEXT})")
    parser.add_argument("--rows", default=None,
                        help="comma-separated row counts (default: "
                             f"{','.join(map(str, GPU_ROWS))} on GPU, {','.join(map(str, CPU_ROWS))} on CPU)")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"timed rounds per row count (default {GPU_REPEATS} GPU, {CPU_REPEATS} CPU)")
    parser.add_argument("--warmup", type=int, default=None,
                        help=f"untimed passes per row count first (default {GPU_WARMUP} GPU, {CPU_WARMUP} CPU)")
    parser.add_argument("--budget", type=float, default=None,
                        help=f"stop timing after this many seconds, at least {MIN_REPEATS} rounds "
                             f"(default {GPU_BUDGET_S:g} GPU, {CPU_BUDGET_S:g} CPU)")
    parser.add_argument("--out", default=None, help="write the profile here instead of the per-user cache")
    parser.add_argument("--exit-layers", default=None,
                        help="early exit: exit layers whose one-row draft pass to time, comma-separated, "
                             "or 'none' (default: a quarter, half, three quarters and all layers)")
    if "--draft-model" not in have:
        parser.add_argument("--draft-model", default=None,
                            help="also probe this draft model (same vocabulary) and price it as a drafter")
    return parser


def _parse_exit_layers(text: str | None, n_layers: int | None) -> list[int] | None:
    """--exit-layers: None (the default spread), [] ('none'), or the listed layers."""
    if text is None:
        return None if n_layers is None else default_exit_layers(n_layers)
    if text.strip().lower() == "none":
        return []
    try:
        layers = sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError:
        raise ParameterError(f"--exit-layers takes comma-separated layer counts like 8,16,24 or 'none'; "
                             f"got {text!r}") from None
    if not layers or (n_layers is not None and not 1 <= layers[0] <= layers[-1] <= n_layers):
        raise ParameterError(f"--exit-layers must lie between 1 and the model's {n_layers} layers, "
                             f"got {text!r}")
    return layers


def _call_factory(factory: Callable[..., Any], args: argparse.Namespace) -> Any:
    """The CLI may hand a factory of args or a closure of none; accept both."""
    try:
        n = len(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        n = 1
    return factory(args) if n else factory()


def format_report(profile: CostProfile) -> str:
    """Measured points next to the fit, the fit in words, and the break-even table."""
    f = profile.fit
    lines = [f"{profile.device} | {profile.model} | {profile.dtype} | context {profile.context}", "",
             f"{'rows':>6}  {'measured ms':>11}  {'fit ms':>8}"]
    for r, ms in profile.points:
        lines.append(f"{r:>6}  {ms:>11.3f}  {profile.ms(r):>8.3f}")
    knee = "none within the probed rows" if f.knee_rows is None else f"{f.knee_rows:.1f} rows"
    lines += ["", f"fit: {describe_fit(profile)}",
              f"knee {knee}; slope {f.slope_ms_per_row:.4g} ms/row; flat {f.flat_ms:.3f} ms; "
              f"one row {f.one_row_ms:.3f} ms" + (f"; fit error {100 * f.rms_rel:.1f}% rms"
                                                  if f.rms_rel is not None else ""),
              "", "break-even (window ms / one-row ms):", format_break_even(profile)]
    exits = format_exit_break_even(profile)
    if exits:
        lines += ["", exits]
    return "\n".join(lines)


def run_roofline(args: argparse.Namespace, runtime_factory: Callable[..., VerifyTimer],
                 out: TextIO | None = None, err: TextIO | None = None,
                 draft_factory: Callable[[Any], VerifyTimer] | None = None) -> int:
    """`specscope roofline`: probe, print the fit and the break-even table, save the profile.
    draft_factory(target runtime): the --draft-model's runtime, probed and priced as a drafter."""
    out = out or sys.stdout
    err = err or sys.stderr
    rows_arg = _parse_rows(getattr(args, "rows", None))      # checked before the slow load
    _parse_exit_layers(getattr(args, "exit_layers", None), None)
    runtime = _call_factory(runtime_factory, args)
    n_layers = getattr(getattr(runtime, "config", None), "n_layers", None)
    exit_layers = _parse_exit_layers(getattr(args, "exit_layers", None), n_layers)
    rows = rows_arg or list(CPU_ROWS if device_type(runtime) == "cpu" else GPU_ROWS)
    profile = _probe_and_save(runtime, args, rows, exit_layers or [], err, out)
    if draft_factory is not None:
        draft = draft_factory(runtime)
        print(f"\nthe draft model {getattr(draft, 'model_id', '?')}:", file=out)
        if profile_path(draft.device_name, draft.model_id, draft.dtype_name) == \
                profile_path(profile.device, profile.model, profile.dtype):
            dprof = profile              # the target itself (in the same form): measured above
            print("the same file and form as the target: its profile above", file=out)
        else:
            dprof = _probe_and_save(draft, args, rows, [], err, out, out_path=False)
        cost = draft_model_cost(dprof, f"draft model {dprof.model}")
        print("\n" + format_draft_break_even(profile, cost), file=out)
    return 0


def _probe_and_save(runtime: VerifyTimer, args: argparse.Namespace, rows: list[int],
                    exit_layers: list[int], err: TextIO, out: TextIO,
                    out_path: bool = True) -> CostProfile:

    def show(p: ProbeProgress) -> None:
        if p.done % len(rows) == 0:     # one line per round
            print(f"  round {p.round}: {p.done}/{p.total} passes in {p.elapsed_s:.1f} s "
                  f"(last: {p.rows} rows, {p.ms:.3f} ms)", file=err, flush=True)

    print(f"probing verify cost on {getattr(runtime, 'device_name', '?')}, rows "
          f"{','.join(map(str, rows))}, context {args.context}", file=err, flush=True)
    profile = run_probe(runtime, context=args.context, rows=rows, repeats=args.repeats,
                        warmup=args.warmup, budget_s=args.budget, progress=show,
                        exit_layers=exit_layers)
    path = (Path(args.out) if args.out and out_path
            else profile_path(profile.device, profile.model, profile.dtype))
    profile.save(path)
    print(format_report(profile), file=out)
    print(f"\nprofile written to {path} ({profile.extra.get('probe_s', 0):.1f} s of probing)", file=out)
    return profile


