"""One drafter contract (engine.speculation.drafters): every drafter takes the same frozen
DraftRequest, begins on the target's session, and proposes a tree rooted at the request's root
within its rows. The model drafters run the bundled model (its own draft model here: a second
session on the same runtime)."""

from __future__ import annotations

import pytest

from engine.speculation.drafters import DraftRequest, Drafter, LookupDrafter, TreeDrafter
from engine.speculation.model_drafters import DraftModelDrafter, EarlyExitDrafter
from engine.speculation.ngram import NgramIndex
from engine.speculation.sampling import Rng, SamplingConfig

TEXT = "def area(w, h):\n    return w * h\n\n\ndef area(w, h):\n    return"


@pytest.fixture(scope="module")
def drafters(cpu_runtime):
    return [LookupDrafter(), TreeDrafter(), EarlyExitDrafter(cpu_runtime, 4),
            DraftModelDrafter(cpu_runtime, cpu_runtime)]


@pytest.mark.parametrize("sampled", [False, True])
def test_every_drafter_obeys_one_request(cpu_runtime, drafters, sampled) -> None:
    ids = cpu_runtime.tokenizer.encode(TEXT)
    session = cpu_runtime.session(len(ids) + 80, spare=65)
    try:
        session.prefill(ids[:-1])
        index = NgramIndex(1, 4)
        index.extend(ids)
        sampling = SamplingConfig(temperature=1.0) if sampled else SamplingConfig()
        for d in drafters:
            assert isinstance(d, Drafter)
            d.begin(session)
            for depth, width, rows in ((4, 1, 5), (3, 2, 64), (6, 3, 4)):
                req = DraftRequest(ids, index, ids[-1], depth, width, rows, sampling, Rng(1))
                tree = d.propose(req)
                assert tree.root == ids[-1], d.name
                assert 1 <= tree.n_rows <= rows and tree.max_depth <= depth, (d.name, depth, rows)
            assert len(d.propose(DraftRequest(ids, index, ids[-1], 4, 1, 1, sampling))) == 0
            assert session.length == len(ids) - 1            # drafting commits nothing
    finally:
        session.close()
