"""Pricing speculative windows: which (depth, width) to draft next.

Pick the draft depth k that maximises expected emitted tokens per unit of window cost, as
Leviathan et al. 2023 choose their draft length γ (their E = (1 - α^(γ+1)) / (1 - α) is the
formula below with one acceptance rate α at every depth), and fall back to one token per step when
no window beats it (the AR floor, which measures that instead, is engine.cost.floor).

Expected tokens. A window of depth k emits E(k) = 1 + sum_{j=1..k} prod_{i<=j} a_i, with
a_d = P(a node at depth d is accepted | its parent was) (engine.cost.acceptance).

For a tree of width w (the top-w continuations, merged into a trie) the same formula holds with
a_d(w) = P(some branch at depth d is accepted | the path to depth d-1 was): the tree is one
path from the verifier's point of view, only with better odds per depth. Each width the chooser
has tried keeps its own per-depth exponential moving averages of those odds, so the learned
numbers already include how correlated the branches really are and how often the trie merges
them. A width (or depth) not tried yet gets a cold-start guess:

  * another width w0 observed at this depth: treat its estimate as "any of e(w0) independent
    tries", recover the per-try odds p = 1 - (1 - a)^(1/e(w0)), and re-project to
    a_d(w) = 1 - (1 - p)^e(w), with e(w) = 1 + (w - 1) * (1 - correlation). The branches are the
    top matches of one context, so when the best one is wrong the next ones are often wrong the
    same way: correlation 0 treats them as independent, 1 makes extra branches worthless. The
    default 0.5 is a guess that the measured per-width averages replace after one window.
  * else the estimate at depth d-1 for this width (acceptance past a long agreed prefix tends to
    stay high; a fixed prior would cap how deep the chooser ever looks);
  * else the prior, re-projected to width w the same way.

Cost. rows = 1 + depth * width, priced on the cost profile (an upper bound: the trie merges
shared prefixes, so real trees are smaller). Measured window times fed back to `observe` keep an
additive per-pass overhead (drafting, mask building, commit) for plain steps and windows apart;
the profile prices the verify pass only (engine.cost.clock).

Model drafts. A drafter registered with a draft cost (`register(name, rows_of, draft_ms)`: an
early exit or a draft model, engine.cost.draft_cost) pays its draft passes too:

    window ms = draft_ms(depth, width) x r + verify_ms(rows) + overhead

where r, the measured draft time over the predicted one, is learned from every model-drafted
window (its propose time) as the overhead is, so a draft priced from a reference or a busy
probe is corrected after one window. The n-gram drafters' propose time stays in the overhead.
A drafter none of whose windows could beat plain decoding even with every draft accepted is not
priced again for HOLD windows (an early exit of 28 of 30 layers on a GPU: the verdict is the
same every window, and pricing it each time cost a noticeable share of a plain step: BENCHMARKS.md,
"Speculation and tuning timings (moved from code comments)").
"""

from __future__ import annotations

from typing import Any, Callable

from engine.cost.acceptance import AcceptanceModel, path_tokens
from engine.cost.clock import WindowClock
from engine.cost.plan import Cause, Plan, plain_plan
from engine.cost.profile import CostProfile
from engine.errors import ParameterError

HOLD = 32          # windows a "can never pay" verdict stands before the drafter is priced again


