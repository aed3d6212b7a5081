"""The three jobs the generator worker (workbench.worker) runs on the window's model: the live
run, a sweep and a race. Each is a generator function `body(runtime, ctx)`: engine code that
yields what the window shows step by step and returns its final word; it sees the stop flag
(ctx.stop) and JobStopped thrown at a yield, never Qt.
"""

from __future__ import annotations

import copy
import queue
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.speculation.events import RunHeader, RunReport
from engine.speculation.settings import DecodeSettings

from workbench.worker import JobContext, JobStopped

# ---- the live run ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunStarted:
    """Noted once a run's decoder is built: the header a recording keeps."""
    header: RunHeader


@dataclass(frozen=True)
class ProfileReady:
    """Noted when the card's cost profile is known (saved, bundled or just probed)."""
    profile: Any


def unpaused_event(ev, paused_s: float):
    """`ev` with the time the run was held paused taken out of its clock (the decoder's clock
    runs on while the worker holds it between windows): tok/s is decoding speed, pauses aside."""
    if paused_s <= 0:
        return ev
    st = ev.stats
    elapsed = max(1e-9, st.elapsed_s - paused_s)
    return replace(ev, stats=replace(st, elapsed_s=elapsed, tok_s=st.new_tokens / elapsed))


def final_report(report: RunReport, paused_s: float, cut: str) -> dict:
    """The run's report as the window keeps it: its finish_reason the decoder's, else `cut` (the
    worker, not the decoder, ended the run); its wall_s and tok_s without the time the run was
    held paused (as unpaused_event), which it adds as paused_s; decode_tok_s too (a pause comes
    after a window, so after the first token: first_token_s keeps)."""
    from engine.cost.baseline import decode_tok_s
    paused = paused_s > 0 and bool(report.wall_s)
    changes: dict[str, Any] = {"finish_reason": report.finish_reason or cut}
    if paused:
        wall = max(1e-9, report.wall_s - paused_s)
        decode = decode_tok_s(report.new_tokens, wall, report.first_token_s, report.first_tokens)
        changes.update(wall_s=round(wall, 4), tok_s=round(report.new_tokens / wall, 3),
                       decode_tok_s=None if decode is None else round(decode, 3))
    d = replace(report, **changes).to_dict()
    if paused:
        d["paused_s"] = round(paused_s, 4)
    return d


def live_run(host, prompt: Any, settings: DecodeSettings, controls: queue.Queue, *, probe: bool,
             max_windows: int | None = None):
    """The window's run: the card's profile (probed once per model when `probe`), the decoder
    over `prompt`, one WindowEvent yielded per window; returns the report (finish_reason
    "stopped" or "windows" when the worker, not the decoder, ended it). Settings put on
    `controls` reach the decoder at its next window."""
    def body(rt, ctx: JobContext):
        from engine.cost.probe import card_profile
        from engine.io.prompts import encode_prompt
        from engine.session import draft_opener
        from engine.speculation.decoder import Decoder

        from workbench.host import activation_dtype
        spec = host.spec
        if spec not in host.profiles:
            if probe:
                ctx.state("probing")
            profile = card_profile(rt, progress=ctx.progress, probe=probe, repeats=3, warmup=1, budget_s=8.0)
            if profile is not None:
                host.profiles[spec] = profile
        profile = host.profiles.get(spec)
        if profile is not None:
            ctx.note(ProfileReady(profile))
        s = settings
        if s.adaptive and s.draft != "none" and profile is None and not probe:
            # adaptive prices windows on the card's cost profile; with none saved and probing
            # off (--no-probe) this run keeps the fixed depth and width, and says so
            s = replace(s, adaptive=False)
            ctx.progress("adaptive off for this run: no saved cost profile for this card "
                         "and probing is off", 1.0)
        ids = encode_prompt(rt.tokenizer, prompt)
        dec = Decoder(rt, ids, s, controls=controls, stop=ctx.stop, open_model=draft_opener(rt))
        ctx.note(RunStarted(replace(dec.run_header(prompt), activation_dtype=activation_dtype(rt))))
        ctx.state("running")
        gen = dec.windows()
        # the report's clock stops at the last window (the decoder's wall_s), so it leaves out
        # the pauses before that window only: a pause after it (then Stop, or the end found
        # at the next step) is no decoding time to take out (94.9 tok/s against 23.9)
        cut, n, paused_s = "", 0, 0.0
        try:
            for ev in gen:
                n += 1
                paused_s = ctx.paused_s
                yield unpaused_event(ev, paused_s)
                if max_windows is not None and n >= max_windows:
                    cut = "windows"
                    break
        except JobStopped:
            cut = "stopped"
        finally:
            gen.close()
        return final_report(dec.run_report(), paused_s, cut)
    return body


# ---- a sweep --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepTick:
    """What the sweep yields after the AR baseline and each cell."""
    result: dict[str, Any]       # a copy of the whole result so far
    done: int
    total: int
    eta_s: float | None
    message: str


def sweep_job(cfg, out_dir: Path, previous: dict[str, Any] | None, profile):
    """Every cell of `cfg` (resuming `previous`), each saved to out_dir at once; returns
    {"cancelled": bool, "result": the sweep} (cancelled: a valid partial sweep, saved)."""
    def body(rt, ctx: JobContext):
        from engine.io.workloads import load_workload
        from engine.tuning.sweep import Sweep, SweepCancelled
        from engine.tuning.sweep_file import save_sweep
        prompts = load_workload(cfg.workload, cfg.per_category, cfg.prompts)
        sweep = Sweep(rt, cfg, prompts, previous=previous, profile=profile, stop=ctx.stop,
                      progress=ctx.progress)
        try:
            for step in sweep.steps():
                save_sweep(step.result, out_dir)
                yield SweepTick(copy.deepcopy(step.result), step.done, step.total, step.eta_s, step.message)
        except (SweepCancelled, JobStopped):
            save_sweep(sweep.result, out_dir)
            return {"cancelled": True, "result": copy.deepcopy(sweep.result)}
        return {"cancelled": False, "result": copy.deepcopy(sweep.result)}
    return body


# ---- a race ---------------------------------------------------------------------------------


def race_job(prompt, a: DecodeSettings, b: DecodeSettings, profile):
    """Two settings on one prompt, taking turns on the device; yields each update, returns the
    race's report (stopped: the report so far, with no winner)."""
    def body(rt, ctx: JobContext):
        from engine.io.prompts import encode_prompt
        from engine.tuning.race import Race
        race = Race(rt, encode_prompt(rt.tokenizer, prompt), a, b, stop=ctx.stop, profile=profile)
        try:
            yield from race.updates()
        except JobStopped:
            return None
        return race.report()
    return body
