"""Drafters: turn the n-gram index into a draft tree for the next verify pass.

One contract (the proposer side of transformers' CandidateGenerator / vLLM's proposer): a
drafter is handed a frozen `DraftRequest` and proposes a `TokenTree` rooted at the last committed
token; it is told the verdict afterwards (`observe`) and, once a request starts, the target's
stream (`begin`, a `TargetStream`: a model drafter takes the stream it drafts on there). An empty
tree means "no draft: decode one token normally". Every drafter obeys the same contract, so the
decoder never asks which drafter it holds; `DrafterBase` gives the hooks a drafter does not need.

- `LookupDrafter`: prompt lookup decoding. One continuation of up to `depth` tokens copied from
  one earlier occurrence of the longest matching suffix n-gram. Which occurrence is the match
  rule: "recent" (llama.cpp's lookup: the most recent), "first" (transformers'
  prompt_lookup_num_tokens: the first), "frequent" (the continuation that recurs most often;
  ties go to the most recent).
- `TreeDrafter`: the top `width` distinct continuations merged into a trie. Code is full of
  near-duplicate lines (`self.a = a`, `self.b = b`, ...), so the same suffix is followed by
  several plausible continuations; a linear drafter must bet on one, the tree checks several in
  the same pass (3 matches x depth 8 = 24 rows + the root: on a bandwidth-bound card such rows
  are nearly free; the RX 9070 XT reference in assets/profiles is flat up to ~24 rows).
  Candidates come from every n from n_max down to n_min, longer n-grams first (a longer match is
  more specific), then by how often the continuation recurs, then by recency; a candidate equal
  to, or a prefix of, one already taken adds no node and is skipped, so `width` counts branches
  that really differ.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

from engine.errors import ParameterError
from engine.speculation.events import Provenance
from engine.speculation.ngram import NgramIndex
from engine.speculation.sampling import Rng, SamplingConfig
from engine.speculation.settings import MATCH_RULES
from engine.speculation.stream import TargetStream
from engine.speculation.tree import TokenTree, build_trie

if TYPE_CHECKING:
    from engine.speculation.verify import VerifyOutcome

# Ranking scans at most this many of the most recent occurrences of one n-gram: a 1-gram such
# as "\n" can occur hundreds of times in a 4k context, and old occurrences add little.
MAX_SCAN = 256


GREEDY = SamplingConfig()


@dataclass(frozen=True, eq=False)
class DraftRequest:
    """What a drafter is asked for one window.

    context: the committed stream, ending with the root (index.tokens is the same stream);
    depth, width: the window's shape (a chain when width is 1); rows: the most verify rows the
    draft may fill, root included (the plan's rows, cut to what one pass and the cache hold);
    sampling, rng: the request's sampling (a model drafter samples its tokens through it; the
    n-gram drafters copy text and ignore it)."""

    context: Sequence[int]
    index: NgramIndex
    root: int
    depth: int
    width: int
    rows: int
    sampling: SamplingConfig = GREEDY
    rng: Rng | None = None

    @classmethod
    def of(cls, index: NgramIndex, depth: int, width: int, rows: int, **kw: Any) -> "DraftRequest":
        """A request on the stream the index holds (its last token is the root)."""
        return cls(index.tokens, index, index.tokens[-1], depth, width, rows, **kw)


@runtime_checkable
class Drafter(Protocol):
    name: str

    def begin(self, session: TargetStream) -> None:
        """A request starts on the target's stream (engine.speculation.stream)."""
        ...

    def propose(self, req: DraftRequest) -> TokenTree:
        """A draft tree rooted at `req.root` with at most `req.rows` rows including the root;
        the empty tree means no draft."""
        ...

    def observe(self, outcome: "VerifyOutcome") -> None:
        """The verdict on the last proposal."""
        ...


class DrafterBase:
    """The hooks a drafter without state of its own leaves alone."""

    name = "drafter"

    def begin(self, session: TargetStream) -> None:
        pass

    def observe(self, outcome: "VerifyOutcome") -> None:
        pass


