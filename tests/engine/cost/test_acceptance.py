"""Acceptance by depth and expected tokens (engine/cost/acceptance.py), against hand counts."""

from __future__ import annotations


import pytest

from engine.cost.acceptance import DepthTally, expected_tokens, path_tokens, window_depths


def test_a_depth_is_tried_where_a_node_hung_below_the_accepted_prefix():
    # a chain of 3: one accepted, the second rejected -> depths 1 and 2 tried, 1 accepted
    assert window_depths([-1, 0, 1], [0]) == (2, 1)
    # every node of the chain accepted (a bonus token): nothing below the leaf was tried
    assert window_depths([-1, 0, 1], [0, 1, 2]) == (3, 3)
    # a tree whose short branch (node 2) was accepted to its leaf while node 1 had a child:
    # depth 2 was not tried on the path the target took
    assert window_depths([-1, 0, -1], [2]) == (1, 1)
    assert window_depths([-1, 0, -1], []) == (1, 0)
    assert window_depths([], []) == (0, 0)          # a plain step tries nothing


def test_the_tally_rates_alpha_and_path_tokens_by_hand():
    t = DepthTally()
    for parents, path in (([-1, 0, 1], [0]), ([-1, 0, 1], [0, 1, 2]), ([-1, 0], []), ([], [])):
        t.add(parents, path)
    assert t.tried == [3, 2, 1] and t.accepted == [2, 1, 1]
    assert t.rates() == pytest.approx([2 / 3, 1 / 2, 1.0])
    assert t.alpha == pytest.approx(4 / 6)
    assert path_tokens(t.rates()) == pytest.approx([1, 1 + 2 / 3, 1 + 2 / 3 + 1 / 3, 2 + 1 / 3])
    assert expected_tokens(0.5, 3) == pytest.approx(1.875)


def test_the_workbench_store_reads_the_same_acceptance_as_the_report(cpu_runtime):
    """One definition: the store's per-depth rates over a run's events equal the report's
    accept_rate_by_depth, and its reach is their running product."""
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    from workbench.store import EventStore

    ids = cpu_runtime.tokenizer.encode("def area(w, h):\n    return w * h\n\n\ndef area(w, h):\n")
    dec = Decoder(cpu_runtime, ids, DecodeSettings(draft="tree", depth=6, width=2,
                                                   max_new_tokens=16), detail=False)
    store = EventStore(events=list(dec.windows()))
    acc = store.acceptance(len(store) - 1)
    assert [round(a, 4) for a in acc.rates] == dec.report()["accept_rate_by_depth"]
    run = 1.0
    for a, r in zip(acc.rates, acc.reach):
        run *= a
        assert r == pytest.approx(run)
    assert sum(acc.windows[:1]) == sum(1 for ev in store.events if ev.tokens)
