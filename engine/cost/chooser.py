"""Pricing speculative windows: which (depth, width) to draft next, and the AR floor.

Pick the draft depth k that maximises expected emitted tokens per unit of window cost, as
Leviathan et al. 2023 choose their draft length γ (their E = (1 - α^(γ+1)) / (1 - α) is the
formula below with one acceptance rate α at every depth), and fall back to one token per step when
no window beats it. The AR floor (`ArFloor`) times one plain step, probes up to three windows and
retires the request to plain decoding when none was strictly cheaper per emitted token.

Expected tokens. A window always emits one token of the target's own (a correction or a bonus),
plus every accepted draft node along the accepted path. With a_d = P(a node at depth d is
accepted | its parent was), a linear window of depth k emits

    E(k) = 1 + sum_{j=1..k} prod_{i<=j} a_i

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
the profile prices the verify pass only.

Model drafts. A drafter registered with a draft cost (`register(name, rows_of, draft_ms)`: an
early exit or a draft model, engine.cost.draft_cost) pays its draft passes too:

    window ms = draft_ms(depth, width) x r + verify_ms(rows) + overhead

where r, the measured draft time over the predicted one, is learned from every model-drafted
window (its propose time) as the overhead is, so a draft priced from a reference or a busy
probe is corrected after one window. The n-gram drafters' propose time stays in the overhead.
A drafter none of whose windows could beat plain decoding even with every draft accepted is not
priced again for HOLD windows (an early exit of 28 of 30 layers on a GPU: the verdict is the
same every window, and pricing it each time cost ~5% of a plain step's time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from engine.cost.profile import CostProfile
from engine.errors import ParameterError

PLAIN_REASON_NO_DRAFT = "plain decode: the drafter has no continuation"
HOLD = 32          # windows a "can never pay" verdict stands before the drafter is priced again
PRIOR_TRIALS = 4.0  # the prior's weight, in trials, in the record plain steps relax toward


@dataclass(frozen=True)
class Choice:
    """The chooser's pick for the next window. depth 0 (width 0) = one plain decode step."""

    depth: int
    width: int
    rows: int                   # verify rows the window will cost (1 + depth * width)
    predicted_ms: float
    expected_tokens: float
    reason: str
    explore: bool = False       # a first try of a model drafter priced only at the prior

    @property
    def plain(self) -> bool:
        return self.depth == 0

    @property
    def tokens_per_ms(self) -> float:
        return self.expected_tokens / self.predicted_ms


def _eff(width: int, correlation: float) -> float:
    return 1.0 + (width - 1) * (1.0 - correlation)


def _reproject(a: float, w_from: int, w_to: int, correlation: float) -> float:
    """Acceptance of 'any of w_from branches' -> of 'any of w_to branches' (module docstring)."""
    if w_from == w_to:
        return a
    a = min(max(a, 0.0), 1.0)
    if a >= 1.0:
        return 1.0
    p = 1.0 - (1.0 - a) ** (1.0 / _eff(w_from, correlation))
    return 1.0 - (1.0 - p) ** _eff(w_to, correlation)


class _RowLine:
    """A window's time above the profile as a + b x rows, from exponentially weighted moments
    of the measured windows. Why a slope: the profile times bare passes, while a sampled (or
    penalized, or shown) window also fetches every row's logits and scores each on the host, a
    cost that grows with rows (on the H200 it rivals the pass itself at 25 rows). b stays 0
    until the rows measured spread over at least MIN_SPREAD (a slope from one size is a guess)."""

    MIN_SPREAD = 2.0        # rows, standard deviation

    def __init__(self) -> None:
        self.w = self.r = self.g = self.rr = self.rg = 0.0
        self.seen = 0

    def add(self, rows: float, gap: float, ema: float) -> None:
        k = 1.0 - ema
        self.w, self.r, self.g = k * self.w + ema, k * self.r + ema * rows, k * self.g + ema * gap
        self.rr, self.rg = k * self.rr + ema * rows * rows, k * self.rg + ema * rows * gap
        self.seen += 1

    def at(self, rows: float) -> float:
        mr, mg = self.r / self.w, self.g / self.w
        var = self.rr / self.w - mr * mr
        b = (self.rg / self.w - mr * mg) / var if var >= self.MIN_SPREAD ** 2 else 0.0
        b = max(0.0, b)
        return mg + b * (rows - mr)


