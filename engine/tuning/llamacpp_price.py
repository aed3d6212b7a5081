"""Which llama.cpp n-gram configuration pays on llama.cpp's own measured curve.

Acceptance is replayed, not guessed. Under greedy decoding the tokens a speculative run commits
are the plain run's tokens (speculation is lossless), and an n-gram drafter's proposal depends only
on those tokens. So with a sweep's plain-decoding (AR) outputs, `replay` runs llama.cpp's loop
(examples/speculative-simple/speculative-simple.cpp 163-330 of the pinned tree) for any
configuration without the model: draft from the history with llama.cpp's own drafter
(engine.speculation.llamacpp_ngram), accept the draft's prefix that equals the committed tokens,
commit that plus one, tell the drafter how many were accepted. Each window is (rows = 1 + draft
length, tokens emitted).

`price` puts each window on a llama.cpp cost profile (engine.cost.llamacpp_bench: a pass of R rows
costs ms(R), its measured points joined linearly (`pass_ms`); a window without a draft is a plain
step, ms(1)) and gives the predicted tok/s per
prompt; `choose` takes the configuration with the highest median tok/s, and None when none beats
plain decoding (1000 / ms(1)) by at least MIN_GAIN. llama.cpp's loop costs more than the pass a
drafted window runs (engine.tuning.llamacpp_loop measures how much): `row_overhead` and
`window_overhead` add it, in plain steps per drafted row and per drafted window.
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from engine.cost.profile import CostProfile
from engine.errors import ParameterError
from engine.speculation.llamacpp_ngram import (LLAMACPP_NGRAM_TYPES, LlamaCppNgram,
                                               NgramSimpleIndex, check_sizes)

# the grid searched: every (n, m) with m >= n (ngram-simple never drafts with m < n)
GRID_N = (1, 2, 3, 4, 5, 6, 8, 12)
GRID_M = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 63)
MAP_GRID_N = (2, 3, 4, 6, 8, 12)
MAP_GRID_M = (4, 8, 12, 16, 24, 32, 48)
# a predicted gain below this is within the noise of the curve and the loop's calibration (issue
# 33: an export must never recommend a loss): plain decoding is kept
MIN_GAIN = 1.05
# arg.cpp / common.h defaults of the pinned tree (server README: --spec-ngram-simple-size-n 12 ...)
DEFAULT_SIZE_N, DEFAULT_SIZE_M = 12, 48


@dataclass(frozen=True, order=True)
class LlamaCppConfig:
    spec_type: str
    size_n: int
    size_m: int
    min_hits: int = 1

    def __post_init__(self) -> None:
        if self.spec_type not in LLAMACPP_NGRAM_TYPES:
            raise ParameterError(f"llama.cpp n-gram type must be one of "
                                 f"{', '.join(LLAMACPP_NGRAM_TYPES)}, got {self.spec_type!r}")
        check_sizes(self.size_n, self.size_m)
        if self.size_m < self.size_n:
            raise ParameterError(f"{self.spec_type} with size_m {self.size_m} < size_n {self.size_n} "
                                 "never drafts (common/ngram-map.cpp 100): use size_m >= size_n")

    @property
    def id(self) -> str:
        return f"{self.spec_type} n{self.size_n} m{self.size_m}" + (
            f" hits{self.min_hits}" if self.min_hits != 1 else "")

    def flags(self) -> list[str]:
        """llama-server / llama-speculative-simple flags (common/arg.cpp 4249-4370)."""
        t = self.spec_type
        out = ["--spec-type", t, f"--spec-{t}-size-n", str(self.size_n), f"--spec-{t}-size-m", str(self.size_m)]
        if self.min_hits != 1:
            out += [f"--spec-{t}-min-hits", str(self.min_hits)]
        return out


def default_grid() -> list[LlamaCppConfig]:
    out = [LlamaCppConfig("ngram-simple", n, m) for n in GRID_N for m in GRID_M if m >= n]
    for t in ("ngram-map-k", "ngram-map-k4v"):
        out += [LlamaCppConfig(t, n, m) for n in MAP_GRID_N for m in MAP_GRID_M if m >= n]
    return out


@dataclass(frozen=True)
class Stream:
    """One prompt's token ids and the plain run's new tokens after it."""
    id: str
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    category: str = ""


def replay(stream: Stream, cfg: LlamaCppConfig,
           simple_index: NgramSimpleIndex | None = None) -> list[tuple[int, int]]:
    """(rows, emitted) of each window llama-speculative-simple would run (module docstring).
    n_predict is the output's length; the draft is cut to the tokens still wanted
    (speculative-simple.cpp 181-185, applied only when > 0: speculative.cpp 2832)."""
    s = list(stream.prompt) + list(stream.output)
    n_out = len(stream.output)
    if not stream.prompt:
        raise ParameterError(f"prompt {stream.id!r} has no tokens")
    hist = len(stream.prompt) - 1          # prompt_tgt = s[:hist]; id_last = s[hist]
    state = None
    if cfg.spec_type != "ngram-simple" or simple_index is None:
        state = LlamaCppNgram(cfg.spec_type, cfg.size_n, cfg.size_m, cfg.min_hits)
        state.begin(s[:hist])
    done = 0
    windows = []
    while done < n_out:
        if state is None:
            draft = simple_index.draft(hist, cfg.size_m)
        else:
            draft = state.draft(s[:hist], s[hist])[1]
        n_max = n_out - done - 1
        if n_max > 0:
            draft = draft[:n_max]
        a = 0
        while a < len(draft) and hist + 1 + a < len(s) and draft[a] == s[hist + 1 + a]:
            a += 1
        emitted = min(a + 1, n_out - done)
        if state is not None:
            state.accept(a)
        windows.append((1 + len(draft), emitted))
        done += emitted
        hist += emitted
    return windows


@dataclass(frozen=True)
class Priced:
    config: LlamaCppConfig | None          # None: plain decoding
    tok_s: float                           # median over prompts of the predicted tok/s
    ratio: float                           # tok_s / plain tok/s
    tokens_per_pass: float                 # median over prompts
    drafted: float                         # median share of windows that drafted
    per_prompt: tuple[dict[str, Any], ...] = field(default=(), compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.id if self.config else "plain",
                "flags": self.config.flags() if self.config else [], "tok_s": round(self.tok_s, 2),
                "ratio": round(self.ratio, 4), "tokens_per_pass": round(self.tokens_per_pass, 3),
                "drafted": round(self.drafted, 3), "per_prompt": list(self.per_prompt)}


def plain_tok_s(profile: CostProfile) -> float:
    return 1000.0 / pass_ms(profile)(1)


def pass_ms(profile: CostProfile):
    """ms of a pass of R rows on `profile`: its measured points, linear between them (llama.cpp's
    curve has steps a single hinge smooths over: BENCHMARKS.md, "Speculation and tuning timings
    (moved from code comments)"), the fit's slope past the last one; the fit where nothing was
    measured."""
    pts = sorted(profile.points)
    if len(pts) < 2:
        return profile.ms
    rows = [r for r, _ in pts]
    ms = [m for _, m in pts]
    slope = profile.fit.slope_ms_per_row

    def f(r: int) -> float:
        if r <= rows[0]:
            return ms[0] if r == rows[0] else profile.ms(r)
        if r >= rows[-1]:
            return ms[-1] + slope * (r - rows[-1])
        k = bisect.bisect_left(rows, r)
        if rows[k] == r:
            return ms[k]
        r0, r1, m0, m1 = rows[k - 1], rows[k], ms[k - 1], ms[k]
        return m0 + (m1 - m0) * (r - r0) / (r1 - r0)
    return f


def price(streams: Sequence[Stream], profile: CostProfile,
          grid: Iterable[LlamaCppConfig] | None = None, row_overhead: float = 0.0,
          window_overhead: float = 0.0) -> list[Priced]:
    """Every configuration of `grid` priced on `profile`, best first. row_overhead: what each
    drafted row costs beyond the profile's pass, in plain steps (llama-bench's prompt pass
    computes one row of logits, a verify pass all of them and samples each); window_overhead:
    what each window that drafted costs beyond it (graphs rebuilt as the batch size changes).
    Both measured by `roofline --engine llamacpp` (engine.tuning.llamacpp_loop) or, the row's
    alone, bench/llamacpp_spec.py --sweep --profile; 0 trusts the curve."""
    if not 0.0 <= row_overhead < 10.0:
        raise ParameterError(f"--row-overhead is in plain steps per drafted row, 0 to 10; got {row_overhead}")
    if not 0.0 <= window_overhead < 100.0:
        raise ParameterError(f"the window overhead is in plain steps per drafted window, 0 to 100; "
                             f"got {window_overhead}")
    if not streams:
        raise ParameterError("no prompts to price: the sweep has no plain-decoding outputs")
    grid = list(default_grid() if grid is None else grid)
    plain = plain_tok_s(profile)
    base = pass_ms(profile)
    one = base(1)

    def cost(rows: int) -> float:
        return base(rows) + (one * (window_overhead + row_overhead * (rows - 1)) if rows > 1 else 0.0)
    indexes: dict[tuple[str, int], NgramSimpleIndex] = {}
    out = []
    for cfg in grid:
        rows = []
        for st in streams:
            idx = None
            if cfg.spec_type == "ngram-simple":
                key = (st.id, cfg.size_n)
                if key not in indexes:
                    indexes[key] = NgramSimpleIndex(list(st.prompt) + list(st.output), cfg.size_n)
                idx = indexes[key]
            wins = replay(st, cfg, idx)
            ms = sum(cost(r) for r, _ in wins)
            toks = sum(e for _, e in wins)
            rows.append({"prompt": st.id, "category": st.category, "tok_s": 1000.0 * toks / ms,
                         "tokens_per_pass": toks / len(wins),
                         "drafted": sum(r > 1 for r, _ in wins) / len(wins),
                         "windows": len(wins), "max_rows": max(r for r, _ in wins)})
        med = statistics.median(r["tok_s"] for r in rows)
        out.append(Priced(cfg, med, med / plain, statistics.median(r["tokens_per_pass"] for r in rows),
                          statistics.median(r["drafted"] for r in rows), tuple(
                              {**r, "tok_s": round(r["tok_s"], 2),
                               "tokens_per_pass": round(r["tokens_per_pass"], 3)} for r in rows)))
    out.sort(key=lambda p: (-p.tok_s, p.config))
    return out


def by_category(p: Priced) -> dict[str, float]:
    """A priced configuration's median x plain per prompt category (its prompts' tok/s over the
    profile's plain tok/s), in the order the categories first appear."""
    plain = p.tok_s / p.ratio if p.ratio else 0.0
    cats: dict[str, list[float]] = {}
    for r in p.per_prompt:
        cats.setdefault(r.get("category") or "all", []).append(r["tok_s"])
    return {c: round(statistics.median(xs) / plain, 4) if plain else 0.0 for c, xs in cats.items()}


