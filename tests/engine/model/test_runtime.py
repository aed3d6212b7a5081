"""The runtime's two verify paths agree: eager (CPU) and the graph-bucket path (padded rows,
packed inputs, mask derived on the device), which on CPU runs the same code without capture."""

from __future__ import annotations

import random

import pytest
import torch

from engine.errors import ParameterError
from engine.model.runtime import Runtime, chain
from engine.speculation.tree import TokenTree


def random_window(root: int, R: int, rng: random.Random, vocab: int) -> tuple[list[int], TokenTree]:
    """A window of R rows from `root`: random tokens below `vocab`, each row hung from a random
    earlier row."""
    tokens = [root] + [rng.randrange(vocab) for _ in range(R - 1)]
    return tokens, TokenTree.from_rows(tokens, [-1] + [rng.randrange(i) for i in range(1, R)])


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
    tokens, tree = random_window(prefix[-1], R, rng, 1000)
    out = []
    for rt in (eager, bucketed):
        ses = rt.session(len(prefix) + 64)
        ses.prefill(prefix[:-1])
        out.append(ses.verify(tokens, tree.row_depths, tree.ancestor_mask()))
    torch.testing.assert_close(out[0].logits, out[1].logits, atol=1e-4, rtol=1e-4)
    assert torch.equal(out[0].top_ids[:, 0], out[1].top_ids[:, 0])


def test_a_buckets_one_copy_back_is_its_rows_top_k(runtimes, tokenizer) -> None:
    """A bucketed pass's fast path sends its top k home in one copy (values, then ids as
    float32): read back, it is each real row's top k of the same pass's logits exactly, ids as
    long, and no padded row travels."""
    _, bucketed = runtimes
    prefix = tokenizer.encode("import os\nimport sys\n\ndef main():\n")
    rng = random.Random(5)
    for R in (1, 5, 16, 17):
        tokens, tree = random_window(prefix[-1], R, rng, 2000)
        got = []
        for need in (True, False):
            ses = bucketed.session(len(prefix) + 64)
            ses.prefill(prefix[:-1])
            got.append(ses.verify(tokens, tree.row_depths, tree.ancestor_mask(), need_logits=need))
        full, fast = got
        assert fast.logits is None and fast.top_ids.dtype == torch.long
        assert fast.top_values.shape == fast.top_ids.shape == (R, 5)
        want = full.logits.topk(5, dim=-1)
        assert torch.equal(fast.top_values, want.values)
        assert torch.equal(fast.top_ids, want.indices)
        assert torch.equal(full.top_ids, fast.top_ids) and torch.equal(full.top_values, fast.top_values)


def test_a_bucket_uploads_each_rows_token_position_and_ancestors(runtimes, tokenizer) -> None:
    """The one host -> device upload of a bucketed pass (built with NumPy on the host), read back
    and checked against the tree's own walk up its parents: each row's token and depth, the
    padded rows' positions past the window, the committed length, and row r's ancestor at depth
    j in the table (a padded row: itself, at its depth past the window)."""
    _, bucketed = runtimes
    prefix = tokenizer.encode("def add(a, b):\n    return a + b\n")
    ses = bucketed.session(len(prefix) + 64)
    ses.prefill(prefix[:-1])
    rng = random.Random(3)
    for R in (1, 2, 11, 16, 17):
        tokens, tree = random_window(prefix[-1], R, rng, 1000)
        ses.verify(tokens, tree.row_depths, tree.ancestor_mask(), need_logits=False)
        g = ses._bucket(R)
        B, n = g.rows, ses.length
        packed = g.packed.tolist()
        assert packed[:R] == tokens and packed[R:B] == [0] * (B - R)
        assert packed[B:2 * B] == list(tree.row_depths) + list(range(1, B - R + 1))
        assert packed[2 * B] == n
        table = [packed[2 * B + 1 + r * B:2 * B + 1 + (r + 1) * B] for r in range(B)]
        for r in range(R):
            walk = [0] + [i + 1 for i in tree.path_to(r - 1)]
            assert table[r] == walk + [0] * (B - len(walk)), (R, r)
        for r in range(R, B):           # at depth r - R + 1: itself, above it the root (0)
            assert table[r] == [0] * (r - R + 1) + [r] + [0] * (B - r + R - 2), (R, r)


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


