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

    def describe(self) -> str:
        if not self.seen:
            return "not measured yet"
        return f"{self.tokens:.2f} tok / {self.ms:.1f} ms = {self.rate * 1e3:.1f} tok/s"


@dataclass
class Takeover:
    """Picks who drafts each window; `observe` feeds back what the window did."""

    model_name: str = "model"
    est: dict[str, _Estimate] = field(default_factory=lambda: {k: _Estimate() for k in KINDS})
    last_tried: dict[str, int] = field(default_factory=lambda: {k: -1 for k in KINDS})
    picks: dict[str, int] = field(default_factory=lambda: {k: 0 for k in KINDS})
    windows: int = 0

    def label(self, kind: str) -> str:
        return {NGRAM: "n-gram tree", MODEL: self.model_name, PLAIN: "plain decoding"}[kind]

    def choose(self, has_match: bool) -> tuple[str, str]:
        """(NGRAM, MODEL or PLAIN, the reason in words) for the next window."""
        options = [k for k in KINDS if has_match or k != NGRAM]
        fresh = [k for k in options if self.est[k].seen < MIN_TRIES]
        if fresh:
            kind = min(fresh, key=lambda k: self.est[k].seen)
            why = "measuring each choice"
        else:
            kind = max(options, key=lambda k: self.est[k].rate)
            why = "the most expected tokens per ms"
            stale = [k for k in options if k != kind and self.windows - self.last_tried[k] > RETRY]
            if stale:
                kind = min(stale, key=lambda k: self.last_tried[k])
                why = f"re-trying a choice not used for {RETRY} windows"
        if not has_match:
            why += "; no n-gram match in the context"
        self.last_tried[kind] = self.windows
        self.windows += 1
        self.picks[kind] += 1
        prices = "; ".join(f"{self.label(k)} {self.est[k].describe()}" for k in KINDS)
        return kind, f"takeover: {self.label(kind)}, {why} ({prices})"

    def observe(self, kind: str, tokens: int, ms: float) -> None:
        """A window of `kind` emitted `tokens` in `ms` (draft + verify + commit)."""
        self.est[kind].add(tokens, ms)


def priced_takeover(chooser: Any, has_match: bool, model: str, ngram_depth: int,
                    model_depth: int, width: int) -> tuple[str, Any, str]:
    """The takeover on the cost model (--adaptive): each drafter's best window priced by the
    chooser (engine.cost.chooser: learned acceptance per depth, the profile's verify cost, the
    model's measured draft cost), against a plain step. No round of forced tries: a drafter is
    tried when its priced window beats the others, or once (the chooser's first try) when a
    window of it accepted in full could beat plain decoding; its price is learned from there.

    Returns (NGRAM | MODEL | PLAIN, the chooser's Choice for it, the reason in words)."""
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
    names = {NGRAM: "n-gram tree", MODEL: model, PLAIN: "plain decoding"}

    def price(c: Any) -> str:
        return ("not paying" if c.plain else
                f"d{c.depth} x w{c.width} {c.expected_tokens:.2f} tok / {c.predicted_ms:.2f} ms")

    reason = "a first try" if choice is not None and choice.explore else "the most expected tokens per ms"
    why = (f"takeover: {names[kind]}, {reason} (n-gram tree "
           f"{price(ngram) if has_match else 'no match'}; {model} {price(drafted)}; "
           f"plain {chooser.predicted_ms(1):.2f} ms)")
    return kind, ngram if choice is None else choice, why    # plain: both choices are plain
