"""Window policies: who drafts the next window, how deep and how wide, and why.

A policy answers `plan(context)` with a frozen Plan (engine.cost.plan) before each window and
is shown the window's event afterwards (`observe`); one with `observe_window` (the AR floor)
is told the window's timing as it commits, before the next plan, so a policy whose `observes`
is False may see its events late (engine.speculation.decoder). The decoder builds one from the
settings (engine.speculation.factory) and never looks inside:

    FixedPolicy            the settings' depth and width (n-gram or model drafts)
    PricedPolicy           the window chooser's best price (--adaptive; engine.cost.chooser)
    TakeoverPolicy         n-gram tree, model draft or plain step, measured as it goes (--takeover)
    PricedTakeoverPolicy   the same three priced by the chooser (--takeover --adaptive)
    ArFloorPolicy          wraps another: a timed plain step first, then retire if no window paid
    PlainPolicy            no drafter: every window a plain step
    Learning               wraps another: a chooser keeps learning while it is not asked

Policies read numbers and names only: they never import the model (a contract in
pyproject.toml).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from engine.cost.chooser import WindowChooser
from engine.cost.floor import ArFloor
from engine.cost.plan import Cause, Plan, plain_plan
from engine.speculation.events import WindowEvent
from engine.speculation.takeover import MODEL, NGRAM, PLAIN, Takeover, priced_takeover


@dataclass(frozen=True)
class PlanContext:
    """What a policy may look at before a window."""

    remaining: int                      # tokens the request may still emit
    has_match: Callable[[], bool]       # whether the n-gram index matches the stream's suffix


class WindowPolicy(Protocol):
    """A policy whose `observes` is False learns nothing from events: the decoder may build and
    yield a window's event after the next window's pass is launched (Decoder._loop)."""

    def plan(self, ctx: PlanContext) -> Plan: ...

    def observe(self, event: WindowEvent) -> None: ...


def _depth(depth: int, ctx: PlanContext) -> int:
    """The deepest window the request has room for (a window emits up to depth + 1 tokens)."""
    return max(0, min(depth, ctx.remaining - 1))


def plain_ahead(policy: WindowPolicy) -> bool:
    """Whether the window after a plain step is a plain step too whatever its token (no drafter;
    a retired AR floor's steps before its next probe): then the decoder lets the runtime queue
    it behind this one (engine.model.runtime.Session.verify's ahead). A policy that cannot say
    has no `plain_ahead` and gets False."""
    ask = getattr(policy, "plain_ahead", None)
    return bool(ask()) if ask is not None else False


class PlainPolicy:
    observes = False      # observe() learns nothing: the decoder may yield an event late

    def plan(self, ctx: PlanContext) -> Plan:
        return plain_plan("none", Cause.NO_DRAFTER)

    def plain_ahead(self) -> bool:
        return True

    def observe(self, event: WindowEvent) -> None:
        pass


class FixedPolicy:
    """Every window at the settings' depth and width; `rows_of` is the drafter's shape."""

    observes = False      # observe() learns nothing: the decoder may yield an event late

    def __init__(self, drafter: str, depth: int, width: int, rows_of: Callable[[int, int], int],
                 cause: Cause = Cause.FIXED, **figures: object) -> None:
        self.drafter, self.depth, self.width = drafter, depth, width
        self.rows_of, self.cause, self.figures = rows_of, cause, figures

    def plan(self, ctx: PlanContext) -> Plan:
        d = _depth(self.depth, ctx)
        if d == 0:
            return plain_plan(self.drafter, Cause.LAST_TOKEN)
        return Plan(self.drafter, d, self.width, self.rows_of(d, self.width), self.cause,
                    figures=self.figures)

    def observe(self, event: WindowEvent) -> None:
        pass


class PricedPolicy:
    """The chooser's best window for the drafter each time. An n-gram drafter without a match
    in the index has nothing to offer (`needs_match`)."""

    def __init__(self, chooser: WindowChooser, drafter: str, depth: int, width: int,
                 needs_match: bool) -> None:
        self.chooser, self.drafter, self.depth, self.width = chooser, drafter, depth, width
        self.needs_match = needs_match

    def plan(self, ctx: PlanContext) -> Plan:
        d = _depth(self.depth, ctx)
        if d == 0:
            return plain_plan(self.drafter, Cause.LAST_TOKEN)
        if self.needs_match and not ctx.has_match():
            return self.chooser.choose(self.drafter, available_depth=0)
        return self.chooser.choose(self.drafter, available_depth=d, available_width=self.width)

    def observe(self, event: WindowEvent) -> None:
        self.chooser.observe_event(event)


class TakeoverPolicy:
    """Each window to whoever measured the most tokens per ms (engine.speculation.takeover):
    the n-gram tree (at its own depth, copies run long), the model's chain, or a plain step."""

    def __init__(self, takeover: Takeover, model: str, depth: int, width: int,
                 ngram_depth: int, tree_rows: Callable[[int, int], int]) -> None:
        self.takeover, self.model, self.depth, self.width = takeover, model, depth, width
        self.ngram_depth, self.tree_rows = ngram_depth, tree_rows
        self._kind: str | None = None          # who the last plan gave the window to

    def plan(self, ctx: PlanContext) -> Plan:
        self._kind = None
        d = _depth(self.depth, ctx)
        if d == 0:
            return plain_plan(self.model, Cause.LAST_TOKEN)
        self._kind, figures = self.takeover.choose(ctx.has_match())
        if self._kind == NGRAM:
            k = _depth(max(self.depth, self.ngram_depth), ctx)
            return Plan("tree", k, self.width, self.tree_rows(k, self.width), Cause.TAKEOVER,
                        figures=figures)
        if self._kind == PLAIN:
            return plain_plan("none", Cause.TAKEOVER, **figures)
        return Plan(self.model, d, 1, 1 + d, Cause.TAKEOVER, figures=figures)    # a chain

    def observe(self, event: WindowEvent) -> None:
        if self._kind is not None:
            self.takeover.observe(self._kind, len(event.emitted), event.window_ms)


class PricedTakeoverPolicy:
    """The takeover priced by the chooser (engine.speculation.takeover.priced_takeover)."""

    def __init__(self, chooser: WindowChooser, model: str, depth: int, width: int,
                 ngram_depth: int) -> None:
        self.chooser, self.model, self.depth, self.width = chooser, model, depth, width
        self.ngram_depth = ngram_depth

    def plan(self, ctx: PlanContext) -> Plan:
        d = _depth(self.depth, ctx)
        if d == 0:
            return plain_plan(self.model, Cause.LAST_TOKEN)
        kind, p, figures = priced_takeover(self.chooser, ctx.has_match(), self.model,
                                           _depth(max(d, self.ngram_depth), ctx), d, self.width)
        who = {NGRAM: "tree", PLAIN: "none", MODEL: self.model}[kind]
        return Plan(who, p.depth, p.width, p.rows, Cause.PRICED_TAKEOVER, p.predicted_ms,
                    p.expected_tokens, figures, p.explore)

    def observe(self, event: WindowEvent) -> None:
        self.chooser.observe_event(event)


class ArFloorPolicy:
    """The AR floor (engine.cost.floor) in front of another policy: a timed plain step (behind
    the floor's untimed lead), then the other policy's windows as probes, and plain steps for
    good if none paid."""

    def __init__(self, inner: WindowPolicy, floor: ArFloor, drafter: str) -> None:
        self.inner, self.floor, self.drafter = inner, floor, drafter

    def plan(self, ctx: PlanContext) -> Plan:
        # the request's last token is the inner policy's to say (it needs no floor)
        if ctx.remaining > 1 and self.floor.want_plain_step():
            lead = {"lead": True} if self.floor.untimed() else {}
            return plain_plan(self.drafter, Cause.AR_FLOOR, **self.floor.figures, **lead)
        return self.inner.plan(ctx)

    def plain_ahead(self) -> bool:
        # retired: this plain step counts down plain_left when observed; the next is plain if
        # one is left after it. A lead step is followed by the timed one
        f = self.floor
        return f.final or (f.retired and f.plain_left > 1) or f.leads() or plain_ahead(self.inner)

    @property
    def observes(self) -> bool:
        """The floor learns at each window's commit (observe_window), before the next plan:
        the events themselves only matter to the policy behind it."""
        return getattr(self.inner, "observes", True)

    def observe_window(self, depth: int, drafted: bool, window_ms: float, emitted: int) -> None:
        """What the floor times, told by the decoder as the window commits (its event's depth,
        whether it drafted, window_ms and emitted count)."""
        if depth == 0 and self.floor.want_plain_step():
            self.floor.record_plain(window_ms)
        elif drafted:
            self.floor.record_window(window_ms, emitted)

    def observe(self, event: WindowEvent) -> None:
        self.inner.observe(event)


class Learning:
    """Another policy decides; the chooser still learns from every window (adaptive switched
    off mid-run keeps what it learned for a switch back on)."""

    def __init__(self, inner: WindowPolicy, chooser: WindowChooser) -> None:
        self.inner, self.chooser = inner, chooser

    def plan(self, ctx: PlanContext) -> Plan:
        return self.inner.plan(ctx)

    def plain_ahead(self) -> bool:
        return plain_ahead(self.inner)

    def observe(self, event: WindowEvent) -> None:
        self.inner.observe(event)
        self.chooser.observe_event(event)
