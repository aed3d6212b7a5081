"""What a drafter drafts on: a `Stream` of committed tokens with scratch slots past them.

The target's session (engine.model.runtime.Session) is one, and so is its early-exit view
(`Session.first_layers(k)`, a LayerView: the same cache through the first k layers). Both are
matched structurally: the model layer sits below this one and names no protocol of ours.

A stream is not a runtime: which device, model and dtype it runs is its runtime's to say (a cost
probe that times passes on a stream is given the runtime as well: engine.cost.probe.card_profile).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    import torch

    from engine.model.runtime import RowScores


@runtime_checkable
class Stream(Protocol):
    """Committed tokens and the passes that write only past them."""

    @property
    def length(self) -> int:
        """Committed tokens."""
        ...

    def room(self) -> int:
        """Slots free past the committed prefix."""
        ...

    def window_room(self) -> int:
        """The most rows one pass may have now."""
        ...

    def warm_up(self) -> None:
        """Capture the passes' graphs now (GPU), so no window pays for a capture."""
        ...

    def scratch(self, tokens: Sequence[int], depths: Sequence[int], ancestors: "torch.Tensor",
                at: int) -> "RowScores":
        """Rows `tokens` at `depths` past position `at` (>= length), seeing the committed prefix
        and their `ancestors` [R, R]; writes only slots from `at` on and commits nothing."""
        ...


@runtime_checkable
class TargetStream(Stream, Protocol):
    """The target's stream for one request, as a drafter's `begin` is handed it: what the
    request reserved (a draft model's own stream is made as large) and its early-exit view."""

    needed: int      # tokens the request asked room for
    spare: int       # window rows past them, where the context allows

    def first_layers(self, k: int) -> Stream:
        """This stream through the model's first k layers."""
        ...
