"""The sweep's time left in words (engine.tuning.eta), as the command line and the dock show it."""

from __future__ import annotations

import pytest

from engine.tuning.eta import eta_text


@pytest.mark.parametrize("eta_s, text", [
    (None, "time left: measuring"), (0.0, "~0s left"), (0.4, "~0s left"), (42.4, "~42s left"),
    (59.4, "~59s left"), (59.6, "~1m00s left"), (60, "~1m00s left"), (125, "~2m05s left"),
    (3600 + 61, "~61m01s left"),
])
def test_eta_text(eta_s, text):
    assert eta_text(eta_s) == text
