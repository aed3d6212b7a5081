"""The AR floor: measure instead of guessing whether this request gains from speculation, and
keep measuring, since acceptance moves along a request and a desktop's speed moves under it.

1. time one ordinary plain decode step (`want_plain_step()` is True until `record_plain`);
2. probe up to `max_probes` speculative windows, each timed (`record_window`), judged together:
   as soon as their milliseconds over their tokens are strictly below a plain step's, the floor
   starts "speculating";
3. while speculating, each of the last `recent` windows saved `tokens x plain ms - its ms`;
   once at least `min_judge` are in and their mean saving plus `z` standard errors is not
   above 0 (speculation loses, and not by the luck of a few windows), the floor retires to
   plain steps. Every `refresh` windows one plain step re-times plain decoding (the plain cost
   is the median of the last five plain steps);
4. retired (no probe paid, or speculation stopped paying), it takes plain steps and, after
   `reprobe` of them, probes again, up to `reprobes` windows judged together as in 2: if they
   pay, speculation resumes; if not, the wait doubles (up to `max_reprobe`). A tie is not
   cheaper; an invalid timing (not a positive finite ms, or no emitted token) retires for good,
   since nothing can be concluded.

Why evidence and not one window: what a window emits varies a lot from one window to the next
(a d8 w3 tree emits 1 token or 9), so one unlucky probe or eight recent windows retired the
floor from trees that paid. Until 2026-12-07 the floor retired on the recent 8 windows' cost
and probed again with one window: on an H100 it took 114 plain steps of 120 windows on a
summarization prompt whose fixed tree ran 1.30x plain decoding, and the user default ran below
the fixed tree on every category. bench/floor_sim.py replays the floor over real acceptance
(32 Spec-Bench prompts the card's comparison does not use) with a card's costs in plain steps:
tokens a plain step's time, geometric mean, old rule 1.18 against the fixed tree's 1.23 at an
H100's window cost (1.38 plain steps), this rule 1.23; at a dearer window (1.7) 1.09 against the
tree's 1.07 and the old rule's 1.09. (BENCHMARKS.md, "The AR floor on evidence".)

What is timed is the window's whole cycle, from the end of the window before it to its own end
(the decoder's clock: the last event's yield and its consumer, planning, drafting, the pass and
the commit), so the host's own cost of speculating counts against it, and a plain step queued
behind another costs what plain decoding really pays a token (timed from plan to commit, a
queued plain step measured 0.72-0.76 ms on an H100 where plain decoding paid 0.83 ms a token).
`lead` plain steps after a window (or at the
start) run untimed before the timed one: on a device that queues plain steps behind each other
(engine.model.plain_queue) the first plain step after a window waits for its own pass, while
the ones behind it overlap the host's work, and plain decoding runs at their pace (H100,
bundled model: ~1.3 ms against ~1.09 ms). Timing the first would price plain decoding ~20%
too high, and keep windows that do not beat it. The decoder's floor leads by one step where
its runtime queues plain steps (graphs: a GPU), by none elsewhere, as a bare ArFloor() (the
seed's rule). Make one per request (or call `reset`). Its
state in words is `reason`, made from `figures` by engine.cost.plan.floor_status.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from engine.cost import plan as P
from engine.cost.clock import valid_ms
from engine.errors import ParameterError

PROBING, SPECULATING, RETIRED = "probing", "speculating", "retired"


def seed_floor(max_probes: int = 3, lead: int = 0) -> "ArFloor":
    """The write-up's floor (seed 002 § 07), the rule before 2026-12-07: up to `max_probes`
    probes, the first one strictly cheaper than a plain step starts speculating; the last 8
    windows' cost judged after every window; one window to probe again."""
    return ArFloor(max_probes=max_probes, recent=8, z=0.0, min_judge=1, reprobes=1,
                   first_pays=True, lead=lead)


