"""llama.cpp's n-gram drafters, ported: each expected proposal below was written from reading the
pinned tree (llama.cpp 0c1e570, common/ngram-map.cpp; line numbers are that file's), not from
running our port. `tokens` is llama.cpp's prompt_tgt (the history without the last token) and
`sampled` its id_last (examples/speculative-simple/speculative-simple.cpp 145, 192-193)."""

from __future__ import annotations

import random

import pytest

from engine.errors import ParameterError
from engine.speculation.llamacpp_ngram import (NgramMap, NgramSimpleIndex, ngram_simple_draft)


@pytest.mark.parametrize("tokens, sampled, n, m, expected, why", [
    # pattern [1, 2] (72-75); scan j = 9..1 (79): j = 6 matches first; copy_max = min(3, 12-8) = 3
    # (96-99): tokens[8:11]. The older match at j = 1 (continuation 3 4 5) is never looked at.
    ([9, 1, 2, 3, 4, 5, 1, 2, 6, 7, 8, 1], 2, 2, 3, [6, 7, 8], "the last earlier match"),
    # the last match j = 9 leaves copy_max = min(4, 14-12) = 2 < n = 3 (100-102): no draft, and
    # the match at j = 1 (followed by 8 9 9 9) is not tried instead
    ([5, 1, 2, 3, 8, 9, 9, 9, 0, 1, 2, 3, 1, 2], 3, 3, 4, [], "a last match too near the end"),
    # m = 2 < n = 3: copy_max <= m < n, so never a draft, though j = 1 matches
    ([5, 1, 2, 3, 8, 9, 9, 9, 9, 9, 1, 2], 3, 3, 2, [], "size_m < size_n"),
    # the only earlier [1, 2] starts at position 0, which the scan (j > 0, line 79) skips
    ([1, 2, 7, 7, 7, 7, 7, 7, 1], 2, 2, 2, [], "position 0 never matches"),
    # [4, 4] occurs at j = 7, but the scan starts at cur_len - n - 1 = 6: an occurrence followed
    # only by `sampled` is not a match
    ([0, 4, 5, 6, 7, 8, 9, 4, 4], 4, 2, 2, [], "the occurrence ending at the last token"),
    # cur_len 6 <= n + m + 1 = 6 (65): too short, though [1, 2] recurs
    ([3, 1, 2, 5, 6, 1], 2, 2, 3, [], "history too short"),
    # n = 1: the pattern is `sampled` alone; last 5 at j = 4; copy_max = min(2, 8-5) = 2
    ([0, 5, 1, 1, 5, 8, 9, 3], 5, 1, 2, [8, 9], "n = 1"),
    # the copy stops before `sampled`: last [1, 2] at j = 5, copy_max = min(4, 9-7) = 2 -> [3, 1],
    # not [3, 1, 2] (sampled is not part of `tokens`)
    ([7, 7, 7, 7, 7, 1, 2, 3, 1], 2, 2, 4, [3, 1], "the copy ends before the last token"),
    # the same with m = 8: cur_len 9 <= n + m + 1 = 11 (65), so nothing at all
    ([7, 7, 7, 7, 7, 1, 2, 3, 1], 2, 2, 8, [], "a long size_m needs a long history"),
])
def test_ngram_simple_drafts_what_llamacpp_drafts(tokens, sampled, n, m, expected, why) -> None:
    assert ngram_simple_draft(tokens, sampled, n, m) == expected, why


def test_the_indexed_replay_drafts_as_the_literal_scan() -> None:
    rng = random.Random(7)
    for trial in range(60):
        stream = [rng.randrange(5) for _ in range(rng.randrange(10, 90))]
        n, m = rng.randrange(1, 5), rng.randrange(1, 9)
        idx = NgramSimpleIndex(stream, n)
        for cur_len in range(1, len(stream)):
            assert idx.draft(cur_len, m) == ngram_simple_draft(stream[:cur_len], stream[cur_len], n, m), \
                (trial, cur_len)


def test_ngram_map_k_uses_the_hashed_first_occurrence_and_shrinks_to_what_was_accepted() -> None:
    # begin: size_last_begin = 9 (217-218). key [1, 2]; no hash yet; the scan over
    # [slb-n-m-1 = 4 .. > 0] (278-294) finds j = 1; the new key's n_accepted = m (370);
    # key_only drafts min(m, 2) tokens after the match (386-390): inp[3:5]
    mp = NgramMap(2, 2, key_only=True)
    inp = [7, 1, 2, 3, 4, 9, 9, 9, 1]
    mp.begin(inp)
    assert mp.draft(inp, 2) == [3, 4]
    mp.accept(1)                                   # 535: this key's n_accepted = 1
    # [1, 2] recurs at 8, but the hash slot holds 1 (written first, 326-328; 263 accepts it as
    # 1 < cur_len-n-m-1 = 8): the prompt's occurrence, and only min(m, 1) = 1 token
    inp2 = inp + [2, 3, 5, 1]
    assert mp.draft(inp2, 2) == [3]
    assert ngram_simple_draft(inp2, 2, 2, 2) == [3, 5]    # ngram-simple: the last match (8)
    mp.accept(0)
    # a key whose draft was wholly rejected drafts nothing ever after (386: min(m, 0) = 0)
    assert mp.draft(inp2 + [2, 6, 1], 2) == []


def test_ngram_map_k4v_drafts_only_a_dominant_continuation_and_copies_after_the_current_match() -> None:
    # n = m = 1; key [1] at 1, 3, 5 (scan finds 5 first, 278-294). Values counted from stat_idx 0
    # to 5 (412-456): after 1 -> 7, after 3 -> 7, after 5 -> 8: counts 2 and 1; 2 < 2 * 1 is
    # false (495), so it drafts -- the token after the CURRENT match (505-507): 8, not the
    # dominant 7
    mp = NgramMap(1, 1, key_only=False)
    inp = [5, 1, 7, 1, 7, 1, 8, 0, 0]
    mp.begin(inp)
    assert mp.draft(inp, 1) == [8]
    # three different continuations, one each: 1 < 2 * 2 -> no draft (495-499)
    mp = NgramMap(1, 1, key_only=False)
    inp = [5, 1, 7, 1, 8, 1, 9, 0, 0]
    mp.begin(inp)
    assert mp.draft(inp, 1) == []
    # min_hits 2: the first sighting of a key drafts nothing (401-406)
    mp = NgramMap(1, 1, key_only=False, min_hits=2)
    inp = [5, 1, 7, 1, 7, 1, 8, 0, 0]
    mp.begin(inp)
    assert mp.draft(inp, 1) == []


def test_sizes_outside_llamacpps_range_are_one_clear_error() -> None:
    with pytest.raises(ParameterError, match="between 1 and 1024"):
        NgramMap(0, 4, key_only=True)
