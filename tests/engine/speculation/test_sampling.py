"""Sampling math against transformers' logits processors and the OpenAI penalty formula."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from engine.errors import ParameterError
from engine.speculation.sampling import (
    Rng,
    SamplingConfig,
    inverse_cdf,
    penalize,
    penalize_rows,
    target_probs,
)
from engine.speculation.settings import DecodeSettings


def reference_penalize(logits: torch.Tensor, history: list[int], cfg: SamplingConfig) -> torch.Tensor:
    """transformers' repetition penalty, then OpenAI's frequency / presence formula:
    mu[j] -> mu[j] - c[j] * alpha_frequency - float(c[j] > 0) * alpha_presence."""
    out = logits.float().clone()[None]
    if history:
        out = RepetitionPenaltyLogitsProcessor(cfg.repeat_penalty)(torch.tensor([history]), out)
    out = out[0]
    for tok in set(history):
        c = history.count(tok)
        out[tok] = out[tok] - c * cfg.frequency_penalty - float(c > 0) * cfg.presence_penalty
    return out


def reference_probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """transformers' generate order: temperature, top-k, top-p, min-p, softmax."""
    scores = logits.float().clone()
    ids = torch.zeros((scores.shape[0], 1), dtype=torch.long)
    if cfg.temperature != 1.0:
        scores = TemperatureLogitsWarper(cfg.temperature)(ids, scores)
    if cfg.top_k:
        scores = TopKLogitsWarper(cfg.top_k)(ids, scores)
    if cfg.top_p < 1.0:
        scores = TopPLogitsWarper(cfg.top_p)(ids, scores)
    if cfg.min_p > 0:
        scores = MinPLogitsWarper(cfg.min_p)(ids, scores)
    return scores.softmax(-1)


# --- config ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, words", [
    ({"temperature": -0.1}, "--temperature"),
    ({"temperature": float("nan")}, "--temperature"),
    ({"top_k": -1}, "--top-k"),
    ({"top_p": 0.0}, "--top-p"),
    ({"top_p": 1.5}, "--top-p"),
    ({"min_p": 1.0}, "--min-p"),
    ({"repeat_penalty": 0.0}, "--repeat-penalty"),
    ({"presence_penalty": float("inf")}, "--presence-penalty"),
    ({"frequency_penalty": 101.0}, "--frequency-penalty"),
    ({"penalty_window": 0}, "--penalty-window"),
])
def test_config_rejects_bad_values_with_a_clear_message(kwargs, words):
    with pytest.raises(ParameterError, match=words):
        SamplingConfig(**kwargs)


def test_config_flags():
    cfg = SamplingConfig(temperature=0.7, repeat_penalty=1.1)
    assert not cfg.greedy and cfg.penalized
    assert SamplingConfig().greedy and not SamplingConfig().penalized
    assert SamplingConfig(presence_penalty=0.1).penalized


def test_settings_round_trip_through_json_and_load_the_flat_form():
    s = DecodeSettings(draft="lookup", depth=5, seed=9, sampling=SamplingConfig(
        temperature=0.7, top_k=20, top_p=0.8, min_p=0.05, repeat_penalty=1.1,
        presence_penalty=1.5, frequency_penalty=0.2, penalty_window=32))
    d = json.loads(json.dumps(s.to_dict()))
    assert d["sampling"]["top_p"] == 0.8 and "top_p" not in d
    assert DecodeSettings.from_dict(d) == s
    # recordings made before the nesting store the sampler's fields beside the others
    flat = {k: v for k, v in d.items() if k != "sampling"} | d["sampling"]
    assert DecodeSettings.from_dict(flat) == s
    assert DecodeSettings.from_dict({**d, "top_p": 0.5, "no_such_key": 1}).sampling.top_p == 0.5
    assert s.with_sampling(top_p=0.9) == replace(s, sampling=replace(s.sampling, top_p=0.9))
    with pytest.raises(ParameterError, match="--top-p"):
        s.with_sampling(top_p=2.0)


# --- penalties -------------------------------------------------------------------------------

histories = st.lists(st.integers(0, 39), max_size=30)
penalty_cfgs = st.builds(
    SamplingConfig,
    repeat_penalty=st.floats(0.5, 2.0),
    presence_penalty=st.floats(-2.0, 2.0),
    frequency_penalty=st.floats(-1.0, 1.0),
)


