"""The n-gram index and the drafters, against brute force on real tokenized code prompts."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import ParameterError
from engine.io.gguf_file import read_gguf
from engine.io.load import default_model_path
from engine.io.tokenizer import Tokenizer
from engine.speculation.drafters import (MAX_SCAN, DraftRequest, LookupDrafter, TreeDrafter, alternative_depth,
                                         tree_rows)
from engine.speculation.factory import make_drafter
from engine.speculation.ngram import NgramIndex
from engine.speculation.oracle import oracle_tokens_per_pass
from engine.speculation.tree import TokenTree

WORKLOADS = Path(__file__).resolve().parents[3] / "assets" / "workloads" / "code_edit_prompts.jsonl"


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_gguf_fields(read_gguf(default_model_path()).metadata)


@pytest.fixture(scope="module")
def workloads() -> list[dict]:
    return [json.loads(line) for line in WORKLOADS.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def code_prompt(tokenizer, workloads) -> list[int]:
    """The first code-edit prompt (textwrap.dedent plus an edit instruction), ~450 tokens."""
    return tokenizer.encode(workloads[0]["messages"][0]["content"], add_special_tokens=False)


# --- brute force --------------------------------------------------------------------------------


def brute_matches(tokens: list[int], n: int) -> list[int]:
    end = len(tokens)
    if end < n:
        return []
    suffix = tokens[end - n:]
    return [p for p in range(n, end) if tokens[p - n:p] == suffix]


def brute_lookup(tokens: list[int], n_min: int, n_max: int) -> tuple[int, list[int]]:
    for n in range(n_max, n_min - 1, -1):
        hits = brute_matches(tokens, n)
        if hits:
            return n, hits
    return 0, []


# --- the index ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(tokens=st.lists(st.integers(0, 3), max_size=60), n_min=st.integers(1, 3),
       extra=st.integers(0, 3), cuts=st.lists(st.integers(0, 60), max_size=4))
def test_index_matches_brute_force(tokens, n_min, extra, cuts):
    n_max = n_min + extra
    idx = NgramIndex(n_min, n_max)
    # feed the stream in arbitrary chunks: the index must not care
    bounds = sorted({0, len(tokens), *[min(c, len(tokens)) for c in cuts]})
    for a, b in zip(bounds, bounds[1:]):
        idx.extend(tokens[a:b])
        seen = tokens[:b]
        assert idx.tokens == seen
        for n in range(n_min, n_max + 1):
            assert idx.matches(n) == brute_matches(seen, n)
        assert idx.lookup() == brute_lookup(seen, n_min, n_max)


def test_index_worked_example_and_errors():
    idx = NgramIndex(1, 2)
    idx.extend([1, 2, 3, 1, 2])
    assert idx.matches(2) == [2]
    assert idx.matches(1) == [2]
    assert idx.lookup() == (2, [2])
    assert idx.continuation(2, 10) == [3, 1, 2]        # cut at the end of the stream
    idx.append(9)
    assert idx.lookup() == (0, [])
    with pytest.raises(ParameterError, match="n-grams of 1..2"):
        idx.matches(3)
    with pytest.raises(ParameterError):
        NgramIndex(0, 2)


# --- drafters on a real prompt --------------------------------------------------------------------


def cut_points(tokens: list[int]) -> range:
    return range(20, len(tokens), 3)


def chain(tree: TokenTree) -> list[int]:
    assert all(p == i - 1 for i, p in enumerate(tree.parents))
    return list(tree.tokens)


@pytest.mark.parametrize("rule", ["recent", "first", "frequent"])
def test_lookup_rules_pick_the_expected_continuation(code_prompt, rule):
    drafter = LookupDrafter(rule)
    depth, differs = 6, 0
    for t in cut_points(code_prompt):
        stream = code_prompt[:t]
        idx = NgramIndex(1, 4)
        idx.extend(stream)
        tree = drafter.propose(DraftRequest.of(idx, depth, 1, 1 + depth))
        n, hits = brute_lookup(stream, 1, 4)
        if not hits:
            assert len(tree) == 0
            continue
        conts = [tuple(stream[p:p + depth]) for p in hits]
        if rule == "recent":
            pos = hits[-1]
        elif rule == "first":
            pos = hits[0]
        else:   # most frequent continuation (among the scanned recent hits), ties: most recent
            counts = Counter(conts[-MAX_SCAN:])
            best = max(counts.values())
            pos = max(p for p, c in zip(hits[-MAX_SCAN:], conts[-MAX_SCAN:]) if counts[c] == best)
        assert chain(tree) == stream[pos:pos + depth]
        assert tree.provenance[0].position == pos
        assert tree.provenance[-1].position == pos + len(tree) - 1
        assert tree.root == stream[-1]
        differs += len({conts[0], conts[-1]}) > 1
    assert differs > 10   # the prompt really has suffixes whose first and last matches disagree


def test_lookup_respects_budget_and_stream_end(code_prompt):
    idx = NgramIndex(1, 4)
    idx.extend(code_prompt)
    tree = LookupDrafter("recent").propose(DraftRequest.of(idx, 8, 1, rows=4))
    assert len(tree) <= 3
    idx = NgramIndex(1, 2)
    idx.extend([5, 6, 7, 5, 6])
    tree = LookupDrafter("recent").propose(DraftRequest.of(idx, 8, 1, rows=9))
    assert chain(tree) == [7, 5, 6]   # the continuation stops at the end of the stream
    assert len(LookupDrafter().propose(DraftRequest.of(idx, 8, 1, rows=1))) == 0


@pytest.mark.parametrize("depth, width", [(8, 3), (4, 4), (6, 1), (3, 8)])
def test_tree_drafter_width_depth_budget_and_sources(code_prompt, depth, width):
    drafter = TreeDrafter()
    budget = 1 + depth * width
    wider = 0
    for t in cut_points(code_prompt):
        stream = code_prompt[:t]
        idx = NgramIndex(1, 4)
        idx.extend(stream)
        tree = drafter.propose(DraftRequest.of(idx, depth, width, budget))
        assert tree.n_rows <= budget and tree.max_depth <= depth
        assert len(tree.leaves()) <= width
        n, hits = brute_lookup(stream, 1, 4)
        if not hits:
            assert len(tree) == 0
            continue
        # every path is copied from the stream, right after an occurrence of the suffix: the
        # continuation that created node i starts depth(i) - 1 tokens before i's position
        for i in range(len(tree)):
            d = tree.depths[i]
            start = tree.provenance[i].position - d + 1
            assert tree.path_tokens(i) == stream[start:start + d]
            assert start in brute_matches(stream, 1)
        # branch 0: the longest n-gram's most frequent continuation (ties: most recent)
        conts = [tuple(stream[p:p + depth]) for p in hits][-MAX_SCAN:]
        counts = Counter(conts)
        best = max(counts.values())
        pos0 = max(p for p, c in zip(hits[-MAX_SCAN:], conts) if counts[c] == best)
        leaf0 = max(i for i in range(len(tree)) if tree.provenance[i].match == 0)
        assert tree.path_tokens(leaf0) == stream[pos0:pos0 + depth]
        # when the longest n-gram has at most `width` continuations, the tree holds all of them
        distinct = {c for c in counts if not any(d != c and d[:len(c)] == c for d in counts)}
        # (the best branch at full depth, the alternatives cut to alternative_depth)
        if len(distinct) <= width:
            paths = {tuple(tree.path_tokens(i)) for i in range(len(tree))}
            alt = alternative_depth(depth)
            assert {c if c == tuple(stream[pos0:pos0 + depth]) else c[:alt] for c in distinct} <= paths
        assert tree.n_rows <= tree_rows(depth, width)
        wider += len(tree.children(-1)) > 1
        # deduped: no candidate repeats, or is a prefix of, an earlier one
        cands = [c for c, _ in drafter.candidates(idx, depth, width)]
        assert not any(b[:len(a)] == a for i, a in enumerate(cands) for b in cands[:i])
    if width > 1:
        assert wider > 5   # the prompt really produces branching trees


def test_make_drafter_builds_what_the_flags_name():
    """A stream where the suffix `5 1 2` was followed first by `3 5` and later by `4 5`: the
    lookup drafter copies the occurrence its match rule names, the tree drafter holds both
    (most recent first) and ignores the match rule."""
    stream = [5, 1, 2, 3, 5, 1, 2, 4, 5, 1, 2]
    idx = NgramIndex(1, 4)
    idx.extend(stream)

    def propose(draft: str, match: str, width: int = 1) -> TokenTree:
        return make_drafter(draft, match).propose(DraftRequest.of(idx, 2, width, rows=8))

    assert make_drafter("none", "recent") is None
    assert chain(propose("lookup", "recent")) == [4, 5]
    assert chain(propose("lookup", "first")) == [3, 5]
    assert chain(propose("lookup", "frequent")) == [4, 5]      # a tie: the most recent
    for match in ("recent", "first"):
        tree = propose("tree", match, width=2)
        assert (tree.tokens, tree.parents) == ((4, 5, 3, 5), (-1, 0, -1, 2))
        assert [p.match for p in tree.provenance] == [0, 0, 1, 1]
    with pytest.raises(ParameterError, match="drafter"):
        make_drafter("medusa", "recent")
    with pytest.raises(ParameterError, match="match"):
        make_drafter("lookup", "latest")


# --- end to end: drafters + greedy verify against an oracle target ----------------------------------


def oracle_answer(item: dict) -> str:
    """The edit a coding agent would emit: the function re-emitted, renamed."""
    code = re.search(r"```python\n(.*?)```", item["messages"][0]["content"], re.S).group(1)
    return "```python\n" + re.sub(rf"\b{item['old_name']}\b", item["new_name"], code) + "```"


def test_oracle_counts_the_passes_a_copying_drafter_needs():
    """The answer copies the prompt: with depth 8 the lookup drafter drafts all of it and one
    pass emits it; with depth 2 each pass accepts 2 drafts plus the target's own token."""
    prompt, answer = [7, 1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6]
    assert oracle_tokens_per_pass(prompt, answer, None, 8, 1) == 1.0
    assert oracle_tokens_per_pass(prompt, answer, LookupDrafter("recent"), 8, 1) == 6.0
    assert oracle_tokens_per_pass(prompt, answer, LookupDrafter("recent"), 2, 1) == 3.0
    # nothing to copy: the drafter never helps
    assert oracle_tokens_per_pass([9, 8], [1, 2, 3], TreeDrafter(), 8, 3) == 1.0


def test_tree_beats_linear_lookup_on_code_edits(tokenizer, workloads):
    results = []
    for item in workloads[:3]:
        prompt = tokenizer.encode(item["messages"][0]["content"], add_special_tokens=False)
        answer = tokenizer.encode(oracle_answer(item), add_special_tokens=False)
        plain = oracle_tokens_per_pass(prompt, answer, None, 8, 1)
        recent = oracle_tokens_per_pass(prompt, answer, LookupDrafter("recent"), 8, 1)
        tree = oracle_tokens_per_pass(prompt, answer, TreeDrafter(), 8, 3)
        assert plain == 1.0
        results.append((recent, tree))
        assert tree >= recent > 1.5
    assert sum(t for _, t in results) > 1.02 * sum(r for r, _ in results)
