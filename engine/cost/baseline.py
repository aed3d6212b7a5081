"""The plain-decoding baseline every speed-up is quoted against: one way, one label.

The baseline is plain decoding's decode speed (prefill excluded: it is the same for both and would
only dilute a ratio). Measured when the run itself made enough plain steps (one-row windows: the AR
floor's probes, windows that drafted nothing), since those carry the same host overheads as its
speculative windows; else the device probe's one-row pass. The label says which.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MEASURED_AT_LEAST = 3      # plain steps before the run's own median beats the probe
# ... or fewer, when the probe is this far off them either way: the probe times a pass at
# another context, maybe on a busier machine (a saved profile is only re-probed when 2x off
# its own context's passes). A CPU window showed '4.90x plain decoding 9.9 tok/s (probe)'
# where the run's own plain step ran at 35 tok/s.
PROBE_OFF_BY = 1.5


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

    def to_dict(self) -> dict[str, float | str]:
        """The JSON report's `baseline`: {"tok_s": ..., "source": "measured" | "probe"}."""
        return {"tok_s": round(self.tok_s, 3), "source": self.source}


def decode_tok_s(new_tokens: int, wall_s: float, first_token_s: float | None,
                 first_tokens: int = 1) -> float | None:
    """Decode speed, prefill excluded: the tokens after the first ÷ the seconds after it.

    wall_s and first_token_s run on one clock from the start of prefill (to the last token, to the
    first); first_tokens: how many tokens arrived with the first one (a first window that accepted
    drafts brings more than one). None when there is nothing after the first token to time.
    Every decode tok/s (the generate report, the bench, the sweep, the race) is this one.

    >>> decode_tok_s(11, 1.5, 0.5)
    10.0
    >>> decode_tok_s(1, 0.5, 0.5) is None
    True
    """
    if first_token_s is None or new_tokens <= first_tokens or not wall_s > first_token_s:
        return None
    return (new_tokens - first_tokens) / (wall_s - first_token_s)


def plain_baseline(plain_step_ms: Sequence[float], probe_one_row_ms: float | None) -> Baseline | None:
    """The baseline from a run's plain decode steps (ms each) and the probe's one-row pass (ms).

    >>> plain_baseline([50.0, 60.0, 55.0], 40.0).label()
    'plain decoding 18.2 tok/s (measured)'
    >>> plain_baseline([50.0], 40.0).label()
    'plain decoding 25.0 tok/s (probe)'
    >>> plain_baseline([30.0], 100.0).label()       # the probe 3.3x off this run's own step
    'plain decoding 33.3 tok/s (measured)'
    >>> plain_baseline([], 40.0).label()
    'plain decoding 25.0 tok/s (probe)'
    """
    steps = sorted(m for m in plain_step_ms if m > 0)
    mid = steps[len(steps) // 2] if steps else None
    probe_off = bool(mid and probe_one_row_ms and probe_one_row_ms > 0
                     and not 1 / PROBE_OFF_BY <= probe_one_row_ms / mid <= PROBE_OFF_BY)
    if mid and (len(steps) >= MEASURED_AT_LEAST or not probe_one_row_ms or probe_off):
        return Baseline(1000.0 / mid, "measured")
    if probe_one_row_ms and probe_one_row_ms > 0:
        return Baseline(1000.0 / probe_one_row_ms, "probe")
    return None


def speed_words(report: Mapping[str, Any]) -> str:
    """A run report's speeds, each named for what it counts: tok/s with the prefill in, decode
    tok/s without it, and plain decoding's with its source (absent figures are left out).

    >>> speed_words({"tok_s": 8.6, "decode_tok_s": 15.8,
    ...              "baseline": {"tok_s": 15.2, "source": "measured"}})
    '8.6 tok/s incl. prefill · decode 15.8 tok/s · plain decoding 15.2 tok/s (measured)'
    """
    def num(x: Any) -> float | None:
        return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None

    parts = [f"{num(report.get('tok_s')) or 0.0:.1f} tok/s incl. prefill"]
    if num(report.get("decode_tok_s")) is not None:
        parts.append(f"decode {num(report['decode_tok_s']):.1f} tok/s")
    base = report.get("baseline")
    if isinstance(base, Mapping):
        try:
            parts.append(Baseline(float(base["tok_s"]), str(base["source"])).label())
        except (KeyError, TypeError, ValueError):   # a hand-edited recording's: left out
            pass
    return " · ".join(parts)
