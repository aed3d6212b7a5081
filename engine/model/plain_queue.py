"""Plain steps queued on the device (`Session.verify(..., ahead=True)`).

A plain step whose caller will continue from its top-1 token with another plain step (no
drafter; a retired AR floor: engine.speculation.policies.plain_ahead) lets the session queue
that next step on the device right behind it: the one-row graph runs again at the next length
on its own top-1 token, set on the device (GraphBucket.step_on), and each step's result travels
to pinned host memory with an event that says it is there. The next verify of that token at that
length takes the queued result instead of running the pass (the same inputs, so the same bits),
so the host's work between two steps (the verdict, the event, the caller's own) runs while the
card computes, and a plain step costs one replay and one small copy back. Anything else the
session does drops a queued step; one not taken costs a pass the card ran for nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

if TYPE_CHECKING:
    from engine.model.graphs import GraphBucket

# what a step sends to the host: a device tensor, and how its host copy becomes RowScores
Read = Callable[["GraphBucket"], tuple[torch.Tensor, Callable[[torch.Tensor], Any]]]


class Step:
    """One step's result on its way to the host. `n`: the committed length it ran at; `root`:
    the token it ran on, known to the host once the step before it is read; `key`: what the
    caller asked the step to send (a verify asking for something else runs its own pass)."""

    def __init__(self, result: torch.Tensor, build: Callable[[torch.Tensor], Any],
                 pinned: bool) -> None:
        self.n, self.root, self.key = -1, None, None
        self.build = build
        self.host = torch.empty(result.shape, dtype=result.dtype, pin_memory=pinned)
        self.host.copy_(result, non_blocking=pinned)
        self.result = result        # kept until the copy has read it
        self.done = None
        if pinned:
            self.done = torch.cuda.Event()
            self.done.record()

    def scores(self) -> Any:
        if self.done is not None:
            self.done.synchronize()
        self.result = None
        return self.build(self.host)


class PlainQueue:
    """The plain step a session has queued, if any, and how many it has queued and taken."""

    def __init__(self) -> None:
        self.pending: Step | None = None
        self.queued = self.taken = 0

    def drop(self) -> None:
        self.pending = None

    def take(self, n: int, root: int, key: Any = None) -> Step | None:
        """The queued step if it is the plain step of `root` at length n sending `key`'s result;
        dropped either way."""
        p, self.pending = self.pending, None
        if p is None or (p.n, p.root, p.key) != (n, root, key):
            return None
        self.taken += 1
        return p

    def queue(self, bucket: "GraphBucket", n: int, read: Read, key: Any = None) -> Step:
        """The step `bucket` (one row) just ran at length n, and the next one queued behind it
        (pending); nothing waits for either here."""
        this = Step(*read(bucket), bucket.pinned)
        bucket.step_on()
        self.pending = Step(*read(bucket), bucket.pinned)
        self.pending.n, self.pending.key = n + 1, key
        self.queued += 1
        return this

    def scores(self, step: Step) -> Any:
        """A step's RowScores once on the host; the step queued after it ran on its top-1."""
        sc = step.scores()
        if self.pending is not None:
            self.pending.root = int(sc.top_ids[0, 0])
        return sc