@dataclass
class _Cell:
    value: float
    count: int = 0
    hits: float = 0.0           # accepted / tried at this depth, both fading at each plain step
    trials: float = 0.0


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
    measured time in the overhead averages.
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
        self.ema = ema
        self.prior = prior
        self.correlation = correlation
        self.relax = relax
        self.overhead_ema = overhead_ema
        limits = [m for m in (profile.max_rows, max_rows) if m is not None]
        self.max_rows = min(limits) if limits else None
        # verify rows of a window of depth k and width w: the drafter's shape (default k*w + 1)
        self.rows_of = rows_of or (lambda k, w: 1 + k * w)
        self._rows_by: dict[str, Callable[[int, int], int]] = {}
        self._draft_by: dict[str, Callable[[int, int], float]] = {}   # model drafters' draft ms
        self._draft_ratio: dict[str, float] = {}                      # measured / predicted
        self._cells: dict[tuple[str, int, int], _Cell] = {}     # (drafter, width, depth)
        self._overhead: dict[str, float] = {}    # "plain": a plain step's ms above the profile
        self._observed = 0                       # windows fed back so far
        self._window_gap = _RowLine()            # windows' ms above the profile, by rows
        self._held: dict[tuple, tuple[int, Choice]] = {}   # "can never pay" until window n

    def register(self, drafter: str, rows_of: Callable[[int, int], int] | None = None,
                 draft_ms: Callable[[int, int], float] | None = None) -> None:
        """A drafter's own window shape (verify rows of depth x width) and, for a model
        drafter, the predicted ms of drafting such a window (engine.cost.draft_cost)."""
        if rows_of is not None:
            self._rows_by[drafter] = rows_of
        if draft_ms is not None:
            self._draft_by[drafter] = draft_ms

    def rows_for(self, drafter: str, depth: int, width: int) -> int:
        return self._rows_by.get(drafter, self.rows_of)(depth, width)

    def draft_ms(self, drafter: str, depth: int, width: int) -> float:
        """Predicted draft time of a window (0 for n-gram drafters: their propose time is
        overhead), corrected by what this drafter's windows measured."""
        f = self._draft_by.get(drafter)
        if f is None or depth < 1:
            return 0.0
        return f(depth, width) * self._draft_ratio.get(drafter, 1.0)

    # -- estimates
    def acceptance(self, drafter: str, width: int, depth: int) -> float:
        """Estimated P(the window's path continues through depth `depth` | it reached depth-1)."""
        cell = self._cells.get((drafter, width, depth))
        if cell is not None:
            return cell.value
        same_depth = [(c.count, -abs(w - width), w, c.value) for (dr, w, d), c in self._cells.items()
                      if dr == drafter and d == depth]
        if same_depth:
            _, _, w0, a0 = max(same_depth)
            return _reproject(a0, w0, width, self.correlation)
        if depth > 1:
            return self.acceptance(drafter, width, depth - 1)
        return _reproject(self.prior, 1, width, self.correlation)

    def expected_tokens(self, drafter: str, depth: int, width: int) -> float:
        """E = 1 + sum_{j<=depth} prod_{i<=j} a_i(width)."""
        total, run = 1.0, 1.0
        for d in range(1, depth + 1):
            run *= self.acceptance(drafter, width, d)
            total += run
        return total

    def predicted_ms(self, rows: int) -> float:
        base = self.profile.ms(rows)
        if rows > 1 and not self._window_gap.seen and "plain_ratio" in self._overhead:
            # no window measured yet: a profile measured on a busier (or quieter) machine is off
            # for windows as it is for plain steps, so scale by what plain steps showed (else a
            # pessimistic profile keeps every window out, and none is ever measured)
            return base * self._overhead["plain_ratio"]
        if rows == 1:
            extra = self._overhead.get("plain", 0.0)
        else:
            extra = self._window_gap.at(rows) if self._window_gap.seen else 0.0
        # an overhead learned against a pessimistic profile may be negative; never price below 10%
        return max(0.1 * base, base + extra)

    def candidates(self, drafter: str, available_depth: int | None = None,
                   available_width: int | None = None) -> list[Choice]:
        """Every window the chooser may pick, priced (for the workbench's pricing view)."""
        kmax = self.max_depth if available_depth is None else min(self.max_depth, available_depth)
        wmax = self.max_width if available_width is None else min(self.max_width, available_width)
        # E(k, w) for every k from one running product per width: this runs before every
        # window, so it must cost microseconds, not a pass over all cells per (k, w)
        expected: dict[tuple[int, int], float] = {}
        for w in range(1, wmax + 1):
            total, run = 1.0, 1.0
            for k in range(1, kmax + 1):
                run *= self.acceptance(drafter, w, k)
                total += run
                expected[k, w] = total
        out = []
        for k in range(1, kmax + 1):
            for w in range(1, wmax + 1):
                rows = self.rows_for(drafter, k, w)
                if self.max_rows is not None and rows > self.max_rows:
                    continue
                ms = self.predicted_ms(rows) + self.draft_ms(drafter, k, w)
                out.append(Choice(k, w, rows, ms, expected[k, w], ""))
        return out

    def best_possible(self, drafter: str, available_depth: int | None = None,
                      available_width: int | None = None) -> float:
        """Tokens per ms of the drafter's best window if every draft node were accepted (k + 1
        tokens): an upper bound, so a drafter below plain decoding here can never pay."""
        cands = self.candidates(drafter, available_depth, available_width)
        return max(((c.depth + 1) / c.predicted_ms for c in cands), default=0.0)

    def choose(self, drafter: str, available_depth: int | None = None,
               available_width: int | None = None) -> Choice:
        """The next window for `drafter`. available_*: what the drafter can supply (None: any)."""
        ar_ms = self.predicted_ms(1)
        ar_rate = 1.0 / ar_ms
        plain = Choice(0, 0, 1, ar_ms, 1.0, "")
        if available_depth == 0 or available_width == 0:
            return _with_reason(plain, PLAIN_REASON_NO_DRAFT)
        key = (drafter, available_depth, available_width, self.max_depth, self.max_width)
        held = self._held.get(key)
        if held is not None and held[0] > self._observed:
            return held[1]
        cands = self.candidates(drafter, available_depth, available_width)
        best: Choice | None = None
        for c in cands:
            if best is None or c.tokens_per_ms > best.tokens_per_ms * (1 + 1e-12):
                best = c
        if best is None:
            return _with_reason(plain, f"plain decode: no window fits in {self.max_rows} rows")
        if best.tokens_per_ms > ar_rate:
            d_ms = self.draft_ms(drafter, best.depth, best.width)
            split = f" (draft {d_ms:.2f} + verify {best.predicted_ms - d_ms:.2f})" if d_ms else ""
            return _with_reason(best, (
                f"depth {best.depth} x width {best.width} ({best.rows} rows): "
                f"{best.expected_tokens:.2f} tok expected in {best.predicted_ms:.2f} ms{split} = "
                f"{best.tokens_per_ms:.4g} tok/ms vs plain {ar_rate:.4g} tok/ms"))
        # windows that would beat plain decoding if every draft node were accepted
        can_pay = [c for c in cands if (c.depth + 1) / c.predicted_ms > ar_rate]
        trial = self._first_try(drafter, can_pay, ar_rate)
        if trial is not None:
            return trial
        if not can_pay:
            # no acceptance rate makes this drafter pay at these costs: say so, and spare the
            # pricing until the costs may have moved (HOLD more windows observed)
            top = max(cands, key=lambda c: (c.depth + 1) / c.predicted_ms)
            choice = _with_reason(plain, (
                f"plain decode: no {drafter} window can pay on this device, even with every draft "
                f"accepted (at best {top.depth + 1} tok in {top.predicted_ms:.2f} ms, depth "
                f"{top.depth} x width {top.width}; plain {ar_ms:.2f} ms a token)"))
            self._held[key] = (self._observed + HOLD, choice)
            return choice
        return _with_reason(plain, (
            f"plain decode: best window depth {best.depth} x width {best.width} "
            f"({best.expected_tokens:.2f} tok in {best.predicted_ms:.2f} ms = {best.tokens_per_ms:.4g} tok/ms) "
            f"does not beat plain {ar_rate:.4g} tok/ms"))

    def _first_try(self, drafter: str, can_pay: list[Choice], ar_rate: float) -> Choice | None:
        """A model drafter never observed is priced at the prior alone, which may be far off
        (a good draft model accepts 80-90%): try it once if some window of it could beat plain
        decoding were every draft accepted (`can_pay`); one that cannot is never tried (its
        draft passes alone cost more than the tokens they could save)."""
        if not can_pay or drafter not in self._draft_by or any(
                c.count for (dr, _w, _d), c in self._cells.items() if dr == drafter):
            return None
        c = max(can_pay, key=lambda c: c.tokens_per_ms)
        return Choice(c.depth, c.width, c.rows, c.predicted_ms, c.expected_tokens,
                      f"first try of {drafter}: depth {c.depth} x width {c.width} could emit "
                      f"{c.depth + 1} tok in {c.predicted_ms:.2f} ms, beating plain "
                      f"{1 / ar_rate:.2f} ms/tok if every draft is accepted", explore=True)

    def choose_among(self, available: dict[str, int | None]) -> tuple[str, Choice]:
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
        drafted = drafter in self._draft_by and depth >= 1 and _valid(draft_ms)
        if drafted:
            predicted = self._draft_by[drafter](depth, width)
            if predicted > 0:
                old_r = self._draft_ratio.get(drafter)
                r = draft_ms / predicted
                self._draft_ratio[drafter] = r if old_r is None else old_r + self.overhead_ema * (r - old_r)
        if measured_ms is not None and math.isfinite(measured_ms) and measured_ms > 0:
            gap = measured_ms - (draft_ms if drafted else 0.0) - self.profile.ms(rows)
            if rows > 1:
                self._window_gap.add(rows, gap, self.overhead_ema)
            else:
                # the first measurement sets the overhead outright; later ones average in
                old = self._overhead.get("plain")
                self._overhead["plain"] = gap if old is None else old + self.overhead_ema * (gap - old)
                if self.profile.ms(1) > 0:
                    self._overhead["plain_ratio"] = (self.profile.ms(1) + self._overhead["plain"]) / self.profile.ms(1)
        if depth == 0:
            # a plain step relaxes its drafter's estimates; under a takeover a plain step
            # (drafter "none") relaxes every drafter's, so one written off is re-tried later
            for (dr, w, _d), cell in self._cells.items():
                if dr == drafter or drafter == "none":
                    prior = _reproject(self.prior, 1, w, self.correlation)
                    target = (cell.hits + PRIOR_TRIALS * prior) / (cell.trials + PRIOR_TRIALS)
                    cell.value += self.relax * (target - cell.value)
                    cell.hits *= 1.0 - self.relax
                    cell.trials *= 1.0 - self.relax
            return
        if width < 1:
            raise ParameterError(f"a window of depth {depth} needs width >= 1, got {width}")
        outcomes = [(d, 1.0) for d in range(1, accepted_len + 1)]
        if rejected and accepted_len < depth:
            outcomes.append((accepted_len + 1, 0.0))
        # start new cells from the estimates as they stood before this window
        start = {d: self.acceptance(drafter, width, d) for d, _ in outcomes}
        for d, hit in outcomes:
            cell = self._cells.setdefault((drafter, width, d), _Cell(start[d]))
            cell.value += self.ema * (hit - cell.value)
            cell.count += 1
            cell.hits += hit
            cell.trials += 1.0

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
        self._cells.clear()
        self._overhead.clear()
        self._draft_ratio.clear()
        self._held.clear()
        self._window_gap = _RowLine()

    def snapshot(self, drafter: str) -> dict[int, list[float]]:
        """width -> [a_1 .. a_max_depth] as the chooser sees them now (for views and reports)."""
        return {w: [self.acceptance(drafter, w, d) for d in range(1, self.max_depth + 1)]
                for w in range(1, self.max_width + 1)}


