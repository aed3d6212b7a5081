"""Model drafters: the vocabulary check, the size warning, the draft cache kept in step with the
committed text, the early exit's layer bound. Real models: the bundled one and tiny random ones
(tests/tiny_models.py, another vocabulary). Losslessness on the bundled model is in
test_lossless.py; the rejection sampling with real q in test_verify.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from engine.errors import ParameterError
from engine.io.load import load_model
from engine.model.runtime import Runtime, chain
from engine.session import draft_opener
from engine.speculation.decoder import Decoder
from engine.speculation.drafters import DraftRequest
from engine.speculation.model_drafters import DraftModelDrafter, EarlyExitDrafter
from engine.speculation.ngram import NgramIndex
from engine.speculation.settings import DecodeSettings
from tiny_models import make_tiny_gguf


@pytest.fixture(scope="module")
def tiny_paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return {arch: make_tiny_gguf(arch, d / f"{arch}.gguf") for arch in ("llama", "qwen2")}


def specscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specscope.cli", *args], capture_output=True,
                          text=True, timeout=240)


def test_a_draft_with_another_vocabulary_is_one_clear_error(cpu_runtime, tiny_paths):
    tiny = Runtime(load_model(tiny_paths["llama"]), "cpu", "float32")
    with pytest.raises(ParameterError) as e:
        DraftModelDrafter(cpu_runtime, tiny)
    msg = str(e.value)
    n_tiny = tiny.tokenizer.vocab_size
    assert f"target has {cpu_runtime.tokenizer.vocab_size} tokens" in msg
    assert f"the draft {n_tiny}" in msg
    first = next(i for i in range(n_tiny)
                 if cpu_runtime.tokenizer.backend.id_to_token(i) != tiny.tokenizer.backend.id_to_token(i))
    assert f"id {first}:" in msg and repr(tiny.tokenizer.backend.id_to_token(first)) in msg


def test_cli_vocabulary_mismatch_and_larger_draft_warning(tiny_paths):
    bad = specscope("generate", "--draft", "model", "--draft-model", str(tiny_paths["llama"]),
                    "--prompt", "Hello", "--max-new-tokens", "2", "--json")
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "vocabulary differs" in lines[0] and "Traceback" not in bad.stderr
    # the tiny llama (untied head) is larger than the tiny qwen2 (tied): allowed, warned about
    ok = specscope("--model", str(tiny_paths["qwen2"]), "generate", "--draft", "model",
                   "--draft-model", str(tiny_paths["llama"]), "--prompt", "the cat", "--depth", "3",
                   "--no-adaptive", "--no-ar-floor",    # fixed windows: the priced default may
                   "--max-new-tokens", "6", "--json")    # retire drafts on a loaded machine
    assert ok.returncode == 0, ok.stderr
    assert "warning: the draft model" in ok.stderr and "not smaller than the target" in ok.stderr
    import json
    rep = json.loads(ok.stdout)
    assert rep["new_tokens"] == 6 and rep["proposed_draft_tokens"] > 0
    assert rep["draft_model"].endswith("llama.gguf")


def test_the_warning_reaches_the_first_event_only(tiny_paths):
    target = Runtime(load_model(tiny_paths["qwen2"]), "cpu", "float32")
    s = DecodeSettings(draft="model", draft_model=str(tiny_paths["llama"]), depth=2, max_new_tokens=6)
    ids = target.tokenizer.encode("the cat sat")
    events = list(Decoder(target, ids, s, open_model=draft_opener(target)).windows())
    assert "not smaller than the target" in events[0].notice
    assert all(ev.notice == "" for ev in events[1:])


@pytest.mark.parametrize("draft_arch", ["qwen2", "llama"])   # every draft accepted; few
def test_the_draft_cache_follows_the_committed_text(tiny_paths, draft_arch):
    """After every window the draft model's cache holds exactly the committed text but the root:
    its keys equal those of a fresh prefill of the same tokens."""
    target = Runtime(load_model(tiny_paths["qwen2"]), "cpu", "float32")
    draft = Runtime(load_model(tiny_paths[draft_arch]), "cpu", "float32")
    s = DecodeSettings(draft="model", draft_model="tiny llama", depth=3, max_new_tokens=20)
    ids = target.tokenizer.encode("the cat sat on the mat")
    dec = Decoder(target, ids, s, draft_runtime=draft)
    fresh = Runtime(draft.loaded, "cpu", "float32").session(256)
    for _ in dec.windows():
        ctx = dec.context
        # the drafter catches up lazily, at its next proposal: do what it does, then compare
        dec.drafter._first_logits(ctx[:-1], ctx[-1])
        mine = dec.drafter.stream
        n = mine.length
        assert n == len(ctx) - 1
        fresh.reserve(256)
        fresh.prefill(ctx[:-1])
        torch.testing.assert_close(mine.cache.kv[:, :, :, :n], fresh.cache.kv[:, :, :, :n])


def test_early_exit_drafts_with_the_first_k_layers(cpu_runtime):
    """Exit layer K: the draft's logits are the norm and LM head over the K-th layer's output
    (here checked against a full pass of a model truncated to K layers), and the draft never
    changes the committed cache."""
    rt = cpu_runtime
    ids = rt.tokenizer.encode("def add(a, b):\n    return")
    ses = rt.session(64)
    ses.prefill(ids[:-1])
    before = ses.cache.kv[:, :, :, :ses.length].clone()
    drafter = EarlyExitDrafter(rt, 3)
    drafter.begin(ses)
    index = NgramIndex(1, 4)
    index.extend(ids)
    tree = drafter.propose(DraftRequest.of(index, depth=3, width=1, rows=8))
    assert len(tree) == 3 and tree.parents == (-1, 0, 1) and tree.q is not None
    torch.testing.assert_close(ses.cache.kv[:, :, :, :ses.length], before)
    # reference: the same chain through a forward of a 3-layer copy of the model
    layers = rt.model.layers
    try:
        rt.model.layers = layers[:3]
        seq = [ids[-1], *tree.tokens[:-1]]
        ref = ses.verify(seq, *chain(len(seq))).logits
    finally:
        rt.model.layers = layers
    assert [int(t) for t in ref.argmax(-1)] == list(tree.tokens)
    torch.testing.assert_close(torch.stack(tree.q), ref.softmax(-1))
    with pytest.raises(ParameterError, match="--exit-layer must be between 1 and the model's 30"):
        EarlyExitDrafter(rt, 31)


def test_a_model_drafted_tree_keeps_the_draft_distribution_of_every_node(cpu_runtime):
    """Early exit at 3 layers, depth 3, width 2: every expanded node gets 2 children, the
    draft's top 2 (greedy); each node's q is the 3-layer model's softmax at its parent's row,
    checked against one forward of a 3-layer copy over the whole tree. Sampled: each expanded
    node gets 2 independent draws from its q."""
    from engine.speculation.sampling import Rng, SamplingConfig
    rt = cpu_runtime
    ids = rt.tokenizer.encode("The capital of France is Paris. The capital of Italy is")
    ses = rt.session(64)
    ses.prefill(ids[:-1])
    index = NgramIndex(1, 4)
    index.extend(ids)
    drafter = EarlyExitDrafter(rt, 3)
    drafter.begin(ses)
    tree = drafter.propose(DraftRequest.of(index, depth=3, width=2, rows=64))
    kids = [tree.children(i) for i in range(-1, len(tree))]
    assert len(tree.children(-1)) == 2 and max(tree.depths) == 3
    assert all(len(k) in (0, 2) for k in kids)
    assert sum(1 for k in kids if k) == 1 + 2 + 2      # the root, then the 2 best at each depth
    layers = rt.model.layers
    try:
        rt.model.layers = layers[:3]
        ref = ses.verify([ids[-1], *tree.tokens], tree.row_depths, tree.ancestor_mask()).logits
    finally:
        rt.model.layers = layers
    for i, parent in enumerate(tree.parents):
        p_row = ref[parent + 1].softmax(-1)
        torch.testing.assert_close(tree.q[i], p_row)
        siblings = [tree.tokens[c] for c in tree.children(parent)]
        assert siblings == p_row.topk(2).indices.tolist()
    sampled = drafter.propose(DraftRequest.of(index, depth=3, width=2, rows=64,
                                              sampling=SamplingConfig(temperature=1.0), rng=Rng(0)))
    for node in range(-1, len(sampled)):
        kids = sampled.children(node)
        assert len(kids) in (0, 2)
        if kids:     # siblings share one q, each drawn from it
            assert sampled.q[kids[0]] is sampled.q[kids[1]]
            assert all(float(sampled.q[c][sampled.tokens[c]]) > 0 for c in kids)
