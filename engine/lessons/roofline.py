"""Two lessons on what a verify pass costs: `knee` (seed 000's roofline) and `row-cost`
(seed 002's per-row fits, break-even table and the depth a cost-aware chooser picks)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.cost.chooser import WindowChooser
from engine.cost.fit import CostFit
from engine.cost.profile import CostProfile, reference_profile
from engine.lessons import seeds as S
from engine.lessons.figure import Comparison, LessonResult, Mark, Panel, fmt, series
from engine.lessons.runs import LessonContext, probe, profile

KNEE_PASS_ROWS = 24          # seed 000's box: 24 tokens in one pass vs 24 steps


@dataclass(frozen=True)
class KneeReading:
    """Where a pass stops costing about one decode step, read from a probe's fit.

    Where the fit has a flat part (2 rows or more), the knee is where it ends. Where every row
    adds cost from the first, the write-up's own formula: one decode step ÷ one row's compute
    (its 25.3 ms ÷ 1.04 ms); on a roofline the two agree. None: flat over every probed row."""
    rows: float | None
    how: str                 # "flat part" | "formula" | "flat"
    top: int                 # most rows probed
    top_steps: float         # what `top` rows cost, in one-row steps (the probe's median)
    one_ms: float
    slope_ms: float

    @property
    def row_share(self) -> float:
        """One extra row's cost as a share of a decode step."""
        return self.slope_ms / self.one_ms

    @property
    def past_probe(self) -> bool:
        return self.rows is not None and self.rows > self.top


def read_knee(points, fit: CostFit) -> KneeReading:
    """The knee of a probe's (rows, ms) points and their fit."""
    top, top_ms = max(points)
    one = fit.one_row_ms
    if fit.knee_rows is None or fit.slope_ms_per_row <= 0:
        rows, how = None, "flat"
    elif fit.knee_rows >= 2:
        rows, how = fit.knee_rows, "flat part"
    else:
        rows, how = one / fit.slope_ms_per_row, "formula"
    return KneeReading(rows, how, int(top), top_ms / one, one, fit.slope_ms_per_row)


def knee_text(k: KneeReading) -> str:
    """The knee as the table says it."""
    cost = f"{k.top} rows cost {fmt(k.top_steps)} steps"
    if k.rows is None:
        return f"none within the {k.top} rows probed ({cost})"
    if k.how == "flat part":
        return f"≈ {fmt(k.rows)} rows (the flat part ends there; {cost})"
    where = f", past the {k.top} probed" if k.past_probe else ""
    return f"≈ {fmt(k.rows)} rows{where} ({fmt(k.one_ms)} ÷ {fmt(k.slope_ms)}; {cost})"


def knee_grid(probed: list[int], k: KneeReading) -> list[int]:
    top = max(64, max(probed), min(512, 2 * int(k.rows or 0)))
    return sorted({1, 2, 3, *range(4, 64, 2), *range(64, top + 1, 16), top, *probed, KNEE_PASS_ROWS})


