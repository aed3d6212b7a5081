"""The runtime's two verify paths agree: eager (CPU) and the graph-bucket path (padded rows,
packed inputs, mask derived on the device), which on CPU runs the same code without capture."""

from __future__ import annotations

import random

import pytest
import torch

from engine.errors import ParameterError
from engine.model.runtime import Runtime
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
        rt.start(len(prefix) + 64)
        rt.prefill(prefix[:-1])
        out.append(rt.verify(tokens, tree.row_depths, tree.ancestor_mask()))
    torch.testing.assert_close(out[0].logits, out[1].logits, atol=1e-4, rtol=1e-4)
    assert torch.equal(out[0].top_ids[:, 0], out[1].top_ids[:, 0])


def test_prompt_longer_than_context_is_a_clear_error(runtimes) -> None:
    eager, _ = runtimes
    with pytest.raises(ParameterError, match="context"):
        eager.start(eager.config.max_context + 1)