def choose(priced: Sequence[Priced], min_gain: float = MIN_GAIN) -> Priced | None:
    """The best-priced configuration, or None when none beats plain decoding by `min_gain`."""
    best = max(priced, key=lambda p: p.tok_s, default=None)
    return best if best is not None and best.ratio >= min_gain else None


def streams_from_sweep(result: dict[str, Any], prompt_ids: dict[str, list[int]] | None = None) -> list[Stream]:
    """The plain-decoding outputs of a sweep.json with their prompts' token ids (stored in the
    sweep's prompt entries as `ids`, or given)."""
    ar = result.get("ar") or {}
    per = ar.get("per_prompt") or []
    cats = {p["id"]: p.get("category", "") for p in result.get("prompts", [])}
    ids = dict(prompt_ids or {})
    for p in result.get("prompts", []):
        if "ids" in p and p["id"] not in ids:
            ids[p["id"]] = p["ids"]
    out = []
    for x in per:
        if x["prompt"] not in ids:
            raise ParameterError(f"the sweep does not hold prompt {x['prompt']!r}'s token ids")
        if not x.get("tokens"):
            continue
        out.append(Stream(x["prompt"], tuple(ids[x["prompt"]]), tuple(x["tokens"]), cats.get(x["prompt"], "")))
    if not out:
        raise ParameterError("the sweep has no plain-decoding outputs to replay: "
                             "let its plain-decoding run finish")
    return out


