"""llama.cpp's own n-gram drafters, ported line for line, so we measure what llama.cpp would draft.

Source: the pinned llama.cpp tree (../shared/peers/llama.cpp-0.3.36-src.tgz, commit 0c1e570,
2026-10-01), `common/ngram-map.cpp` and `common/speculative.cpp`. Line numbers below are that
tree's.

ngram-simple (`common_ngram_simple_draft`, ngram-map.cpp 49-112). llama.cpp hands it the history
WITHOUT the last token (`prompt_tgt`) and the last token apart (`id_last`; speculative-simple.cpp
145, 192-193). With tokens = that history (cur_len of them), n = size_n, m = size_m:

    cur_len <= n + m + 1            -> no draft                                   (64-67)
    pattern = tokens[-(n-1):] + [sampled]: the last n tokens of the whole stream  (70-75)
    j = cur_len-n-1 down to 1: the first (so the LAST in the stream) j with
        tokens[j:j+n] == pattern; position 0 never matches                      (77-91)
    copy_max = min(m, cur_len - (j + n)): the continuation stops BEFORE `sampled`   (96-99)
    copy_max < n                    -> no draft; no earlier match is tried         (100-102)
    draft = tokens[j+n : j+n+copy_max]                                           (107-110)

so with m < n it never drafts (copy_max <= m < n), and a last match too near the end drafts
nothing even when an older match would. common_speculative_draft then cuts the draft to the
request's `n_max` when that is > 0 (speculative.cpp 2832-2836).

ngram-map-k / ngram-map-k4v (`common_ngram_map_draft`, ngram-map.cpp 221-516; the type sets
key_only, speculative.cpp 2175-2184): a hash map from n-gram to ONE earlier index of it (the first
written wins: the prompt's latest occurrence, else the first occurrence generated), searched before
a backward scan; a per-key record of how many draft tokens were accepted last time
(`common_ngram_map_accept`, 518-536), which caps the next draft from that key (so a key whose
draft was wholly rejected never drafts again). ngram-map-k drafts the m tokens after the match;
ngram-map-k4v first counts up to 4 distinct m-token continuations of the key and drafts only when
the most frequent one occurs at least twice as often as all the others together (495-499) and the
key was seen `min_hits` times (401-406) -- and then copies the continuation after the current
match, not the most frequent one (505-507), as the C++ does.

The drafters below follow the drafter protocol of engine.speculation.drafters (propose a chain
rooted at the last committed token, observe the verdict): `--draft ngram-simple --ngram-max N
--depth M` is llama.cpp's `--spec-type ngram-simple --spec-ngram-simple-size-n N
--spec-ngram-simple-size-m M`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from engine.errors import ParameterError
from engine.speculation.drafters import DraftRequest, DrafterBase
from engine.speculation.events import Provenance
from engine.speculation.ngram import NgramIndex
from engine.speculation.tree import TokenTree, build_trie

if TYPE_CHECKING:
    from engine.speculation.verify import VerifyOutcome

LLAMACPP_NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v")

LCG_FACTOR = 2654435761          # ngram-map.cpp 11
HASH_MAP_SIZE = 262144           # ngram-map.h COMMON_NGRAM_HASH_MAP_SIZE
MAX_VALUES = 4                   # ngram-map.h COMMON_NGRAM_MAX_VALUES
MAX_VALUE_COUNT = 16380          # ngram-map.cpp 119


def check_sizes(size_n: int, size_m: int) -> None:
    """arg.cpp 4290-4370: sizes in [1, 1024]."""
    for name, v in (("size_n", size_n), ("size_m", size_m)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1024:
            raise ParameterError(f"llama.cpp n-gram {name} must be between 1 and 1024, got {v!r}")


# ---------------------------------------------------------------------------------------------
# ngram-simple


def ngram_simple_draft(tokens: Sequence[int], sampled: int, size_n: int, size_m: int) -> list[int]:
    """`common_ngram_simple_draft` (ngram-map.cpp 49-112): `tokens` is the history without the
    last token, `sampled` the last token."""
    return ngram_simple_match(tokens, sampled, size_n, size_m)[1]


def ngram_simple_match(tokens: Sequence[int], sampled: int, size_n: int,
                       size_m: int) -> tuple[int, list[int]]:
    """(where the draft was copied from, the draft); (-1, []) for no draft."""
    cur_len = len(tokens)
    n, m = size_n, size_m
    if cur_len <= n + m + 1:                                   # 65
        return -1, []
    pattern = list(tokens[cur_len - n + 1:cur_len]) + [sampled]   # 72-75
    match_pos = 0
    for j in range(cur_len - n - 1, 0, -1):                    # 79: j > 0, position 0 ignored
        if list(tokens[j:j + n]) == pattern:
            match_pos = j
            break
    if match_pos == 0:                                         # 92
        return -1, []
    copy_max = min(m, cur_len - (match_pos + n))               # 96-99
    if copy_max < n:                                           # 100
        return -1, []
    return match_pos + n, list(tokens[match_pos + n:match_pos + n + copy_max])


class NgramSimpleIndex:
    """The same drafts as `ngram_simple_draft` over one known stream, by a table of n-gram start
    positions instead of a backward scan (for replaying many configurations quickly)."""

    def __init__(self, stream: Sequence[int], size_n: int) -> None:
        self.stream = list(stream)
        self.n = size_n
        self.starts: dict[tuple[int, ...], list[int]] = {}
        for j in range(len(self.stream) - size_n + 1):
            self.starts.setdefault(tuple(self.stream[j:j + size_n]), []).append(j)

    def draft(self, cur_len: int, size_m: int) -> list[int]:
        """The draft when the history is stream[:cur_len] and the last token stream[cur_len]."""
        n, m, s = self.n, size_m, self.stream
        if cur_len <= n + m + 1:
            return []
        starts = self.starts.get(tuple(s[cur_len + 1 - n:cur_len + 1]), [])
        k = bisect.bisect_right(starts, cur_len - n - 1) - 1     # the last start <= cur_len-n-1
        if k < 0 or starts[k] == 0:
            return []
        j = starts[k]
        copy_max = min(m, cur_len - (j + n))
        return s[j + n:j + n + copy_max] if copy_max >= n else []


# ---------------------------------------------------------------------------------------------
# ngram-map-k / ngram-map-k4v


def _hash(tokens: Sequence[int], start: int, length: int) -> int:
    """ngram-map.cpp 14-20 (uint32 arithmetic)."""
    h = 0
    for i in range(length):
        h = (h * LCG_FACTOR + tokens[start + i]) & 0xFFFFFFFF
    return h


@dataclass
class _Value:                    # common_ngram_map_value
    value_idx: int = 0
    value_num: int = 0
    n_accepted: int = -1


@dataclass
class _Key:                      # common_ngram_map_key
    key_idx: int
    stat_idx: int = 0
    key_num: int = 0
    values: list[_Value] = field(default_factory=lambda: [_Value() for _ in range(MAX_VALUES)])


class NgramMap:
    """`common_ngram_map` with `common_ngram_map_begin/_draft/_accept`. `begin` is the growing
    history's case only (a request's history never shrinks; lines 128-215 rebuild after a
    reasoning block is cut out of a chat)."""

    def __init__(self, size_key: int, size_value: int, key_only: bool, min_hits: int = 1) -> None:
        check_sizes(size_key, size_value)
        if min_hits < 1:
            raise ParameterError(f"llama.cpp n-gram min_hits must be at least 1, got {min_hits}")
        self.size_key, self.size_value = size_key, size_value
        self.key_only, self.min_hits = key_only, min_hits
        self.keys: list[_Key] = []
        self.key_map: dict[int, int] = {}        # hash slot -> index (absent: 0)
        self.key_map_last_idx = 0
        self.size_last_begin = 0
        self.idx_last_check = 0
        self.last_draft_created = False
        self.last_draft_key_idx = 0
        self.last_draft_value_idx = 0
        self.last_copy_pos = -1                  # ours: where the last draft was copied from

    def begin(self, tokens: Sequence[int]) -> None:
        self.idx_last_check = len(tokens)        # 217-218
        self.size_last_begin = len(tokens)

    def _matches(self, inp: Sequence[int], j: int, key: list[int]) -> bool:
        return list(inp[j:j + self.size_key]) == key

    def draft(self, inp: Sequence[int], sampled: int) -> list[int]:
        # 85 lines, past the house's 60: a line-for-line port of common_ngram_map_draft, kept in
        # the original's shape (the numbers are its lines) so the two read side by side; the
        # allowance is in tests/engine/speculation/test_sizes.py, where the limit is checked
        self.last_draft_created = False                        # 225-227
        self.last_draft_key_idx = 0
        self.last_draft_value_idx = 0
        self.last_copy_pos = -1
        cur_len = len(inp)
        n, m = self.size_key, self.size_value
        if cur_len < 2 * n + m:                                # 232
            return []
        self.idx_last_check = cur_len                          # 244
        key = list(inp[cur_len - n + 1:cur_len]) + [sampled]   # 247-252
        slb, top = self.size_last_begin, cur_len - n - m - 1
        match_pos = 0
        idx_key = self.key_map.get(_hash(key, 0, n) % HASH_MAP_SIZE, 0)    # 259-277
        if idx_key != 0 and idx_key < top and self._matches(inp, idx_key, key):
            match_pos = idx_key
        if match_pos == 0 and slb > n + m + 1:                 # 278-294
            for j in range(slb - n - m - 1, self.key_map_last_idx, -1):
                if self._matches(inp, j, key):
                    match_pos = j
                    break
        if match_pos == 0:                                     # 295-312
            j = top
            while j > slb and j > self.key_map_last_idx:
                if self._matches(inp, j, key):
                    match_pos = j
                    break
                j -= 1
        # 318-340: index the new n-grams (the first index written to a slot stays)
        ranges = []
        if slb > n + m + 1:
            ranges.append(range(slb - n - m - 1, self.key_map_last_idx, -1))
        ranges.append(range(top, max(slb, self.key_map_last_idx), -1))
        for rng in ranges:
            for j in rng:
                self.key_map.setdefault(_hash(inp, j, n) % HASH_MAP_SIZE, j)
        self.key_map_last_idx = max(top, self.key_map_last_idx)
        if match_pos == 0:
            return []
        # 347-373: the key's statistics
        offset = next((i for i, k in enumerate(self.keys) if self._matches(inp, k.key_idx, key)),
                      len(self.keys))
        if offset == len(self.keys):
            new = _Key(key_idx=match_pos)
            for v in new.values:
                v.value_num, v.n_accepted = 0, m
            self.keys.append(new)
        cur = self.keys[offset]
        cur.key_num = min(cur.key_num + 1, MAX_VALUE_COUNT)    # 379
        if self.key_only:                                      # 382-399
            out = [inp[match_pos + n + i] for i in range(min(m, cur.values[0].n_accepted))]
            self.last_draft_created, self.last_draft_key_idx, self.last_draft_value_idx = True, offset, 0
            self.last_copy_pos = match_pos + n
            return out
        if cur.key_num < self.min_hits:                        # 401-406
            return []
        for i in range(cur.stat_idx, match_pos + 1):           # 412-456
            if not self._matches(inp, i, key):
                continue
            begin_value = i + n
            idx_value = -1
            for v, val in enumerate(cur.values):
                if val.value_idx == 0:
                    val.value_idx, val.value_num, val.n_accepted = begin_value, 0, m
                    idx_value = v
                    break
                if list(inp[begin_value:begin_value + m]) == list(inp[val.value_idx:val.value_idx + m]):
                    idx_value = v
                    break
            if idx_value >= 0:
                val = cur.values[idx_value]
                val.value_num = min(val.value_num + 1, MAX_VALUE_COUNT)
        cur.stat_idx = match_pos                               # 458
        max_occur, slot_max = 0, 0                             # 461-469
        for v, val in enumerate(cur.values):
            if val.value_num > max_occur:
                max_occur, slot_max = val.value_num, v
        sum_occur = sum(val.value_num for v, val in enumerate(cur.values) if v != slot_max)
        if sum_occur > 0 and max_occur < 2 * sum_occur:        # 495-499
            return []
        out = [inp[match_pos + n + i] for i in range(min(m, cur.values[slot_max].n_accepted))]
        self.last_draft_created, self.last_draft_key_idx = True, offset
        self.last_draft_value_idx = slot_max
        self.last_copy_pos = match_pos + n
        return out

    def accept(self, n_accepted: int) -> None:
        """`common_ngram_map_accept` (518-536)."""
        if not self.last_draft_created:
            return
        self.keys[self.last_draft_key_idx].values[self.last_draft_value_idx].n_accepted = n_accepted


# ---------------------------------------------------------------------------------------------
# the drafter protocol


class LlamaCppNgram:
    """One request's drafter state of llama.cpp type `spec_type`: `draft(history, last)` gives
    (copied-from position or -1, tokens); `accept(n)` is told the accepted count."""

    def __init__(self, spec_type: str, size_n: int, size_m: int, min_hits: int = 1) -> None:
        check_sizes(size_n, size_m)
        if spec_type not in LLAMACPP_NGRAM_TYPES:
            raise ParameterError(f"llama.cpp n-gram type must be one of "
                                 f"{', '.join(LLAMACPP_NGRAM_TYPES)}, got {spec_type!r}")
        self.spec_type, self.size_n, self.size_m = spec_type, size_n, size_m
        self.map = (None if spec_type == "ngram-simple" else
                    NgramMap(size_n, size_m, key_only=spec_type == "ngram-map-k", min_hits=min_hits))

    def begin(self, history: Sequence[int]) -> None:
        if self.map is not None:
            self.map.begin(history)

    def draft(self, history: Sequence[int], last: int) -> tuple[int, list[int]]:
        if self.map is None:
            return ngram_simple_match(history, last, self.size_n, self.size_m)
        out = self.map.draft(history, last)
        return self.map.last_copy_pos, out

    def accept(self, n_accepted: int) -> None:
        if self.map is not None:
            self.map.accept(n_accepted)


class LlamaCppNgramDrafter(DrafterBase):
    """llama.cpp's `spec_type` as a drafter of ours: size_n is the index's n_max (`--ngram-max`),
    size_m the largest depth this run has asked for (`--depth`). A window's depth below it is the
    end of the request (the decoder caps depth at the tokens still wanted) and cuts the draft as
    llama.cpp's n_max does, after drafting with the full size_m. One difference stays: on the very
    last token our decoder plans a plain step, where llama.cpp (n_max 0: no cut) may still verify
    a draft."""

    def __init__(self, spec_type: str) -> None:
        if spec_type not in LLAMACPP_NGRAM_TYPES:
            raise ParameterError(f"llama.cpp n-gram type must be one of "
                                 f"{', '.join(LLAMACPP_NGRAM_TYPES)}, got {spec_type!r}")
        self.name = spec_type
        self._state: LlamaCppNgram | None = None
        self._drafted = False        # propose ran since the last verdict (plain steps skip it)

    def propose(self, req: DraftRequest) -> TokenTree:
        index, root, depth, budget_rows = req.index, req.root, req.depth, req.rows
        st = self._state
        size_n = index.n_max
        size_m = max(depth, st.size_m if st is not None and st.size_n == size_n else 0)
        if st is None or (st.size_n, st.size_m) != (size_n, size_m):
            # a new configuration: llama.cpp would start afresh (begin: speculative-simple.cpp 150)
            st = self._state = LlamaCppNgram(self.name, size_n, size_m)
            st.begin(index.tokens[:-1])
        history = index.tokens[:-1]
        pos, draft = st.draft(history, root)
        self._drafted = True
        n_max = min(depth, budget_rows - 1)
        if n_max > 0:                            # speculative.cpp 2832-2836
            draft = draft[:n_max]
        if not draft:
            return TokenTree.empty(root)
        prov = Provenance(match=0, position=pos, source=self.name, count=1)
        return build_trie(root, [(tuple(draft), prov)], budget_rows)

    def observe(self, outcome: "VerifyOutcome") -> None:
        if self._state is not None and self._drafted:
            self._state.accept(len(outcome.accepted))
        self._drafted = False
