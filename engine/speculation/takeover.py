"""Takeovers: each window, the n-gram tree, the model draft or a plain decoding step, whichever
is expected to emit the most tokens per millisecond.

The n-gram draft is nearly free (an index lookup) but only exists where the text repeats its
context, and then it is often long and right; the model draft always exists but costs a draft
pass per token (a draft model's, or the first K layers of the target's); a plain step costs one
one-row pass and emits one token. All three are priced on the one clock that matters, this
device's wall time: a window's cost is its draft time plus its verify time, both measured as the
run goes, and its yield the tokens it emitted.

    rate(kind) = E[tokens a window of this kind emits] / E[ms such a window takes]

Each estimate is an exponential moving average over the windows of that kind (every available
kind is tried MIN_TRIES times first). The n-gram tree is available only where the index has a
match. The best kind keeps the windows, but each other kind is re-tried after RETRY windows
without it, so a change in the text (a copy ends, a new one starts) is noticed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.cost.chooser import WindowChooser
from engine.cost.plan import Plan, price_figures

NGRAM, MODEL, PLAIN = "ngram", "model", "plain"
KINDS = (NGRAM, MODEL, PLAIN)
MIN_TRIES = 2
RETRY = 16
DECAY = 0.25          # weight of the newest window in the moving averages


@dataclass
class _Estimate:
    tokens: float = 0.0
    ms: float = 0.0
    seen: int = 0

    def add(self, tokens: int, ms: float) -> None:
        w = 1.0 if self.seen == 0 else DECAY
        self.tokens += w * (tokens - self.tokens)
        self.ms += w * (ms - self.ms)
        self.seen += 1

    @property
    def rate(self) -> float:
        """Expected tokens per millisecond (nan before any window)."""
        return self.tokens / self.ms if self.seen and self.ms > 0 else float("nan")


@dataclass
class Takeover:
    """Picks who drafts each window; `observe` feeds back what the window did."""

    model_name: str = "model"
    est: dict[str, _Estimate] = field(default_factory=lambda: {k: _Estimate() for k in KINDS})
    last_tried: dict[str, int] = field(default_factory=lambda: {k: -1 for k in KINDS})
    picks: dict[str, int] = field(default_factory=lambda: {k: 0 for k in KINDS})
    windows: int = 0

    def choose(self, has_match: bool) -> tuple[str, dict[str, Any]]:
        """(NGRAM, MODEL or PLAIN, the figures of why: engine.cost.plan, Cause.TAKEOVER)."""
        options = [k for k in KINDS if has_match or k != NGRAM]
        fresh = [k for k in options if self.est[k].seen < MIN_TRIES]
        if fresh:
            kind = min(fresh, key=lambda k: self.est[k].seen)
            why = "measuring"
        else:
            kind = max(options, key=lambda k: self.est[k].rate)
            why = "best"
            stale = [k for k in options if k != kind and self.windows - self.last_tried[k] > RETRY]
            if stale:
                kind = min(stale, key=lambda k: self.last_tried[k])
                why = "retry"
        self.last_tried[kind] = self.windows
        self.windows += 1
        self.picks[kind] += 1
        figures: dict[str, Any] = {"kind": kind, "why": why, "retry": RETRY, "match": has_match,
                                   "model": self.model_name}
        for k in KINDS:
            e = self.est[k]
            figures.update({f"{k}_seen": e.seen, f"{k}_tokens": e.tokens, f"{k}_ms": e.ms})
        return kind, figures

    def observe(self, kind: str, tokens: int, ms: float) -> None:
        """A window of `kind` emitted `tokens` in `ms` (draft + verify + commit)."""
        self.est[kind].add(tokens, ms)


def priced_takeover(chooser: WindowChooser, has_match: bool, model: str, ngram_depth: int,
                    model_depth: int, width: int) -> tuple[str, Plan, dict[str, Any]]:
    """The takeover on the cost model (--adaptive): each drafter's best window priced by the
    chooser (engine.cost.chooser: learned acceptance per depth, the profile's verify cost, the
    model's measured draft cost), against a plain step. No round of forced tries: a drafter is
    tried when its priced window beats the others, or once (the chooser's first try) when a
    window of it accepted in full could beat plain decoding; its price is learned from there.

    Returns (NGRAM | MODEL | PLAIN, the chooser's plan for it, the figures of why: engine.cost.
    plan, Cause.PRICED_TAKEOVER)."""
    ngram = chooser.choose("tree", available_depth=ngram_depth if has_match else 0,
                           available_width=width)
    drafted = chooser.choose(model, available_depth=model_depth, available_width=width)
    plain_rate = 1.0 / chooser.predicted_ms(1)
    options = [(PLAIN, None, plain_rate)]
    if not ngram.plain:
        options.append((NGRAM, ngram, ngram.tokens_per_ms))
    if not drafted.plain:
        options.append((MODEL, drafted, drafted.tokens_per_ms))
    kind, choice, _ = max(options, key=lambda o: o[2])
    if drafted.explore:               # a model drafter's first window: learn its acceptance
        kind, choice = MODEL, drafted
    figures = {"kind": kind, "match": has_match, "model": model, "ar_ms": chooser.predicted_ms(1),
               **price_figures("ngram", ngram), **price_figures("model", drafted)}
    return kind, ngram if choice is None else choice, figures   # plain: both plans are plain
