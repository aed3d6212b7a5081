"""`specscope export --format llamacpp --price-with PROFILE`: the n-gram configuration that pays
on llama.cpp, priced on its measured pass (llama-bench) and its measured loop.

The profile of `roofline --engine llamacpp` carries what llama.cpp's own speculative loop adds to
a drafted window and a drafted row (engine.tuning.llamacpp_loop); the export prices with it by
default, `--row-overhead STEPS` overrides it (that row cost alone, no window cost), and a profile
without it (older profiles, a raw llama-bench JSON) is priced on the pass alone, with a note.
Printed on stderr: the prediction, the runners-up, the chosen configuration's prediction per
prompt category and on the pass alone, and beside it what the calibration measured on its own
prompts. When no configuration is predicted at MIN_GAIN x plain or more, the command printed is
plain decoding's line and stderr says why (exit 0: plain decoding is an answer).
"""

from __future__ import annotations

import argparse
import re
import shlex
from typing import Any

from engine.cost.llamacpp_bench import llamacpp_label, load_llama_bench_json
from engine.cost.profile import CostProfile
from engine.tuning.llamacpp_export import NO_GAIN, PER_SERVER, REMOVED, command, priced_lines, type_notes
from engine.tuning.llamacpp_loop import LoopCalibration, format_calibration, profile_calibration
from engine.tuning.llamacpp_price import (MIN_GAIN, LlamaCppConfig, Priced, by_category, choose, price,
                                          plain_tok_s, streams_from_sweep, sweep_is_greedy, sweep_prompt_ids)


def overheads(given: float | None, cal: LoopCalibration | None) -> tuple[float, float, str]:
    """(row overhead, window overhead, where they come from)."""
    if given is not None:
        return given, 0.0, (f"each drafted row priced {given:g} plain steps above llama-bench's pass "
                            "(--row-overhead; the profile's loop calibration is not used)")
    if cal is not None:
        return cal.row_overhead, cal.window_overhead, (
            f"priced with the profile's calibration of llama.cpp's loop ({cal.date}): each drafted window "
            f"{cal.window_overhead:.2f} and each drafted row {cal.row_overhead:.2f} plain steps above "
            "llama-bench's pass")
    return 0.0, 0.0, ("this profile has no calibration of llama.cpp's loop: windows priced on "
                      "llama-bench's prompt passes alone, which under-price a verify window (re-run "
                      "specscope roofline --engine llamacpp with llama-speculative-simple beside llama-bench)")


_ID = re.compile(r"^(\S+) n(\d+) m(\d+)(?: hits(\d+))?$")


def _config(cid: str) -> LlamaCppConfig | None:
    m = _ID.match(cid)
    return LlamaCppConfig(m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4) or 1)) if m else None


def beside_calibration(cal: LoopCalibration, streams: list, profile: CostProfile, row: float,
                       win: float) -> list[str]:
    """The calibration's measured settings, each with its prediction on the sweep's prompts."""
    lines = format_calibration(cal)
    lines[1] += "   predicted on the sweep's prompts"
    for i, s in enumerate(cal.settings):
        cfg = _config(s["setting"])
        if cfg is not None:
            lines[2 + i] += f"   {price(streams, profile, [cfg], row, win)[0].ratio:>6.2f}"
    return lines


def pricing_report(chosen: Priced | None, ranked: list[Priced], streams: list, profile: CostProfile,
                   label: str, calibrated: bool) -> list[str]:
    lines = priced_lines(chosen, ranked, plain_tok_s(profile), label)
    best = chosen or (ranked[0] if ranked else None)
    if best is not None:
        alone = price(streams, profile, [best.config])[0]
        lines.append(f"{best.config.id}: {best.ratio:.2f}x plain as priced"
                     + (f", {alone.ratio:.2f}x on llama-bench's pass alone" if calibrated else "")
                     + "; by category: " + ", ".join(f"{c} {r:.2f}x" for c, r in by_category(best).items()))
    if chosen is None:
        why = (f"the best, {best.config.id}, is predicted at {best.ratio:.2f}x" if best else "nothing was priced")
        lines.append(f"recommendation: plain decoding (no speculation): no configuration is predicted at "
                     f"{MIN_GAIN:.2f}x plain or more ({why})")
    return lines


def priced_llamacpp(a: argparse.Namespace, res: dict[str, Any]) -> tuple[str, list[str], list[str]]:
    """(the command or the plain-decoding line, the pricing report, notes)."""
    profile = load_llama_bench_json(a.price_with)
    cal = profile_calibration(profile)
    row, win, source = overheads(getattr(a, "row_overhead", None), cal)
    streams = streams_from_sweep(res, sweep_prompt_ids(res))
    ranked = price(streams, profile, None, row, win)
    chosen = choose(ranked)
    label = f"{llamacpp_label(profile)} on {profile.device.split(' · ')[0]}, {profile.model}, depth {profile.context}"
    report = pricing_report(chosen, ranked, streams, profile, label, bool(row or win))
    if cal is not None:
        report += [""] + beside_calibration(cal, streams, profile, row, win)
    notes = [f"acceptance replayed from the sweep's plain runs on {len(streams)} prompts; {source}"]
    if not sweep_is_greedy(res):
        notes.append("the sweep was sampled: the replay assumes greedy outputs, so the prediction is rougher")
    if chosen is None:
        return NO_GAIN, report, notes
    model = str((res.get("model") or {}).get("source") or "MODEL.gguf")
    return (shlex.join(command(model, chosen.config)), report,
            notes + type_notes(chosen.config) + [PER_SERVER, REMOVED])