class ArFloor:
    def __init__(self, max_probes: int = 6, recent: int = 32, refresh: int = 32, reprobe: int = 16,
                 max_reprobe: int = 128, lead: int = 0, z: float = 1.0, min_judge: int = 8,
                 reprobes: int = 6, first_pays: bool = False) -> None:
        if max_probes < 1 or reprobes < 1:
            raise ParameterError("the AR floor needs at least one probe window, got "
                                 f"{min(max_probes, reprobes)}")
        if min_judge < 1 or z < 0:
            raise ParameterError(f"the AR floor judges at least one window with z >= 0, got "
                                 f"{min_judge} windows, z {z}")
        if lead < 0:
            raise ParameterError(f"the AR floor's lead is a count of plain steps, got {lead}")
        self.max_probes, self.recent, self.refresh = max_probes, recent, refresh
        self.lead, self.z, self.min_judge = lead, z, min_judge
        self.reprobes, self.first_pays = reprobes, first_pays
        self.reprobe, self.max_reprobe = reprobe, max_reprobe
        self.reset()

    def reset(self) -> None:
        self.state = PROBING
        self.plain_ms: deque[float] = deque(maxlen=5)
        self.windows: deque[tuple[float, int]] = deque(maxlen=self.recent)
        self.probes: list[tuple[float, int]] = []
        self.ar_windows = 0          # plain steps taken while the floor was on
        self.timed = 0               # of them, the ones timed (not leads)
        self.since_plain = 0         # speculative windows since the last plain step
        self.wait = self.reprobe     # plain steps between probes once retired
        self.plain_left = 0          # plain steps before the next probe (retired)
        self.final = False           # retired for good (an invalid timing)
        self.leading = self.lead     # untimed plain steps before the next timed one
        self.figures: dict[str, Any] = {"status": P.FLOOR_TIMING}

    @property
    def ar_ms(self) -> float | None:
        """What one plain step costs: the median of the last plain steps timed."""
        if not self.plain_ms:
            return None
        xs = sorted(self.plain_ms)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

    @property
    def reason(self) -> str:
        return P.floor_status(self.figures)

    @property
    def retired(self) -> bool:
        return self.state == RETIRED

    def want_plain_step(self) -> bool:
        """True: the decoder should run a plain step (timing, a refresh, or retired)."""
        if self.state == PROBING:
            return self.ar_ms is None
        if self.state == SPECULATING:
            return self.since_plain >= self.refresh
        return self.final or self.plain_left > 0

    def untimed(self) -> bool:
        """The plain step the floor wants now is a lead: run, not timed."""
        return self.leading > 0 and not self.final and self.want_plain_step()

    def leads(self) -> bool:
        """The plain step the floor wants now is an untimed lead that the timed one follows,
        whatever its token (probing or speculating; retired, the count of steps left says)."""
        return self.untimed() and self.state != RETIRED

    def record_plain(self, ms: float) -> None:
        self.ar_windows += 1
        if self.final:
            return
        if self.leading > 0:
            self.leading -= 1
            if self.state == RETIRED:
                self.plain_left = max(0, self.plain_left - 1)
            return
        if not valid_ms(ms):
            self._retire(final=True, status=P.FLOOR_BAD_PLAIN, ms=ms)
            return
        self.plain_ms.append(float(ms))
        self.timed += 1
        self.since_plain = 0
        if self.state == PROBING and not self.probes:
            self.figures = {"status": P.FLOOR_READY, "ar_ms": self.ar_ms}
        elif self.state == RETIRED:
            self.plain_left = max(0, self.plain_left - 1)
        elif self.state == SPECULATING:
            self._judge()

    def record_window(self, ms: float, emitted: int) -> None:
        self.leading = self.lead     # the next plain step follows a window: not queued
        if self.final or self.state == RETIRED and self.plain_left > 0:
            return
        if self.ar_ms is None:
            raise ParameterError("the AR floor times a plain step first: check want_plain_step()")
        if not valid_ms(ms) or emitted < 1:
            self._retire(final=True, status=P.FLOOR_BAD_WINDOW, ms=ms, tokens=emitted)
            return
        self.since_plain += 1
        if self.state == SPECULATING:
            self.windows.append((float(ms), int(emitted)))
            self._judge()
            return
        # a probe: the first ones of the request, or ones after a wait in plain steps, judged
        # together (their milliseconds over their tokens)
        self.probes.append((float(ms), int(emitted)))
        n = len(self.probes)
        if self.first_pays:        # the seed's rule: the probes one by one, the first cheaper one
            per_token = min(m / e for m, e in self.probes)
        else:
            per_token = sum(m for m, _ in self.probes) / sum(e for _, e in self.probes)
        limit = self.reprobes if self.state == RETIRED else self.max_probes
        if per_token < self.ar_ms:
            self.state = SPECULATING
            self.windows.clear()
            self.windows.extend(self.probes[-1:] if self.first_pays else self.probes)
            self.wait = self.reprobe
            self.figures = {"status": P.FLOOR_SPECULATING, "probes": n, "per_token": per_token,
                            "ar_ms": self.ar_ms}
        elif n >= limit:
            if self.state == RETIRED:
                self.wait = min(2 * self.wait, self.max_reprobe)
            self._retire(status=P.FLOOR_NO_GAIN, probes=n, best=per_token, ar_ms=self.ar_ms,
                         next=self.wait, **({"cheapest": True} if self.first_pays else {}))
        else:
            self.figures = {"status": P.FLOOR_PROBE, "probes": n, "per_token": per_token}

    def _judge(self) -> None:
        """Speculating: retire once the recent windows do not beat a plain step per token, with
        `z` standard errors of their saving a window to spare."""
        ms = sum(m for m, _ in self.windows)
        tokens = sum(e for _, e in self.windows)
        per_token, n = ms / tokens, len(self.windows)
        if n < self.min_judge or self._saving_bound(n, (tokens * self.ar_ms - ms) / n) > 0:
            self.figures = {"status": P.FLOOR_SPECULATING, "windows": n, "per_token": per_token,
                            "ar_ms": self.ar_ms}
        else:
            self._retire(status=P.FLOOR_STOPPED, windows=n, per_token=per_token,
                         ar_ms=self.ar_ms, next=self.wait)

    def _saving_bound(self, n: int, mean: float) -> float:
        """The recent windows' mean saving a window plus `z` standard errors of it."""
        if n < 2 or self.z == 0:
            return mean
        var = sum((e * self.ar_ms - m - mean) ** 2 for m, e in self.windows) / (n - 1)
        return mean + self.z * (var / n) ** 0.5

    def _retire(self, final: bool = False, **figures: Any) -> None:
        self.state = RETIRED
        self.final = self.final or final
        self.plain_left = 0 if final else self.wait
        self.probes = [] if not final else self.probes
        self.figures = figures
