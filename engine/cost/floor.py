"""The AR floor: measure instead of guessing whether this request gains from speculation at all.

1. time one ordinary plain decode step (`want_plain_step()` is True until `record_plain`);
2. probe up to `max_probes` speculative windows, each timed (`record_window`);
3. the first probe that is strictly cheaper per emitted token than the plain step decides
   "speculating" for the rest of the request;
4. if none was, retire: plain decoding until the request ends (`want_plain_step()` stays
   True). A tie is not cheaper; an invalid timing (not a positive finite ms, or no emitted
   token) retires at once, since nothing can be concluded from it.

The floor bounds the probing (one plain step and at most `max_probes` windows before the
decision), not the request's wall time. Make one per request (or call `reset`). Its state in
words is `reason`, made from `figures` by engine.cost.plan.floor_status.
"""

from __future__ import annotations

from typing import Any

from engine.cost import plan as P
from engine.cost.clock import valid_ms
from engine.errors import ParameterError

PROBING, SPECULATING, RETIRED = "probing", "speculating", "retired"


class ArFloor:
    def __init__(self, max_probes: int = 3) -> None:
        if max_probes < 1:
            raise ParameterError(f"the AR floor needs at least one probe window, got {max_probes}")
        self.max_probes = max_probes
        self.reset()

    def reset(self) -> None:
        self.state = PROBING
        self.ar_ms: float | None = None
        self.probes: list[tuple[float, int]] = []
        self.ar_windows = 0          # plain steps taken while the floor was on
        self.figures: dict[str, Any] = {"status": P.FLOOR_TIMING}

    @property
    def reason(self) -> str:
        return P.floor_status(self.figures)

    @property
    def retired(self) -> bool:
        return self.state == RETIRED

    def want_plain_step(self) -> bool:
        """True: the decoder should run a plain step (calibration, or retired)."""
        return self.state == RETIRED or (self.state == PROBING and self.ar_ms is None)

    def record_plain(self, ms: float) -> None:
        self.ar_windows += 1
        if self.state == PROBING and self.ar_ms is None:
            if not valid_ms(ms):
                self._retire(status=P.FLOOR_BAD_PLAIN, ms=ms)
            else:
                self.ar_ms = float(ms)
                self.figures = {"status": P.FLOOR_READY, "ar_ms": self.ar_ms}

    def record_window(self, ms: float, emitted: int) -> None:
        if self.state != PROBING:
            return
        if self.ar_ms is None:
            raise ParameterError("the AR floor times a plain step first: check want_plain_step()")
        if not valid_ms(ms) or emitted < 1:
            self._retire(status=P.FLOOR_BAD_WINDOW, ms=ms, tokens=emitted)
            return
        self.probes.append((float(ms), int(emitted)))
        per_token = ms / emitted
        n = len(self.probes)
        if per_token < self.ar_ms:
            self.state = SPECULATING
            self.figures = {"status": P.FLOOR_SPECULATING, "probes": n, "per_token": per_token,
                            "ar_ms": self.ar_ms}
        elif n >= self.max_probes:
            best = min(m / e for m, e in self.probes)
            self._retire(status=P.FLOOR_NO_GAIN, probes=n, best=best, ar_ms=self.ar_ms)
        else:
            self.figures = {"status": P.FLOOR_PROBE, "probes": n, "per_token": per_token}

    def _retire(self, **figures: Any) -> None:
        self.state = RETIRED
        self.figures = figures