def rank_continuations(index: NgramIndex, positions: list[int], length: int,
                       max_scan: int = MAX_SCAN) -> list[tuple[tuple[int, ...], int, int]]:
    """Distinct continuations of up to `length` tokens starting at `positions`, best first.

    Returns (continuation, count, most recent start) sorted by count, then recency. A
    continuation cut short by the end of the stream is its own (shorter) entry.
    """
    toks = index.tokens
    counts: Counter[tuple[int, ...]] = Counter()
    latest: dict[tuple[int, ...], int] = {}
    for p in positions[-max_scan:]:
        cont = tuple(toks[p:p + length])
        counts[cont] += 1
        latest[cont] = p   # positions ascend, so the last write is the most recent
    return sorted(((c, n, latest[c]) for c, n in counts.items()),
                  key=lambda e: (e[1], e[2]), reverse=True)


class LookupDrafter(DrafterBase):
    """Prompt lookup: one continuation from one match of the longest suffix n-gram."""

    name = "lookup"

    def __init__(self, match: str = "recent") -> None:
        if match not in MATCH_RULES:
            raise ParameterError(f"match rule must be one of {', '.join(MATCH_RULES)}, got {match!r}")
        self.match = match

    def propose(self, req: DraftRequest) -> TokenTree:
        index, root, budget_rows = req.index, req.root, req.rows
        length = min(req.depth, budget_rows - 1)
        n, hits = index.lookup()
        if not hits or length < 1:
            return TokenTree.empty(root)
        ranked = rank_continuations(index, hits, length)
        if self.match == "frequent":
            cont, count, pos = ranked[0]
        else:
            pos = hits[-1] if self.match == "recent" else hits[0]
            cont = tuple(index.continuation(pos, length))
            # occurrences outside the scanned (most recent) ones are not counted
            count = next((c for t, c, _ in ranked if t == cont), 1)
        prov = Provenance(match=0, position=pos, source="lookup", count=count)
        return build_trie(root, [(cont, prov)], budget_rows)


class TreeDrafter(DrafterBase):
    """The top `width` distinct continuations as one trie: the best-ranked one up to `depth`
    tokens (the spine), each alternative up to max(2, depth // 4).

    Why this shape: these continuations are copies, so once the first tokens of a branch are
    accepted the rest usually is too; an alternative earns its rows where the best match fails
    in its first few tokens, and rarely deeper. Measured at a 25-row budget on the code-edit
    prompts (BENCHMARKS.md): spine 16 + 4 + 4 gave 3.77 tokens per pass, three even branches of
    8 gave 3.44, one linear branch of 24 gave 3.42.
    """

    name = "tree"

    def candidates(self, index: NgramIndex, length: int,
                   width: int) -> list[tuple[tuple[int, ...], Provenance]]:
        """The ranked continuations the trie is built from (at most `width`)."""
        chosen: list[tuple[tuple[int, ...], Provenance]] = []
        for n in range(index.n_max, index.n_min - 1, -1):
            hits = index.matches(n)
            if not hits:
                continue
            for cont, count, pos in rank_continuations(index, hits, length):
                # equal to, or a prefix of, a chosen continuation: the trie has it already
                if any(c[:len(cont)] == cont for c, _ in chosen):
                    continue
                chosen.append((cont, Provenance(match=len(chosen), position=pos,
                                                source="tree", count=count)))
                if len(chosen) == width:
                    return chosen
        return chosen

    def propose(self, req: DraftRequest) -> TokenTree:
        length = min(req.depth, req.rows - 1)
        if length < 1 or req.width < 1:
            return TokenTree.empty(req.root)
        cands = self.candidates(req.index, length, req.width)
        alt = min(length, alternative_depth(length))
        cands = cands[:1] + [(cont[:alt], prov) for cont, prov in cands[1:]]
        return build_trie(req.root, cands, req.rows)


def alternative_depth(depth: int) -> int:
    """How deep the tree drafter's alternatives to its best branch go."""
    return max(2, depth // 4)


def tree_rows(depth: int, width: int) -> int:
    """Verify rows of a full tree of this depth and width, root included."""
    return 1 + depth + (width - 1) * min(depth, alternative_depth(depth))

