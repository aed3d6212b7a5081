"""One plain-decoding baseline, one decode speed (issue 33.3), in the `generate` report and its
summary line, with the bundled model: `tok_s` keeps DESIGN.md's meaning (new tokens over wall_s,
the prefill in); `decode_tok_s` leaves the prefill out (the tokens after the first over the seconds
after it: engine.cost.baseline.decode_tok_s, the bench's and the sweep's); `baseline` is plain
decoding's decode speed with its source, "measured" (the run's own plain steps: plain decoding,
the AR floor's timing step) or "probe" (the cost profile's one-row pass)."""

from __future__ import annotations

import json
import re

import pytest

# a long prompt (about 1,300 tokens): its prefill costs many decode steps, so a speed that
# keeps it in is well below one that leaves it out, even on a busy machine
LONG = "def add(a, b):\n    return a + b\n\n" * 100
CPU = ("--device", "cpu", "--weights", "dequantized")


def test_generate_json_has_decode_tok_s_without_the_prefill_and_a_measured_baseline(specscope):
    r = specscope("generate", *CPU, "--draft", "none", "--max-new-tokens", "5", "--prompt", LONG,
                  "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    n = rep["new_tokens"]
    assert n == 5 and rep["prompt_tokens"] > 1000
    # the contract's tok_s: new tokens over wall_s, the prefill in
    assert rep["tok_s"] == pytest.approx(n / rep["wall_s"], rel=2e-3)
    # decode_tok_s: plain decoding brings one token a window, so the tokens after the first over
    # the seconds after it; the long prefill is out of it, so it is well above tok_s
    assert rep["first_tokens"] == 1 and 0 < rep["first_token_s"] < rep["wall_s"]
    assert rep["decode_tok_s"] == pytest.approx((n - 1) / (rep["wall_s"] - rep["first_token_s"]),
                                                rel=2e-3)
    assert rep["decode_tok_s"] > rep["tok_s"]
    # every window was a plain step: the baseline is this run's, measured (the median step)
    base = rep["baseline"]
    assert set(base) == {"tok_s", "source"} and base["source"] == "measured"
    assert 0.5 < base["tok_s"] / rep["decode_tok_s"] < 2.0


def test_the_summary_line_names_each_speed_and_the_floor_measures_the_baseline(specscope):
    # a fixed tree behind the AR floor (a GPU's default; a CPU's adds --adaptive, whose probe
    # would stand in for a single plain step), whose first window is a timed plain step
    r = specscope("generate", *CPU, "--no-adaptive", "--max-new-tokens", "4", "--prompt", LONG)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    summary = json.loads(lines[-1])
    assert {"tok_s", "decode_tok_s", "first_token_s", "baseline", "wall_s"} <= set(summary)
    assert summary["baseline"]["source"] == "measured"
    words = next(x for x in lines if x.startswith("specscope: ") and " tokens in " in x)
    m = re.fullmatch(r"specscope: (\d+) tokens in (\d+) windows: ([0-9.]+) tok/s incl\. prefill"
                     r"(?: · decode ([0-9.]+) tok/s)? · plain decoding ([0-9.]+) tok/s \(measured\)",
                     words)
    assert m, words
    assert int(m[1]) == summary["new_tokens"] and float(m[3]) == pytest.approx(summary["tok_s"], abs=0.051)
    assert float(m[5]) == pytest.approx(summary["baseline"]["tok_s"], abs=0.051)
    if summary["decode_tok_s"] is None:          # the first window brought every token
        assert m[4] is None and summary["windows"] == 1
    else:
        assert float(m[4]) == pytest.approx(summary["decode_tok_s"], abs=0.051)
    assert " AR" not in words


def test_a_run_without_plain_steps_quotes_the_probe_and_counts_its_first_window(cpu_runtime):
    """A tree that drafts in every window takes no plain step: the baseline is the cost profile's
    one-row pass (50 ms here: 20 tok/s), "probe"; its first window brings several tokens, and
    decode_tok_s counts the tokens after that window over the time after it."""
    from engine.cost.baseline import plain_baseline
    from engine.io.prompts import encode_prompt
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    from sweep_helpers import cpu_like_profile

    ids = encode_prompt(cpu_runtime.tokenizer, "def add(a, b):\n    return a + b\n" * 8)
    s = DecodeSettings(draft="tree", depth=4, width=2, max_new_tokens=16, adaptive=False, ar_floor=False)
    dec = Decoder(cpu_runtime, ids, s, detail=False, profile=cpu_like_profile(cpu_runtime))
    rep = dec.run()
    steps = dec.run_stats.plain_ms                     # windows that drafted nothing, if any
    assert len(steps) < 3                              # too few plain steps to beat the probe ...
    if not steps or 1 / 1.5 <= 50.0 / sorted(steps)[len(steps) // 2] <= 1.5:
        assert rep["baseline"] == {"tok_s": 20.0, "source": "probe"}
    else:                                              # ... unless the probe is 1.5x off them
        assert rep["baseline"] == plain_baseline(steps, 50.0).to_dict()
        assert rep["baseline"]["source"] == "measured"
    n, k = rep["new_tokens"], rep["first_tokens"]
    assert k > 1 and n > k
    assert rep["decode_tok_s"] == pytest.approx((n - k) / (rep["wall_s"] - rep["first_token_s"]), rel=2e-3)

    # plain decoding on the same profile: enough steps of its own, measured, the median step
    dec = Decoder(cpu_runtime, ids, DecodeSettings(draft="none", max_new_tokens=4), detail=False,
                  profile=cpu_like_profile(cpu_runtime))
    rep = dec.run()
    assert rep["baseline"]["source"] == "measured" and len(dec.run_stats.plain_ms) == 4
    assert rep["baseline"] == plain_baseline(dec.run_stats.plain_ms, 50.0).to_dict()
