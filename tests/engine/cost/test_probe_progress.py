"""Long work is announced (issue 35.2): a probe says what it measures and about how long it
takes before it starts, then once a round where it is and the time left, and how long it took."""

from __future__ import annotations

import time

import pytest

from engine.cost.probe import expected_probe_s, probe_profile


class SleepyRuntime:
    """A verify pass that takes 2 ms a row (a real sleep: the probe's clock is the wall's)."""
    device_name, device, model_id, dtype_name = "test device", "cpu", "test-model", "float32"

    def time_verify_pass(self, n_rows: int, context: int, exit_layer: int | None = None) -> float:
        time.sleep(0.002 * n_rows)
        return 2.0 * n_rows


def test_the_probe_says_what_it_measures_and_the_time_left():
    said: list[tuple[str, float]] = []
    probe_profile(SleepyRuntime(), context=64, progress=lambda m, f: said.append((m, f)),
                  rows=[1, 2, 4], repeats=4, warmup=1, budget_s=None)
    first, last = said[0], said[-1]
    assert first[1] == 0.0 and "measuring this device's verify cost" in first[0]
    assert "passes of 1, 2, 4 rows at context 64" in first[0] and "once for this model" in first[0]
    assert last[1] == 1.0 and last[0].startswith("verify cost measured in ")
    rounds = [m for m, _ in said[1:-1]]
    assert len(rounds) == 4 * 3
    assert len(set(rounds)) == 4                 # one message a round (a log gets four lines)
    assert "round 1 of up to 4, passes of 1 to 4 rows" in rounds[0] and "left" not in rounds[0]
    assert all("s left" in m for m in rounds[3:])
    fracs = [f for _, f in said]
    assert fracs == sorted(fracs) and all(0.0 <= f <= 1.0 for f in fracs)
    assert not any("1 rows" in m for m, _ in said)


@pytest.mark.parametrize("round_s, repeats, budget, expected", [
    (1.0, 5, 45.0, 5.0),        # under the budget: every round
    (10.0, 5, 35.0, 40.0),      # stops after the first round past the budget...
    (30.0, 5, 15.0, 90.0),      # ...never before MIN_REPEATS (3) rounds
    (2.0, 2, 1.0, 4.0),         # nor after `repeats`
    (1.0, 4, None, 4.0),
])
def test_expected_probe_time_follows_the_probes_own_rule(round_s, repeats, budget, expected):
    assert expected_probe_s(round_s, repeats, budget) == pytest.approx(expected)
