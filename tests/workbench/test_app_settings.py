"""The settings the window opens with, from the command line."""

from __future__ import annotations

from engine.speculation.settings import USER_DEFAULTS
from specscope.cli import build_parser
from workbench.app import window_settings


def test_the_window_opens_with_the_users_defaults_and_its_draft_options():
    # no options: adaptive windows with the AR floor (a fixed tree ran 0.99x AR on 2 cores)
    assert window_settings(build_parser().parse_args([])) == USER_DEFAULTS
    s = window_settings(build_parser().parse_args(
        ["--draft", "early-exit", "--exit-layer", "24", "--depth", "4", "--temperature", "0.7"]))
    assert (s.draft, s.exit_layer, s.depth, s.sampling.temperature) == ("early-exit", 24, 4, 0.7)
    assert s.adaptive and s.ar_floor          # model drafts are priced like the n-gram ones
