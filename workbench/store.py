"""The session's events and the figures views derive from them. Plain Python: no Qt, no torch.

A live run appends one `WindowEvent` per window; a recording loads the same list. Every view draws
"the state up to window i" from here, so scrubbing the timeline and replaying a recording give the
same pictures as the live run did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.cost.acceptance import DepthTally, expected_tokens, path_tokens
from engine.speculation.events import WindowEvent


@dataclass(frozen=True)
class DepthAcceptance:
    """Acceptance by depth as the run report counts it (engine.cost.acceptance.DepthTally)."""

    depths: list[int]          # 1 .. deepest depth tried
    rates: list[float]         # a_d = P(accepted at depth d | a node at depth d was tried): the
                               # report's accept_rate_by_depth
    reach: list[float]         # P(the accepted path reaches depth d) = prod_{i<=d} a_i
    windows: list[int]         # how many windows tried depth d
    alpha: float | None        # per-draft acceptance, maximum-likelihood over all windows
    measured_tokens: list[float]  # 1 + Σ_{j≤γ} Π_{d≤j} a_d for γ = 0 .. max depth
    theory_tokens: list[float]    # (1 − α^(γ+1)) / (1 − α) for γ = 0 .. max depth


@dataclass
class EventStore:
    """Events of one session plus the header a recording carries (settings, model, device)."""

    header: dict[str, Any] = field(default_factory=dict)
    events: list[WindowEvent] = field(default_factory=list)
    report: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.events)

    def __getitem__(self, i: int) -> WindowEvent:
        return self.events[i]

    def append(self, ev: WindowEvent) -> None:
        self.events.append(ev)

    def clear(self) -> None:
        self.events.clear()
        self.header = {}
        self.report = None

    # ---- derived figures, always "up to and including window `upto`" ---------------------------

    def acceptance(self, upto: int) -> DepthAcceptance:
        tally = DepthTally()
        for e in self.events[: upto + 1]:
            tally.add(e.parents, e.accepted_path)
        rates, alpha = tally.rates(), tally.alpha
        measured = path_tokens(rates)                      # 1 + the running sum of reach
        reach = [b - a for a, b in zip(measured, measured[1:])]
        theory = [expected_tokens(alpha, g) for g in range(len(rates) + 1)] if alpha is not None else []
        return DepthAcceptance(list(range(1, len(rates) + 1)), rates, reach, list(tally.tried),
                               alpha, measured, theory)

    def series(self, upto: int) -> dict[str, list[float]]:
        """Per-window series for the stats and roofline views."""
        evs = self.events[: upto + 1]
        out: dict[str, list[float]] = {k: [] for k in (
            "index", "elapsed_s", "tok_s", "window_tokens", "window_tok_s", "tokens_per_pass",
            "rows", "window_ms", "verify_ms")}
        for e in evs:
            n = len(e.emitted)
            out["index"].append(e.index)
            out["elapsed_s"].append(e.stats.elapsed_s)
            out["tok_s"].append(e.stats.tok_s)
            out["window_tokens"].append(n)
            out["window_tok_s"].append(1000.0 * n / e.window_ms if e.window_ms > 0 else 0.0)
            out["tokens_per_pass"].append(e.stats.tokens_per_pass)
            out["rows"].append(len(e.rows))
            out["window_ms"].append(e.window_ms)
            out["verify_ms"].append(e.verify_ms)
        return out

    def observed_ar_ms(self, upto: int, at_least: int = 1) -> float | None:
        """Median cost of one-row windows (plain decode steps) seen so far, if at least
        `at_least` were."""
        ms = sorted(e.window_ms for e in self.events[: upto + 1] if len(e.rows) == 1 and e.window_ms > 0)
        return ms[len(ms) // 2] if len(ms) >= max(1, at_least) else None

    def near_tie_windows(self, upto: int) -> int:
        """Windows through `upto` with a near-tie row (a choice within rounding noise)."""
        return sum(1 for e in self.events[: upto + 1] if any(r.near_tie for r in e.rows))

    def decode_tok_s(self, upto: int) -> float | None:
        """Tokens emitted per second of window time through window `upto` (prefill excluded)."""
        evs = self.events[: upto + 1]
        ms = sum(e.window_ms for e in evs)
        return 1000.0 * sum(len(e.emitted) for e in evs) / ms if ms > 0 else None

    def emitted_upto(self, upto: int) -> list[tuple[int, str, str, int]]:
        """(token id, text, kind, window index) of every token emitted through window `upto`."""
        out = []
        for e in self.events[: upto + 1]:
            out.extend((t, s, k, e.index) for t, s, k in zip(e.emitted, e.emitted_texts, e.emitted_kinds))
        return out
