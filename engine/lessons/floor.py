"""The `ar-floor` lesson (seed 002 § 07): time one plain step, probe up to three windows, and
retire to plain decoding when none was strictly cheaper per emitted token (the floor then keeps
measuring). The lesson runs the write-up's rule (engine.cost.floor.seed_floor); the decoder's
own floor judges on more windows (engine.cost.floor's docstring says why)."""

from __future__ import annotations

from engine.cost.floor import PROBING, RETIRED, seed_floor
from engine.cost.plan import FLOOR_TIMING, Cause
from engine.lessons import seeds as S
from engine.lessons.figure import Comparison, LessonResult, Mark, Panel, fmt, series
from engine.lessons.runs import LessonContext, Run, decode, workload_ids
from engine.speculation.drafters import tree_rows
from engine.speculation.events import WindowEvent
from engine.speculation.settings import DecodeSettings

# low-acceptance prose: Spec-Bench's open-ended writing, drafted by a fixed tree (depth 8 x 3:
# up to 13 rows a probe: engine.speculation.drafters.tree_rows), so that the floor has
# something to refuse on a card where rows cost
FLOOR_WORKLOAD = "specbench:writing"
TREE = DecodeSettings(draft="tree", depth=8, width=3)


def window_kind(ev: WindowEvent, state_before: str) -> str:
    """What a window was to the floor, from its plan's cause (and the floor's figures in it)
    and the floor's state before it."""
    if ev.tokens:
        return {PROBING: "probe window", RETIRED: "probe again (retired)"}.get(state_before, "speculating")
    cause = Cause(ev.cause)
    if cause is Cause.AR_FLOOR:
        if ev.figures.get("lead"):
            return "plain step (untimed lead)"
        return ("plain step (timing)" if ev.figures.get("status") == FLOOR_TIMING
                else "plain step (retired)")
    return "plain step (the last token)" if cause is Cause.LAST_TOKEN else "plain step (no n-gram match)"


FLOOR_COLORS = {"plain step (untimed lead)": "reference2", "plain step (timing)": "card", "probe window": "warn",
                "probe again (retired)": "reference", "speculating": "good",
                "plain step (retired)": "neutral", "plain step (no n-gram match)": "info",
                "plain step (the last token)": "text"}


def seen_ms(ev: WindowEvent) -> float:
    """What the floor was told a window cost: its whole cycle (window_ms in old recordings)."""
    return ev.window_ms if ev.cycle_ms is None else ev.cycle_ms


def floor_steps(on: Run) -> tuple[dict[str, tuple[list[int], list[float], list[str]]], list[dict]]:
    """The floor-on run window by window: per kind, the (windows, ms per token, labels) drawn,
    and each window's row of what the floor saw and decided."""
    kinds: dict[str, tuple[list[int], list[float], list[str]]] = {}
    state = PROBING
    steps: list[dict] = []
    for ev, (after, reason) in zip(on.events, on.floor):
        kind = window_kind(ev, state)
        ms_tok = seen_ms(ev) / len(ev.emitted)
        xs, ys, labels = kinds.setdefault(kind, ([], [], []))
        xs.append(ev.index)
        ys.append(ms_tok)
        labels.append("timed" if kind == "plain step (timing)" else
                      f"probe {len([s for s in steps if s['kind'] == 'probe window']) + 1}"
                      + (f": {after}" if after != state else "") if kind == "probe window" else "")
        steps.append({"window": ev.index, "kind": kind, "rows": 1 + len(ev.tokens), "tokens": len(ev.emitted),
                      "window_ms": ev.window_ms, "cycle_ms": seen_ms(ev), "ms_per_token": ms_tok, "state": after, "reason": reason})
        state = after
    return kinds, steps


def floor_panels(on: Run, runs, kinds) -> tuple[Panel, Panel]:
    p1 = Panel("the floor's decision, window by window", "window", "ms per emitted token (whole cycle)",
               tuple(series(k, xs, ys, style="points", color=FLOOR_COLORS[k], labels=tuple(lb))
                     for k, (xs, ys, lb) in kinds.items()),
               (Mark("y", on.ar_ms, f"the timed plain step: {fmt(on.ar_ms)} ms", "card"),)
               if on.ar_ms else ())
    p2 = Panel("tokens per second kept", "", "tok/s",
               (series("tok/s", range(3), [r.report["tok_s"] for _, r in runs], style="bars",
                       labels=tuple(f"{fmt(r.report['tok_s'])} tok/s" for _, r in runs)),),
               x_ticks=tuple((float(i), name) for i, (name, _) in enumerate(runs)))
    return p1, p2


