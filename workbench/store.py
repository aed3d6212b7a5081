"""The session's events and the figures views derive from them. Plain Python: no Qt, no torch.

A live run appends one `WindowEvent` per window; a recording loads the same list. Every view draws
"the state up to window i" from here, so scrubbing the timeline and replaying a recording give the
same pictures as the live run did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.speculation.events import WindowEvent


def theory_tokens_per_pass(alpha: float, gamma: int) -> float:
    """Expected tokens one window emits with `gamma` drafts, each accepted i.i.d. with prob. alpha:
    (1 − α^(γ+1)) / (1 − α)  (Leviathan et al., 2023, eq. 1)."""
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


@dataclass(frozen=True)
class DepthAcceptance:
    depths: list[int]          # 1 .. max proposed depth
    reach: list[float]         # P(accepted path reaches depth d | a draft of depth d was proposed)
    windows: list[int]         # how many windows proposed depth d
    alpha: float | None        # per-draft acceptance, maximum-likelihood over all windows
    measured_tokens: list[float]  # 1 + Σ_{d'≤γ} reach[d'] for γ = 0 .. max depth
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
        evs = self.events[: upto + 1]
        max_d = max((max(e.depths) for e in evs if e.depths), default=0)
        proposed = [0] * (max_d + 1)
        reached = [0] * (max_d + 1)
        succ = fail = 0
        for e in evs:
            if not e.depths:
                continue
            d_max, length = max(e.depths), len(e.accepted_path)
            for d in range(1, d_max + 1):
                proposed[d] += 1
                if length >= d:
                    reached[d] += 1
            # each window is a run of Bernoulli trials down the tree: `length` successes, then one
            # failure unless the whole proposed depth was accepted
            succ += length
            fail += 1 if length < d_max else 0
        alpha = succ / (succ + fail) if succ + fail else None
        depths = list(range(1, max_d + 1))
        reach = [reached[d] / proposed[d] if proposed[d] else 0.0 for d in depths]
        measured = [1.0]
        for r in reach:
            measured.append(measured[-1] + r)
        theory = [theory_tokens_per_pass(alpha, g) for g in range(max_d + 1)] if alpha is not None else []
        return DepthAcceptance(depths, reach, [proposed[d] for d in depths], alpha, measured, theory)

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
