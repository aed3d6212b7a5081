"""Takeovers: each window, the n-gram tree or the model draft, whichever is expected to emit more
tokens per millisecond.

The n-gram draft is nearly free (an index lookup) but only exists where the text repeats its
context, and then it is often long and right; the model draft always exists but costs a draft
pass per token (a draft model's, or the first K layers of the target's). Both are priced on the
one clock that matters, this device's wall time: a window's cost is its draft time plus its
verify time, both measured as the run goes, and its yield the tokens it emitted.

    rate(kind) = E[tokens a window of this kind emits] / E[ms such a window takes]

Each estimate is an exponential moving average over the windows of that kind (the prior until
the first ones are seen: every kind is tried at least MIN_TRIES times where a match exists). A
window without an n-gram match always goes to the model. The cheaper kind keeps the windows, but
the other is re-tried every RETRY windows so a change in the text (a copy ends, a new one starts)
is noticed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NGRAM, MODEL = "ngram", "model"
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
    """Picks the drafter of each window; `observe` feeds back what the window did."""

    model_name: str = "model"
    est: dict[str, _Estimate] = field(default_factory=lambda: {NGRAM: _Estimate(), MODEL: _Estimate()})
    since_other: int = 0          # windows since the kind that is not in favour was last tried
    picks: dict[str, int] = field(default_factory=lambda: {NGRAM: 0, MODEL: 0})

    def choose(self, has_match: bool) -> tuple[str, str]:
        """(NGRAM or MODEL, the reason in words) for the next window."""
        n, m = self.est[NGRAM], self.est[MODEL]
        if not has_match:
            kind, why = MODEL, "no n-gram match in the context"
        elif n.seen < MIN_TRIES or m.seen < MIN_TRIES:
            kind = NGRAM if n.seen <= m.seen else MODEL
            why = "measuring both drafters"
        else:
            best = NGRAM if n.rate >= m.rate else MODEL
            other = MODEL if best == NGRAM else NGRAM
            if self.since_other >= RETRY:
                kind, why = other, f"re-trying the other drafter (every {RETRY} windows)"
            else:
                kind, why = best, "the higher expected tokens per ms"
        self.since_other = 0 if kind != self._favourite() else self.since_other + 1
        self.picks[kind] += 1
        label = "n-gram tree" if kind == NGRAM else self.model_name
        return kind, (f"takeover: {label}, {why} (n-gram tree {n.describe()}; "
                      f"{self.model_name} {m.describe()})")

    def _favourite(self) -> str:
        n, m = self.est[NGRAM], self.est[MODEL]
        if not (n.seen and m.seen):
            return NGRAM if n.seen >= m.seen else MODEL
        return NGRAM if n.rate >= m.rate else MODEL

    def observe(self, kind: str, tokens: int, ms: float) -> None:
        """A window of `kind` emitted `tokens` in `ms` (draft + verify + commit)."""
        self.est[kind].add(tokens, ms)
