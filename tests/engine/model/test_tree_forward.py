"""The forward pass over a token tree equals sequential decoding of each root-to-node path, and
commit(path) leaves the cache exactly as sequential decoding of that path would."""

from __future__ import annotations

import random

import pytest
import torch

from engine.errors import ParameterError
from engine.model.config import ModelConfig, expected_shapes
from engine.model.source import TensorSource
from engine.model.transformer import Transformer
from engine.speculation.tree import TokenTree


def random_model(arch: str, seed: int = 0) -> Transformer:
    cfg = ModelConfig(arch=arch, vocab_size=97, hidden_size=48, intermediate_size=80, n_layers=2,
                      n_heads=6, n_kv_heads=2, head_dim=8, rope_theta=10000.0, max_context=256,
                      tie_embeddings=arch != "qwen2", qkv_bias=arch == "qwen2",
                      qk_norm=arch == "qwen3")
    g = torch.Generator().manual_seed(seed)
    weights = {name: f32_source(name, torch.randn(shape, generator=g) * (0.3 if len(shape) == 2 else 1.0))
               for name, shape in expected_shapes(cfg).items()}
    return Transformer(cfg, weights)


def f32_source(name: str, t: torch.Tensor) -> TensorSource:
    """An in-memory float32 tensor in the form the model reads weights in (the file's bytes)."""
    raw = t.contiguous().reshape(t.shape[0] if t.dim() > 1 else 1, -1).view(torch.uint8)
    return TensorSource(name, tuple(t.shape), "F32", raw.numel(), lambda: raw)


def random_tree(rng: random.Random, n_nodes: int, vocab: int) -> tuple[list[int], list[int]]:
    """Rows: row 0 = root; parents[i] < i."""
    tokens = [rng.randrange(vocab) for _ in range(n_nodes + 1)]
    parents = [-1] + [rng.randrange(i) for i in range(1, n_nodes + 1)]
    return tokens, parents


def path_rows(parents: list[int], row: int) -> list[int]:
    path = []
    while row != -1:
        path.append(row)
        row = parents[row]
    return path[::-1]


def run_tree(model: Transformer, prefix: list[int], tokens: list[int], parents: list[int]):
    """The window's positions and ancestor mask come from TokenTree, as in the decoder."""
    cache = model.new_cache(128)
    n = len(prefix)
    R = len(tokens)
    m = torch.tril(torch.ones(n, n, dtype=torch.bool))
    model.forward(torch.tensor(prefix), torch.arange(n), m, cache, torch.arange(n))
    cache.advance(n)
    tree = TokenTree.from_rows(tokens, parents)
    mask = torch.ones(R, n + R, dtype=torch.bool)
    mask[:, n:] = tree.ancestor_mask()
    logits = model.forward(torch.tensor(tokens), tree.positions(n), mask, cache,
                           torch.arange(n, n + R))
    return logits, cache


def run_sequential(model: Transformer, seq: list[int]):
    cache = model.new_cache(128)
    out = []
    for i, t in enumerate(seq):
        mask = torch.ones(1, i + 1, dtype=torch.bool)
        out.append(model.forward(torch.tensor([t]), torch.tensor([i]), mask, cache,
                                 torch.tensor([i]))[0])
        cache.advance(1)
    return torch.stack(out), cache


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tree_rows_equal_sequential_paths(arch: str, seed: int) -> None:
    rng = random.Random(seed)
    model = random_model(arch, seed)
    prefix = [rng.randrange(97) for _ in range(7)]
    tokens, parents = random_tree(rng, 12 + seed * 3, 97)
    tree_logits, _ = run_tree(model, prefix, tokens, parents)
    for row in range(len(tokens)):
        seq = prefix + [tokens[r] for r in path_rows(parents, row)]
        seq_logits, _ = run_sequential(model, seq)
        torch.testing.assert_close(tree_logits[row], seq_logits[-1], atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_commit_keeps_exactly_the_accepted_path(seed: int) -> None:
    rng = random.Random(seed)
    model = random_model("llama", seed)
    prefix = [rng.randrange(97) for _ in range(5)]
    tokens, parents = random_tree(rng, 14, 97)
    _, cache = run_tree(model, prefix, tokens, parents)
    leaf = rng.randrange(1, len(tokens))
    path = path_rows(parents, leaf)            # starts with row 0, the root
    cache.commit(path)
    seq = prefix + [tokens[r] for r in path]
    _, ref = run_sequential(model, seq)
    assert cache.length == len(seq) == ref.length
    torch.testing.assert_close(cache.kv[:, :, :, :cache.length], ref.kv[:, :, :, :ref.length],
                               atol=2e-5, rtol=1e-5)


def test_commit_of_a_chain_moves_nothing_and_extends_the_prefix() -> None:
    model = random_model("llama")
    _, cache = run_tree(model, [1, 2, 3], [4, 5, 6, 7], [-1, 0, 1, 2])
    before = cache.kv.clone()
    cache.commit([0, 1, 2])
    assert cache.length == 6
    assert torch.equal(before, cache.kv)


def test_the_cache_owns_its_length() -> None:
    cache = random_model("llama").new_cache(8)
    cache.advance(3)
    assert cache.length == 3 and cache.room() == 5
    with pytest.raises(AttributeError):
        cache.length = 5                        # only its methods move it
    with pytest.raises(ParameterError):
        cache.advance(6)                        # past the capacity
    cache.truncate(1)
    assert cache.length == 1