def sweep_is_greedy(result: dict[str, Any]) -> bool:
    cells = result.get("cells") or []
    temps = {((c.get("settings") or {}).get("sampling") or {}).get("temperature", 0.0) for c in cells}
    return not temps or temps == {0.0}


def sweep_prompt_ids(result: dict[str, Any]) -> dict[str, list[int]]:
    """The prompts' token ids: from the sweep (stored since the llama.cpp pricing), else
    re-encoded from its workload with its model's tokenizer (older sweeps)."""
    stored = {p["id"]: p["ids"] for p in result.get("prompts", []) if "ids" in p}
    if len(stored) == len(result.get("prompts", [])):
        return stored
    from engine.io.load import default_model_path, load_model
    from engine.io.prompts import encode_prompt
    from engine.io.workloads import load_workload
    from pathlib import Path
    cfg = result.get("config") or {}
    src = Path(str((result.get("model") or {}).get("source") or ""))
    if not src.exists():
        name = (result.get("model") or {}).get("name", "")
        if default_model_path().name in str(name) or default_model_path().name == src.name:
            src = default_model_path()
        else:
            raise ParameterError(f"the sweep holds no prompt token ids and its model {src} is not "
                                 "here to re-encode them: re-run the sweep command (it resumes and "
                                 "adds them)")
    tok = load_model(src).tokenizer
    prompts = load_workload(cfg.get("workload", "code-edit"), cfg.get("per_category", 1), cfg.get("prompts"))
    return {p.id: encode_prompt(tok, list(p.messages)) for p in prompts}


