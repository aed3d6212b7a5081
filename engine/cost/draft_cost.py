"""What a model draft costs on this device, on the same clock as the verify pass.

A window drafted by a model pays its draft passes before the verify pass: a chain of depth k
runs k one-row draft passes (the root's, then one per draft token but the last); a tree of
depth k and width w runs one pass per level over every row drafted so far (level 0 is the
root alone). So

    draft_ms(k, 1) = k x pass(1)
    draft_ms(k, w) = pass(1) + sum_{j=1..k-1} pass(1 + w + (j - 1) w^2)        (rows capped at 64)

and the window costs draft_ms + verify_ms(rows). `pass(R)` is the drafting model's own curve:

- a draft model: its own cost profile, probed and saved like the target's under its own id
  (engine.cost.probe.card_profile on the draft's runtime);
- early exit at K of L layers: a K-layer pass runs the embedding, K layers, the final norm and
  the LM head, so its one-row time is a line in K, pass_K(1) = head_ms + K x layer_ms, fitted to
  one-row passes probed at a few exit layers (`probe_exit_layers`, stored in the target's
  profile as "exit_ms"); more rows scale like the target's own curve,
  pass_K(R) = pass_K(1) x verify(R) / verify(1).

The break-even of a model draft (`draft_break_even`): the tokens a window must emit to match
plain decoding, (draft_ms + verify_ms) / verify_ms(1), against k + 1, the most it can emit: where
even that loses, no acceptance rate makes the drafter pay on this card.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from engine.cost.profile import BEAT, CostProfile
from engine.errors import ParameterError
from engine.limits import MAX_ROWS

EXIT_REPEATS = 5


def model_tree_rows(depth: int, width: int) -> int:
    """Verify rows of a model-drafted tree: the root, `width` children at depth 1 and
    `width` x `width` at each deeper level (at most MAX_ROWS)."""
    return min(MAX_ROWS, 1 + width + (depth - 1) * width * width)


def model_rows(depth: int, width: int) -> int:
    """Verify rows of a model-drafted window: a chain, or the level-by-level tree."""
    return 1 + depth if width <= 1 else model_tree_rows(depth, width)


@dataclass(frozen=True)
class DraftCost:
    """The drafting model's pass: `one_row_ms` for one row, the shape of `curve` for more."""

    label: str                   # "early exit at 24 of 30 layers" / "draft model X"
    one_row_ms: float
    curve: CostProfile           # whose ms(R) / ms(1) gives a pass of R rows

    def __post_init__(self) -> None:
        if not (self.one_row_ms > 0 and self.one_row_ms < float("inf")):
            raise ParameterError(f"draft cost {self.label!r}: a draft pass must cost a positive "
                                 f"number of ms, got {self.one_row_ms!r}")

    def pass_ms(self, rows: int) -> float:
        return self.one_row_ms * self.curve.ms(rows) / self.curve.ms(1)

    def draft_ms(self, depth: int, width: int = 1) -> float:
        """Draft time of a window of `depth` x `width` (module docstring)."""
        if depth < 1:
            return 0.0
        if width <= 1:
            return depth * self.one_row_ms
        total = self.one_row_ms
        for j in range(1, depth):
            total += self.pass_ms(model_tree_rows(j, width))     # the tree so far
        return total


