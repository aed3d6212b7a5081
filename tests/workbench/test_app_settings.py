"""The settings the window opens with, from the command line."""

from __future__ import annotations

import torch

from engine.speculation.settings import USER_DEFAULTS, user_defaults
from specscope.cli import build_parser
from workbench.app import window_settings


def test_the_window_opens_with_the_users_defaults_and_its_draft_options():
    # no options: the device's default (BENCHMARKS.md, "Answers that hold, measured"): on a GPU
    # the 8 x 3 tree behind the AR floor, on a CPU adaptive windows behind it
    here = "cuda" if torch.cuda.is_available() else "cpu"
    assert window_settings(build_parser().parse_args([])) == user_defaults(here)
    assert window_settings(build_parser().parse_args(["--device", "cpu"])) == user_defaults("cpu")
    assert user_defaults("cuda") == USER_DEFAULTS and user_defaults(None) == USER_DEFAULTS
    assert user_defaults("cpu").adaptive and user_defaults("cpu").ar_floor and not USER_DEFAULTS.adaptive
    s = window_settings(build_parser().parse_args(
        ["--draft", "early-exit", "--exit-layer", "24", "--depth", "4", "--temperature", "0.7"]))
    assert (s.draft, s.exit_layer, s.depth, s.sampling.temperature) == ("early-exit", 24, 4, 0.7)
    assert s.ar_floor and s.adaptive == user_defaults(here).adaptive   # model drafts: the floor too
    assert s.width == 1                       # a chain, as the README describes early exit


def test_a_plain_window_says_why_in_a_few_words():
    """The tree header's few words come from the window's cause and figures (engine.cost.plan),
    the same figures its whole reason is made of; a recording without a cause shows none."""
    from types import SimpleNamespace

    from engine.cost.plan import Cause, plain_plan
    from workbench.views.tree import plain_why

    def event(plan):
        return SimpleNamespace(tokens=(), reason=plan.reason, cause=plan.cause.value,
                               figures=plan.all_figures())

    never = plain_plan("early-exit", Cause.NEVER_PAYS, 2.1, best_depth=4, best_width=1,
                       best_ms=11.2, ar_ms=2.1)
    assert never.reason == (
        "plain decode: no early-exit window can pay on this device, even with every draft "
        "accepted (at best 5 tok in 11.20 ms, depth 4 x width 1; plain 2.10 ms a token)")
    assert plain_why(event(never)) == " · plain: no early-exit window can pay on this device"
    short = plain_plan("lookup", Cause.NOT_BEATING, 2.0, best_depth=1, best_width=1,
                       best_tokens=1.5, best_ms=3.1, ar_rate=0.5)
    assert short.reason == ("plain decode: best window depth 1 x width 1 (1.50 tok in 3.10 ms = "
                            "0.4839 tok/ms) does not beat plain 0.5 tok/ms")
    assert plain_why(event(short)) == " · plain: best window depth 1 x width 1 does not beat plain 0.5 tok/ms"
    assert plain_why(SimpleNamespace(tokens=(5,), cause="priced", figures={})) == ""
    assert plain_why(SimpleNamespace(tokens=(), cause="", figures={}, reason="old text")) == ""
