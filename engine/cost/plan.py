"""What the next window will be and why: a frozen `Plan`, and its reason in words.

A window policy (engine.speculation.policies) answers each window with a Plan: who drafts it,
its depth, width and verify rows, the price the chooser put on it, and why, as a `Cause` plus
the figures behind it. The words a person reads are made here and only here (`describe`), from
the cause and the figures; views that need the few-word form of a plain window's reason ask
`describe(..., brief=True)` and never take the long form apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping

NAN = float("nan")


class Cause(str, Enum):
    """Why a window has the shape it has (the value is what events and recordings carry)."""

    FIXED = "fixed"                      # the settings' depth and width
    MODEL_FIXED = "model fixed"          # a model drafter at the settings' depth and width
    NO_DRAFTER = "no drafter"            # plain: --draft none
    LAST_TOKEN = "last token"            # plain: the request's last token
    AR_FLOOR = "ar floor"                # plain: the AR floor times a step, or has retired
    NO_CONTINUATION = "no continuation"  # plain: the n-gram index has no match
    NO_FIT = "no fit"                    # plain: no window fits in the row limit
    PRICED = "priced"                    # the chooser's best window beats plain decoding
    FIRST_TRY = "first try"              # a model drafter's first window, priced at the prior
    NEVER_PAYS = "never pays"            # plain: not even an all-accepted window would pay
    NOT_BEATING = "not beating"          # plain: the best window does not beat plain decoding
    TAKEOVER = "takeover"                # the measured takeover picked who drafts
    PRICED_TAKEOVER = "priced takeover"  # the priced takeover picked who drafts


@dataclass(frozen=True)
class Plan:
    """The next window. depth 0 (width 0) = one plain decode step.

    drafter: who drafts it, as the event names it ("lookup", "tree", "early-exit", "model";
    "none" for a takeover's plain step or no drafter; a priced plain step keeps the drafter it
    priced, whose estimates the step relaxes). figures: the numbers (and names) the cause's
    words are made of."""

    drafter: str
    depth: int
    width: int
    rows: int
    cause: Cause
    predicted_ms: float = NAN
    expected_tokens: float = NAN
    figures: Mapping[str, Any] = field(default_factory=dict)
    explore: bool = False        # a first try of a model drafter priced only at the prior

    @property
    def plain(self) -> bool:
        return self.depth == 0

    @property
    def tokens_per_ms(self) -> float:
        return self.expected_tokens / self.predicted_ms

    @property
    def reason(self) -> str:
        return describe(self.cause, self.all_figures())

    def all_figures(self) -> dict[str, Any]:
        """The window's shape and price and the cause's own figures, as plain values: what
        `describe` reads, and what a WindowEvent carries."""
        return {"drafter": self.drafter, "depth": self.depth, "width": self.width,
                "rows": self.rows, "ms": finite_or_none(self.predicted_ms),
                "tokens": finite_or_none(self.expected_tokens), "explore": self.explore,
                **self.figures}

    def because(self, cause: Cause, explore: bool = False, **figures: Any) -> "Plan":
        """The same window for another reason."""
        return Plan(self.drafter, self.depth, self.width, self.rows, cause, self.predicted_ms,
                    self.expected_tokens, figures, explore)


def plain_plan(drafter: str, cause: Cause, predicted_ms: float = NAN, **figures: Any) -> Plan:
    return Plan(drafter, 0, 0, 1, cause, predicted_ms, 1.0, figures)


def price_figures(prefix: str, p: Plan) -> dict[str, Any]:
    """A priced window's figures under `prefix` (a takeover quotes each option's price)."""
    return {f"{prefix}_plain": p.plain, f"{prefix}_depth": p.depth, f"{prefix}_width": p.width,
            f"{prefix}_tokens": p.expected_tokens, f"{prefix}_ms": p.predicted_ms}


# ---------------------------------------------------------------------------------------------
# The words

TAKEOVER_LABELS = {"ngram": "n-gram tree", "plain": "plain decoding"}
FLOOR_TIMING, FLOOR_READY, FLOOR_PROBE, FLOOR_SPECULATING = "timing", "ready", "probe", "speculating"
FLOOR_BAD_PLAIN, FLOOR_BAD_WINDOW, FLOOR_NO_GAIN = "bad plain", "bad window", "no gain"
FLOOR_STOPPED = "stopped paying"


def _probes(n: int) -> str:
    return f"{n} probe window{'s' * (n != 1)}"


def floor_status(f: Mapping[str, Any]) -> str:
    """The AR floor's state in words (engine.cost.chooser.ArFloor.figures; `lead`: an untimed
    plain step that queues the timed one)."""
    if f.get("lead"):
        rest = {k: v for k, v in f.items() if k != "lead"}
        ahead = "an untimed plain step ahead of the timed one (queued behind it, as plain decoding runs)"
        return ahead if rest.get("status", FLOOR_TIMING) == FLOOR_TIMING else f"{ahead}; {floor_status(rest)}"
    st = f.get("status", FLOOR_TIMING)
    if st == FLOOR_READY:
        return f"plain step {f['ar_ms']:.3f} ms/token; probing windows"
    if st == FLOOR_SPECULATING:
        what = (f"the last {f['windows']} windows" if "windows" in f
                else _probes(f["probes"]))
        return (f"speculating: {what} cost {f['per_token']:.3f} ms/token "
                f"< plain {f['ar_ms']:.3f} ms/token")
    if st == FLOOR_PROBE:
        return f"{_probes(f['probes'])}: {f['per_token']:.3f} ms/token, not below plain yet"
    if st == FLOOR_BAD_PLAIN:
        return f"retired: invalid plain-step timing {f['ms']!r}"
    if st == FLOOR_BAD_WINDOW:
        return f"retired: invalid window timing ({f['ms']!r} ms, {f['tokens']} tokens)"
    if st == FLOOR_NO_GAIN:
        again = f"; probing again after {f['next']} plain steps" if f.get("next") else ""
        which = f"the cheapest of {_probes(f['probes'])}" if f.get("cheapest") else _probes(f["probes"])
        return (f"retired: {which} cost {f['best']:.3f} ms/token, "
                f"not below plain {f['ar_ms']:.3f} ms/token{again}")
    if st == FLOOR_STOPPED:
        return (f"retired: the last {f['windows']} windows cost {f['per_token']:.3f} ms/token, "
                f"not below plain {f['ar_ms']:.3f} ms/token; probing again after {f['next']} "
                "plain steps")
    return "timing one plain step"


def _takeover_estimate(f: Mapping[str, Any], kind: str) -> str:
    if not f.get(f"{kind}_seen"):
        return "not measured yet"
    tokens, ms = f[f"{kind}_tokens"], f[f"{kind}_ms"]
    rate = tokens / ms if ms > 0 else NAN
    return f"{tokens:.2f} tok / {ms:.1f} ms = {rate * 1e3:.1f} tok/s"


def _price(f: Mapping[str, Any], prefix: str) -> str:
    if f[f"{prefix}_plain"]:
        return "not paying"
    return (f"d{f[f'{prefix}_depth']} x w{f[f'{prefix}_width']} {f[f'{prefix}_tokens']:.2f} tok / "
            f"{f[f'{prefix}_ms']:.2f} ms")


def describe(cause: Cause | str, f: Mapping[str, Any], brief: bool = False) -> str:
    """A window's reason in words, from its cause and figures (Plan.all_figures). brief: without
    the figures in brackets, and a plain step's "plain decode: " said as "plain: " (the tree
    header's few words)."""
    text = _words(Cause(cause), f, brief)
    if brief and text.startswith("plain decode: "):
        text = "plain: " + text[len("plain decode: "):]
    return text


