"""Every call the lessons make into the decoder, the runtime and the cost probe, in one place.

What they use of the engine's public API: the Decoder (its events, its report, its factory's AR
floor and its `on_verify` observer), the workloads and the cost probe; when that API changes,
this module is what to adapt. The lessons above it see only `decode`
(one request, its events and, on request, each window's raw logits and draft tree), `probe`
(a roofline probe now) and `profile` (the card's cost profile: saved, bundled or probed).
"""

from __future__ import annotations

import platform
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from engine.cost.probe import ProbeProgress, card_profile, run_probe
from engine.errors import SpecscopeError
from engine.io.prompts import encode_prompt
from engine.io.workloads import WorkloadPrompt, load_workload
from engine.session import draft_opener
from engine.speculation.decoder import Decoder
from engine.speculation.events import WindowEvent
from engine.speculation.settings import DecodeSettings


class LessonCancelled(SpecscopeError):
    """The lesson's stop flag was set; nothing was saved."""


@dataclass(frozen=True)
class Budget:
    """How much a lesson measures. `quick` is the test budget: one prompt per workload (the
    shortest), a few tokens, a short probe; seconds, not minutes, on a CPU."""

    quick: bool = False
    prompts: int = 3                # per workload
    new_tokens: int = 96
    probe_rows: tuple[int, ...] | None = None    # None: the device's default rows
    probe_repeats: int | None = None
    probe_context: int = 1024
    trials: int = 200_000           # rejection-sampling replays

    @classmethod
    def quick_budget(cls) -> "Budget":
        return cls(quick=True, prompts=1, new_tokens=16, probe_rows=(1, 2, 4, 8, 16),
                   probe_repeats=2, probe_context=128, trials=200_000)

    @property
    def label(self) -> str:
        if self.quick:
            return "quick test budget: the shortest prompt, a few tokens, a short probe"
        return f"full budget: up to {self.prompts} prompts per workload, {self.new_tokens} new tokens"


@dataclass
class LessonContext:
    """What a lesson runs with: the runtime, its budget, a stop flag and a progress callback
    (message, fraction of this lesson done)."""

    rt: Any
    budget: Budget = field(default_factory=Budget)
    stop: threading.Event = field(default_factory=threading.Event)
    progress: Callable[[str, float], None] | None = None

    def say(self, message: str, fraction: float) -> None:
        self.check()
        if self.progress is not None:
            self.progress(message, max(0.0, min(1.0, fraction)))

    def check(self) -> None:
        if self.stop.is_set():
            raise LessonCancelled("lesson cancelled")

    @property
    def device(self) -> str:
        """What the lesson runs on, by name: "Intel Xeon Processor (2 threads of 2)", "NVIDIA H200 (CUDA)"."""
        return device_names(self.rt)[1]

    @property
    def here(self) -> str:
        """"this CPU" or "this GPU": the figures' and the prose's name for it."""
        return device_names(self.rt)[0]

    @property
    def model(self) -> str:
        return str(self.rt.model_id)


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name ("Intel Xeon Processor"), else what the platform says."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            name = next((ln.split(":", 1)[1] for ln in f if ln.lower().startswith("model name")), "")
    except OSError:
        name = ""
    name = name or platform.processor() or platform.machine() or "unknown CPU"
    return " ".join(re.sub(r"\((R|TM|tm|r)\)", "", name).split())


def device_names(rt: Any) -> tuple[str, str]:
    """("this CPU" | "this GPU", its name) of a runtime's device."""
    name = str(getattr(rt, "device_name", "") or "")
    kind = getattr(getattr(rt, "device", None), "type", "cpu")
    if kind == "cpu":
        threads = re.search(r"\((\d+) threads? of (\d+)\)", name)
        return "this CPU", cpu_model() + (f", {threads[1]} of {threads[2]} threads" if threads else "")
    return "this GPU", name or kind


# ---- prompts --------------------------------------------------------------------------------

def workload_ids(ctx: LessonContext, spec: str) -> list[tuple[str, list[int]]]:
    """(id, token ids) of a workload's first `budget.prompts` prompts; under the quick budget,
    the shortest ones (prefill dominates a short run on a CPU)."""
    prompts: list[WorkloadPrompt] = load_workload(spec, per_category=max(ctx.budget.prompts, 10))
    encoded = [(p.id, encode_prompt(ctx.rt.tokenizer, list(p.messages))) for p in prompts]
    if ctx.budget.quick:
        encoded.sort(key=lambda e: len(e[1]))
    return encoded[:ctx.budget.prompts]


