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