def _with_reason(c: Choice, reason: str) -> Choice:
    return Choice(c.depth, c.width, c.rows, c.predicted_ms, c.expected_tokens, reason, c.explore)


# ---------------------------------------------------------------------------------------------
# The AR floor

PROBING, SPECULATING, RETIRED = "probing", "speculating", "retired"


class ArFloor:
    """Measure instead of guessing whether this request gains from speculation at all.

    1. time one ordinary plain decode step (`want_plain_step()` is True until `record_plain`);
    2. probe up to `max_probes` speculative windows, each timed (`record_window`);
    3. the first probe that is strictly cheaper per emitted token than the plain step decides
       "speculating" for the rest of the request;
    4. if none was, retire: plain decoding until the request ends (`want_plain_step()` stays
       True). A tie is not cheaper; an invalid timing (not a positive finite ms, or no emitted
       token) retires at once, since nothing can be concluded from it.

    The floor bounds the probing (one plain step and at most `max_probes` windows before the
    decision), not the request's wall time. Make one per request (or call `reset`).
    """

    def __init__(self, max_probes: int = 3) -> None:
        if max_probes < 1:
            raise ParameterError(f"the AR floor needs at least one probe window, got {max_probes}")
        self.max_probes = max_probes
        self.reset()

    def reset(self) -> None:
        self.state = PROBING
        self.ar_ms: float | None = None
        self.probes: list[tuple[float, int]] = []
        self.ar_windows = 0          # plain steps taken while the floor was on
        self.reason = "timing one plain step"

    @property
    def retired(self) -> bool:
        return self.state == RETIRED

    def want_plain_step(self) -> bool:
        """True: the decoder should run a plain step (calibration, or retired)."""
        return self.state == RETIRED or (self.state == PROBING and self.ar_ms is None)

    def record_plain(self, ms: float) -> None:
        self.ar_windows += 1
        if self.state == PROBING and self.ar_ms is None:
            if not _valid(ms):
                self._retire(f"retired: invalid plain-step timing {ms!r}")
            else:
                self.ar_ms = float(ms)
                self.reason = f"plain step {ms:.3f} ms/token; probing windows"

    def record_window(self, ms: float, emitted: int) -> None:
        if self.state != PROBING:
            return
        if self.ar_ms is None:
            raise ParameterError("the AR floor times a plain step first: check want_plain_step()")
        if not _valid(ms) or emitted < 1:
            self._retire(f"retired: invalid window timing ({ms!r} ms, {emitted} tokens)")
            return
        self.probes.append((float(ms), int(emitted)))
        per_token = ms / emitted
        if per_token < self.ar_ms:
            self.state = SPECULATING
            self.reason = (f"speculating: probe {len(self.probes)} cost {per_token:.3f} ms/token "
                           f"< plain {self.ar_ms:.3f} ms/token")
        elif len(self.probes) >= self.max_probes:
            best = min(m / e for m, e in self.probes)
            self._retire(f"retired: best of {len(self.probes)} probes {best:.3f} ms/token, "
                         f"not below plain {self.ar_ms:.3f} ms/token")
        else:
            self.reason = f"probe {len(self.probes)}: {per_token:.3f} ms/token, not below plain yet"

    def _retire(self, reason: str) -> None:
        self.state = RETIRED
        self.reason = reason


def _valid(ms: float) -> bool:
    return isinstance(ms, (int, float)) and math.isfinite(ms) and ms > 0
