"""Parity with an outside implementation: transformers loads the same GGUF; our logits and our
greedy output must match it on the five shared code-edit prompts."""

from __future__ import annotations

import pytest
import torch

from engine.io.prompts import encode_prompt
from engine.model.runtime import chain
from engine.speculation.decoder import Decoder
from engine.speculation.settings import DecodeSettings
from engine.speculation.tree import TokenTree


@pytest.fixture(scope="module")
def encoded(cpu_runtime, code_edit_prompts):
    return [encode_prompt(cpu_runtime.tokenizer, p["messages"]) for p in code_edit_prompts]


PARITY_TOKENS = 32   # a token costs both engines a step on 2 CPU cores (64, then 40 until 2026-12-07: the suite's time)


@pytest.mark.parametrize("prompt", range(5))      # the five code-edit prompts, one test each
def test_greedy_output_matches_transformers(cpu_runtime, hf_model, packed_runtime,
                                                          encoded, prompt) -> None:
    """The prompt's last-position logits equal transformers' to 1e-3 (ours: a prefill and a
    one-row verify; theirs: the first step of the generate below, the same forward over the
    prompt), and plain greedy decoding emits generate's PARITY_TOKENS tokens. On the first two prompts
    the packed runtime's lookup decoding (test_packed_model.py's exact CPU kernels) emits the
    same tokens as this float32 plain decoding: the packed path's greedy check, here where the
    float32 decode it is compared with already runs."""
    assert len(encoded) == 5
    ids = encoded[prompt]
    ses = cpu_runtime.session(len(ids) + 8)
    ses.prefill(ids[:-1])
    first = ses.verify([ids[-1]], *chain(1)).logits[0]
    ses.close()
    ours = Decoder(cpu_runtime, ids, DecodeSettings(draft="none", max_new_tokens=PARITY_TOKENS)).run()
    # decoded before any check, so a transformers difference cannot hide a packed one
    packed = (Decoder(packed_runtime, ids, DecodeSettings(draft="lookup", max_new_tokens=PARITY_TOKENS)).run()
              if prompt < 2 else ours)
    with torch.inference_mode():
        out = hf_model.generate(torch.tensor([ids]), max_new_tokens=PARITY_TOKENS, do_sample=False,
                                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                output_logits=True, return_dict_in_generate=True)
    ref = out.sequences[0, len(ids):].tolist()
    checks = {"last-position logits within 1e-3": (first - out.logits[0][0]).abs().max().item() < 1e-3,
              "greedy tokens": ours["tokens"] == ref[: len(ours["tokens"])]
              and (len(ours["tokens"]) == len(ref) or ours["finish_reason"] == "eos"),
              "the packed runtime's lookup tokens": packed["tokens"] == ours["tokens"]}
    assert all(checks.values()), [k for k, ok in checks.items() if not ok]


# A window with side branches at depths 1 and 2: row i's parent is PARENTS[i]. Row 0 is the root
# (the last committed token); rows 1-2-6 are the spine, 3-4 and 5 branch off it.
PARENTS = [-1, 0, 1, 0, 3, 1, 2]


def _path(i: int) -> list[int]:
    """The rows from the root down to row i."""
    out = []
    while i >= 0:
        out.append(i)
        i = PARENTS[i]
    return out[::-1]


def _tree_window_matches_sequential(rt, ref_model, prefix: list[int], tokens: list[int], tol: float) -> None:
    """One verify pass over the tree; row i's logits must equal the reference model's at the end
    of prefix + the tokens on row i's path, computed as a plain sequence. A causal model's
    logits at a position depend only on the tokens up to it, so one reference run per leaf (the
    prefix and the leaf's whole path) gives every row on that path."""
    ses = rt.session(len(prefix) + len(tokens) + 8)
    ses.prefill(prefix)
    tree = TokenTree.from_rows(tokens, PARENTS)
    ours = ses.verify(tokens, tree.row_depths, tree.ancestor_mask()).logits     # [R, V]
    assert ours.shape[0] == len(tokens)
    ref: dict[int, torch.Tensor] = {}
    for leaf in (i for i in range(len(tokens)) if i not in PARENTS):
        path = _path(leaf)
        with torch.inference_mode():
            logits = ref_model(torch.tensor([prefix + [tokens[j] for j in path]])).logits[0]
        for d, i in enumerate(path):
            ref.setdefault(i, logits[len(prefix) + d])
    assert sorted(ref) == list(range(len(tokens)))
    for i in range(len(tokens)):
        assert (ours[i] - ref[i]).abs().max().item() < tol, f"row {i} (path {_path(i)})"


def test_tree_window_rows_match_transformers_on_each_path(cpu_runtime, hf_model, encoded) -> None:
    ids = encoded[0]
    # the branches reuse prompt tokens, so each path is a plausible continuation
    _tree_window_matches_sequential(cpu_runtime, hf_model, ids[:-1], [ids[-1], *ids[10:16]], 1e-3)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_tiny_hf_folders_give_transformers_logits(arch: str, tmp_path) -> None:
    """A tiny random model written by save_pretrained, loaded through our HF-folder path, gives
    the logits transformers gives for the same tokens: after a prefill, and on every row of a
    tree window (each row against its own path run as a sequence)."""
    from tiny_models import make_tiny_hf, tiny_model

    from engine.io.load import load_model
    from engine.model.runtime import Runtime

    folder = make_tiny_hf(arch, tmp_path / arch)
    ref_model = tiny_model(arch)
    rt = Runtime(load_model(folder), "cpu", "float32", capacity=64)
    ids = [5, 17, 99, 3, 42, 42, 7, 64, 11]
    ses = rt.session(32)
    ses.prefill(ids[:-1])
    ours = ses.verify([ids[-1]], *chain(1)).logits[0]
    with torch.inference_mode():
        ref = ref_model(torch.tensor([ids])).logits[0, -1]
    assert (ours - ref).abs().max().item() < 1e-4
    _tree_window_matches_sequential(rt, ref_model, ids[:-1], [ids[-1], 23, 8, 77, 23, 120, 4], 1e-4)
