"""Where the rows of a verify window sit: the input both attention paths take (the torch one,
engine.model.attention, and the Triton one, engine.kernels.triton_attention). It lives below
both so the kernel needs nothing from the model; the block length is here because the two
paths must cut positions into the same blocks for a row to come out bit-identical."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

BLOCK = 64          # logical positions per block (block boundaries at multiples of this)


@dataclass(frozen=True)
class WindowLayout:
    """Where each row of a verify window sits: n committed tokens, row r at position
    n + depth[r], its ancestors (itself included) by depth in anc[r, :depth[r] + 1].

    n: int (CPU) or a 0-d long tensor (inside a GPU graph); depth: [R] long; anc: [R, A] long,
    A > max depth, on the device of the cache."""

    n: int | torch.Tensor
    depth: torch.Tensor
    anc: torch.Tensor


def ancestor_table(depths: Sequence[int], ancestors: torch.Tensor, width: int | None = None
                   ) -> torch.Tensor:
    """[R, width] long (width defaults to R): row r's ancestor at depth j is row anc[r, j] (the
    root is row 0 at depth 0). `ancestors` [R, R] bool: itself and its ancestors, one per depth
    (what TokenTree.ancestor_mask and runtime.chain give). Unused entries are 0."""
    R = len(depths)
    anc = np.zeros((R, width or R), dtype=np.int64)
    fill_ancestor_table(anc, depths, ancestors)
    return torch.from_numpy(anc)


def fill_ancestor_table(out: np.ndarray, depths: Sequence[int], ancestors: torch.Tensor) -> None:
    """ancestor_table's entries written into `out` [>= R, >= R] (zeroed where unused). NumPy,
    not torch: a window's table is built on the host between two passes, where each torch call
    on a small tensor costs microseconds (bench/host_replay.py)."""
    rows, cols = np.nonzero(ancestors.cpu().numpy())
    out[rows, np.asarray(depths, dtype=np.int64)[cols]] = cols
