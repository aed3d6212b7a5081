"""Each lesson's prose follows its own numbers: the function that writes a lesson's "why" (and
the knee's table cell) is fed numbers that imply one conclusion and, as the control, numbers that
imply the opposite; the sentence must change with them. No model: the prose functions take
plain numbers (the knee's, a real fit of synthetic probe points)."""

from __future__ import annotations

import pytest

from engine.cost.fit import fit_points
from engine.lessons.drafting import acceptance_why, budget_why
from engine.lessons.floor import ar_floor_why
from engine.lessons.roofline import knee_text, knee_why, read_knee, row_cost_why
from engine.lessons.verification import penalties_why, rejection_why

# probe points (rows, ms) of four devices: the CPU (16 rows for 1.37 steps), a roofline
# with its knee at 8 rows, a device where each row costs half a step, and a flat one
GENTLE = [(1, 10.0), (2, 10.25), (4, 10.75), (8, 11.75), (16, 13.7)]
ROOFLINE = [(1, 10.0), (2, 10.0), (4, 10.0), (8, 10.0), (16, 20.0), (32, 40.0)]
STEEP = [(1, 10.0), (2, 15.0), (4, 25.0), (8, 45.0), (16, 85.0)]
FLAT = [(1, 10.0), (2, 10.0), (4, 10.0), (8, 10.0), (16, 10.0)]

def reading(points):
    return read_knee(points, fit_points(points))

def test_the_knee_is_read_from_the_probe_and_said_as_it_is():
    gentle, roof, steep, flat = (reading(p) for p in (GENTLE, ROOFLINE, STEEP, FLAT))
    # the case: every row costs from the first, but little; the knee is far, not "none"
    assert gentle.how == "formula" and gentle.rows == pytest.approx(40, rel=0.1) and gentle.past_probe
    assert gentle.top_steps == pytest.approx(1.37)
    assert roof.how == "flat part" and roof.rows == pytest.approx(8, rel=0.05) and not roof.past_probe
    assert steep.how == "formula" and steep.rows == pytest.approx(2, rel=0.05)
    assert flat.rows is None and flat.how == "flat"
    texts = {name: knee_text(k) for name, k in
             (("gentle", gentle), ("roof", roof), ("steep", steep), ("flat", flat))}
    assert texts["flat"].startswith("none") and not any(t.startswith("none") for n, t in texts.items() if n != "flat")
    assert "past the 16 probed" in texts["gentle"] and "past" not in texts["steep"]
    assert "16 rows cost 1.37 steps" in texts["gentle"] and "16 rows cost 8.50 steps" in texts["steep"]

def test_the_knee_why_follows_the_reading():
    gentle, roof, steep, flat = (knee_why(reading(p), "M", "this CPU") for p in (GENTLE, ROOFLINE, STEEP, FLAT))
    assert "nearly free" in gentle and "past the 16 probed" in gentle and "bound by arithmetic" not in gentle
    assert "bound by arithmetic early" in steep and "nearly free" not in steep
    assert "flat cost" in roof and "≈ 8" in roof
    assert "stays flat up to the 16 rows" in flat
    for text, points in ((gentle, GENTLE), (steep, STEEP)):
        top, ms = points[-1]
        assert f"{top} rows cost {ms / points[0][1]:.2f} decode steps" in text

def test_row_cost_why_compares_the_row_with_the_write_ups_cards():
    cheap = row_cost_why(30.0, 1.5, 1.05, (3, 2, 7), "M", "this GPU")       # 0.05 of a step a row
    dear = row_cost_why(10.0, 6.0, 1.6, (3, 2, 0), "M", "this CPU")         # 0.6 of a step a row
    assert "cheaper than on both" in cheap and "deeper than on either card" in cheap
    assert "dearer than on both" in dear and "shallower than on either card" in dear
    assert "faster path" not in dear and "faster path" in row_cost_why(10.0, 1.0, 2.0, (3, 2, 1), "M")

def test_budget_why_names_the_winner_the_numbers_give():
    cand = {"linear d8": 6.0, "linear d24": 14.0, "tree 3 x d8": 16.0}
    tree = budget_why(cand, {"linear d8": 20, "linear d24": 18, "tree 3 x d8": 30, "plain decoding": 15})
    plain = budget_why(cand, {"linear d8": 10, "linear d24": 8, "tree 3 x d8": 9, "plain decoding": 15})
    d8 = budget_why(cand, {"linear d8": 20, "linear d24": 8, "tree 3 x d8": 9, "plain decoding": 15})
    assert "the tree wins" in tree and "as the write-up says" in tree
    assert "plain decoding is fastest" in plain and "wins" not in plain
    assert "linear d8 wins" in d8 and "not the tree" in d8
    assert "the tree checks 16 and depth 24 14 candidate tokens" in tree

def test_acceptance_why_ranks_the_workloads_by_their_alpha():
    expected = acceptance_why({"code edits": (0.8, 8, 9), "summarization": (0.4, 6, 10), "roleplay": (0.0, 2, 16)}, "M")
    unlike = acceptance_why({"code edits": (0.2, 8, 9), "summarization": (0.6, 6, 10), "roleplay": (0.1, 2, 16)}, "M")
    alike = acceptance_why({"code edits": (0.5, 8, 9), "summarization": (0.5, 8, 9), "roleplay": (0.5, 8, 9)}, "M")
    none = acceptance_why({"code edits": (None, 0, 9), "summarization": (None, 0, 9), "roleplay": (None, 0, 9)}, "M")
    assert "As the write-up expects" in expected and "code edits (α 0.8) > summarization (α 0.4)" in expected
    assert "Unlike the write-up's agents, summarization drafts best" in unlike
    assert "every workload drafted alike" in alike
    assert "no workload drafted" in none
    assert "code edits 8 of 9 windows; summarization 6 of 10 windows" in expected

def test_penalties_why_follows_the_counts():
    flipped = penalties_why(flips=3, rows=40, moved=10, deep=30, differing=1)
    moved = penalties_why(flips=0, rows=40, moved=10, deep=30, differing=0)
    nothing = penalties_why(flips=0, rows=40, moved=0, deep=30, differing=0)
    assert "3 of 40 rows" in flipped and "1 window(s)" in flipped
    assert "flipped no greedy verdict" in moved and "10 of 30" in moved
    assert "changes nothing here" in nothing and "flipped" not in nothing

def test_rejection_why_says_what_the_replays_showed():
    both = rejection_why(True, True, 0.4, 0.2, "M")
    hidden = rejection_why(True, False, 0.01, 0.001, "M")
    broken = rejection_why(False, True, 0.4, 0.2, "M")
    assert both.startswith("As in the write-up")
    assert "does not show" in hidden and "As in the write-up" not in hidden
    assert "does NOT follow p" in broken and "bug" in broken

def test_ar_floor_why_follows_the_decision():
    retired = ar_floor_why("retired", 20.0, [(90.0, 3), (80.0, 2)])
    speculating = ar_floor_why("speculating", 20.0, [(30.0, 3)])
    never = ar_floor_why("probing", None, [])
    assert "retires" in retired and "30 ms per emitted token against the plain step's 20 ms" in retired
    assert "starts speculating" in speculating and "10 ms each, under the plain step's 20" in speculating
    assert "never decided" in never
    assert "so the floor retires" not in speculating
