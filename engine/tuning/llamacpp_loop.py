"""What a drafted row and a drafted window cost in llama.cpp's own speculative loop.

llama-bench times a k-token prompt pass: one llama_decode, one row of logits. The speculative
loop of the pinned tree (examples/speculative-simple/speculative-simple.cpp 163-330) does more
per window: it computes and samples the logits of every row on the host
(common_sampler_sample_and_accept_n), and a batch size that changes from one window to the next
rebuilds the graph. So `calibrate_loop` runs the user's `llama-speculative-simple` (beside their
llama-bench) on LOOP_PROMPTS, plainly and with LOOP_CONFIGS, greedy, and reads what it prints
at the end of each run (LOG_INF, speculative-simple.cpp 338-345; common_perf_print,
common/sampling.cpp 558-580):

    decoded  129 tokens in    0.412 seconds, speed:  313.107 t/s
    n_drafted = 311            n_accept  = 78
    common_perf_print: prompt eval time = ... ms /   512 tokens (...)   # every batch of 2+ tokens
    common_perf_print:        eval time = ... ms /    44 runs   (...)   # every 1-token decode

Each window emits its accepted drafts plus one, so windows = decoded - n_accept; the 1-token
decodes are the windows that drafted nothing (llama-context.cpp 781-791 counts a decode of one
token as a run), except the first window, whose decode is counted with the prompt's batch (no
synchronisation between them: the FIXME at llama-context.cpp 776-778; the recorded runs show it:
plain decoding of 65 tokens prints 64 runs). So drafted windows = windows - 1 - runs, or one more
when the first window drafted, which the counters do not say: at least enough windows to hold
n_drafted at the setting's size_m. In plain steps of the same prompt's plain
run (decode_s / decoded of the never-drafting run), `fit_loop` solves

    measured steps = curve steps + window_overhead x drafted windows + row_overhead x drafted rows

by least squares with both overheads >= 0, curve steps being what the llama-bench profile prices
(engine.tuning.llamacpp_price.pass_ms: ms(1 + mean draft) / ms(1) a drafted window, 1 a plain
one). The result is a LoopCalibration, kept in the llama.cpp profile's extra fields under
"loop_calibration" (old profiles have none and still load), and the export prices with it.
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from engine.childproc import run_bounded
from engine.cost.profile import CostProfile
from engine.errors import SpecscopeError
from engine.tuning.llamacpp_price import LlamaCppConfig, pass_ms

SPEC_SIMPLE = "llama-speculative-simple"
LOOP_TOKENS = 128
LOOP_TIMEOUT_S = 300.0
# the binary will not run without a speculative type: ngram-simple with sizes it can never meet
# (cur_len <= n + m + 1 drafts nothing, common/ngram-map.cpp 65) is plain decoding in its loop
NEVER_DRAFTS = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1024",
                "--spec-ngram-simple-size-m", "1024")
# drafts long and short, copied and hashed: the fit needs windows of several sizes (llama.cpp's
# default ngram-simple 12/48 finds no 12-token match in prompts this short: it would not draft)
LOOP_CONFIGS = (LlamaCppConfig("ngram-simple", 3, 8), LlamaCppConfig("ngram-simple", 4, 32),
                LlamaCppConfig("ngram-map-k", 4, 16))
# raw text, no chat template (any model continues it): material to copy and prose, so that some
# windows draft and accept, some draft and fail, some draft nothing
LOOP_PROMPTS = {
    "code": (
        "def moving_average(values, window):\n"
        "    \"\"\"The mean of each run of `window` consecutive values.\"\"\"\n"
        "    if window < 1:\n"
        "        raise ValueError(f\"window must be >= 1, got {window}\")\n"
        "    out = []\n"
        "    total = 0.0\n"
        "    for i, v in enumerate(values):\n"
        "        total += v\n"
        "        if i >= window:\n"
        "            total -= values[i - window]\n"
        "        if i >= window - 1:\n"
        "            out.append(total / window)\n"
        "    return out\n\n\n"
        "# The same function with `values` renamed to `samples` and `window` to `width`:\n"
        "def moving_average(samples, width):\n"),
    "summary": (
        "The cache keeps the keys and values of every token the model has seen, one row per "
        "token and layer. A verify pass appends the rows of the drafted tokens; when a draft is "
        "rejected, its rows are dropped again, so the cache always holds the committed tokens "
        "and nothing else. Because the rows of a rejected draft are never read, dropping them "
        "costs nothing but the bookkeeping of the cache's length.\n\n"
        "In one sentence, the paragraph above says that"),
    "question": (
        "Question: A speculative decoder drafts four tokens and the target model accepts two "
        "of them. How many tokens does the window emit, and why?\n"
        "Answer: The window emits three tokens: the two accepted drafts and the token the "
        "target model chose where the third draft was rejected.\n\n"
        "Question: A speculative decoder drafts six tokens and the target model accepts all of "
        "them. How many tokens does the window emit, and why?\n"
        "Answer:"),
}

DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s")
ENCODED = re.compile(r"encoded\s+(\d+) tokens in")
DRAFTED = re.compile(r"n_drafted\s*=\s*(\d+)")
ACCEPTED = re.compile(r"n_accept\s*=\s*(\d+)")
BATCHED = re.compile(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens")
ONE_ROW = re.compile(r"(?<!prompt )eval time =\s*[\d.]+ ms /\s*(\d+) runs")
SAMPLING = re.compile(r"sampling time =\s*([\d.]+) ms")
REUSED = re.compile(r"graphs reused =\s*(\d+)")


class LoopCalibrationError(SpecscopeError):
    """llama-speculative-simple failed or printed no statistics (one line says which)."""


@dataclass(frozen=True)
class LoopRun:
    """What one llama-speculative-simple run printed (module docstring)."""
    prompt: str
    setting: str                  # "plain" or a LlamaCppConfig id
    decoded: int
    decode_s: float
    drafted: int
    accepted: int
    one_row_runs: int | None      # 1-token decodes: windows that drafted nothing
    batch_tokens: int | None      # tokens of every 2+-token decode, the prompt's included
    encoded: int | None
    sampling_ms: float | None = None
    graphs_reused: int | None = None

    @property
    def windows(self) -> int:
        return self.decoded - self.accepted

    @property
    def drafted_windows(self) -> int | None:
        """Windows that drafted (module docstring: the first window's decode is not a run)."""
        if self.one_row_runs is None:
            return None
        if not self.drafted:
            return 0
        m = re.search(r" m(\d+)", self.setting)
        at_least = -(-self.drafted // int(m.group(1))) if m else 1
        return min(self.windows, max(at_least, self.windows - 1 - self.one_row_runs))

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def parse_loop_output(text: str, prompt: str = "", setting: str = "") -> LoopRun:
    """The statistics llama-speculative-simple prints at its end (module docstring)."""
    m = DECODED.search(text)
    d, a = DRAFTED.search(text), ACCEPTED.search(text)
    if not m or not d or not a:
        raise LoopCalibrationError(f"{SPEC_SIMPLE} printed no decode statistics (\"decoded N tokens "
                                   "in S seconds\", n_drafted, n_accept): is it llama-speculative-simple?")

    def num(rx: re.Pattern, cast=int):
        x = rx.search(text)
        return cast(x.group(1)) if x else None
    return LoopRun(prompt, setting, int(m.group(1)), float(m.group(2)), int(d.group(1)), int(a.group(1)),
                   num(ONE_ROW), num(BATCHED), num(ENCODED), num(SAMPLING, float), num(REUSED))


def find_speculative_simple(llama_bench: str | Path) -> Path | None:
    """llama-speculative-simple beside the llama-bench (same build/bin), or None."""
    p = Path(llama_bench).parent / SPEC_SIMPLE
    return p if p.is_file() else None


def loop_args_from_profile(profile: CostProfile) -> list[str]:
    """The llama-bench run's offload and attention settings as llama-speculative-simple flags
    (llama-bench's -fa takes 0/1, common/arg.cpp's on/off)."""
    e = profile.extra
    out = []
    if e.get("n_gpu_layers") is not None:
        out += ["-ngl", str(e["n_gpu_layers"])]
    fa = e.get("flash_attn")
    if fa is not None:
        out += ["-fa", "on" if fa in (1, True, "1", "on", "true") else
                "off" if fa in (0, False, "0", "off", "false") else "auto"]
    return out


def loop_command(binary: str | Path, model: str | Path, prompt_file: str | Path, flags: Sequence[str],
                 tokens: int = LOOP_TOKENS, threads: int | None = None, extra: Sequence[str] = ()) -> list[str]:
    cmd = [str(binary), "-m", str(model), "-f", str(prompt_file), "-n", str(tokens), "--temp", "0",
           "--ignore-eos"]
    if threads is not None:
        cmd += ["-t", str(threads)]
    return cmd + list(extra) + list(flags)


def run_loop(cmd: Sequence[str], prompt: str, setting: str, timeout_s: float = LOOP_TIMEOUT_S) -> LoopRun:
    done = run_bounded(cmd, timeout_s=timeout_s, error=LoopCalibrationError, tail_lines=400)
    text = "\n".join(done.tail)
    if done.returncode != 0:
        last = [t for t in done.tail if "error" in t.lower() or "failed" in t.lower()] or list(done.tail[-1:])
        raise LoopCalibrationError(f"{Path(cmd[0]).name} failed (exit {done.returncode}): "
                                   f"{(last[-1] if last else 'no output').strip()[:300]}")
    return parse_loop_output(text + "\n" + done.stdout[-4000:], prompt, setting)


def calibrate_loop(binary: str | Path, model: str | Path, profile: CostProfile, *,
                   tokens: int = LOOP_TOKENS, threads: int | None = None, extra: Sequence[str] = (),
                   configs: Sequence[LlamaCppConfig] = LOOP_CONFIGS,
                   progress: Callable[[str, float | None], None] | None = None,
                   timeout_s: float = LOOP_TIMEOUT_S) -> "LoopCalibration":
    """Run every prompt of LOOP_PROMPTS plainly and with each of `configs` (round-robin per
    prompt, so drift spreads over all settings) and fit the overheads (module docstring)."""
    say = progress or (lambda msg, frac: None)
    settings = [("plain", list(NEVER_DRAFTS))] + [(c.id, c.flags()) for c in configs]
    total = len(LOOP_PROMPTS) * len(settings)
    runs: list[LoopRun] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in LOOP_PROMPTS.items():
            f = Path(tmp) / f"{name}.txt"
            f.write_text(text)
            for setting, flags in settings:
                cmd = loop_command(binary, model, f, flags, tokens, threads, extra)
                r = run_loop(cmd, name, setting, timeout_s)
                runs.append(r)
                say(f"llama.cpp's loop [{len(runs)}/{total}] {name} {setting}: {r.decoded} tokens in "
                    f"{r.decode_s:.3f} s, drafted {r.drafted}, accepted {r.accepted}", len(runs) / total)
    example = loop_command(binary, model, "PROMPT.txt", settings[1][1], tokens, threads, extra)
    cal = fit_loop(runs, profile, command=example, seconds=time.perf_counter() - t0, tokens=tokens)
    if cal is None:
        raise LoopCalibrationError("no speculative run of llama.cpp's loop drafted: nothing to fit "
                                   "the drafted rows' cost on")
    return cal


@dataclass(frozen=True)
class LoopCalibration:
    """llama.cpp's speculative loop against the llama-bench curve (module docstring)."""
    row_overhead: float              # plain steps per drafted row beyond the curve's pass
    window_overhead: float           # plain steps per drafted window beyond the curve's pass
    rel_rms: float                   # of the fitted steps against the measured, over the runs
    plain_tok_s: float               # the loop's plain decoding, median over prompts
    tokens: int
    settings: tuple[dict[str, Any], ...] = ()   # per setting: measured, fitted and curve x plain
    runs: tuple[dict[str, Any], ...] = field(default=(), compare=False)
    command: tuple[str, ...] = ()
    date: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"row_overhead": self.row_overhead, "window_overhead": self.window_overhead,
                "rel_rms": self.rel_rms, "plain_tok_s": self.plain_tok_s, "tokens": self.tokens,
                "settings": list(self.settings), "runs": list(self.runs), "command": list(self.command),
                "date": self.date, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LoopCalibration":
        try:
            row, win = float(d["row_overhead"]), float(d.get("window_overhead", 0.0))
        except (KeyError, TypeError, ValueError) as e:
            raise LoopCalibrationError(f"the profile's loop_calibration is malformed ({type(e).__name__}: {e})") \
                from None
        if not (0.0 <= row < 10.0 and 0.0 <= win < 100.0):
            raise LoopCalibrationError(f"the profile's loop_calibration is out of range: row_overhead {row}, "
                                       f"window_overhead {win} plain steps")
        return cls(row, win, float(d.get("rel_rms", 0.0)), float(d.get("plain_tok_s", 0.0)),
                   int(d.get("tokens", 0)), tuple(d.get("settings") or ()), tuple(d.get("runs") or ()),
                   tuple(d.get("command") or ()), str(d.get("date", "")), float(d.get("seconds", 0.0)))


CALIBRATION_KEY = "loop_calibration"


def profile_calibration(profile: CostProfile) -> LoopCalibration | None:
    """The loop calibration kept in a llama.cpp profile, None for a profile without one."""
    d = profile.extra.get(CALIBRATION_KEY)
    return LoopCalibration.from_dict(d) if isinstance(d, dict) else None


def with_calibration(profile: CostProfile, cal: LoopCalibration) -> CostProfile:
    from dataclasses import replace
    return replace(profile, extra={**profile.extra, CALIBRATION_KEY: cal.to_dict()})


def _steps(r: LoopRun, plain: LoopRun, base: Callable[[int], float]) -> tuple[float, float, int, int]:
    """(measured plain steps, curve steps, drafted windows, drafted rows) of one run."""
    step = plain.decode_s / plain.decoded
    wd = r.drafted_windows or 0
    one = base(1)
    curve = (r.windows - wd) + (wd * base(1 + r.drafted / wd) / one if wd else 0.0)
    return r.decode_s / step, curve, wd, r.drafted


def _nonneg_lsq(rows: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(a, b) >= 0 minimising sum (y - a x1 - b x2)^2 over rows (x1, x2, y)."""
    def sse(a: float, b: float) -> float:
        return sum((y - a * x1 - b * x2) ** 2 for x1, x2, y in rows)
    s11 = sum(x1 * x1 for x1, _, _ in rows)
    s22 = sum(x2 * x2 for _, x2, _ in rows)
    s12 = sum(x1 * x2 for x1, x2, _ in rows)
    s1y = sum(x1 * y for x1, _, y in rows)
    s2y = sum(x2 * y for _, x2, y in rows)
    det = s11 * s22 - s12 * s12
    cands = [(0.0, 0.0)]
    if det > 1e-9 * max(s11 * s22, 1e-12):
        a, b = (s22 * s1y - s12 * s2y) / det, (s11 * s2y - s12 * s1y) / det
        if a >= 0 and b >= 0:
            cands.append((a, b))
    if s11 > 0:
        cands.append((max(0.0, s1y / s11), 0.0))
    if s22 > 0:
        cands.append((0.0, max(0.0, s2y / s22)))
    return min(cands, key=lambda ab: sse(*ab))


def fit_loop(runs: Sequence[LoopRun], profile: CostProfile, command: Sequence[str] = (),
             seconds: float = 0.0, tokens: int | None = None) -> LoopCalibration | None:
    """The overheads that make the profile's priced windows match the measured runs (module
    docstring); None when no speculative run drafted or no plain run pairs with one."""
    base = pass_ms(profile)
    plain = {r.prompt: r for r in runs if r.setting == "plain" and r.decoded > 0 and r.decode_s > 0}
    rows, used = [], []
    for r in runs:
        p = plain.get(r.prompt)
        if r.setting == "plain" or p is None or r.decoded <= 0 or not r.drafted:
            continue
        measured, curve, wd, dr = _steps(r, p, base)
        rows.append((wd, dr, measured - curve))
        used.append((r, measured, curve, wd, dr))
    if not rows:
        return None
    a, b = _nonneg_lsq(rows)
    out_runs, errs = [], []
    for r, measured, curve, wd, dr in used:
        fitted = curve + a * wd + b * dr
        errs.append(((fitted - measured) / measured) ** 2)
        out_runs.append({**r.to_dict(), "measured_steps": round(measured, 2), "curve_steps": round(curve, 2),
                         "fitted_steps": round(fitted, 2), "drafted_windows": wd})
    return LoopCalibration(round(b, 4), round(a, 4), round(statistics.fmean(errs) ** 0.5, 4),
                           round(statistics.median(p.decoded / p.decode_s for p in plain.values()), 2),
                           tokens or max(r.decoded for r in runs), _per_setting(out_runs), tuple(out_runs),
                           tuple(command), time.strftime("%Y-%m-%d %H:%M:%S %z"), round(seconds, 1))


def _per_setting(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """Per setting, medians over prompts of decoded tokens per plain step: measured, as the fit
    prices it, as the llama-bench curve alone prices it (all x plain decoding in the loop)."""
    out = []
    for s in dict.fromkeys(r["setting"] for r in runs):
        rs = [r for r in runs if r["setting"] == s]

        def med(key: str) -> float:
            return round(statistics.median(r["decoded"] / r[key] for r in rs), 3)
        out.append({"setting": s, "prompts": len(rs), "measured": med("measured_steps"),
                    "fitted": med("fitted_steps"), "curve": med("curve_steps")})
    return tuple(out)


def format_calibration(cal: LoopCalibration) -> list[str]:
    """The calibration as the roofline and the export print it."""
    lines = [f"llama.cpp's speculative loop ({SPEC_SIMPLE}, {len(LOOP_PROMPTS)} prompts x {cal.tokens} "
             f"tokens, greedy; plain {cal.plain_tok_s:.1f} tok/s in the loop): each drafted window costs "
             f"{cal.window_overhead:.2f} and each drafted row {cal.row_overhead:.2f} plain steps beyond "
             f"llama-bench's pass (fit rms {100 * cal.rel_rms:.0f}%)",
             f"{'setting':<26} {'measured':>9} {'fitted':>8} {'curve':>7}   (x plain, median over prompts)"]
    for s in cal.settings:
        lines.append(f"{s['setting']:<26} {s['measured']:>9.2f} {s['fitted']:>8.2f} {s['curve']:>7.2f}")
    return lines