def test_queued_plain_steps_give_the_steps_tokens_and_scores(runtimes, tokenizer) -> None:
    """verify(ahead=True) queues the next plain step on its own top-1 token at the next length;
    verifying that token at that length takes the queued result, which equals a pass run for it
    (the same inputs); another token, another length, or a scratch pass in between drops it and
    the pass runs again. A run of plain steps takes every queued step but the last."""
    _, rt = runtimes
    ids = tokenizer.encode("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n")
    ref = rt.session(len(ids) + 16)
    ref.prefill(ids[:-1])
    want, tok = [], ids[-1]
    for _ in range(5):                              # the reference: one pass a step, no queue
        sc = ref.verify([tok], *chain(1), need_logits=False)
        want.append((sc.top_values, sc.top_ids))
        ref.commit([0])
        tok = int(sc.top_ids[0, 0])
    ref.close()
    s = rt.session(len(ids) + 16)
    s.prefill(ids[:-1])
    q0, t0 = s.plain_queue.queued, s.plain_queue.taken
    tok = ids[-1]
    for i in range(5):
        sc = s.verify([tok], *chain(1), need_logits=False, ahead=i < 4)
        assert torch.equal(sc.top_ids, want[i][1]) and torch.equal(sc.top_values, want[i][0])
        s.commit([0])
        tok = int(sc.top_ids[0, 0])
    assert (s.plain_queue.queued - q0, s.plain_queue.taken - t0) == (4, 4)
    # a queued step not continued: another token at the same length runs its own pass
    n = s.length
    sc = s.verify([tok], *chain(1), need_logits=False, ahead=True)
    other = (int(sc.top_ids[0, 0]) + 1) % rt.config.vocab_size
    s.commit([0])
    alone = s.verify([other], *chain(1), need_logits=False)
    taken = s.plain_queue.taken
    s.truncate(n)
    s.verify([tok], *chain(1), need_logits=False, ahead=True)        # queues again
    s.scratch([3], *chain(1), at=n + 3)                               # ... and drops it
    again = s.verify([tok], *chain(1), need_logits=False)
    assert s.plain_queue.taken == taken and torch.equal(again.top_ids, sc.top_ids)
    fresh = rt.session(len(ids) + 16)
    fresh.prefill(ids[:-1] + [ids[-1]] + [int(w[1][0, 0]) for w in want[:-1]] + [tok])
    assert fresh.length == n + 1
    assert torch.equal(fresh.verify([other], *chain(1), need_logits=False).top_ids, alone.top_ids)
    fresh.close()
    s.close()


def test_a_plain_run_queues_its_steps_and_keeps_its_tokens(loaded_model, tokenizer) -> None:
    """The decoder queues each plain step behind the last where the next window is plain
    whatever the token (--draft none), and the run's tokens are those of a run that does not."""
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    ids = tokenizer.encode("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n")
    s = DecodeSettings(draft="none", max_new_tokens=12)
    out = []
    for graphs in (True, False):
        rt = Runtime(loaded_model, "cpu", "float32", capacity=128, graphs=graphs)
        dec = Decoder(rt, ids, s, detail=False)
        out.append(dec.run()["tokens"])
        ses = rt._idle[0]
        assert (ses.plain_queue.queued, ses.plain_queue.taken) == ((11, 11) if graphs else (0, 0))
    assert out[0] == out[1] and len(out[0]) == 12