@settings(max_examples=60, deadline=None)
@given(history=histories, cfg=penalty_cfgs, seed=st.integers(0, 2**16))
def test_penalize_matches_transformers_and_openai(history, cfg, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(40, generator=g) * 3
    logits[::7] = 0.0   # zero logits: transformers and llama.cpp both leave them at 0 (x * r = x / r)
    got, ledger = penalize(logits, history, cfg)
    want = reference_penalize(logits, history, cfg)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    # the ledger: one entry per distinct history token, first appearance first, exact values
    assert [t for t, _, _ in ledger] == list(dict.fromkeys(history)) or not cfg.penalized
    for tok, before, after in ledger:
        assert before == pytest.approx(float(logits[tok]))
        assert after == pytest.approx(float(got[tok]))
    untouched = torch.ones(40, dtype=torch.bool)
    untouched[list(set(history))] = False
    assert torch.equal(got[untouched], logits[untouched])


def test_repeat_penalty_direction():
    logits = torch.tensor([2.0, -2.0, 0.0, 1.0])
    got, _ = penalize(logits, [0, 1, 2], SamplingConfig(repeat_penalty=2.0))
    assert got.tolist() == [1.0, -4.0, 0.0, 1.0]   # positive halves, negative doubles
    got, ledger = penalize(logits, [0, 0, 3], SamplingConfig(frequency_penalty=0.5, presence_penalty=1.0))
    assert got.tolist() == [2.0 - 1.0 - 1.0, -2.0, 0.0, 1.0 - 0.5 - 1.0]
    assert ledger == [(0, 2.0, 0.0), (3, 1.0, -0.5)]


def test_penalize_rows_is_per_row():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 40, generator=g)
    hists = [[1, 2, 2], [], [3], [1, 2, 2, 39, 0], [7] * 10]
    cfg = SamplingConfig(repeat_penalty=1.3, presence_penalty=0.2, frequency_penalty=0.1)
    got, ledgers = penalize_rows(logits, hists, cfg)
    for r, h in enumerate(hists):
        want, led = penalize(logits[r], h, cfg)
        assert torch.equal(got[r], want)
        assert ledgers[r] == led
    assert ledgers[1] == []
    # the input is not modified
    assert torch.equal(logits, torch.randn(5, 40, generator=torch.Generator().manual_seed(3)))


def test_no_penalty_is_the_identity():
    logits = torch.randn(3, 10)
    got, ledgers = penalize_rows(logits, [[1], [2], [3]], SamplingConfig())
    assert got is logits and ledgers == [[], [], []]


def test_penalize_rows_work_does_not_grow_with_the_window():
    """25 verify rows over SmolLM2's vocabulary (49,152): the number of tensor ops does not
    grow with the penalty window (no per-token Python loop). Its time is a benchmark, not a
    test (bench/bench_penalties.py: ~0.6 ms on one idle core)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(25, 49152, generator=g)
    cfg = SamplingConfig(repeat_penalty=1.1, presence_penalty=0.5, frequency_penalty=0.1)

    def ops(window: int) -> int:
        hists = [torch.randint(0, 49152, (window,), generator=g).tolist() for _ in range(25)]
        Count.n = 0
        with Count():
            out, _ = penalize_rows(logits.clone(), hists, cfg)
        assert not torch.equal(out, logits)          # the penalties did something
        return Count.n

    assert ops(64) == ops(256) == ops(1024)


# --- the target distribution -----------------------------------------------------------------

filter_cfgs = st.builds(
    SamplingConfig,
    temperature=st.sampled_from([0.3, 0.7, 1.0, 1.5]),
    top_k=st.sampled_from([0, 1, 3, 10, 63]),
    top_p=st.sampled_from([1.0, 0.95, 0.8, 0.5, 0.1]),
    min_p=st.sampled_from([0.0, 0.01, 0.1, 0.5]),
)


@settings(max_examples=80, deadline=None)
@given(cfg=filter_cfgs, seed=st.integers(0, 2**16), scale=st.sampled_from([0.5, 2.0, 6.0]))
def test_target_probs_match_transformers_warpers(cfg, seed, scale):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(4, 64, generator=g) * scale
    got = target_probs(logits, cfg)
    want = reference_probs(logits, cfg)
    assert got.dtype == torch.float32
    assert torch.equal(got > 0, want > 0)          # the same tokens survive the filters
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(got.sum(-1), torch.ones(4))


def test_top_p_on_a_flat_large_vocabulary():
    """The nucleus grows past the first top-k guess (64) when the distribution is flat."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 5000, generator=g) * 0.5
    cfg = SamplingConfig(temperature=1.0, top_p=0.9)
    got, want = target_probs(logits, cfg), reference_probs(logits, cfg)
    assert torch.equal(got > 0, want > 0)
    assert int((got[0] > 0).sum()) > 3000
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-8)


def test_greedy_is_one_hot_at_the_argmax():
    logits = torch.tensor([[0.1, 3.0, 2.9, -1.0], [5.0, 5.0, 1.0, 0.0]])
    p = target_probs(logits, SamplingConfig())
    assert p.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]   # first index on an exact tie


# --- the random stream -----------------------------------------------------------------------


def test_rng_replays_and_is_seeded():
    a, b, c = Rng(7), Rng(7), Rng(8)
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    seq_a = [a.uniform() for _ in range(5)] + [a.categorical(probs) for _ in range(20)]
    seq_b = [b.uniform() for _ in range(5)] + [b.categorical(probs) for _ in range(20)]
    seq_c = [c.uniform() for _ in range(5)] + [c.categorical(probs) for _ in range(20)]
    assert seq_a == seq_b and seq_a != seq_c
    with pytest.raises(ParameterError, match="seed"):
        Rng(-1)


def test_inverse_cdf_samples_the_distribution_and_never_a_zero():
    probs = torch.tensor([0.0, 0.3, 0.0, 0.05, 0.65, 0.0])
    n = 200_000
    toks = inverse_cdf(probs * 7.0, Rng(0).uniforms(n))      # unnormalised input is fine
    counts = torch.bincount(toks, minlength=6)
    assert counts[probs == 0].sum() == 0
    nz = probs > 0
    expected = probs[nz].double() / probs[nz].double().sum() * counts.sum()
    assert chisquare(counts[nz].double().numpy(), expected.numpy()).pvalue > 1e-3
    # the edge of the unit interval cannot pick the trailing zero-probability token
    assert inverse_cdf(probs, torch.tensor([1.0 - 2**-53, 0.0])).tolist() == [4, 1]
