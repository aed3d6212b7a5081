"""An n-gram index over the request's token stream (prompt + emitted tokens).

Prompt lookup (Saxena 2023; transformers' `prompt_lookup_num_tokens`, llama.cpp's lookup) drafts
by finding earlier places where the last n tokens occurred and copying what followed. The index
keeps, for each n in [n_min, n_max], a dict from the n-gram to the positions right after its
occurrences, updated as tokens arrive, so a lookup is n_max - n_min + 1 dict probes instead of a
scan of the context.

Example, stream [a b c a b], n = 2:
    (a, b) -> [2, 5]     # continuations start at 2 ("c a b") and at 5 (the end: the suffix itself)
    matches(2) -> [2]    # the suffix's own occurrence is excluded
"""

from __future__ import annotations

from typing import Sequence

from engine.errors import ParameterError


class NgramIndex:
    """Positions of every n-gram (n_min <= n <= n_max) of a growing token stream."""

    def __init__(self, n_min: int, n_max: int) -> None:
        if not 1 <= n_min <= n_max:
            raise ParameterError(f"n-gram sizes need 1 <= n_min <= n_max, got {n_min} and {n_max}")
        self.n_min = n_min
        self.n_max = n_max
        self.tokens: list[int] = []
        # n -> {n-gram: [continuation start, ...]} in increasing order; a position p means the
        # n-gram is tokens[p - n:p] and its continuation starts at tokens[p]
        self._tables: dict[int, dict[tuple[int, ...], list[int]]] = {
            n: {} for n in range(n_min, n_max + 1)}

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        """Append tokens to the stream and index every n-gram that now ends at them."""
        toks = self.tokens
        tables = self._tables
        for t in tokens:
            toks.append(int(t))
            end = len(toks)
            for n, table in tables.items():
                if end < n:
                    break   # n ascends: longer n-grams do not fit either
                key = tuple(toks[end - n:end])
                hits = table.get(key)
                if hits is None:
                    table[key] = [end]
                else:
                    hits.append(end)

    def append(self, token: int) -> None:
        self.extend((token,))

    def matches(self, n: int) -> list[int]:
        """Continuation starts of the earlier occurrences of the last n tokens, oldest first.

        The suffix's own occurrence (whose continuation would start at the end) is excluded, so
        every returned position p has p < len(tokens) and tokens[p:] is a non-empty continuation.
        """
        if n not in self._tables:
            raise ParameterError(f"this index holds n-grams of {self.n_min}..{self.n_max} tokens, not {n}")
        end = len(self.tokens)
        if end < n:
            return []
        hits = self._tables[n].get(tuple(self.tokens[end - n:]))
        # the suffix itself was indexed last, so it is always the final entry
        return hits[:-1] if hits else []

    def lookup(self) -> tuple[int, list[int]]:
        """The longest n (n_max down to n_min) whose last n-gram occurred before: (n, positions).

        (0, []) when even the last n_min tokens never occurred before.
        """
        for n in range(self.n_max, self.n_min - 1, -1):
            hits = self.matches(n)
            if hits:
                return n, hits
        return 0, []

    def continuation(self, position: int, length: int) -> list[int]:
        """Up to `length` tokens copied from `position`; shorter near the end of the stream."""
        return self.tokens[position:position + length]