def test_queued_plain_steps_bring_the_rows_summary_where_asked(runtimes, tokenizer) -> None:
    """A run that shows its rows (summary=True) queues plain steps too: each queued result has
    the same top-k, log normaliser and window logit as a pass run for it; a step queued without
    the summary is not taken by a verify that asks for one."""
    _, rt = runtimes
    ids = tokenizer.encode("The capital of France is Paris. The capital of Spain is")
    got = []
    for ahead in (False, True):
        s = rt.session(len(ids) + 8)
        s.prefill(ids[:-1])
        tok, rows, taken = ids[-1], [], s.plain_queue.taken
        for i in range(4):
            sc = s.verify([tok], *chain(1), need_logits=False, summary=True, ahead=ahead and i < 3)
            rows.append(sc)
            s.commit([0])
            tok = int(sc.top_ids[0, 0])
        assert s.plain_queue.taken - taken == (3 if ahead else 0)
        got.append(rows)
        s.close()
    for a, b in zip(*got):
        assert a.log_norm is not None and b.log_norm is not None
        for f in ("top_values", "top_ids", "log_norm", "window_logits"):
            assert torch.equal(getattr(a, f), getattr(b, f)), f
    s = rt.session(len(ids) + 8)
    s.prefill(ids[:-1])
    taken = s.plain_queue.taken
    sc = s.verify([ids[-1]], *chain(1), need_logits=False, ahead=True)
    s.commit([0])
    detailed = s.verify([int(sc.top_ids[0, 0])], *chain(1), need_logits=False, summary=True)
    assert s.plain_queue.taken == taken and torch.equal(detailed.log_norm, got[0][1].log_norm)
    s.close()


def test_a_run_behind_the_ar_floor_wastes_no_queued_step(loaded_model, tokenizer) -> None:
    """Behind the AR floor the decoder queues a plain step only where the floor will ask for
    one whatever the token (retired, steps left): every queued step is taken, but for one a
    run's end may leave (the end of text)."""
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    rt = Runtime(loaded_model, "cpu", "float32", capacity=256, graphs=True)
    ids = tokenizer.encode("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n")
    dec = Decoder(rt, ids, DecodeSettings(draft="tree", ar_floor=True, max_new_tokens=40),
                  detail=False)
    rep = dec.run()
    q = rt._idle[0].plain_queue
    assert 0 <= q.queued - q.taken <= 1 and rep["new_tokens"] > 1


@pytest.mark.parametrize("lead", [1, 0])
def test_the_floor_times_plain_steps_that_came_queued(loaded_model, tokenizer, lead) -> None:
    """The decoder's AR floor leads each timing with an untimed plain step, which queues the
    timed one behind it: every plain step the floor times was taken from the session's queue,
    as plain decoding's steps are. The control (a floor that times the first plain step after
    a window, as before) times a step that ran its own pass."""
    from engine.cost.floor import ArFloor
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    rt = Runtime(loaded_model, "cpu", "float32", capacity=256, graphs=True)
    ids = tokenizer.encode("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n")
    dec = Decoder(rt, ids, DecodeSettings(draft="tree", ar_floor=True, max_new_tokens=24),
                  detail=False)
    if not lead:
        dec.factory.floor = ArFloor(lead=0)
    timed_from_queue, taken, timed = [], 0, 0
    for _ in dec.windows():
        floor, q = dec.factory.floor, dec.session.plain_queue
        if floor.timed > timed:
            timed_from_queue.append(q.taken > taken)
        taken, timed = q.taken, floor.timed
    assert timed_from_queue
    if lead:
        assert all(timed_from_queue) and floor.ar_windows > floor.timed, timed_from_queue
    else:
        assert not timed_from_queue[0]



def _fixed_tree_run(rt, tokenizer, monkeypatch, stop_after: int | None = None, **settings):
    """A fixed d8 w3 tree run (its policy learns nothing from events; `settings` may put the AR
    floor in front) on `rt`, detail off: ([(event, verify passes run when it arrived, committed
    length then)], the decoder). `stop_after`: the consumer sets the stop flag when that event
    arrives."""
    from engine.model.graphs import GraphBucket
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    runs, real_run = [0], GraphBucket._run

    def counted(bucket):
        runs[0] += 1
        real_run(bucket)
    monkeypatch.setattr(GraphBucket, "_run", counted)
    ids = tokenizer.encode("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
                           "def add(a, b):\n")
    dec = Decoder(rt, ids, DecodeSettings(**dict(dict(draft="tree", depth=8, width=3,
                                                      max_new_tokens=40), **settings)),
                  detail=False)
    seen = []
    for ev in dec.windows():
        seen.append((ev, runs[0], dec.session.cache.length))
        if stop_after is not None and ev.index == stop_after:
            dec.stop.set()
    monkeypatch.setattr(GraphBucket, "_run", real_run)
    return seen, dec