def default_exit_layers(n_layers: int) -> list[int]:
    """Exit layers an automatic probe times: a quarter, half, three quarters and all layers."""
    return sorted({max(1, n_layers // 4), max(1, n_layers // 2), max(1, 3 * n_layers // 4), n_layers})


def probe_exit_layers(runtime: Any, layers: Sequence[int], context: int,
                      repeats: int = EXIT_REPEATS) -> dict[int, float]:
    """Median ms of a one-row pass through the first K layers, for each K in `layers`."""
    out = {}
    for k in sorted(set(layers)):
        runtime.time_verify_pass(1, context, exit_layer=k)       # warm-up (captures a graph)
        out[k] = float(statistics.median(runtime.time_verify_pass(1, context, exit_layer=k)
                                         for _ in range(repeats)))
    return out


def exit_line(points: dict[int, float]) -> tuple[float, float]:
    """(head_ms, layer_ms) of pass_K(1) = head_ms + K x layer_ms, least squares over the points
    (one point: all of it per layer). Both are kept >= 0: noise must not price a layer below free."""
    if not points:
        raise ParameterError("no exit-layer timings to fit")
    ks, ms = list(points), list(points.values())
    if len(ks) == 1:
        return 0.0, ms[0] / ks[0]
    mk, mm = sum(ks) / len(ks), sum(ms) / len(ms)
    var = sum((k - mk) ** 2 for k in ks)
    layer = max(0.0, sum((k - mk) * (m - mm) for k, m in zip(ks, ms)) / var)
    head = mm - layer * mk
    if head < 0:                 # a line through the origin instead
        return 0.0, sum(m * k for k, m in zip(ks, ms)) / sum(k * k for k in ks)
    return head, layer


def exit_points(profile: CostProfile | None) -> dict[int, float]:
    """The exit-layer timings a profile carries (profile JSON "exit_ms": {"K": ms}), else {}."""
    raw = (profile.extra.get("exit_ms") if profile is not None else None) or {}
    try:
        pts = {int(k): float(v) for k, v in raw.items()}
    except (AttributeError, TypeError, ValueError):
        return {}
    return {k: v for k, v in pts.items() if k >= 1 and 0 < v < float("inf")}


def early_exit_cost(profile: CostProfile, exit_layer: int, n_layers: int,
                    runtime: Any = None, context: int | None = None) -> DraftCost:
    """The early-exit drafter's cost at `exit_layer`: from the profile's probed exit layers, else
    timed now on `runtime` (a profile saved before exit layers were probed, or a reference)."""
    pts = exit_points(profile)
    if exit_layer in pts:
        one = pts[exit_layer]
    elif len(pts) >= 2:
        head, layer = exit_line(pts)
        one = head + layer * exit_layer
    elif runtime is not None:
        ctx = context if context is not None else (profile.context or 1024)
        one = probe_exit_layers(runtime, [exit_layer], ctx)[exit_layer]
    else:                        # nothing measured: the layers' share of a one-row pass
        one = profile.ms(1) * exit_layer / n_layers
    return DraftCost(f"early exit at {exit_layer} of {n_layers} layers", one, profile)


def draft_model_cost(draft_profile: CostProfile, label: str) -> DraftCost:
    """A draft model's cost: its own profile's one-row pass and curve."""
    return DraftCost(label, draft_profile.ms(1), draft_profile)


def draft_break_even(target: CostProfile, cost: DraftCost, depths: Sequence[int] = (1, 2, 3, 4, 6, 8),
                     width: int = 1) -> list[tuple[int, int, float, float, float]]:
    """(depth, rows, draft ms, window ms, tokens to beat plain decoding) for chains (or trees) of
    each depth; a window can emit at most depth + 1 tokens, so a break-even above that never pays."""
    out = []
    for k in depths:
        rows = model_rows(k, width)
        d = cost.draft_ms(k, width)
        w = d + target.ms(rows)
        out.append((k, rows, d, w, w / target.ms(1)))
    return out


def format_draft_break_even(target: CostProfile, cost: DraftCost,
                            depths: Sequence[int] = (1, 2, 3, 4, 6, 8)) -> str:
    lines = [f"{cost.label}: a draft pass {cost.one_row_ms:.3f} ms "
             f"({cost.one_row_ms / target.ms(1):.2f} of a plain step)",
             f"{'depth':>6}  {'draft ms':>9}  {'window ms':>10}  {BEAT:>29}  {'at most':>7}"]
    for k, _rows, d, w, be in draft_break_even(target, cost, depths):
        note = "" if be < k + 1 else "  never pays"
        lines.append(f"{k:>6}  {d:>9.3f}  {w:>10.3f}  {be:>29.2f}  {k + 1:>7}{note}")
    return "\n".join(lines)


def format_exit_break_even(profile: CostProfile, depths: Sequence[int] = (1, 2, 3, 4, 6, 8)) -> str:
    """The early-exit break-even at each probed exit layer: the tokens a chain of each depth must
    emit to beat plain decoding ('-' where even k + 1 tokens would not), as aligned text."""
    pts = exit_points(profile)
    if not pts:
        return ""
    n_layers = profile.extra.get("n_layers") or max(pts)
    head = f"{'exit K':>6}  {'pass ms':>8}  " + "  ".join(f"{'d' + str(k):>5}" for k in depths)
    lines = ["early exit: tokens a chain of depth d must emit to beat plain decoding "
             "(- : not even d + 1 tokens would)", head]
    for k in sorted(pts):
        cost = DraftCost(f"early exit at {k} of {n_layers} layers", pts[k], profile)
        cells = [f"{be:>5.2f}" if be < d + 1 else f"{'-':>5}"
                 for d, _r, _dm, _w, be in draft_break_even(profile, cost, depths)]
        lines.append(f"{k:>6}  {pts[k]:>8.3f}  " + "  ".join(cells))
    return "\n".join(lines)
