"""The runtime's two verify paths agree: eager (CPU) and the graph-bucket path (padded rows,
packed inputs, mask derived on the device), which on CPU runs the same code without capture."""

from __future__ import annotations

import random

import pytest
import torch

from engine.errors import ParameterError
from engine.model.runtime import Runtime, chain
from engine.speculation.tree import TokenTree


@pytest.fixture(scope="module")
def runtimes(loaded_model):
    eager = Runtime(loaded_model, "cpu", "float32", capacity=256, graphs=False)
    bucketed = Runtime(loaded_model, "cpu", "float32", capacity=256, graphs=True)
    return eager, bucketed


def test_bucketed_verify_equals_eager(runtimes, tokenizer) -> None:
    eager, bucketed = runtimes
    prefix = tokenizer.encode("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n")
    rng = random.Random(0)
    R = 11    # pads to the 16-row bucket
    tokens = [prefix[-1]] + [rng.randrange(1000) for _ in range(R - 1)]
    tree = TokenTree.from_rows(tokens, [-1] + [rng.randrange(i) for i in range(1, R)])
    out = []
    for rt in (eager, bucketed):
        ses = rt.session(len(prefix) + 64)
        ses.prefill(prefix[:-1])
        out.append(ses.verify(tokens, tree.row_depths, tree.ancestor_mask()))
    torch.testing.assert_close(out[0].logits, out[1].logits, atol=1e-4, rtol=1e-4)
    assert torch.equal(out[0].top_ids[:, 0], out[1].top_ids[:, 0])


def test_prompt_longer_than_context_is_a_clear_error(runtimes) -> None:
    eager, _ = runtimes
    with pytest.raises(ParameterError, match="context"):
        eager.session(eager.config.max_context + 1)


def test_sessions_are_independent_streams_and_scratch_passes_commit_nothing(runtimes, tokenizer) -> None:
    """Two sessions on one runtime keep their own caches (a race's two sides); a scratch pass
    at a length past the committed one leaves the committed keys and length alone and refuses
    a length below it; a closed session is handed to the next request with its graphs."""
    _, rt = runtimes
    a_ids = tokenizer.encode("def add(a, b):\n    return a + b\n")
    b_ids = tokenizer.encode("The capital of France is")
    a, b = rt.session(64), rt.session(64)
    a.prefill(a_ids[:-1])
    b.prefill(b_ids[:-1])
    alone = rt.session(64)
    alone.prefill(a_ids[:-1])
    ref = alone.verify([a_ids[-1]], *chain(1)).logits
    alone.close()
    before = a.cache.kv[:, :, :, :a.length].clone()
    n = a.length
    a.scratch([7, 8, 9], *chain(3), at=n + 5)          # a draft or timing pass past the text
    assert a.length == n and torch.equal(a.cache.kv[:, :, :, :n], before)
    with pytest.raises(ParameterError, match="committed"):
        a.scratch([7], *chain(1), at=n - 1)
    torch.testing.assert_close(a.verify([a_ids[-1]], *chain(1)).logits, ref)
    assert b.length == len(b_ids) - 1
    graphs = dict(a._buckets)
    a.close()
    again = rt.session(32)
    assert again is a and again.length == 0 and again._buckets == graphs


def test_a_session_made_by_a_probe_serves_a_later_request(loaded_model, tokenizer) -> None:
    """A probe times passes inside inference mode, on a session it borrows; handed back, that
    session's cache must still take a request's commits outside inference mode."""
    rt = Runtime(loaded_model, "cpu", "float32", capacity=64)
    with torch.inference_mode():
        rt.time_verify_pass(2, 8)
    ids = tokenizer.encode("def add(a, b):\n    return")
    s = rt.session(len(ids) + 4)
    s.prefill(ids[:-1])
    tree = TokenTree.from_rows([ids[-1], 5, 6], [-1, 0, 0])       # two siblings
    s.verify([ids[-1], 5, 6], tree.row_depths, tree.ancestor_mask())
    s.commit([0, 2])                    # a branch: moved down into the prefix, in place
    assert s.length == len(ids) + 1


def test_bucketed_prefill_equals_eager(runtimes, tokenizer) -> None:
    """A prefill chunk padded up to its graph bucket writes the same committed keys as the eager
    prefill, and the next pass sees the same context: padding rows come after every real row,
    and their keys land past the committed length, where the next tokens overwrite them.

    Same prompt, same bits: a bucketed chunk runs through its bucket from its first use (never
    once at its own shape and later at the padded one), so the session's second prefill of the
    prompt writes exactly the keys of its first (issue 31: a runtime that had prefilled a chunk
    of the same shape before gave other tokens than a fresh one)."""
    eager, bucketed = runtimes
    ids = tokenizer.encode("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n")
    R = len(ids) - 1
    assert 16 < R < 31
    outs, kvs = [], []
    for rt in (eager, bucketed):
        ses = rt.session(len(ids) + 40)
        ses.prefill(ids[:-1])
        if rt is bucketed:
            assert (31, 32) in ses._prefills and ses.length == R     # the bucket, first use
            first = ses.cache.kv[:, :, :, :R].clone()
            ses.truncate(0)
            ses.prefill(ids[:-1])               # its second use
            assert torch.equal(ses.cache.kv[:, :, :, :R], first)
        kvs.append(ses.cache.kv[:, :, :, :R].clone())
        outs.append(ses.verify([ids[-1]], *chain(1)))
        ses.close()
    torch.testing.assert_close(kvs[0], kvs[1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outs[0].logits, outs[1].logits, atol=1e-4, rtol=1e-4)
    assert torch.equal(outs[0].top_ids, outs[1].top_ids)