def test_a_fixed_window_yields_each_event_after_the_next_pass_is_launched(runtimes, tokenizer,
                                                                         monkeypatch) -> None:
    """The graph path launches a drafting window's pass without waiting (a Step) and, where the
    policy learns nothing from events, yields the window before it meanwhile: the same events
    and tokens as the eager path (which waits), but a drafting window's event arrives with the
    next window's pass already run (on this CPU) and nothing more committed. A stop set on
    such an event drops that launched pass: nothing is committed after it."""
    eager, bucketed = runtimes
    ref, ref_dec = _fixed_tree_run(eager, tokenizer, monkeypatch)
    got, dec = _fixed_tree_run(bucketed, tokenizer, monkeypatch)
    assert ref_dec.new_tokens == dec.new_tokens and len(ref) == len(got) > 4
    key = lambda ev: (ev.index, ev.committed_len, ev.tokens, ev.parents, ev.accepted_path,
                      ev.emitted, ev.emitted_kinds, ev.stats.new_tokens, ev.stats.forward_passes,
                      ev.settings, ev.finished)
    assert [key(e) for e, *_ in ref] == [key(e) for e, *_ in got]
    # the cache holds the stream but its last token (the next root): nothing more committed
    assert all(length == e.committed_len + len(e.emitted) - 1 for e, _, length in got)
    # passes run when each event arrived: a drafting window's (not the last) one more, the
    # next window's; a plain step's (one row: no Step) none. The eager path runs no bucket
    assert all(runs == 0 for _, runs, _ in ref)
    later = [runs - (e.index + 1) for e, runs, _ in got[:-1]]
    assert later == [1 if e.tokens else 0 for e, *_ in got[:-1]] and 1 in later
    stop_at = next(e.index for e, *_ in got[:-1] if e.tokens)
    stopped, sdec = _fixed_tree_run(bucketed, tokenizer, monkeypatch, stop_after=stop_at)
    assert sdec.finish_reason == "stopped" and stopped[-1][0].index == stop_at
    assert sdec.new_tokens == [t for e, *_ in stopped for t in e.emitted]
    assert sdec.new_tokens == dec.new_tokens[:len(sdec.new_tokens)]
    # the AR floor in front (the GPU's user default) learns at each commit, so it defers too
    floored, fdec = _fixed_tree_run(bucketed, tokenizer, monkeypatch, ar_floor=True)
    assert fdec.new_tokens == dec.new_tokens
    # (its plain steps come queued, one run ahead: only drafting events are counted here)
    later = [runs - (e.index + 1) for e, runs, _ in floored[:-1] if e.tokens]
    assert later and min(later) >= 1, later


def test_the_floor_is_told_each_windows_whole_cycle(runtimes, tokenizer, monkeypatch) -> None:
    """The AR floor prices a window by its whole cycle, from the end of the window before it:
    a consumer that takes 30 ms over each event costs the next window those 30 ms (what plain
    decoding or speculation really pays a token), while the event's own window_ms (planning to
    commit) leaves them out. The cycles add up to the run's time after its prefill."""
    import time
    from engine.speculation.decoder import Decoder
    from engine.speculation.policies import ArFloorPolicy
    from engine.speculation.settings import DecodeSettings
    told, real = [], ArFloorPolicy.observe_window

    def tell(self, depth, drafted, window_ms, emitted):
        told.append(window_ms)
        real(self, depth, drafted, window_ms, emitted)
    monkeypatch.setattr(ArFloorPolicy, "observe_window", tell)
    for rt in runtimes:                    # eager (events at once) and bucketed (events deferred)
        told.clear()
        ids = tokenizer.encode("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n")
        dec = Decoder(rt, ids, DecodeSettings(draft="tree", ar_floor=True, max_new_tokens=12),
                      detail=False)
        events = []
        for ev in dec.windows():
            events.append(ev)
            time.sleep(0.03)
        assert len(told) == len(events) > 3
        assert all(c >= e.window_ms for c, e in zip(told, events))
        # the consumer's 30 ms before each window after the first: in its cycle, not its window
        assert all(c - e.window_ms >= 29.0 for c, e in zip(told[1:], events[1:])), told
        assert sum(told) <= 1e3 * dec.wall_s + 1.0