def knee(ctx: LessonContext) -> LessonResult:
    prof = probe(ctx, (0.0, 0.95))
    f = prof.fit
    probed = [r for r, _ in prof.points]
    k = read_knee(prof.points, f)
    grid = knee_grid(probed, k)
    ref = reference_profile("rx9070xt-qwen3.5-9b")
    one, pass24 = f.one_row_ms, prof.ms(KNEE_PASS_ROWS)
    steps24 = KNEE_PASS_ROWS * one
    here = ctx.here
    marks = [Mark("x", ref.fit.knee_rows, f"RX 9070 XT knee ≈ {ref.fit.knee_rows:.1f}", "reference")]
    if k.rows is not None:
        marks.append(Mark("x", k.rows, f"{here}: knee ≈ {fmt(k.rows)}"
                          + (" (past the probe)" if k.past_probe else ""), "card"))
    panel = Panel(
        "verify-pass cost against rows", "verify rows (candidate tokens + 1)", "ms per pass",
        (series("RX 9070 XT, Qwen3.5-9B (seed 000): max(25.3, 1.04 × rows)", grid,
                [ref.ms(r) for r in grid], color="reference"),
         series(f"{here}: fit", grid, [prof.ms(r) for r in grid]),
         series(f"{here}: probe medians", probed, [ms for _, ms in prof.points], style="points")),
        tuple(marks), log_x=True, log_y=True)
    comps = (
        Comparison("one decode step (1 row)", S.RX9070_DECODE_MS, one, "ms"),
        Comparison("flat cost of a multi-row pass", S.RX9070_DECODE_MS, f.flat_ms, "ms"),
        Comparison("each row's compute (the fit's slope)", S.RX9070_MS_PER_CANDIDATE, f.slope_ms_per_row, "ms"),
        Comparison("the knee", S.RX9070_KNEE, k.rows, "rows", write_up_text="≈ 24 rows (25.3 ÷ 1.04)",
                   here_text=knee_text(k)),
        Comparison(f"{k.top} rows in one pass, in decode steps", ref.ms(k.top) / ref.ms(1), k.top_steps, "steps",
                   write_up_text=f"{fmt(ref.ms(k.top) / ref.ms(1))} (the RX 9070 XT's roofline)"),
        Comparison(f"{KNEE_PASS_ROWS} tokens in one pass", S.RX9070_PASS_24_MS, pass24, "ms",
                   here_text=f"{fmt(pass24)} ms" + (" (extrapolated)" if KNEE_PASS_ROWS > max(probed) else "")),
        Comparison(f"{KNEE_PASS_ROWS} tokens as {KNEE_PASS_ROWS} decode steps", S.RX9070_STEPS_24_MS, steps24, "ms"),
        Comparison("steps' cost ÷ one pass's", S.RX9070_STEPS_24_MS / S.RX9070_PASS_24_MS, steps24 / pass24, "x"),
    )
    pts = ", ".join(f"{r}: {fmt(ms)}" for r, ms in prof.points)
    caption = (f"Median ms of one verify pass against its rows on {here} ({pts}), the fitted "
               "flat-then-linear curve, and seed 000's RX 9070 XT roofline. Up to the knee extra "
               "candidates ride along under the weight stream; past it each costs its compute. "
               "Log-log axes.")
    return LessonResult(
        name="knee", title="a verify pass costs one decode step up to the knee",
        claim=("a verify pass is priced like one decode step up to the knee = decode floor ÷ "
               "per-candidate compute (RX 9070 XT: 25.3 ms ÷ 1.04 ms ≈ 24 rows); 24 tokens in one "
               "pass ≈ 25 ms vs 24 steps ≈ 606 ms."),
        source=S.SEED_000, caption=caption, panels=(panel,), comparisons=comps,
        why=knee_why(k, ctx.model, here, f.flat_ms), device=ctx.device, model=ctx.model,
        budget=ctx.budget.label, here=here,
        settings={"probe context": prof.context, "repeats": prof.extra.get("repeats")},
        data={"profile": prof, "knee": k})


def knee_why(k: KneeReading, model: str, here: str = "this device", flat_ms: float | None = None) -> str:
    """Why this device's knee is not the RX 9070 XT's, from the reading's numbers only."""
    cost = f"{k.top} rows cost {fmt(k.top_steps)} decode steps"
    if k.rows is None:
        return (f"On {here} a pass stays flat up to the {k.top} rows probed ({cost}): {model} streams "
                "its weights without waiting on the rows' arithmetic within that range, so the knee "
                "lies past what was measured.")
    if k.how == "flat part":
        flat = flat_ms if flat_ms is not None else k.one_ms
        why = (f"On {here} the knee sits where each row's compute ({fmt(k.slope_ms)} ms) catches up with "
               f"the {fmt(flat)} ms flat cost, at ≈ {fmt(k.rows)} rows ({cost}); that depends on the "
               "device's compute against its bandwidth and on the model's size, not on the 9070 XT's 24")
        return why + (f", and one row runs a faster path here ({fmt(k.one_ms)} ms against {fmt(flat)})."
                      if k.one_ms < 0.8 * flat else ".")
    share = f"each row adds {fmt(k.slope_ms)} ms, {k.row_share:.0%} of a {fmt(k.one_ms)} ms step, from the first"
    if k.past_probe:
        return (f"On {here} {share}, so {cost}: rows are nearly free, and the write-up's formula "
                f"({fmt(k.one_ms)} ÷ {fmt(k.slope_ms)}) puts the knee at ≈ {fmt(k.rows)} rows, past the "
                f"{k.top} probed; {model} is small, so its weight stream, not the rows' arithmetic, sets "
                "what a pass costs.")
    bound = ("a CPU's compute is small next to its memory bandwidth" if here == "this CPU" else
             f"this device's compute is small next to its bandwidth for {model}")
    return (f"On {here} {share}, so {cost} and the write-up's formula ({fmt(k.one_ms)} ÷ "
            f"{fmt(k.slope_ms)}) puts the knee at ≈ {fmt(k.rows)} rows: the pass is bound by arithmetic "
            f"early ({bound}), not by the weight stream that makes rows free on a 640 GB/s card "
            "running a 9B model.")


