"""Two lessons on what a verify pass costs: `knee` (seed 000's roofline) and `row-cost`
(seed 002's per-row fits, break-even table and the depth a cost-aware chooser picks)."""

from __future__ import annotations

from engine.cost.chooser import WindowChooser
from engine.cost.profile import CostProfile, reference_profile
from engine.lessons import seeds as S
from engine.lessons.figure import Comparison, LessonResult, Mark, Panel, fmt, series
from engine.lessons.runs import LessonContext, probe, profile

KNEE_PASS_ROWS = 24          # seed 000's box: 24 tokens in one pass vs 24 steps


def knee(ctx: LessonContext) -> LessonResult:
    prof = probe(ctx, (0.0, 0.95))
    f = prof.fit
    probed = [r for r, _ in prof.points]
    top = max(64, max(probed))
    grid = sorted({1, 2, 3, *range(4, top + 1, 2), *probed, KNEE_PASS_ROWS})
    ref = reference_profile("rx9070xt-qwen3.5-9b")
    one, pass24 = f.one_row_ms, prof.ms(KNEE_PASS_ROWS)
    steps24 = KNEE_PASS_ROWS * one
    marks = [Mark("x", ref.fit.knee_rows, f"RX 9070 XT knee ≈ {ref.fit.knee_rows:.1f}", "reference")]
    if f.knee_rows is not None and f.knee_rows >= 1.5:
        marks.append(Mark("x", f.knee_rows, f"this card's knee ≈ {f.knee_rows:.1f}", "card"))
    panel = Panel(
        "verify-pass cost against rows", "verify rows (candidate tokens + 1)", "ms per pass",
        (series("RX 9070 XT, Qwen3.5-9B (seed 000): max(25.3, 1.04 × rows)", grid,
                [ref.ms(r) for r in grid], color="reference"),
         series("this card: fit", grid, [prof.ms(r) for r in grid]),
         series("this card: probe medians", probed, [ms for _, ms in prof.points], style="points")),
        tuple(marks), log_x=True, log_y=True)
    knee_text = (f"none within {max(probed)} rows" if f.knee_rows is None else
                 "none: every row costs from the first" if f.knee_rows < 1.5 else "")
    comps = (
        Comparison("one decode step (1 row)", S.RX9070_DECODE_MS, one, "ms"),
        Comparison("flat cost of a multi-row pass", S.RX9070_DECODE_MS, f.flat_ms, "ms"),
        Comparison("each row past the knee", S.RX9070_MS_PER_CANDIDATE, f.slope_ms_per_row, "ms"),
        Comparison("the knee", S.RX9070_KNEE, f.knee_rows, "rows", write_up_text="≈ 24 rows (25.3 ÷ 1.04)",
                   here_text=knee_text),
        Comparison(f"{KNEE_PASS_ROWS} tokens in one pass", S.RX9070_PASS_24_MS, pass24, "ms",
                   here_text=f"{fmt(pass24)} ms" + (" (extrapolated)" if KNEE_PASS_ROWS > max(probed) else "")),
        Comparison(f"{KNEE_PASS_ROWS} tokens as {KNEE_PASS_ROWS} decode steps", S.RX9070_STEPS_24_MS, steps24, "ms"),
        Comparison("steps' cost ÷ one pass's", S.RX9070_STEPS_24_MS / S.RX9070_PASS_24_MS, steps24 / pass24, "x"),
    )
    why = _knee_why(ctx, prof)
    pts = ", ".join(f"{r}: {fmt(ms)}" for r, ms in prof.points)
    caption = (f"Median ms of one verify pass against its rows on this card ({pts}), the fitted "
               "flat-then-linear curve, and seed 000's RX 9070 XT roofline. Up to the knee extra "
               "candidates ride along under the weight stream; past it each costs its compute. "
               "Log-log axes.")
    return LessonResult(
        name="knee", title="a verify pass costs one decode step up to the knee",
        claim=("a verify pass is priced like one decode step up to the knee = decode floor ÷ "
               "per-candidate compute (RX 9070 XT: 25.3 ms ÷ 1.04 ms ≈ 24 rows); 24 tokens in one "
               "pass ≈ 25 ms vs 24 steps ≈ 606 ms."),
        source=S.SEED_000, caption=caption, panels=(panel,), comparisons=comps, why=why,
        device=ctx.device, model=ctx.model, budget=ctx.budget.label,
        settings={"probe context": prof.context, "repeats": prof.extra.get("repeats")},
        data={"profile": prof})


