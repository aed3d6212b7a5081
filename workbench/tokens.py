"""Token text made visible: whitespace drawn as glyphs so a token tree of code stays readable.

>>> visible("    return x\\n")
'␣␣␣␣return␣x⏎'
"""

from __future__ import annotations

import html

_VISIBLE = {" ": "␣", "\n": "⏎", "\t": "→", "\r": "␍"}


def visible(text: str, limit: int = 0) -> str:
    """Spaces as ␣, newlines as ⏎, tabs as →; other control characters as \\xNN; cut at `limit`."""
    out = []
    for ch in text:
        if ch in _VISIBLE:
            out.append(_VISIBLE[ch])
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    s = "".join(out)
    if limit and len(s) > limit:
        s = s[: limit - 1] + "…"
    return s if s else "∅"


def html_visible(text: str, limit: int = 0) -> str:
    return html.escape(visible(text, limit))


def fmt_prob(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "–"
    if 0 < x < 10 ** -digits:
        return f"{x:.0e}"
    return f"{x:.{digits}f}"


def fmt_top(top: list, n: int = 5) -> str:
    """`[(id, text, prob), ...]` -> 'return 0.62  ·  pass 0.11  ·  …' with visible whitespace."""
    return "  ".join(f"{visible(t[1], 12)} {_short(t[2])}" for t in top[:n])


def _short(p: float) -> str:
    """0.62 -> '.62', 1.0 -> '1', 0.004 -> '.004'."""
    if p >= 0.995:
        return "1"
    s = f"{p:.2f}" if p >= 0.01 else f"{p:.3f}" if p >= 0.001 else "<.001"
    return s.lstrip("0") if s[0] == "0" else s
