"""The AR floor keeps measuring (issue 33): speculation that stops paying is dropped, a retired
floor probes again after a wait that doubles while probes fail, and plain decoding is re-timed
while speculating, so a machine whose speed moves under the run is followed."""

from __future__ import annotations

import pytest

from engine.cost.floor import ArFloor, seed_floor
from engine.errors import ParameterError
from engine.cost.plan import FLOOR_NO_GAIN, FLOOR_SPECULATING, FLOOR_STOPPED, floor_status


def drive(floor: ArFloor, plain_ms, window, n: int) -> list[str]:
    """n decoder steps: a plain step when the floor asks (plain_ms(i) ms), else a window whose
    (ms, tokens) is window(i)."""
    log = []
    for i in range(n):
        if floor.want_plain_step():
            floor.record_plain(plain_ms(i))
            log.append("p")
        else:
            floor.record_window(*window(i))
            log.append("w")
    return log


def test_speculation_that_stops_paying_is_dropped():
    floor = ArFloor()
    # 4 tokens per 20 ms window (5 ms/token) against 10 ms plain, then 1 token per window
    log = drive(floor, lambda i: 10.0, lambda i: (20.0, 4 if i < 6 else 1), 36)
    assert log[:6] == ["p", "w", "w", "w", "w", "w"]
    assert floor.retired and floor.figures["status"] == FLOOR_STOPPED
    assert floor.figures["per_token"] >= floor.ar_ms
    assert "not below plain 10.000" in floor_status(floor.figures)
    # the loss has to show through the five good windows' savings first, and then it does:
    # once the recent windows' saving is not above 0 with a standard error to spare, plain steps
    first_plain_after = log.index("p", 1)
    assert 6 + 10 <= first_plain_after <= 6 + 20
    assert set(log[first_plain_after:]) == {"p"}


def test_a_few_unlucky_windows_do_not_retire_speculation_that_pays():
    """Runs of six 1-token windows between runs of six 4-token ones (20 ms each, 2.5 tokens a
    window on average: 8 ms a token against 10 ms plain) pay all along: the floor keeps
    speculating (a plain step only every `refresh` windows). The control, the rule before
    2026-12-07 (the last 8 windows' cost, one window to probe again), retires in the first
    unlucky run and spends most of the request in plain steps."""
    def window(i):
        return 20.0, 4 if (i - 1) % 12 < 6 else 1

    floor = ArFloor()
    log = drive(floor, lambda i: 10.0, window, 200)
    assert floor.state == "speculating" and floor.ar_windows == 1 + 199 // (floor.refresh + 1)
    assert "speculating: the last 32 windows cost" in floor_status(floor.figures)
    old = seed_floor()
    log = drive(old, lambda i: 10.0, window, 200)
    assert log.count("p") > 100


def test_a_retired_floor_probes_again_and_resumes_when_the_probes_pay():
    floor = ArFloor(reprobe=4, max_reprobe=16)
    # the request's start accepts nothing (20 ms, 1 token), then the text turns into a copy
    good_from = 20
    log = drive(floor, lambda i: 10.0, lambda i: (20.0, 1 if i < good_from else 5), 50)
    six = ["w"] * floor.reprobes
    assert log[:7] == ["p"] + six                         # six probes, together no gain
    assert log[7:11] == ["p"] * 4                         # the wait
    assert log[11:17] == six                              # probe again: still 1 token, so the
    assert log[17:25] == ["p"] * 8                        # wait doubles
    # the probes from step 25 emit 5 tokens for 20 ms: the first one pays at once
    assert floor.state == "speculating" and set(log[25:]) == {"w"}
    assert floor.figures["status"] == FLOOR_SPECULATING


def test_the_wait_between_failed_probes_is_capped():
    floor = ArFloor(reprobe=2, max_reprobe=8)
    log = drive(floor, lambda i: 10.0, lambda i: (20.0, 1), 120)
    batches = [len(g) for g in "".join(log[1:]).split("p") if g]
    gaps = [len(g) for g in "".join(log[1:]).split("w") if g]
    assert gaps[:4] == [2, 4, 8, 8] and max(gaps) == 8
    assert set(batches[:-1]) == {floor.reprobes}          # every probe is a batch, judged whole
    while not floor.want_plain_step():                     # the last batch, to its verdict
        floor.record_window(20.0, 1)
    assert floor.figures["status"] == FLOOR_NO_GAIN and floor.figures["next"] == 8
    assert "6 probe windows cost 20.000 ms/token" in floor_status(floor.figures)