def chat_ids(ctx: LessonContext, text: str) -> list[int]:
    return encode_prompt(ctx.rt.tokenizer, [{"role": "user", "content": text}])


# ---- decoding -------------------------------------------------------------------------------

@dataclass
class Run:
    events: list[WindowEvent]
    report: dict[str, Any]
    floor: list[tuple[str, str]]      # per window: the AR floor's (state, reason) after it ([] if off)
    ar_ms: float | None = None        # the AR floor's timed plain step
    probes: list[tuple[float, int]] = field(default_factory=list)   # the floor's (ms, tokens) probes


# on_window(event, raw logits [R, V] or None, the verified TokenTree or None): called per window
OnWindow = Callable[[WindowEvent, "torch.Tensor | None", Any], None]


def decode(ctx: LessonContext, ids: list[int], settings: DecodeSettings, *, label: str = "",
           span: tuple[float, float] = (0.0, 1.0), detail: bool = False,
           on_window: OnWindow | None = None, floor: Any = None) -> Run:
    """One request through the decoder; progress over `span` of the lesson. With `on_window`,
    each window's raw logits (the target's, before penalties) and drafted tree (None for a plain
    step) are handed over as the window ends, from the decoder's `on_verify` (and not kept: a
    window's logits are rows x vocabulary floats). `floor`: the AR floor to run instead of the
    decoder's own (an engine.cost.floor.ArFloor; settings with ar_floor on)."""
    ctx.check()
    verified: list = [None, None]           # the last window's (tree, scores)

    def keep(tree, scores) -> None:
        verified[:] = [tree, scores]
    dec = Decoder(ctx.rt, ids, settings, stop=ctx.stop, detail=detail or on_window is not None,
                  open_model=draft_opener(ctx.rt), on_verify=keep if on_window is not None else None)
    if floor is not None:
        dec.factory.floor = floor
    events: list[WindowEvent] = []
    floor: list[tuple[str, str]] = []
    lo, hi = span
    for ev in dec.windows():
        events.append(ev)
        f = dec.factory.floor
        if f is not None:
            floor.append((f.state, f.reason))
        if on_window is not None:
            tree, scores = verified
            on_window(ev, scores.logits, tree if ev.tokens else None)
        ctx.say(f"{label}: {ev.stats.new_tokens}/{settings.max_new_tokens} tokens",
                lo + (hi - lo) * ev.stats.new_tokens / settings.max_new_tokens)
    ctx.check()
    report = dec.report()
    f = dec.factory.floor
    return Run(events, report, floor, ar_ms=f.ar_ms if f is not None else None,
               probes=list(f.probes) if f is not None else [])


# ---- cost -----------------------------------------------------------------------------------

def _relay(ctx: LessonContext, span: tuple[float, float], what: str):
    lo, hi = span

    def relay(p: ProbeProgress) -> None:
        ctx.say(f"{what}: {p.rows} rows ({p.done}/{p.total})", lo + (hi - lo) * p.done / p.total)
    return relay


def probe(ctx: LessonContext, span: tuple[float, float] = (0.0, 1.0)):
    """A roofline probe of this card now (not saved): the budget's rows and repeats, the
    model's context permitting. No early-exit passes."""
    b = ctx.budget
    limit = getattr(getattr(ctx.rt, "config", None), "max_context", None) or 1 << 30
    rows = b.probe_rows
    context = b.probe_context
    if rows is not None:
        rows = [r for r in rows if r < limit] or [1]
        context = max(1, min(context, limit - max(rows)))
    else:
        context = max(1, min(context, limit - 65))
    return run_probe(ctx.rt, context=context, rows=rows, repeats=b.probe_repeats,
                     warmup=1 if b.quick else None, budget_s=4.0 if b.quick else None,
                     progress=_relay(ctx, span, "probing verify cost"), exit_layers=[])


def profile(ctx: LessonContext, span: tuple[float, float] = (0.0, 1.0)):
    """The card's cost profile: saved or bundled (re-timed first), else a probe. The quick
    budget probes briefly at a small context and saves nothing."""
    def progress(message: str, fraction: float) -> None:
        ctx.say(message, span[0] + (span[1] - span[0]) * fraction)
    if ctx.budget.quick:
        b = ctx.budget
        return card_profile(ctx.rt, progress=progress, check=False, context=b.probe_context,
                            rows=list(b.probe_rows or ()), repeats=b.probe_repeats, warmup=1,
                            budget_s=4.0, exit_layers=[])
    return card_profile(ctx.rt, progress=progress, check=True)