def _words(cause: Cause, f: Mapping[str, Any], brief: bool) -> str:
    def br(s: str) -> str:          # a part in brackets: left out of the brief form
        return "" if brief else s

    d, wd, drafter = f.get("depth", 0), f.get("width", 0), f.get("drafter", "none")
    if cause is Cause.FIXED:
        return "fixed depth and width"
    if cause is Cause.MODEL_FIXED:
        who = (f"the first {f['exit_layer']} layers" if drafter == "early-exit"
               else "the draft model")
        return (f"{who} draft a tree of depth {d}, width {wd}" if wd > 1
                else f"{who} draft a chain of {d}")
    if cause is Cause.NO_DRAFTER:
        return "plain decode: no drafter"
    if cause is Cause.LAST_TOKEN:
        return "plain decode: the last token of the request"
    if cause is Cause.AR_FLOOR:
        return f"AR floor: {floor_status(f)}"
    if cause is Cause.NO_CONTINUATION:
        return "plain decode: the drafter has no continuation"
    if cause is Cause.NO_FIT:
        return f"plain decode: no window fits in {f['max_rows']} rows"
    if cause is Cause.PRICED:
        ms, tokens, rows, d_ms = f["ms"], f["tokens"], f["rows"], f.get("draft_ms", 0.0)
        split = br(f" (draft {d_ms:.2f} + verify {ms - d_ms:.2f})") if d_ms else ""
        return (f"depth {d} x width {wd}{br(f' ({rows} rows)')}: "
                f"{tokens:.2f} tok expected in {ms:.2f} ms{split} = {tokens / ms:.4g} tok/ms vs "
                f"plain {f['ar_rate']:.4g} tok/ms")
    if cause is Cause.FIRST_TRY:
        return (f"first try of {drafter}: depth {d} x width {wd} could emit {d + 1} tok in "
                f"{f['ms']:.2f} ms, beating plain {1 / f['ar_rate']:.2f} ms/tok if every "
                "draft is accepted")
    if cause is Cause.NEVER_PAYS:
        return (f"plain decode: no {f['drafter']} window can pay on this device" + br(
            f", even with every draft accepted (at best {f['best_depth'] + 1} tok in "
            f"{f['best_ms']:.2f} ms, depth {f['best_depth']} x width {f['best_width']}; plain "
            f"{f['ar_ms']:.2f} ms a token)"))
    if cause is Cause.NOT_BEATING:
        tokens, ms = f["best_tokens"], f["best_ms"]
        return (f"plain decode: best window depth {f['best_depth']} x width {f['best_width']} "
                + br(f"({tokens:.2f} tok in {ms:.2f} ms = {tokens / ms:.4g} tok/ms) ")
                + f"does not beat plain {f['ar_rate']:.4g} tok/ms")
    if cause is Cause.TAKEOVER:
        labels = {**TAKEOVER_LABELS, "model": f["model"]}
        why = {"measuring": "measuring each choice", "best": "the most expected tokens per ms",
               "retry": f"re-trying a choice not used for {f.get('retry')} windows"}[f["why"]]
        if not f["match"]:
            why += "; no n-gram match in the context"
        prices = "; ".join(f"{labels[k]} {_takeover_estimate(f, k)}"
                           for k in ("ngram", "model", "plain"))
        return f"takeover: {labels[f['kind']]}, {why}" + br(f" ({prices})")
    if cause is Cause.PRICED_TAKEOVER:
        labels = {**TAKEOVER_LABELS, "model": f["model"]}
        why = "a first try" if f.get("explore") else "the most expected tokens per ms"
        ngram = _price(f, "ngram") if f["match"] else "no match"
        return (f"takeover: {labels[f['kind']]}, {why}" + br(
            f" (n-gram tree {ngram}; {f['model']} {_price(f, 'model')}; "
            f"plain {f['ar_ms']:.2f} ms)"))
    raise ValueError(f"no words for {cause!r}")


def finite_or_none(x: float) -> float | None:
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None
