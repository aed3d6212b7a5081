"""What the window hands every view, and what a view tells the window about itself.

The window keeps a list of views and knows nothing of what each draws. When the timeline, the
store or the selected verify row changes, it calls `update_from(shown)` on the views that depend
on the change; each view reads what it needs from `shown`. A view declares:

    is_plot       a run-wide plot (the run up to the shown window): slow to change and costly to
                  repaint, so while a run streams it is redrawn at a lower rate (see
                  workbench.frames)
    follows_row   it shows the selected verify row, and is redrawn at once when the user picks one

A view that draws in separate pieces (the stats view's two plot rows) lists each as a `Part`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from engine.cost.baseline import Baseline, plain_baseline
from engine.speculation.events import ACCEPTED, REJECTED, WindowEvent

from workbench.store import EventStore


@dataclass(frozen=True)
class Shown:
    """Window `index` of `store` (-1: none), with verify row `row` of it selected (-1: none)."""

    store: EventStore
    index: int
    row: int = -1
    follow: bool = True        # the timeline follows the newest window (text views scroll along)

    @property
    def event(self) -> WindowEvent | None:
        return self.store[self.index] if 0 <= self.index < len(self.store) else None


def interesting_row(ev: WindowEvent) -> int:
    """The row a window opens on: a verdict the penalties flipped, else the first rejection, else
    the deepest accepted draft, else the root row."""
    for r in ev.rows:
        if r.penalty is not None and r.penalty.flipped:
            return r.row
    for r in ev.rows:
        if r.outcome == REJECTED:
            return r.row
    acc = [r.row for r in ev.rows if r.outcome == ACCEPTED]
    return acc[-1] if acc else 0


class View(Protocol):
    is_plot: bool
    follows_row: bool

    def update_from(self, shown: Shown) -> None: ...


@dataclass(frozen=True, eq=False)
class Part:
    """One separately drawn piece of a view."""

    draw: Callable[[Shown], None]
    is_plot: bool = True
    follows_row: bool = False

    def update_from(self, shown: Shown) -> None:
        self.draw(shown)


def plain_step_ms(store: EventStore, upto: int) -> list[float]:
    """Window ms of the run's plain decode steps (one-row windows) through window `upto`."""
    return [e.window_ms for e in store.events[: upto + 1] if len(e.rows) == 1 and e.window_ms > 0]


def baseline_of(store: EventStore | None, upto: int, probe_one_row_ms: float | None) -> Baseline | None:
    """The plain-decoding baseline every view quotes (engine.cost.baseline): the run's plain steps
    through `upto`, else the probe's one-row pass."""
    steps = plain_step_ms(store, upto) if store is not None and upto >= 0 else []
    return plain_baseline(steps, probe_one_row_ms)