class WindowChooser:
    """Picks (depth, width) per window to maximise expected emitted tokens per ms.

    ema: weight of the newest window in the per-depth acceptance averages. prior: a_d before any
    observation (width 1). relax: per plain step, how far every estimate of that drafter moves
    back toward what its record says, so a drafter written off early gets re-tried once the text
    may have changed. The record is the cell's own acceptance, hits / trials, shrunk toward the
    prior by PRIOR_TRIALS pseudo-trials, and it fades by the same factor each plain step: a
    drafter with a few failures drifts back to the prior (after ~35 plain steps at 0.02 it has
    regained half the gap), one that failed dozens of times (point-mass n-gram drafts under
    sampling: 1-6% accepted) is re-tried far less often. overhead_ema: weight of the newest
    measured time in the overhead averages. max_depth / max_width: the largest window sizes it
    considers (a call may name smaller ones: what the drafter and the settings allow now).
    """

    def __init__(self, profile: CostProfile, max_depth: int, max_width: int, ema: float = 0.3,
                 prior: float = 0.5, correlation: float = 0.5, relax: float = 0.02,
                 overhead_ema: float = 0.1, max_rows: int | None = None,
                 rows_of: Callable[[int, int], int] | None = None) -> None:
        if max_depth < 1 or max_width < 1:
            raise ParameterError(f"the chooser needs max depth and width >= 1, got {max_depth} and {max_width}")
        for name, v in (("ema", ema), ("relax", relax), ("overhead_ema", overhead_ema)):
            if not 0.0 <= v <= 1.0:
                raise ParameterError(f"chooser {name} must be in [0, 1], got {v}")
        if not 0.0 <= prior <= 1.0 or not 0.0 <= correlation <= 1.0:
            raise ParameterError(f"chooser prior and correlation must be in [0, 1], got {prior} and {correlation}")
        self.profile = profile
        self.max_depth = max_depth
        self.max_width = max_width
        self.model = AcceptanceModel(ema, prior, correlation, relax)
        self.clock = WindowClock(profile, overhead_ema)
        limits = [m for m in (profile.max_rows, max_rows) if m is not None]
        self.max_rows = min(limits) if limits else None
        # verify rows of a window of depth k and width w: the drafter's shape (default k*w + 1)
        self.rows_of = rows_of or (lambda k, w: 1 + k * w)
        self._rows_by: dict[str, Callable[[int, int], int]] = {}
        self._observed = 0                       # windows fed back so far
        self._held: dict[tuple, tuple[int, Plan]] = {}   # "can never pay" until window n

    def register(self, drafter: str, rows_of: Callable[[int, int], int] | None = None,
                 draft_ms: Callable[[int, int], float] | None = None) -> None:
        """A drafter's own window shape (verify rows of depth x width) and, for a model
        drafter, the predicted ms of drafting such a window (engine.cost.draft_cost)."""
        if rows_of is not None:
            self._rows_by[drafter] = rows_of
        if draft_ms is not None:
            self.clock.register(drafter, draft_ms)

    def rows_for(self, drafter: str, depth: int, width: int) -> int:
        return self._rows_by.get(drafter, self.rows_of)(depth, width)

    # -- estimates
    def acceptance(self, drafter: str, width: int, depth: int) -> float:
        """Estimated P(the window's path continues through depth `depth` | it reached depth-1)."""
        return self.model.acceptance(drafter, width, depth)

    def expected_tokens(self, drafter: str, depth: int, width: int) -> float:
        """E = 1 + sum_{j<=depth} prod_{i<=j} a_i(width)."""
        return path_tokens([self.acceptance(drafter, width, d) for d in range(1, depth + 1)])[-1]

    def draft_ms(self, drafter: str, depth: int, width: int) -> float:
        return self.clock.draft_ms(drafter, depth, width)

    def predicted_ms(self, rows: int) -> float:
        return self.clock.predicted_ms(rows)

    def candidates(self, drafter: str, available_depth: int | None = None,
                   available_width: int | None = None) -> list[Plan]:
        """Every window the chooser may pick, priced. available_*: the most the drafter can
        supply now, at most max_depth / max_width."""
        kmax = self.max_depth if available_depth is None else min(self.max_depth, available_depth)
        wmax = self.max_width if available_width is None else min(self.max_width, available_width)
        # E(k, w) for every k from one running product per width: this runs before every
        # window, so it must cost microseconds, not a pass over all cells per (k, w)
        expected = {w: path_tokens([self.acceptance(drafter, w, k) for k in range(1, kmax + 1)])
                    for w in range(1, wmax + 1)}
        out = []
        for k in range(1, kmax + 1):
            for w in range(1, wmax + 1):
                rows = self.rows_for(drafter, k, w)
                if self.max_rows is not None and rows > self.max_rows:
                    continue
                ms = self.predicted_ms(rows) + self.draft_ms(drafter, k, w)
                out.append(Plan(drafter, k, w, rows, Cause.PRICED, ms, expected[w][k]))
        return out

    def choose(self, drafter: str, available_depth: int | None = None,
               available_width: int | None = None) -> Plan:
        """The next window for `drafter`. available_*: what the drafter can supply (None: any)."""
        ar_ms = self.predicted_ms(1)
        ar_rate = 1.0 / ar_ms
        if available_depth == 0 or available_width == 0:
            return plain_plan(drafter, Cause.NO_CONTINUATION, ar_ms)
        key = (drafter, available_depth, available_width)
        held = self._held.get(key)
        if held is not None and held[0] > self._observed:
            return held[1]
        cands = self.candidates(drafter, available_depth, available_width)
        best: Plan | None = None
        for c in cands:
            if best is None or c.tokens_per_ms > best.tokens_per_ms * (1 + 1e-12):
                best = c
        if best is None:
            return plain_plan(drafter, Cause.NO_FIT, ar_ms, max_rows=self.max_rows)
        if best.tokens_per_ms > ar_rate:
            return best.because(Cause.PRICED, ar_rate=ar_rate,
                                draft_ms=self.draft_ms(drafter, best.depth, best.width))
        # windows that would beat plain decoding if every draft node were accepted
        can_pay = [c for c in cands if (c.depth + 1) / c.predicted_ms > ar_rate]
        trial = self._first_try(drafter, can_pay, ar_rate)
        if trial is not None:
            return trial
        if not can_pay:
            # no acceptance rate makes this drafter pay at these costs: say so, and spare the
            # pricing until the costs may have moved (HOLD more windows observed)
            top = max(cands, key=lambda c: (c.depth + 1) / c.predicted_ms)
            plan = plain_plan(drafter, Cause.NEVER_PAYS, ar_ms,
                              best_depth=top.depth, best_width=top.width,
                              best_ms=top.predicted_ms, ar_ms=ar_ms)
            self._held[key] = (self._observed + HOLD, plan)
            return plan
        return plain_plan(drafter, Cause.NOT_BEATING, ar_ms, best_depth=best.depth,
                          best_width=best.width, best_tokens=best.expected_tokens,
                          best_ms=best.predicted_ms, ar_rate=ar_rate)

    def _first_try(self, drafter: str, can_pay: list[Plan], ar_rate: float) -> Plan | None:
        """A model drafter never observed is priced at the prior alone, which may be far off
        (a good draft model accepts 80-90%): try it once if some window of it could beat plain
        decoding were every draft accepted (`can_pay`); one that cannot is never tried (its
        draft passes alone cost more than the tokens they could save)."""
        if not can_pay or not self.clock.drafts(drafter) or self.model.observed(drafter):
            return None
        c = max(can_pay, key=lambda c: c.tokens_per_ms)
        return c.because(Cause.FIRST_TRY, explore=True, ar_rate=ar_rate)

    def choose_among(self, available: dict[str, int | None]) -> tuple[str, Plan]:
        """Best drafter and window across drafters, all priced in tokens per ms on the same
        profile (a drafter takes over only if it pays on the same clock). available: drafter ->
        its available depth (None: unlimited)."""
        if not available:
            raise ParameterError("choose_among needs at least one drafter")
        picks = [(name, self.choose(name, depth)) for name, depth in available.items()]
        return max(picks, key=lambda p: (p[1].tokens_per_ms, -p[1].rows))

    # -- feedback
    def observe(self, drafter: str, depth: int, width: int, accepted_len: int, rejected: bool,
                measured_ms: float | None = None, rows: int | None = None,
                draft_ms: float | None = None) -> None:
        """Feed one finished window back.

        depth/width: what the window was built with (depth 0: a plain step). accepted_len: draft
        nodes on the accepted path. rejected: the window ended on a rejected node (a correction
        token); False when the path ran to a leaf (a bonus token), which says nothing about the
        depth below it. measured_ms: the window's wall time, propose + verify + commit.
        rows: the verify rows actually used (default 1 + depth * width). draft_ms: for a model
        drafter, the measured draft time inside measured_ms (it teaches the draft ratio, and is
        taken out of the overhead).
        """
        if depth < 0 or not 0 <= accepted_len <= max(depth, 0):
            raise ParameterError(f"accepted length {accepted_len} does not fit a window of depth {depth}")
        rows = (1 + depth * width) if rows is None else rows
        self._observed += 1
        self.clock.measured(drafter, depth, width, rows, measured_ms, draft_ms)
        if depth == 0:
            # a plain step relaxes its drafter's estimates; under a takeover a plain step
            # (drafter "none") relaxes every drafter's, so one written off is re-tried later
            self.model.relax_toward_record(drafter)
            return
        if width < 1:
            raise ParameterError(f"a window of depth {depth} needs width >= 1, got {width}")
        self.model.learn(drafter, depth, width, accepted_len, rejected)

    def observe_event(self, event: Any) -> None:
        """Feed a WindowEvent (or its dict) back: the decoder's one-line hook."""
        # read the few fields it needs; event.to_dict() would deep-copy every row per window
        d = event if isinstance(event, dict) else {
            k: getattr(event, k) for k in ("tokens", "drafter", "window_ms", "depths", "width",
                                           "accepted_path", "emitted_kinds", "propose_ms")}
        n_nodes = len(d["tokens"])
        if n_nodes == 0:
            self.observe(d["drafter"], 0, 0, 0, False, measured_ms=d.get("window_ms"), rows=1)
            return
        # keyed by the width the window was asked for: what it learns is what asking buys
        self.observe(d["drafter"], max(d["depths"]), max(int(d.get("width") or 1), 1),
                     len(d["accepted_path"]),
                     rejected="correction" in d["emitted_kinds"],
                     measured_ms=d.get("window_ms"), rows=1 + n_nodes,
                     draft_ms=d.get("propose_ms"))

    def reset(self) -> None:
        """Forget everything learned (a new session; estimates carry over between requests)."""
        self.model.clear()
        self.clock.clear()
        self._held.clear()