@dataclass(frozen=True)
class SweepPricing:
    ranked: list[Priced]                 # every configuration, best first
    chosen: Priced | None                # None: plain decoding
    plain_tok_s: float
    prompts: int
    greedy: bool


def price_sweep(result: dict[str, Any], profile: CostProfile,
                grid: Iterable[LlamaCppConfig] | None = None, min_gain: float = MIN_GAIN,
                row_overhead: float = 0.0, window_overhead: float = 0.0) -> SweepPricing:
    streams = streams_from_sweep(result, sweep_prompt_ids(result))
    ranked = price(streams, profile, grid, row_overhead, window_overhead)
    return SweepPricing(ranked, choose(ranked, min_gain), plain_tok_s(profile), len(streams),
                        sweep_is_greedy(result))


def config_from_flags(words: Sequence[str]) -> LlamaCppConfig | None:
    """The n-gram configuration of a llama.cpp command's flags (None: no n-gram type of ours;
    sizes not given are the pinned tree's defaults, 12 and 48)."""
    w = list(words)
    if "--spec-type" not in w:
        return None
    t = w[w.index("--spec-type") + 1]
    if t not in LLAMACPP_NGRAM_TYPES:
        return None

    def val(flag: str, default: int) -> int:
        return int(w[w.index(flag) + 1]) if flag in w else default
    return LlamaCppConfig(t, val(f"--spec-{t}-size-n", DEFAULT_SIZE_N), val(f"--spec-{t}-size-m", DEFAULT_SIZE_M),
                          val(f"--spec-{t}-min-hits", 1))


def calibrate_row_overhead(streams: Sequence[Stream], profile: CostProfile,
                           runs: Sequence[dict[str, Any]],
                           variants: dict[str, list[str]] | None = None) -> dict[str, Any] | None:
    """The row_overhead that makes the priced windows match llama.cpp's measured runs.

    runs: bench/llamacpp_spec.py's, each {prompt, repeat, variant, flags, decode_s, decoded},
    the plain variant among them (`variants`: variant -> flags, for runs without their own). Per speculative run: measured plain steps = decode_s over the
    same prompt and repeat's plain step, scaled to the replayed token count; priced = sum of
    ms(R)/ms(1) over the replayed windows; the overhead e solves measured = priced + e x drafted
    rows (least squares through the origin)."""
    base = pass_ms(profile)
    one = base(1)
    by_id = {s.id: s for s in streams}
    num = den = 0.0
    rows = []
    for r in runs:
        cfg = config_from_flags(r.get("flags") or (variants or {}).get(r["variant"]) or [])
        s = by_id.get(r["prompt"])
        if cfg is None or s is None or r["variant"] == "plain":
            continue
        plain = next((x for x in runs if x["variant"] == "plain" and x["prompt"] == r["prompt"]
                      and x["repeat"] == r["repeat"]), None)
        if plain is None or not plain["decoded"] or not r["decoded"]:
            continue
        n = min(len(s.output), r["decoded"])          # the run's length, not the sweep's
        wins = replay(Stream(s.id, s.prompt, s.output[:n], s.category), cfg)
        priced = sum(base(k) / one for k, _ in wins)
        drafted = sum(k - 1 for k, _ in wins)
        step = plain["decode_s"] / plain["decoded"]
        measured = r["decode_s"] / step * n / r["decoded"]
        rows.append({"prompt": r["prompt"], "variant": r["variant"], "priced_steps": round(priced, 2),
                     "measured_steps": round(measured, 2), "drafted": drafted})
        num += drafted * (measured - priced)
        den += drafted * drafted
    if not rows or den == 0:
        return None
    return {"row_overhead": round(max(0.0, num / den), 3), "runs": rows}
