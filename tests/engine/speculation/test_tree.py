"""TokenTree and build_trie: invariants against brute force."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import ParameterError
from engine.speculation.events import Provenance
from engine.speculation.tree import TokenTree, build_trie

continuations = st.lists(st.lists(st.integers(0, 4), min_size=0, max_size=6), max_size=6)


def ranked(conts: list[list[int]]) -> list[tuple[list[int], Provenance]]:
    return [(c, Provenance(match=r, position=100 * r, source="test", count=r + 1))
            for r, c in enumerate(conts)]


def node_paths(tree: TokenTree) -> list[tuple[int, ...]]:
    return [tuple(tree.path_tokens(i)) for i in range(len(tree))]


@settings(max_examples=300, deadline=None)
@given(conts=continuations, budget=st.integers(1, 20))
def test_trie_is_the_first_distinct_prefixes_within_budget(conts, budget):
    tree = build_trie(9, ranked(conts), budget)
    assert tree.n_rows <= budget and tree.n_rows == len(tree) + 1
    # brute force: every distinct prefix, in rank order then length, until the budget is spent
    want: list[tuple[int, ...]] = []
    want_prov: list[Provenance] = []
    for r, c in enumerate(conts):
        for k in range(1, len(c) + 1):
            if tuple(c[:k]) not in want:
                want.append(tuple(c[:k]))
                want_prov.append(Provenance(r, 100 * r + k - 1, "test", r + 1))
    want, want_prov = want[:budget - 1], want_prov[:budget - 1]
    assert node_paths(tree) == want
    assert list(tree.provenance) == want_prov
    # no node has two children with the same token
    for node in range(-1, len(tree)):
        toks = [tree.tokens[c] for c in tree.children(node)]
        assert len(toks) == len(set(toks))


@settings(max_examples=200, deadline=None)
@given(conts=continuations, budget=st.integers(1, 20), base=st.integers(0, 4000))
def test_mask_positions_and_paths_agree_with_the_parents(conts, budget, base):
    tree = build_trie(9, ranked(conts), budget)
    n = len(tree)
    mask = tree.ancestor_mask()
    assert mask.dtype == torch.bool and mask.shape == (n + 1, n + 1)
    for i in range(n):
        # path_to follows the parents and ends at the node; depth is its length
        path = tree.path_to(i)
        assert path[-1] == i and len(path) == tree.depths[i]
        assert all(tree.parents[b] == a for a, b in zip([-1] + path, path))
        # the mask row: exactly the root, the ancestors and the node itself
        want = {0} | {a + 1 for a in path}
        assert {c for c in range(n + 1) if mask[i + 1, c]} == want
        for c in tree.children(i):
            assert tree.parents[c] == i
    assert mask[0].tolist() == [True] + [False] * n
    assert tree.positions(base).tolist() == [base] + [base + d for d in tree.depths]
    assert sorted(c for node in range(-1, n) for c in tree.children(node)) == list(range(n))
    assert set(tree.leaves()) == {i for i in range(n) if not tree.children(i)}


def test_worked_example_and_budget_cut():
    p = [Provenance(r, 10 * r, "tree", 1) for r in range(3)]
    tree = build_trie(5, [([7, 8], p[0]), ([7, 9], p[1]), ([1, 2, 3], p[2])], budget_rows=5)
    assert tree.tokens == (7, 8, 9, 1) and tree.parents == (-1, 0, 0, -1)
    assert tree.depths == (1, 2, 2, 1)
    assert tree.children(-1) == (0, 3) and tree.children(0) == (1, 2)
    # the third continuation is cut after one token: the budget (root + 4) is spent
    assert tree.provenance[3] == Provenance(2, 20, "tree", 1)
    assert tree.positions(40).tolist() == [40, 41, 42, 42, 41]
    assert tree.ancestor_mask().int().tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 0, 1, 0],
        [1, 0, 0, 0, 1],
    ]


def test_empty_tree_is_one_row():
    tree = TokenTree.empty(3)
    assert tree.n_rows == 1 and len(tree) == 0 and tree.max_depth == 0
    assert tree.ancestor_mask().tolist() == [[True]]
    assert tree.positions(12).tolist() == [12]
    assert build_trie(3, ranked([[1, 2]]), budget_rows=1) == tree


def test_bad_trees_are_refused():
    prov = Provenance(0, 0, "test")
    with pytest.raises(ValueError, match="parent"):
        TokenTree(1, (2, 3), (-1, 1), (prov, prov))
    with pytest.raises(ValueError, match="one parent"):
        TokenTree(1, (2, 3), (-1,), (prov, prov))
    with pytest.raises(ParameterError, match="budget"):
        build_trie(1, [], 0)
