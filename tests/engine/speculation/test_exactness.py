"""The exactness watch on real decodes of the bundled model (float32 CPU runtime): a greedy tree
run is identical to plain decoding; a token list altered at one step is reported at that step,
with the two tokens' texts and their probabilities under the target there (checked against a
softmax of plain decoding's own logits, taken here independently); on the fast path (top k only)
the margin is in logits; sampling is refused; the exit status follows the verdict."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from engine.errors import ParameterError
from engine.speculation.decoder import Decoder
from engine.speculation.exactness import (EXIT_DIFFERS, StepRecorder, check_exact, compare,
                                          plain_settings, reference_side, require_greedy)
from engine.speculation.settings import DecodeSettings

PROMPT = ("def area(width, height):\n    return width * height\n\n\n"
          "def area(width, height):\n    return width * height\n\n\n"
          "def area(width, height):\n    return")
TREE = DecodeSettings(draft="tree", depth=4, width=2, adaptive=False, ar_floor=False,
                      max_new_tokens=10)


@pytest.fixture(scope="module")
def ids(cpu_runtime):
    return cpu_runtime.tokenizer.encode(PROMPT)


@pytest.fixture(scope="module")
def plain_run(cpu_runtime, ids):
    """Plain greedy decoding, taken here on its own: tokens and each step's full logits."""
    logits = []
    dec = Decoder(cpu_runtime, ids, plain_settings(TREE), detail=True,
                  on_verify=lambda tree, scores: logits.append(scores.logits[0].clone()))
    dec.run()
    return list(dec.new_tokens), logits


def test_a_greedy_tree_run_is_identical_to_plain_decoding(cpu_runtime, ids, plain_run):
    spec = Decoder(cpu_runtime, ids, TREE, detail=False).run()
    assert spec["accepted_draft_tokens"] > 0          # it did speculate
    v = check_exact(cpu_runtime, ids, TREE, spec["tokens"])
    assert spec["tokens"] == plain_run[0]             # the independent reference agrees
    assert v.identical and v.first_diff is None and v.compared == len(spec["tokens"]) == 10
    assert v.verdict == "identical to plain decoding (10 tokens)"
    assert v.exit_status == 0
    d = v.to_dict()
    assert d["identical"] is True and d["first_diff"] is None and d["verdict"] == v.verdict


def test_an_altered_token_is_reported_at_its_step_with_the_targets_probabilities(cpu_runtime, ids,
                                                                                 plain_run):
    plain, logits = plain_run
    tok = cpu_runtime.tokenizer
    k = 6
    runner_up = int(logits[k].topk(2).indices[1])     # plain's second choice at step k
    assert runner_up != plain[k]
    altered = plain[:k] + [runner_up] + plain[k + 1:]
    v = check_exact(cpu_runtime, ids, TREE, altered)
    assert not v.identical and v.first_diff == k and v.compared == k + 1
    assert (v.spec_id, v.plain_id) == (runner_up, plain[k])
    assert (v.spec_token, v.plain_token) == (repr(tok.token_text(runner_up)), repr(tok.token_text(plain[k])))
    p = torch.softmax(logits[k].double(), dim=0)
    assert v.spec_p == pytest.approx(float(p[runner_up]), rel=1e-5)
    assert v.plain_p == pytest.approx(float(p[plain[k]]), rel=1e-5)
    assert v.plain_p > v.spec_p and v.margin_of == "probability"
    assert v.margin == pytest.approx(v.plain_p - v.spec_p)
    assert v.spec_logit == pytest.approx(float(logits[k][runner_up]))
    assert v.verdict.startswith(f"first differs at token {k}: {v.spec_token} (p ")
    assert f" vs {v.plain_token} (p " in v.verdict and v.verdict.endswith(" in probability")
    assert v.exit_status == EXIT_DIFFERS == 3
    # a difference at the very first token, and an altered last one
    first = check_exact(cpu_runtime, ids, TREE, [runner_up] + plain[1:])
    assert first.first_diff == 0 and first.spec_id == runner_up
    last = check_exact(cpu_runtime, ids, TREE, plain[:-1] + [runner_up])
    assert last.first_diff == len(plain) - 1 and last.plain_id == plain[-1]


def test_on_the_fast_path_the_margin_is_in_logits(cpu_runtime, ids, plain_run):
    """The plain side of a race runs on the fast path: only each step's top 5 logits are seen."""
    plain, logits = plain_run
    rec = StepRecorder()
    dec = Decoder(cpu_runtime, ids, plain_settings(TREE), detail=False, on_verify=rec)
    dec.run()
    assert dec.new_tokens == plain and len(rec.steps) == len(plain)
    assert all(s.log_norm is None for s in rec.steps)
    k = 3
    top = logits[k].topk(5)
    second, outside = int(top.indices[1]), int(logits[k].argmin())
    tt = cpu_runtime.tokenizer.token_text
    v = compare(plain[:k] + [second] + plain[k + 1:], plain, rec.steps, tt)
    assert v.first_diff == k and v.spec_p is None and v.margin_of == "logit"
    assert v.margin == pytest.approx(float(top.values[0] - top.values[1]))
    assert v.verdict.endswith(" in logits") and "(logit " in v.verdict
    w = compare(plain[:k] + [outside], plain, rec.steps, tt)
    assert w.first_diff == k and w.margin is None and "not in plain's top 5" in w.verdict


def test_runs_of_different_lengths_and_no_scores():
    tt = lambda t: f"<{t}>"  # noqa: E731
    v = compare([1, 2, 3], [1, 2, 3, 4, 5], None, tt)
    assert v.identical and v.compared == 3 and "first 3 tokens" in v.verdict
    w = compare([1, 9], [1, 2], None, tt)
    assert w.first_diff == 1 and w.verdict == "first differs at token 1: '<9>' vs '<2>'"
    assert w.margin is None and w.exit_status == 3
    assert compare([], [], [], tt).verdict == "identical to plain decoding (0 tokens)"


def test_sampling_is_refused_and_the_race_reference_side():
    hot = TREE.with_sampling(temperature=0.7)
    with pytest.raises(ParameterError, match="only defined for greedy"):
        require_greedy(hot)
    ar = plain_settings(TREE)
    assert reference_side((ar, TREE)) == (0, "")
    assert reference_side((TREE, ar)) == (1, "")
    assert reference_side((TREE, replace(TREE, depth=2)))[0] is None
    assert "sampling" in reference_side((plain_settings(hot), hot))[1]
    assert reference_side((ar, replace(TREE, max_new_tokens=3)))[0] is None