def _knee_why(ctx: LessonContext, prof: CostProfile) -> str:
    """Why this card's knee is not the RX 9070 XT's, in the lesson's words."""
    f, one = prof.fit, prof.fit.one_row_ms
    if f.knee_rows is None:
        top = max(r for r, _ in prof.points)
        why = (f"On this card a pass stays flat up to the {top} rows probed: {ctx.model} is far "
               "smaller than a 9B model, so streaming its weights never waits on the rows' arithmetic "
               "within that range, and the knee lies past what was measured.")
    elif f.knee_rows < 4:
        why = (f"This card has almost no flat part: each extra row adds {fmt(f.slope_ms_per_row)} ms to a "
               f"{fmt(one)} ms step, because here the pass is bound by arithmetic from the first rows "
               "(a CPU's compute is small next to its memory bandwidth), not by the weight stream that "
               "makes rows free on a 640 GB/s card running a 9B model.")
    else:
        why = (f"The knee sits where this card's per-row compute ({fmt(f.slope_ms_per_row)} ms) catches "
               f"up with its {fmt(f.flat_ms)} ms flat cost; that ratio depends on the card's compute "
               f"against its bandwidth and on the model's size, so it is not the 9070 XT's 24")
        why += (f", and one row runs a faster one-row path here ({fmt(one)} ms against {fmt(f.flat_ms)}), "
                f"so even two rows cost {fmt(f.flat_ms / one)} steps." if one < 0.8 * f.flat_ms else ".")
    return why


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


def row_cost(ctx: LessonContext) -> LessonResult:
    prof = profile(ctx, (0.0, 0.9))
    halo, r9700 = reference_profile("strix-halo-flash-next"), reference_profile("r9700-flash-next")
    a, b = linear_fit(prof)
    rows = ROW_COST_ROWS
    be = [prof.break_even(r) for r in rows]
    cards = (("Strix Halo", "Strix Halo 30.5 + 6.9 ms/row (seed 002)", halo, "reference"),
             ("R9700", "R9700 30.3 + 14.8 ms/row (seed 002)", r9700, "reference2"))
    p1 = Panel("tokens a window must emit to break even (window ms ÷ one-row ms)",
               "verify rows per window (drafts + 1)", "tokens to break even",
               tuple(series(name, rows, [c.break_even(r) for r in rows], style="linepoints", color=col)
                     for _, name, c, col in cards)
               + (series(f"this card: {fmt(a)} + {fmt(b)} ms/row (fit)", rows,
                         [(a + b * (r - 1)) / prof.ms(1) for r in rows], color="card", dashed=True),
                  series("this card (probe)", rows, be, style="linepoints")))
    depths = {short: [chooser_depth(c, al) for al in ALPHAS] for short, _, c, _ in cards}
    mine = [chooser_depth(prof, al) for al in ALPHAS]
    p2 = Panel("draft depth the chooser picks (0 = plain decoding)", "acceptance per draft token α",
               "depth picked",
               tuple(series(short, ALPHAS, depths[short], style="linepoints", color=col)
                     for short, _, _, col in cards)
               + (series("this card", ALPHAS, mine, style="linepoints"),),
               (Mark("x", CHOOSER_ALPHA, f"α = {CHOOSER_ALPHA}", "neutral"),), y_range=(-0.3, 7.5))
    d_halo, d_r9700, d_here = (chooser_depth(c, CHOOSER_ALPHA) for c in (halo, r9700, prof))
    comps = (
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
    why = _row_cost_why(ctx, prof, a, b)
    caption = ("Left: a window's cost in plain steps, i.e. the tokens it must emit to tie plain "
               "decoding, for 1 to 8 verify rows, on this card and the two cards of seed 002. "
               "Right: the depth the decoder's cost-aware chooser picks on each card's curve for a "
               "given per-token acceptance (one-token-per-step when no window pays).")
    return LessonResult(
        name="row-cost", title="what a verify row costs, and the depth that buys",
        claim=("window cost = a + b·rows (Strix Halo 30.5 + 6.9 ms/row, R9700 30.3 + 14.8); tokens to "
               "break even for 1-3 drafts 1.23 / 1.45 / 1.68 (Halo) and 1.49 / 1.98 / 2.47 (R9700); the "
               "depth is picked per window to maximize expected tokens per unit of window cost."),
        source=S.SEED_002 + ", § 05", caption=caption, panels=(p1, p2), comparisons=comps, why=why,
        device=ctx.device, model=ctx.model, budget=ctx.budget.label,
        settings={"profile": prof.id, "profile source": prof.source},
        data={"profile": prof, "fit": (a, b), "chooser": {"alphas": ALPHAS, "here": mine, **depths}})


def _row_cost_why(ctx: LessonContext, prof: CostProfile, a: float, b: float) -> str:
    """Why an extra row costs what it does here, against seed 002's cards."""
    ratio = b / a if a > 0 else float("nan")
    why = (f"Here an extra row costs {fmt(ratio)} of a plain step ({fmt(b)} of {fmt(a)} ms), against "
           f"{S.HALO_MS_PER_ROW / S.HALO_BASE_MS:.2f} on Strix Halo and {S.R9700_MS_PER_ROW / S.R9700_BASE_MS:.2f} "
           f"on the R9700: the ratio is the card's arithmetic against its weight stream for this model "
           f"({ctx.model} here, Flash-Next there), and the dearer the row, the shallower the chooser drafts")
    jump = prof.ms(2) / prof.ms(1)
    why += (f"; the first extra row costs more than the fit says ({fmt(jump)} steps for two rows: one row "
            "runs its own faster path), which a straight line smooths over." if jump > 1 + 1.5 * b / a else ".")
    return why
