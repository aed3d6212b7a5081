"""The plain-decoding baseline every speed-up is quoted against: one way, one label.

The baseline is plain decoding's decode speed (prefill excluded: it is the same for both and would
only dilute a ratio). Measured when the run itself made enough plain steps (one-row windows: the AR
floor's probes, windows that drafted nothing), since those carry the same host overheads as its
speculative windows; else the device probe's one-row pass. The label says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MEASURED_AT_LEAST = 3      # plain steps before the run's own median beats the probe


@dataclass(frozen=True)
class Baseline:
    tok_s: float               # tokens a second of plain decoding, prefill excluded
    source: str                # "measured" (this run's plain steps) | "probe" (the device probe)

    def __post_init__(self) -> None:
        if not self.tok_s > 0:
            raise ValueError(f"a baseline must be a positive tok/s, got {self.tok_s}")
        if self.source not in ("measured", "probe"):
            raise ValueError(f"a baseline comes from 'measured' or 'probe', got {self.source!r}")

    @property
    def ms(self) -> float:
        """Milliseconds of one plain decode step."""
        return 1000.0 / self.tok_s

    def label(self) -> str:
        """'plain decoding 18.1 tok/s (measured)'."""
        return f"plain decoding {self.tok_s:.1f} tok/s ({self.source})"


def plain_baseline(plain_step_ms: Sequence[float], probe_one_row_ms: float | None) -> Baseline | None:
    """The baseline from a run's plain decode steps (ms each) and the probe's one-row pass (ms).

    >>> plain_baseline([50.0, 60.0, 55.0], 40.0).label()
    'plain decoding 18.2 tok/s (measured)'
    >>> plain_baseline([50.0], 40.0).label()
    'plain decoding 25.0 tok/s (probe)'
    """
    steps = sorted(m for m in plain_step_ms if m > 0)
    if len(steps) >= MEASURED_AT_LEAST or (steps and not probe_one_row_ms):
        return Baseline(1000.0 / steps[len(steps) // 2], "measured")
    if probe_one_row_ms and probe_one_row_ms > 0:
        return Baseline(1000.0 / probe_one_row_ms, "probe")
    return None
