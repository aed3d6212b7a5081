"""The time a sweep has left, in words: what `specscope sweep` prints with each step and the
workbench's sweep dock shows on its progress bar (SweepStep.eta_s, engine.tuning.sweep)."""

from __future__ import annotations


def eta_text(eta_s: float | None) -> str:
    """`eta_s` rounded to whole seconds, as minutes and seconds from a minute on.

    >>> eta_text(None), eta_text(42.4), eta_text(125)
    ('time left: measuring', '~42s left', '~2m05s left')
    """
    if eta_s is None:
        return "time left: measuring"
    s = int(round(eta_s))
    return f"~{s // 60}m{s % 60:02d}s left" if s >= 60 else f"~{s}s left"