ROW_COST_ROWS = tuple(range(1, 9))     # the seed's fits hold up to 8 rows
ALPHAS = tuple(round(0.05 * i, 2) for i in range(1, 20))
CHOOSER_ALPHA = 0.7


def linear_fit(prof: CostProfile, rows=ROW_COST_ROWS) -> tuple[float, float]:
    """(a, b) of ms(R) ≈ a + b·(R - 1), least squares over `rows` of the profile's curve: the
    form of seed 002's fits (a = one row, b = each extra row)."""
    xs = [r - 1.0 for r in rows]
    ys = [prof.ms(r) for r in rows]
    n, mx, my = len(xs), sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def chooser_depth(prof: CostProfile, alpha: float, max_depth: int = 7) -> int:
    """The draft depth the decoder's chooser picks on `prof` when every draft token is accepted
    with probability `alpha` (0: a plain step)."""
    return WindowChooser(prof, max_depth=max_depth, max_width=1, prior=alpha).choose("lookup").depth


def _break_even_panel(prof: CostProfile, cards, a: float, b: float, here: str) -> Panel:
    rows = ROW_COST_ROWS
    return Panel("tokens a window must emit to break even (window ms ÷ one-row ms)",
                 "verify rows per window (drafts + 1)", "tokens to break even",
                 tuple(series(name, rows, [c.break_even(r) for r in rows], style="linepoints", color=col)
                       for _, name, c, col in cards)
                 + (series(f"{here}: {fmt(a)} + {fmt(b)} ms/row (fit)", rows,
                           [(a + b * (r - 1)) / prof.ms(1) for r in rows], color="card", dashed=True),
                    series(f"{here} (probe)", rows, [prof.break_even(r) for r in rows], style="linepoints")))


def _row_cost_comparisons(prof: CostProfile, a: float, b: float, depths: tuple[int, int, int]):
    d_halo, d_r9700, d_here = depths
    return (
        Comparison("one row (a plain decode step)", S.HALO_BASE_MS, prof.ms(1), "ms",
                   write_up_text=f"{S.HALO_BASE_MS} ms Halo, {S.R9700_BASE_MS} ms R9700"),
        Comparison("fit a + b·(rows − 1): b, each extra row", S.HALO_MS_PER_ROW, b, "ms",
                   write_up_text=(f"{S.HALO_BASE_MS} + {S.HALO_MS_PER_ROW} Halo, "
                                  f"{S.R9700_BASE_MS} + {S.R9700_MS_PER_ROW} R9700"),
                   here_text=f"{fmt(a)} + {fmt(b)} ms"),
        Comparison("b ÷ a: a row in plain steps", S.HALO_MS_PER_ROW / S.HALO_BASE_MS, b / a, "",
                   write_up_text=(f"{S.HALO_MS_PER_ROW / S.HALO_BASE_MS:.2f} Halo, "
                                  f"{S.R9700_MS_PER_ROW / S.R9700_BASE_MS:.2f} R9700")),
        *(Comparison(f"tokens to break even, {k} draft{'s' if k > 1 else ''}", S.HALO_BREAK_EVEN[k - 1],
                     prof.break_even(k + 1), "tok",
                     write_up_text=f"{S.HALO_BREAK_EVEN[k - 1]} Halo, {S.R9700_BREAK_EVEN[k - 1]} R9700")
          for k in (1, 2, 3)),
        Comparison(f"depth the chooser picks at α = {CHOOSER_ALPHA}", S.MTP_DEFAULT_DEPTH, d_here, "",
                   write_up_text=(f"hipfire picks per window (default {S.MTP_DEFAULT_DEPTH}); our chooser "
                                  f"on their fits: {d_halo} Halo, {d_r9700} R9700")),
    )


