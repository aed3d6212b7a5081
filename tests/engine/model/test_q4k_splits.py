"""CUDA's Q4_K split rule (engine.kernels.triton_kernels._q4k_splits): the split counts measured
on the H100 for the 8B-like layer (BENCHMARKS.md, "The packed matmul, fifth round"), the rule's
invariants over many shapes and SM counts, the switch back to the wave rule alone, and ROCm
left to the wave rule. Configuration only: nothing is compiled or run."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from engine.kernels import triton_kernels as tk  # noqa: E402
from engine.kernels.dot_precision import compiling_for  # noqa: E402

H100_SMS = 132
# (N, K) of the 8B-like Q4_K_M layer -> (splits with the rule, splits with the wave rule alone),
# the wave rule's column as BENCHMARKS.md's split table gives it
LAYER = {"gate|up": ((24576, 4096), 1, 1), "down": ((4096, 12288), 4, 2),
         "q|k|v": ((6144, 4096), 4, 1), "o": ((4096, 4096), 4, 2)}


@pytest.fixture
def wave_rule_alone(monkeypatch):
    """SPECSCOPE_Q4K_SPLITS=0, as the module reads it at import."""
    monkeypatch.setattr(tk, "_Q4K_SPLITS", False)
    tk._config.cache_clear()
    yield
    tk._config.cache_clear()


def _splits(n: int, k: int, sms: int, backend: str = "cuda") -> dict:
    with compiling_for(backend):
        return tk.kernel_config("Q4_K", n, k, sms)


def test_the_8b_layer_gets_the_measured_split_counts():
    tk._config.cache_clear()
    for name, ((n, k), want, _) in LAYER.items():
        assert _splits(n, k, H100_SMS)["splits"] == want, name


def test_the_wave_rule_alone_gives_the_old_counts(wave_rule_alone):
    for name, ((n, k), _, want) in LAYER.items():
        assert _splits(n, k, H100_SMS)["splits"] == want, name


def test_the_rule_divides_the_tiles_and_fills_the_sms():
    tk._config.cache_clear()
    for sms in (28, 60, 84, 108, 132, 144):
        for n in (576, 1024, 2048, 4096, 6144, 11008, 14336, 24576):
            for k in (1024, 2048, 4096, 8192, 11008, 12288, 14336):
                cfg = _splits(n, k, sms)
                s, tiles = cfg["splits"], cfg["tiles_per_split"] * cfg["splits"]
                blocks, wave = -(-n // cfg["BN"]), tk._auto_splits(-(-n // cfg["BN"]), tiles, sms)
                assert tiles % s == 0, (n, k, sms, s)
                # at least 1.5 programs an SM, or the most splits of at most 4 the tiles allow
                most = max(d for d in range(1, 5) if tiles % d == 0)
                assert 2 * blocks * s >= 3 * sms or s >= most, (n, k, sms, s)
                if s > wave:        # the rule's own count: at most 4, and the fewest that fills
                    assert s <= 4, (n, k, sms, s)
                    fills = [d for d in range(1, s) if tiles % d == 0 and 2 * blocks * d >= 3 * sms]
                    assert not fills, (n, k, sms, s, fills)


def test_rocm_keeps_the_wave_rule():
    tk._config.cache_clear()
    rule = {name: _splits(n, k, 64, "hip") for name, ((n, k), _, _) in LAYER.items()}
    tk._config.cache_clear()
    tk._Q4K_SPLITS, old = False, tk._Q4K_SPLITS
    try:
        wave = {name: _splits(n, k, 64, "hip") for name, ((n, k), _, _) in LAYER.items()}
    finally:
        tk._Q4K_SPLITS = old
        tk._config.cache_clear()
    assert rule == wave
