"""A race: two decode settings on one prompt, on the one device, taking turns window by window.

Sharing the device: the side that has used less device time so far runs its next window (a
fair-share scheduler), so at every moment both have had about the same time on the device, and
each output's length is what that setting makes of an equal share. The finish line is the
request's --max-new-tokens (or the end of text); the first side to cross it wins. Each side's
speeds count its own device time (the other side's turns are not counted against it), the
figures it would show running alone, up to the cost of switching: tok_s its tokens over all of
it (the prefill in), decode_tok_s the tokens after its first window over the time after it
(engine.cost.baseline.decode_tok_s: the prefill out, the speed the stats dock and the sweep quote).

The baseline (engine.cost.baseline.Baseline, named "plain decoding" with its source): where one
side is plain decoding, that side's decode tok/s ("measured", the same measurement as the other
side's); otherwise the sides' own plain steps (windows that drafted nothing, e.g. the AR floor's
timings), else the cost profile's one-row pass ("probe").

Each side's decoder holds its own session on the runtime (engine.model.runtime.Session: its own
KV cache and, on a GPU, its own captured graphs).

The exactness watch: where one side is plain greedy decoding (`plain`) and the other greedy too, the
report's `check_exact` compares the other side's tokens with the plain side's
(engine.speculation.exactness); the plain side's per-step top k is recorded as it runs (on the
fast path: logits, no probabilities). Otherwise `check_exact` is None and `check_exact_why`
says why.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

from engine.cost.baseline import Baseline, decode_tok_s, plain_baseline
from engine.model.runtime import Runtime
from engine.session import draft_opener
from engine.speculation.decoder import Decoder
from engine.speculation.events import WindowEvent
from engine.speculation.exactness import StepRecorder, compare, reference_side
from engine.speculation.settings import DecodeSettings


@dataclass(frozen=True)
class RaceUpdate:
    side: int                    # 0 or 1: whose window this was
    event: WindowEvent
    text: str                    # the side's output so far
    new_tokens: int
    tok_s: float                 # new tokens / the side's own device time (the prefill in)
    tokens_per_pass: float
    device_s: tuple[float, float]  # each side's device time so far
    finished: tuple[bool, bool]
    winner: int | None           # the first side over the finish line (None: nobody yet)
    decode_tok_s: float | None = None   # after the side's first window, on its own device time
    baseline: Baseline | None = None    # plain decoding's decode speed (the race's, so far)
    baseline_side: int | None = None    # the plain side it was measured on (None: steps or probe)


class _Side:
    def __init__(self, rt: Runtime, ids: list[int], settings: DecodeSettings,
                 stop: threading.Event, profile, on_verify=None) -> None:
        self.decoder = Decoder(rt, ids, settings, stop=stop, detail=False,
                               profile=profile if settings.adaptive else None,
                               open_model=draft_opener(rt), on_verify=on_verify)
        self.windows = self.decoder.windows()
        self.device_s = 0.0
        self.first_s: float | None = None   # device time at the end of its first window
        self.first_tokens = 0               # the tokens that window emitted
        self.finished = False
        self.plain = settings.draft == "none"

    def decode_tok_s(self) -> float | None:
        return decode_tok_s(len(self.decoder.new_tokens), self.device_s, self.first_s, self.first_tokens)


class Race:
    def __init__(self, rt: Runtime, prompt_ids: list[int], a: DecodeSettings, b: DecodeSettings,
                 stop: threading.Event | None = None, profile=None) -> None:
        self.rt = rt
        self.profile = profile
        self.stop = stop or threading.Event()
        self.reference, self.check_exact_why = reference_side((a, b))
        self.recorder = StepRecorder() if self.reference is not None else None
        self.sides = [_Side(rt, prompt_ids, s, self.stop, profile,
                            self.recorder if i == self.reference else None)
                      for i, s in enumerate((a, b))]
        self.winner: int | None = None

    def _turn(self, i: int) -> WindowEvent | None:
        """One window of side i; None when its decoder has ended."""
        side = self.sides[i]
        t0 = time.perf_counter()
        try:
            ev = next(side.windows)
        except StopIteration:
            ev = None
        finally:
            side.device_s += time.perf_counter() - t0
        if ev is not None and side.first_s is None and side.decoder.new_tokens:
            side.first_s, side.first_tokens = side.device_s, len(side.decoder.new_tokens)
        return ev

    def baseline(self) -> tuple[Baseline | None, int | None]:
        """(plain decoding's decode speed so far, the plain side it was measured on or None)."""
        for i, s in enumerate(self.sides):
            if s.plain and (d := s.decode_tok_s()):
                return Baseline(d, "measured"), i
        steps = [ms for s in self.sides for ms in s.decoder.run_stats.plain_ms]
        probe = self.profile.ar_ms if self.profile is not None else None
        return plain_baseline(steps, probe), None

    def updates(self) -> Iterator[RaceUpdate]:
        try:
            while not self.stop.is_set():
                running = [i for i, s in enumerate(self.sides) if not s.finished]
                if not running:
                    return
                i = min(running, key=lambda j: self.sides[j].device_s)
                ev = self._turn(i)
                side = self.sides[i]
                if ev is None or ev.finished:
                    side.finished = True
                    if self.winner is None and side.decoder.finish_reason != "stopped":
                        self.winner = i
                if ev is None:
                    continue
                dec = side.decoder
                n = len(dec.new_tokens)
                base, base_side = self.baseline()
                yield RaceUpdate(
                    side=i, event=ev, text=self.rt.tokenizer.decode(dec.new_tokens, skip_special_tokens=True),
                    new_tokens=n, tok_s=n / side.device_s if side.device_s > 0 else 0.0,
                    tokens_per_pass=n / dec.windows_done if dec.windows_done else 0.0,
                    device_s=(self.sides[0].device_s, self.sides[1].device_s),
                    finished=(self.sides[0].finished, self.sides[1].finished), winner=self.winner,
                    decode_tok_s=side.decode_tok_s(), baseline=base, baseline_side=base_side)
        finally:
            for s in self.sides:
                s.windows.close()

    def exactness(self):
        """The other side against the plain side (an exactness Verdict), or None (no plain
        greedy side: `check_exact_why`)."""
        if self.reference is None:
            return None
        plain = self.sides[self.reference].decoder
        spec = self.sides[1 - self.reference].decoder
        return compare(spec.new_tokens, plain.new_tokens, self.recorder.steps,
                       self.rt.tokenizer.token_text)

    def report(self) -> dict[str, Any]:
        """The race's report: per side its device time and speeds (tok_s with the prefill in,
        decode_tok_s without), and the baseline {"tok_s", "source"} with the side it was
        measured on (baseline_side; None: plain steps or the probe)."""
        verdict = self.exactness()
        base, base_side = self.baseline()

        def speeds(s: _Side) -> dict[str, Any]:
            n, d = len(s.decoder.new_tokens), s.decode_tok_s()
            return {"tok_s": round(n / s.device_s, 3) if s.device_s > 0 else 0.0,
                    "decode_tok_s": None if d is None else round(d, 3),
                    "first_token_s": None if s.first_s is None else round(s.first_s, 4),
                    "first_tokens": s.first_tokens}
        return {"winner": self.winner,
                "check_exact": verdict.to_dict() if verdict is not None else None,
                "check_exact_why": self.check_exact_why,
                "reference": self.reference,
                "baseline": base.to_dict() if base is not None else None,
                "baseline_side": base_side,
                "sides": [{"settings": s.decoder.settings.to_dict(), "new_tokens": len(s.decoder.new_tokens),
                           "device_s": round(s.device_s, 4), "windows": s.decoder.windows_done,
                           "finish_reason": s.decoder.finish_reason, **speeds(s)} for s in self.sides]}