def ar_floor(ctx: LessonContext) -> LessonResult:
    pid, ids = workload_ids(ctx, FLOOR_WORKLOAD)[0]
    n = ctx.budget.new_tokens
    base = TREE.to_dict() | {"max_new_tokens": n}
    on = decode(ctx, ids, DecodeSettings.from_dict(base | {"ar_floor": True}), label="AR floor on",
                span=(0.0, 0.4), floor=seed_floor(S.FLOOR_MAX_PROBES, lead=int(ctx.rt.use_graphs)))
    off = decode(ctx, ids, DecodeSettings.from_dict(base | {"ar_floor": False}), label="AR floor off",
                 span=(0.4, 0.7))
    ar = decode(ctx, ids, DecodeSettings.from_dict(base | {"draft": "none"}), label="plain decoding",
                span=(0.7, 1.0))
    kinds, steps = floor_steps(on)
    runs = (("AR floor on", on), ("AR floor off (always the tree)", off), ("plain decoding", ar))
    p1, p2 = floor_panels(on, runs, kinds)
    final = on.floor[-1][0] if on.floor else "off"
    decided = next((s for s in steps if s["state"] != "probing"), None)
    # the first decision, which the write-up's rule is about: its probes and the plain step they
    # were held against (the floor's own lists move on as it keeps measuring)
    probes = [(s["cycle_ms"], s["tokens"]) for s in steps if s["kind"] == "probe window"]
    timed = next((s["cycle_ms"] for s in steps if s["kind"] == "plain step (timing)"), None)
    comps = (
        Comparison("plain steps timed first", 1, sum(s["kind"] == "plain step (timing)" for s in steps), "",
                   write_up_text="one ordinary AR token, timed"),
        Comparison("probe windows before deciding", S.FLOOR_MAX_PROBES, len(probes), "",
                   write_up_text="up to three, each timed"),
        Comparison("decision", None, None, write_up_text="nothing strictly cheaper → retire",
                   here_text=f"{final}" + (f" after window {decided['window']}: {decided['reason']}" if decided else "")),
        Comparison("tok/s: floor on / always speculating / plain decoding", None, on.report["tok_s"], "tok/s",
                   write_up_text=(f"Halo AR {S.HALO_AR_TOK_S} vs MTP {S.HALO_MTP_TOK_S}; R9700 AR "
                                  f"{S.R9700_AR_TOK_S} vs MTP {S.R9700_MTP_TOK_S}"),
                   here_text=" / ".join(fmt(r.report["tok_s"]) for _, r in runs)),
    )
    caption = (f"A low-acceptance prose prompt (Spec-Bench {pid}) with a fixed token tree (depth 8 x 3): "
               "left, each window's ms per emitted token as the AR floor times one plain step (on a GPU "
               "behind an untimed one, so that it runs queued as plain decoding does), probes "
               "up to three windows and decides; right, tok/s with the floor, always speculating, and "
               "plain decoding.")
    return LessonResult(
        name="ar-floor", title="the AR floor: measure instead of guessing",
        claim=("time one AR token, probe up to three speculative windows, compare their cost per emitted "
               "token with the AR time, and retire to plain decoding when nothing is strictly cheaper; "
               "the floor bounds the probing, not the request."),
        source=S.SEED_002 + ", § 07", caption=caption, panels=(p1, p2), comparisons=comps,
        why=ar_floor_why(decided["state"] if decided else "probing", timed, probes, ctx.here),
        here=ctx.here,
        device=ctx.device, model=ctx.model, budget=ctx.budget.label,
        settings={"prompt": pid, "drafter": "tree 8 x 3 (fixed)", "new tokens": n, "temperature": 0},
        data={"on": on, "off": off, "ar": ar, "steps": steps, "probes": probes, "timed_ms": timed})


def ar_floor_why(final: str, ar_ms: float | None, probes, here: str = "this device") -> str:
    """Why the floor decided as it did, from its numbers: the state its probes led to, the timed
    plain step and the probes' (ms, tokens)."""
    rows = tree_rows(TREE.depth, TREE.width)
    if not probes or ar_ms is None:
        return (f"On {here} the request ended before the floor had timed a plain step and a probe, so it "
                "never decided; the rule is the write-up's, the prompt was too short to apply it.")
    best = min(ms / max(1, t) for ms, t in probes)
    if final == "retired":
        return (f"On {here} the cheapest of {len(probes)} probe windows (tree passes of up to {rows} rows) spent "
                f"{fmt(best)} ms per emitted token against the plain step's {fmt(ar_ms)} ms, so the floor "
                "retires, as the write-up's would on a card where rows are dear; the write-up reports the "
                "tok/s of an MTP head that pays on both its cards, the other branch of the same rule.")
    if final == "probing":
        return (f"On {here} the request ended while the floor was still probing ({len(probes)} probe "
                f"windows, the cheapest {fmt(best)} ms per token against the plain step's {fmt(ar_ms)} ms).")
    return (f"On {here} a probe window emitted its tokens at {fmt(best)} ms each, under the plain step's "
            f"{fmt(ar_ms)} ms, so the floor starts speculating (and keeps measuring); whether it retires depends on how dear rows "
            "are here (see the `row-cost` lesson) and how little the prose repeats, not on the rule, which "
            "is the write-up's.")