def row_cost(ctx: LessonContext) -> LessonResult:
    prof = profile(ctx, (0.0, 0.9))
    here = ctx.here
    halo, r9700 = reference_profile("strix-halo-flash-next"), reference_profile("r9700-flash-next")
    a, b = linear_fit(prof)
    cards = (("Strix Halo", "Strix Halo 30.5 + 6.9 ms/row (seed 002)", halo, "reference"),
             ("R9700", "R9700 30.3 + 14.8 ms/row (seed 002)", r9700, "reference2"))
    p1 = _break_even_panel(prof, cards, a, b, here)
    depths = {short: [chooser_depth(c, al) for al in ALPHAS] for short, _, c, _ in cards}
    mine = [chooser_depth(prof, al) for al in ALPHAS]
    p2 = Panel("draft depth the chooser picks (0 = plain decoding)", "acceptance per draft token α",
               "depth picked",
               tuple(series(short, ALPHAS, depths[short], style="linepoints", color=col)
                     for short, _, _, col in cards)
               + (series(here, ALPHAS, mine, style="linepoints"),),
               (Mark("x", CHOOSER_ALPHA, f"α = {CHOOSER_ALPHA}", "neutral"),), y_range=(0, 7.5))
    picked = tuple(chooser_depth(c, CHOOSER_ALPHA) for c in (halo, r9700, prof))
    why = row_cost_why(a, b, prof.ms(2) / prof.ms(1), picked, ctx.model, here)
    caption = ("Left: a window's cost in plain steps, i.e. the tokens it must emit to tie plain "
               f"decoding, for 1 to 8 verify rows, on {here} and the two cards of seed 002. "
               "Right: the depth the decoder's cost-aware chooser picks on each device's curve for a "
               "given per-token acceptance (one-token-per-step when no window pays).")
    return LessonResult(
        name="row-cost", title="what a verify row costs, and the depth that buys",
        claim=("window cost = a + b·rows (Strix Halo 30.5 + 6.9 ms/row, R9700 30.3 + 14.8); tokens to "
               "break even for 1-3 drafts 1.23 / 1.45 / 1.68 (Halo) and 1.49 / 1.98 / 2.47 (R9700); the "
               "depth is picked per window to maximize expected tokens per unit of window cost."),
        source=S.SEED_002 + ", § 05", caption=caption, panels=(p1, p2),
        comparisons=_row_cost_comparisons(prof, a, b, picked), why=why, here=here,
        device=ctx.device, model=ctx.model, budget=ctx.budget.label,
        settings={"profile": prof.id, "profile source": prof.source},
        data={"profile": prof, "fit": (a, b), "chooser": {"alphas": ALPHAS, "here": mine, **depths}})


def row_cost_why(a: float, b: float, jump: float, depths: tuple[int, int, int], model: str,
                 here: str = "this device") -> str:
    """Why an extra row costs what it does here, against seed 002's cards, from the numbers:
    the fit a + b·(rows − 1), what two rows cost in steps (`jump`) and the depths the chooser
    picks at α = CHOOSER_ALPHA on (Strix Halo, R9700, here)."""
    ratio = b / a if a > 0 else float("nan")
    halo, r9700 = S.HALO_MS_PER_ROW / S.HALO_BASE_MS, S.R9700_MS_PER_ROW / S.R9700_BASE_MS
    than = ("dearer than on both of seed 002's cards" if ratio > max(halo, r9700) else
            "cheaper than on both of seed 002's cards" if ratio < min(halo, r9700) else
            "between seed 002's two cards")
    d_halo, d_r9700, d_here = depths
    deeper = ("as deep as on both cards" if d_here == d_halo == d_r9700 else
              "deeper than on either card" if d_here > max(d_halo, d_r9700) else
              "shallower than on either card" if d_here < min(d_halo, d_r9700) else "between the cards")
    why = (f"On {here} an extra row costs {fmt(ratio)} of a plain step ({fmt(b)} of {fmt(a)} ms), "
           f"{than} ({halo:.2f} on Strix Halo, {r9700:.2f} on the R9700): the ratio is the device's "
           f"arithmetic against its weight stream for {model} (Flash-Next there). At α = {CHOOSER_ALPHA} "
           f"the chooser drafts {d_here} deep here, {deeper} "
           f"({d_halo} Halo, {d_r9700} R9700)")
    why += (f"; the first extra row costs more than the fit says ({fmt(jump)} steps for two rows: one row "
            "runs its own faster path), which a straight line smooths over." if jump > 1 + 1.5 * ratio else ".")
    return why
