"""`specscope roofline`: time verify passes of growing row counts, fit the cost curve, save it.

The probe only needs a function that runs ONE verify pass of n rows at a fixed context and
returns its milliseconds (the runtime's `time_verify_pass(n_rows, context)`, graph-replayed on
GPU). It warms each row count up (the first call of a row count captures its graph), then times
the row counts round-robin, `repeats` rounds, and keeps each one's median: interleaving spreads
clock ramps and thermal drift over every row count instead of biasing the last ones.

Profiles are cached per user, one file per (device, model, dtype):
    $SPECSCOPE_CACHE/profiles/<device>-<model>-<dtype>.json   (default ~/.cache/specscope,
    or $XDG_CACHE_HOME/specscope)
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import torch

from engine.model.runtime import PACKED_MARK
from engine.cost.draft_cost import default_exit_layers, probe_exit_layers
from engine.cost.profile import CostProfile, profile_from_points, reference_profiles
from engine.errors import ParameterError, SpecscopeError

# Wall-time goals: <= 20 s on a GPU (graphs: a pass is a few ms, capture dominates), <= 60 s on
# a CPU for the bundled 135M model (a pass there is tens of ms and grows fast with rows).
GPU_ROWS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
CPU_ROWS = (1, 2, 4, 8, 16, 32)
GPU_REPEATS, GPU_WARMUP, GPU_BUDGET_S = 15, 3, 15.0
CPU_REPEATS, CPU_WARMUP, CPU_BUDGET_S = 5, 1, 45.0
MIN_REPEATS = 3             # the time budget never cuts a probe below this many rounds
DEFAULT_CONTEXT = 1024


class VerifyTimer(Protocol):
    """What the probe needs from a runtime (engine.model.runtime.Runtime provides it)."""

    device_name: str        # human name, e.g. "NVIDIA H200 (CUDA)", "AMD Radeon RX 9070 XT (ROCm)"
    device: Any             # torch.device (its .type picks the default rows) or "cpu" / "cuda"
    model_id: str           # e.g. "SmolLM2-135M-Instruct.Q4_1.gguf"
    dtype_name: str         # "float32" | "bfloat16" | "float16" (or a str `dtype`)

    def time_verify_pass(self, n_rows: int, context: int) -> float: ...


class PassTimer(Protocol):
    """Where passes are timed when that is not on the runtime's own stream: a session of it
    (engine.model.runtime.Session), whose committed text a probe must leave alone."""

    def time_verify_pass(self, n_rows: int, context: int, exit_layer: int | None = None) -> float: ...


@dataclass(frozen=True)
class ProbeProgress:
    done: int               # passes timed so far (warm-up excluded)
    total: int              # passes planned
    rows: int               # the pass just timed
    ms: float
    round: int              # 1-based round of the pass just timed
    elapsed_s: float


def probe(time_pass: Callable[[int], float], rows: Sequence[int], repeats: int = CPU_REPEATS,
          warmup: int = CPU_WARMUP, progress: Callable[[ProbeProgress], None] | None = None,
          budget_s: float | None = None) -> list[tuple[int, float]]:
    """Median ms of one verify pass per row count: [(rows, median_ms)], sorted by rows.

    time_pass(n) runs one pass of n rows and returns its ms. budget_s: stop after the round that
    passes this many seconds (never before MIN_REPEATS rounds, or `repeats` if fewer).
    """
    rows = sorted({int(r) for r in rows})
    if not rows or rows[0] < 1:
        raise ParameterError(f"--rows needs row counts >= 1, got {list(rows)}")
    if repeats < 1 or warmup < 0:
        raise ParameterError(f"--repeats must be >= 1 and --warmup >= 0, got {repeats} and {warmup}")

    def timed(n: int) -> float:
        ms = time_pass(n)
        if not (isinstance(ms, (int, float)) and ms == ms and 0 < ms < float("inf")):
            raise SpecscopeError(f"the verify-pass timer returned {ms!r} ms for {n} rows; "
                                 "it must return a positive number of milliseconds")
        return float(ms)

    for n in rows:
        for _ in range(warmup):
            timed(n)
    times: dict[int, list[float]] = {n: [] for n in rows}
    t0 = time.perf_counter()
    total, done = repeats * len(rows), 0
    for rnd in range(1, repeats + 1):
        for n in rows:
            ms = timed(n)
            times[n].append(ms)
            done += 1
            if progress is not None:
                progress(ProbeProgress(done, total, n, ms, rnd, time.perf_counter() - t0))
        if (budget_s is not None and rnd >= min(MIN_REPEATS, repeats)
                and time.perf_counter() - t0 > budget_s):
            break
    return [(n, float(statistics.median(times[n]))) for n in rows]


# ---------------------------------------------------------------------------------------------
# The per-user cache


def cache_dir() -> Path:
    """Where measured profiles live: $SPECSCOPE_CACHE/profiles, else the XDG cache."""
    base = os.environ.get("SPECSCOPE_CACHE")
    if base:
        root = Path(base).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "specscope"
    return root / "profiles"


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", s.lower()).strip("-.") or "unknown"


def profile_id(device_name: str, model_id: str, dtype: str) -> str:
    return f"{_slug(device_name)}-{_slug(model_id)}-{_slug(dtype)}"


def profile_path(device_name: str, model_id: str, dtype: str) -> Path:
    return cache_dir() / f"{profile_id(device_name, model_id, dtype)}.json"


def find_profile(device_name: str, model_id: str, dtype: str) -> CostProfile | None:
    """The profile `specscope roofline` saved for this device, model and dtype, or None."""
    path = profile_path(device_name, model_id, dtype)
    return CostProfile.load(path) if path.is_file() else None


def resolve_profile(device_name: str, model_id: str, dtype: str) -> CostProfile | None:
    """A measured profile if one was saved, else a bundled reference of the same device and
    model shape (e.g. the H200 SmolLM2 shape) whose weights are in the same form (a runtime with
    packed weights has " [packed]" in its model id), else None (the caller should probe)."""
    found = find_profile(device_name, model_id, dtype)
    if found is not None:
        return found
    model, device = model_id.lower(), device_name.lower()
    packed = PACKED_MARK in model
    for ref in reference_profiles().values():
        key = ref.model.split()[0].lower() if ref.model else ""
        # runtime names carry a backend suffix ("NVIDIA H200 (CUDA)"); references do not
        if (ref.device.lower() in device and key and key in model
                and (PACKED_MARK in ref.model.lower()) == packed and ref.dtype == dtype):
            return ref
    return None


def device_type(runtime: Any) -> str:
    kind = getattr(runtime, "device_type", None)
    if kind is None:
        kind = str(getattr(runtime, "device", "cpu")).split(":")[0]
    return str(kind)


def _dtype_name(runtime: Any) -> str:
    name = getattr(runtime, "dtype_name", None)
    if name is None:
        name = str(getattr(runtime, "dtype", "unknown")).replace("torch.", "")
    return str(name)


def _n_layers(runtime: Any) -> int | None:
    n = getattr(getattr(runtime, "config", None), "n_layers", None)
    return n if isinstance(n, int) and n >= 1 else None


def run_probe(runtime: VerifyTimer, context: int = DEFAULT_CONTEXT, rows: Sequence[int] | None = None,
              repeats: int | None = None, warmup: int | None = None, budget_s: float | None = None,
              progress: Callable[[ProbeProgress], None] | None = None,
              exit_layers: Sequence[int] | None = None, on: PassTimer | None = None) -> CostProfile:
    """Probe `runtime` and return a "measured" CostProfile (not saved); the passes are timed on
    its session `on` when given (its identity is still the runtime's).

    A transformer runtime (one with `config.n_layers`) also has one-row passes through its first
    K layers timed, for the early-exit drafter's price (engine.cost.draft_cost): at
    `exit_layers`, default a quarter, half, three quarters and all of its layers; [] skips it."""
    if context < 1:
        raise ParameterError(f"--context must be >= 1, got {context}")
    gpu = device_type(runtime) != "cpu"
    rows = list(rows) if rows else list(GPU_ROWS if gpu else CPU_ROWS)
    repeats = repeats if repeats is not None else (GPU_REPEATS if gpu else CPU_REPEATS)
    warmup = warmup if warmup is not None else (GPU_WARMUP if gpu else CPU_WARMUP)
    budget_s = budget_s if budget_s is not None else (GPU_BUDGET_S if gpu else CPU_BUDGET_S)
    timer = on or runtime
    t0 = time.perf_counter()
    # inference mode: the runtime's graph buffers are inference tensors, and a probe never
    # needs autograd anyway
    with torch.inference_mode():
        points = probe(lambda n: timer.time_verify_pass(n, context), rows, repeats, warmup,
                       progress, budget_s)
        n_layers = _n_layers(runtime)
        if exit_layers is None:
            exit_layers = default_exit_layers(n_layers) if n_layers else []
        exits = probe_exit_layers(timer, exit_layers, context) if exit_layers else {}
    device = str(getattr(runtime, "device_name", "unknown"))
    model = str(getattr(runtime, "model_id", "unknown"))
    dtype = _dtype_name(runtime)
    stamp = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    return profile_from_points(points, id=profile_id(device, model, dtype), device=device,
                               model=model, dtype=dtype, context=context,
                               source=f"specscope roofline {stamp}",
                               extra={"repeats": repeats, "warmup": warmup,
                                      "probe_s": round(time.perf_counter() - t0, 3),
                                      **({"exit_ms": {str(k): round(v, 5) for k, v in exits.items()},
                                          "n_layers": n_layers} if exits else {})})


def rows_text(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def expected_probe_s(round_s: float, repeats: int, budget_s: float | None) -> float:
    """How long the timed rounds take (probe's loop) when one round takes `round_s`: it stops
    after the first round past the budget, never before MIN_REPEATS rounds nor after `repeats`."""
    if budget_s is None or round_s <= 0:
        return round_s * repeats
    rounds = max(min(MIN_REPEATS, repeats), int(budget_s // round_s) + 1)
    return round_s * min(repeats, rounds)


def probe_plan_text(runtime: VerifyTimer, context: int, probe_args: dict[str, Any]) -> str:
    """What a probe measures and about how long it takes, said before it starts (a first run
    on a CPU spends about a minute here)."""
    gpu = device_type(runtime) != "cpu"
    rows = list(probe_args.get("rows") or (GPU_ROWS if gpu else CPU_ROWS))
    budget = probe_args.get("budget_s") or (GPU_BUDGET_S if gpu else CPU_BUDGET_S)
    return (f"measuring this device's verify cost, once for this model and dtype (saved for the "
            f"next start): passes of {', '.join(map(str, rows))} rows at context {context}, "
            f"up to about {budget:.0f} s of timing after a warm-up")


def probe_profile(runtime: VerifyTimer, context: int = DEFAULT_CONTEXT,
                  progress: Callable[[str, float], None] | None = None, save: bool = False,
                  **probe_args: Any) -> CostProfile:
    """The workbench's entry: probe with the device's defaults, report progress as
    (message, fraction), optionally save to the per-user cache (so `find_profile` sees it).
    The messages say what is measured and the time left (from the rounds timed so far)."""
    gpu = device_type(runtime) != "cpu"
    repeats = probe_args.get("repeats") or (GPU_REPEATS if gpu else CPU_REPEATS)
    budget = probe_args.get("budget_s") or (GPU_BUDGET_S if gpu else CPU_BUDGET_S)
    per_round = len(probe_args.get("rows") or (GPU_ROWS if gpu else CPU_ROWS))
    max_rows = max(probe_args.get("rows") or (GPU_ROWS if gpu else CPU_ROWS))
    rounds_s = [0.0, 0.0]        # time of the rounds done so far; the fraction said last

    def relay(p: ProbeProgress) -> None:
        if progress is None:
            return
        # the message changes once a round (a log gets a line a round), the bar every pass;
        # the time left is from the rounds done, so it holds still within a round
        left, frac = "", p.done / p.total
        if p.round > 1:
            round_s = rounds_s[0] / (p.round - 1)
            total_s = expected_probe_s(round_s, repeats, budget)
            left = f", about {max(0.0, total_s - rounds_s[0]):.0f} s left"
            frac = min(p.elapsed_s / max(total_s, 1e-9), 0.99)
        frac = rounds_s[1] = max(frac, rounds_s[1])      # a bar never moves back
        if p.done % per_round == 0:
            rounds_s[0] = p.elapsed_s
        progress(f"measuring verify cost: round {p.round} of up to {repeats}, passes of 1 to "
                 f"{rows_text(max_rows)}{left}", frac)

    if progress is not None:
        progress(probe_plan_text(runtime, context, probe_args), 0.0)
    profile = run_probe(runtime, context=context, progress=relay, **probe_args)
    if save:
        profile.save(profile_path(profile.device, profile.model, profile.dtype))
    if progress is not None:
        took = profile.extra.get("probe_s")
        progress(f"verify cost measured in {took:.0f} s" if took else "verify cost measured", 1.0)
    return profile


def _fitting(runtime: VerifyTimer, context: int, rows: Sequence[int]) -> tuple[int, list[int]]:
    """An automatic probe's context and row counts, cut to what the model's context holds (a
    small model's 256 tokens cannot take a 64-row pass at context 1,024). `roofline --context`
    is not cut: there a context past the model's is the user's error, said as such."""
    limit = getattr(getattr(runtime, "config", None), "max_context", None)
    if limit is None:
        return context, list(rows)
    rows = [r for r in rows if r < limit] or [1]
    return max(1, min(context, limit - max(rows))), rows


def profile_still_holds(runtime: VerifyTimer, prof: CostProfile, context: int | None = None,
                        on: PassTimer | None = None) -> bool:
    """A saved profile measured while the machine was busy (or on other hardware under the same
    name) would misprice every window. Time a few 1-row and 8-row passes now: more than 2x off
    either way means probe again (timed on the session `on` when given)."""
    timer = on or runtime
    ctx, sizes = _fitting(runtime, context if context is not None else (prof.context or DEFAULT_CONTEXT),
                          (1, 8))
    for rows in sizes:
        ms = statistics.median(timer.time_verify_pass(rows, ctx) for _ in range(3))
        if not 0.5 <= ms / prof.ms(rows) <= 2.0:
            return False
    return True


def card_profile(runtime: VerifyTimer, progress: Callable[[str, float], None] | None = None,
                 probe: bool = True, check: bool = False, context: int | None = None,
                 on: PassTimer | None = None, **probe_args: Any) -> CostProfile | None:
    """The attached card's verify-cost profile for this runtime's model and dtype: a saved or
    bundled one (re-timed first when `check`), else, when `probe` is set, a probe now.

    `context` None probes at the profile's usual context and saves the result to the per-user
    cache, so the next start is instant; a context (the committed length, when adaptive is
    switched on mid-run) probes there, writing only scratch slots, and saves nothing: passes
    are then timed on the run's session `on` (the runtime still names device, model and dtype).
    """
    found = resolve_profile(runtime.device_name, runtime.model_id, runtime.dtype_name)
    if found is not None and (not check or profile_still_holds(runtime, found, context, on)):
        return found
    if not probe:
        return found
    gpu = device_type(runtime) != "cpu"
    probe_args["context"], probe_args["rows"] = _fitting(
        runtime, context if context is not None else probe_args.get("context", DEFAULT_CONTEXT),
        probe_args.get("rows") or (GPU_ROWS if gpu else CPU_ROWS))
    return probe_profile(runtime, progress=progress, save=context is None, on=on, **probe_args)
