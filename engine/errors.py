"""The one exception type the CLI and the workbench show to users without a traceback."""

from __future__ import annotations


class SpecscopeError(Exception):
    """A problem the user can fix: a bad file, a bad parameter, a prompt too long.

    The message says what is wrong and what to do; the CLI prints it and exits non-zero.
    """


class ModelLoadError(SpecscopeError):
    """A model file is missing, truncated, corrupt or of an unsupported kind."""


class ParameterError(SpecscopeError, ValueError):
    """A generation or decoding setting is out of range."""


class NumericalError(SpecscopeError):
    """A model produced NaN or infinite values (broken weights or metadata, or an overflow)."""


MAX_MESSAGE_CHARS = 500      # a message longer than this (a template's 16 MB `raise`) is cut


def one_line(text: object, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A message as one printable line of at most `limit` characters ("…" where it was cut):
    cut first (a huge message costs nothing), then line breaks and control characters become
    spaces and a lone surrogate "?", so printing it can neither fail nor span lines."""
    s = str(text)
    cut = len(s) > limit
    s = s[:limit]
    if not s.isprintable():
        s = "".join(c if c.isprintable() else "?" if 0xD800 <= ord(c) <= 0xDFFF else " " for c in s)
    return s.rstrip() + ("…" if cut else "")