def test_plain_decoding_is_re_timed_while_speculating():
    """A machine that gets faster at plain steps (another job ended) while windows stay at
    9 ms/token: the refresh steps bring plain below the windows and speculation stops."""
    floor = ArFloor(refresh=8)
    log = drive(floor, lambda i: 12.0 if i == 0 else 6.0, lambda i: (18.0, 2), 60)
    refreshes = [i for i, x in enumerate(log) if x == "p"]
    assert refreshes[:2] == [0, 9]                      # one plain step after 8 windows
    # the median of the plain steps (12, 6) is 9 ms: windows at 9 ms/token no longer pay
    assert log[10:26] == ["p"] * 16 and floor.ar_ms <= 9.0
    assert floor.retired and floor.figures["status"] in (FLOOR_STOPPED, FLOOR_NO_GAIN)


@pytest.mark.parametrize("lead", [0, 1])
def test_plain_ahead_says_whether_the_next_window_is_a_plain_step(lead):
    """The decoder queues the next plain step on the device only where the policy says it comes
    whatever the token: always with no drafter, never for a drafting policy alone, and in front
    of an AR floor exactly when the floor will ask for another plain step after this one
    (retired, before its next probe; an untimed lead, before the timed step), through probes,
    retirement, waits, a resumption and the refreshes while speculating."""
    from engine.cost.plan import Cause
    from engine.speculation.policies import ArFloorPolicy, FixedPolicy, PlainPolicy, plain_ahead
    fixed = FixedPolicy("tree", 4, 2, lambda d, w: 1 + d * w, Cause.LAST_TOKEN)
    assert plain_ahead(PlainPolicy()) and not plain_ahead(fixed)
    floor = ArFloor(reprobe=2, max_reprobe=8, refresh=8, lead=lead)
    policy = ArFloorPolicy(fixed, floor, "tree")
    said = []
    for i in range(80):
        if floor.want_plain_step():
            ahead = plain_ahead(policy)
            floor.record_plain(10.0)
            assert ahead == floor.want_plain_step(), i
            said.append(ahead)
        else:
            floor.record_window(20.0, 1 if i < 40 else 5)
    assert True in said and False in said
    assert floor.state == "speculating" and floor.timed >= 4 + lead   # the refreshes came
    assert plain_ahead(ArFloorPolicy(PlainPolicy(), ArFloor(), "none"))


def test_a_leading_floor_times_plain_decoding_at_its_queued_pace():
    """On a device that queues plain steps, the first plain step after a window waits for its
    own pass (13 ms here) and the ones behind it overlap the host (10 ms). Windows at 11.5 ms a
    token beat the first figure and lose to plain decoding's real pace: the floor that leads by
    one untimed step retires them, the one that times the first step keeps them (the control)."""
    def plain_ms(log):
        return lambda i: 13.0 if not log or log[-1] == "w" else 10.0

    def run(lead):
        floor, log = ArFloor(lead=lead), []
        for i in range(24):
            if floor.want_plain_step():
                floor.record_plain(plain_ms(log)(i))
                log.append("p")
            else:
                floor.record_window(23.0, 2)
                log.append("w")
        return floor, log

    led, log = run(1)
    assert log[:2] == ["p", "p"] and led.timed < led.ar_windows and set(led.plain_ms) == {10.0}
    assert led.retired and led.figures["status"] == FLOOR_NO_GAIN and led.ar_ms == 10.0
    first, log0 = run(0)
    assert log0[:2] == ["p", "w"] and first.ar_ms == 13.0
    assert first.state == "speculating"                  # the control: 11.5 ms/token "pays"
    with pytest.raises(ParameterError):
        ArFloor(lead=-1)


def test_the_lead_step_says_what_it_is():
    """The window of a lead step explains itself: untimed, ahead of the timed one, and what the
    floor's state is when that is not the first timing."""
    from engine.cost.plan import FLOOR_TIMING
    first = floor_status({"status": FLOOR_TIMING, "lead": True})
    assert first.startswith("an untimed plain step ahead of the timed one") and "timing one" not in first
    retired = floor_status({"status": FLOOR_NO_GAIN, "probes": 3, "best": 12.0, "ar_ms": 10.0, "next": 16,
                            "lead": True})
    assert retired.startswith("an untimed plain step") and "not below plain 10.000" in retired
    assert floor_status({"status": FLOOR_TIMING}) == "timing one plain step"
