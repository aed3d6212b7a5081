"""A draft token tree: what one verify pass checks.

Row 0 is the root (the last committed token); node i is verify row i + 1. Nodes are stored in
topological order (a parent always comes before its children), so a path, a depth or an
ancestor set is one walk up the parents. This is the one place a window's structure is turned
into arrays: the model, the KV cache and the verifier read the tree through the same few views,
`row_depths` and `ancestor_mask` (what one verify pass takes: each row's position past the
committed prefix, and who attends to whom), `positions` (RoPE positions) and `path_to` (which
rows the KV cache keeps when a path is accepted).

Example: root 5 with continuations [7, 8] and [7, 9]

    build_trie(5, [([7, 8], p0), ([7, 9], p1)], budget_rows=8)
    -> tokens (7, 8, 9), parents (-1, 0, 0), depths (1, 2, 2)

    row:        0(root 5)  1(7)  2(8)  3(9)
    attends to: 0          0 1   0 1 2 0 1 3
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from engine.errors import ParameterError
from engine.speculation.events import Provenance


@dataclass(frozen=True)
class TokenTree:
    root: int                               # the last committed token (row 0)
    tokens: tuple[int, ...]                 # node i's token (row i + 1)
    parents: tuple[int, ...]                # -1 = the root; parents[i] < i
    provenance: tuple[Provenance, ...]
    # Optional draft distributions: q[i] is the distribution [V] node i's token was drawn from
    # (over the vocabulary, conditioned on the path to its parent). None (for the whole tree or
    # for one node) means a point-mass draft: the token was proposed deterministically.
    q: tuple[torch.Tensor | None, ...] | None = field(default=None, compare=False)
    _children: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    _depths: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if len(self.parents) != n or len(self.provenance) != n:
            raise ValueError(f"tree needs one parent and one provenance per node: {n} tokens, "
                             f"{len(self.parents)} parents, {len(self.provenance)} provenances")
        if self.q is not None and len(self.q) != n:
            raise ValueError(f"tree has {n} nodes but {len(self.q)} draft distributions")
        children: list[list[int]] = [[] for _ in range(n + 1)]   # slot 0 = root
        depths: list[int] = []
        for i, p in enumerate(self.parents):
            if not -1 <= p < i:
                raise ValueError(f"node {i} has parent {p}; parents must come first (-1 <= parent < i)")
            children[p + 1].append(i)
            depths.append(1 if p < 0 else depths[p] + 1)
        object.__setattr__(self, "_children", tuple(tuple(c) for c in children))
        object.__setattr__(self, "_depths", tuple(depths))

    # --- structure -----------------------------------------------------------------------------

    @staticmethod
    def empty(root: int) -> "TokenTree":
        """No draft: the window is one plain decode step."""
        return TokenTree(root=root, tokens=(), parents=(), provenance=())

    @staticmethod
    def from_rows(tokens: Sequence[int], parent_rows: Sequence[int]) -> "TokenTree":
        """A tree given as verify rows: tokens[0] is the root, parent_rows[i] the row row i
        hangs from (parent_rows[0] = -1). The nodes' provenance is unknown (source "given").

        >>> TokenTree.from_rows([5, 7, 8, 9], [-1, 0, 1, 1]).parents
        (-1, 0, 0)
        """
        if len(tokens) != len(parent_rows) or not tokens or parent_rows[0] != -1:
            raise ValueError(f"need one parent row per token, row 0 the root (parent -1): got "
                             f"{len(tokens)} tokens, {len(parent_rows)} parent rows")
        given = Provenance(match=0, position=-1, source="given")
        return TokenTree(root=int(tokens[0]), tokens=tuple(int(t) for t in tokens[1:]),
                         parents=tuple(p - 1 for p in parent_rows[1:]),
                         provenance=(given,) * (len(tokens) - 1))

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_rows(self) -> int:
        """Verify rows: the root plus one per node."""
        return len(self.tokens) + 1

    @property
    def depths(self) -> tuple[int, ...]:
        """1-based depth of each node (a child of the root has depth 1)."""
        return self._depths

    @property
    def max_depth(self) -> int:
        return max(self._depths, default=0)

    def children(self, node: int) -> tuple[int, ...]:
        """Child node indices of `node` (-1 = the root), in the order they were added."""
        return self._children[node + 1]

    def is_leaf(self, node: int) -> bool:
        return not self._children[node + 1]

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root's child down to `node` (empty for the root, -1)."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        path.reverse()
        return path

    def path_tokens(self, node: int) -> list[int]:
        return [self.tokens[i] for i in self.path_to(node)]

    def leaves(self) -> list[int]:
        return [i for i in range(len(self.tokens)) if not self._children[i + 1]]

    # --- what the model and the cache read -----------------------------------------------------

    @property
    def row_depths(self) -> tuple[int, ...]:
        """[R] depth of each verify row: 0 for the root, then each node's depth."""
        return (0,) + self._depths

    def ancestor_mask(self, device: torch.device | str | None = None) -> torch.Tensor:
        """[R, R] bool: row r attends to row c iff c is r or an ancestor of r (row 0 = root).

        The committed prefix is not part of this mask; every row also attends to all of it.
        """
        r = self.n_rows
        mask = np.zeros((r, r), dtype=np.bool_)     # NumPy: built on the host between passes
        mask[:, 0] = True
        for i, p in enumerate(self.parents):
            # rows are topologically ordered, so the parent's row is complete already
            mask[i + 1] = mask[p + 1]
            mask[i + 1, i + 1] = True
        out = torch.from_numpy(mask)
        return out.to(device) if device is not None else out

    def positions(self, base: int, device: torch.device | str | None = None) -> torch.Tensor:
        """[R] long: the root at `base`, node i at base + depth(i)."""
        pos = torch.tensor(self.row_depths, dtype=torch.long) + base
        return pos.to(device) if device is not None else pos


def build_trie(root: int, continuations: Sequence[tuple[Sequence[int], Provenance]],
               budget_rows: int) -> TokenTree:
    """Merge ranked continuations into a trie of at most `budget_rows` rows (root included).

    Continuations are taken in rank order; a shared prefix reuses existing nodes (no node ever
    has two children with the same token), and a new node takes the provenance of the
    continuation that created it. When the budget runs out the current continuation is cut
    there and later ones are dropped, so the best-ranked continuations keep their full depth.
    """
    if budget_rows < 1:
        raise ParameterError(f"a verify budget needs at least 1 row (the root), got {budget_rows}")
    max_nodes = budget_rows - 1
    tokens: list[int] = []
    parents: list[int] = []
    prov: list[Provenance] = []
    child_of: dict[tuple[int, int], int] = {}   # (parent node, token) -> node
    for cont, provenance in continuations:
        parent = -1
        for k, tok in enumerate(cont):
            node = child_of.get((parent, tok))
            if node is None:
                if len(tokens) >= max_nodes:
                    return TokenTree(root, tuple(tokens), tuple(parents), tuple(prov))
                node = len(tokens)
                tokens.append(int(tok))
                parents.append(parent)
                prov.append(_offset(provenance, k))
                child_of[(parent, tok)] = node
            parent = node
    return TokenTree(root, tuple(tokens), tuple(parents), tuple(prov))


def _offset(p: Provenance, k: int) -> Provenance:
    """The provenance of the k-th token of a continuation copied from position p.position."""
    return Provenance(match=p.match, position=p.position + k, source=p.source, count=p.count)
