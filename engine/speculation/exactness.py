"""The exactness watch: did a greedy speculative run emit plain greedy decoding's tokens?

Greedy speculation is meant to give plain greedy decoding's output token for token (exact verify
rows: engine.model.runtime). The watch compares a speculative run's new tokens with a plain run's
of the same prompt, settings and runtime, and gives one verdict:

    identical to plain decoding (N tokens)
    first differs at token k: 'a' (p 0.4100) vs 'b' (p 0.4000), margin 0.0100 in probability

k counts the new tokens from 0; a is the speculative run's token and b plain decoding's (each the
repr of the token's text); p is each one's probability under the target at that step of the
plain run: the softmax of plain decoding's raw logits there (before any penalty). Where only the
top k of that step's logits left the device (the fast path: greedy, no penalties, no rows shown,
as the plain side of a race runs), probabilities are unknown and the verdict gives the two
logits and their margin in logits instead ("not in plain's top 5" where a token is outside it).

Exactness is defined for greedy decoding only: sampling draws from the distribution, and a
speculative sampler matches plain sampling in distribution, not in tokens.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Sequence

from engine.errors import ParameterError
from engine.speculation.settings import DecodeSettings

EXIT_IDENTICAL = 0
EXIT_DIFFERS = 3          # `specscope generate --check-exact` exits with this on a difference


@dataclass(frozen=True)
class PlainStep:
    """Plain decoding's scores at one step (row 0 of its one-row pass): raw logits of the tokens
    known there (the pass's top k, and any asked for where the full row was seen) and the log of
    the softmax's normaliser over the whole vocabulary (None: only the top k was seen)."""

    logits: dict[int, float]
    log_norm: float | None = None
    top_k: int = 0

    @classmethod
    def of(cls, scores, tokens: Sequence[int] = ()) -> "PlainStep":
        """From a pass's RowScores (engine.model.runtime), row 0; `tokens`: whose logits to keep
        besides the top k (only where the pass returned its full logits)."""
        ids, values = scores.top_ids[0].tolist(), scores.top_values[0].tolist()
        logits = dict(zip(ids, (float(v) for v in values)))
        norm = None
        if scores.logits is not None:
            import torch
            row = scores.logits[0].float()
            norm = float(torch.logsumexp(row, dim=0))
            for t in tokens:
                if 0 <= t < row.numel():
                    logits[t] = float(row[t])
        return cls(logits, norm, len(ids))

    def logit(self, token: int | None) -> float | None:
        return None if token is None else self.logits.get(token)

    def prob(self, token: int | None) -> float | None:
        lg = self.logit(token)
        return None if lg is None or self.log_norm is None else math.exp(lg - self.log_norm)


@dataclass(frozen=True)
class Verdict:
    identical: bool
    compared: int                    # tokens compared (the shorter run's length)
    first_diff: int | None           # index among the new tokens, or None
    spec_id: int | None = None       # at first_diff: the speculative run's token (None: its end)
    plain_id: int | None = None      # ... and plain decoding's
    spec_token: str | None = None    # repr of each token's text
    plain_token: str | None = None
    spec_p: float | None = None      # probabilities under the target at that plain step
    plain_p: float | None = None
    spec_logit: float | None = None  # raw logits there
    plain_logit: float | None = None
    margin: float | None = None      # |difference| of the probabilities, else of the logits
    margin_of: str | None = None     # "probability" or "logit"
    lengths: tuple[int, int] = (0, 0)  # tokens of (the speculative run, the plain run: it may
                                       # stop at the first difference)
    verdict: str = ""

    @property
    def exit_status(self) -> int:
        """What `generate --check-exact` exits with: 0 identical, 3 a difference."""
        return EXIT_IDENTICAL if self.identical else EXIT_DIFFERS

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["lengths"] = list(self.lengths)
        return d


def _p(x: float) -> str:
    return f"{x:.4f}" if x >= 1e-3 or x == 0 else f"{x:.2e}"


def _side(name: str | None, p: float | None, logit: float | None, step: PlainStep | None,
          token: int | None) -> str:
    if token is None:
        return "(end of output)"
    if p is not None:
        return f"{name} (p {_p(p)})"
    if logit is not None:
        return f"{name} (logit {logit:.4f})"
    if step is not None and step.log_norm is None:
        return f"{name} (not in plain's top {step.top_k})"
    return f"{name}"


def compare(spec: Sequence[int], plain: Sequence[int],
            steps: Sequence[PlainStep | None] | None,
            token_text: Callable[[int], str]) -> Verdict:
    """The verdict on a speculative run's new tokens `spec` against plain decoding's `plain` of
    the same prompt; `steps[i]`: plain decoding's scores at its step i (None or short: unknown),
    for the probabilities at the first difference; `token_text`: the tokenizer's (repr shown).

    Runs of different lengths whose tokens agree as far as the shorter goes (one was stopped)
    are identical over that prefix; the verdict says so."""
    spec, plain = list(spec), list(plain)
    n = min(len(spec), len(plain))
    lengths = (len(spec), len(plain))
    k = next((i for i in range(n) if spec[i] != plain[i]), None)
    if k is None:
        if len(spec) == len(plain):
            text = f"identical to plain decoding ({n} tokens)"
        else:
            text = (f"identical to plain decoding over the first {n} tokens (a run stopped early: "
                    f"{len(spec)} speculative, {len(plain)} plain)")
        return Verdict(True, n, None, lengths=lengths, verdict=text)
    a, b = spec[k], plain[k]
    step = steps[k] if steps is not None and k < len(steps) else None
    pa, pb = (step.prob(a), step.prob(b)) if step else (None, None)
    la, lb = (step.logit(a), step.logit(b)) if step else (None, None)
    if pa is not None and pb is not None:
        margin, of = abs(pa - pb), "probability"
    elif la is not None and lb is not None:
        margin, of = abs(la - lb), "logit"
    else:
        margin, of = None, None
    ta, tb = repr(token_text(a)), repr(token_text(b))
    text = (f"first differs at token {k}: {_side(ta, pa, la, step, a)} vs "
            f"{_side(tb, pb, lb, step, b)}")
    if margin is not None:
        text += f", margin {_p(margin) if of == 'probability' else f'{margin:.4f}'} in {of}" + ("s" if of == "logit" else "")
    return Verdict(False, n, k, a, b, ta, tb, pa, pb, la, lb, margin, of, lengths, text)


# -- plain decoding as the reference ----------------------------------------------------------

def require_greedy(settings: DecodeSettings, what: str = "--check-exact") -> None:
    if not settings.sampling.greedy:
        raise ParameterError(
            f"{what} needs greedy decoding (--temperature 0): exactness against plain decoding "
            f"is only defined for greedy, got --temperature {settings.sampling.temperature:g}")


def plain_settings(settings: DecodeSettings) -> DecodeSettings:
    """Plain decoding with the same sampling, penalties and length (a race's `ar` entrant)."""
    return replace(settings, draft="none", adaptive=False, ar_floor=False, takeover=False)


def reference_side(sides: Sequence[DecodeSettings]) -> tuple[int | None, str]:
    """Of a race's two settings, the side that is plain greedy decoding to check the other
    against: (its index, "") or (None, why there is no check)."""
    if not all(s.sampling.greedy for s in sides):
        return None, "no exactness check: sampling (temperature > 0); it is defined for greedy only"
    plain = [i for i, s in enumerate(sides) if s.draft == "none"]
    if not plain:
        return None, "no exactness check: neither side is plain decoding (enter plain on one side)"
    if len({(s.sampling, s.max_new_tokens) for s in sides}) > 1:
        return None, "no exactness check: the sides decode with different sampling or lengths"
    return plain[0], ""


class StepRecorder:
    """An on_verify observer (engine.speculation.decoder.Decoder) for a plain run: keeps each
    step's PlainStep (row 0: plain decoding has one row a pass). Reads the scores, never
    changes them; on the fast path only the top k of each step is known."""

    def __init__(self) -> None:
        self.steps: list[PlainStep] = []

    def __call__(self, tree, scores) -> None:
        self.steps.append(PlainStep.of(scores))


def check_exact(runtime, prompt_ids: Sequence[int], settings: DecodeSettings,
                spec_tokens: Sequence[int]) -> Verdict:
    """Decode `prompt_ids` plainly on `runtime` (draft none, the same greedy sampling and
    length) and compare `spec_tokens`, a speculative run's new tokens, with it. The plain run
    keeps its full logits (so the verdict has probabilities), stops at the first difference or
    once it has as many tokens as the speculative run."""
    from engine.speculation.decoder import Decoder
    require_greedy(settings)
    spec = list(spec_tokens)
    if not spec:
        return compare([], [], [], runtime.tokenizer.token_text)
    last: list = []
    dec = Decoder(runtime, list(prompt_ids), plain_settings(settings), detail=True,
                  on_verify=lambda tree, scores: last.append(scores))
    steps: list[PlainStep | None] = []
    windows = dec.windows()
    try:
        for ev in windows:
            scores = last.pop() if last else None
            plain = dec.new_tokens
            for j, t in enumerate(ev.emitted):     # one token a window: plain has one row
                i = len(plain) - len(ev.emitted) + j
                want = [t] + ([spec[i]] if i < len(spec) else [])
                steps.append(PlainStep.of(scores, want) if scores is not None and j == 0 else None)
            n = min(len(plain), len(spec))
            if plain[:n] != spec[:n] or len(plain) >= len(spec):
                break
    finally:
        windows.close()
    return compare(spec, dec.new_tokens, steps, runtime.tokenizer.token_text)
