"""From settings to the parts a run decodes with: drafters, the window policy, the verifier.

`PartsFactory.build(settings)` is the one place settings turn into parts, at the start of a
run and again at every settings change between windows. What the parts learned stays in the
factory across rebuilds: the window chooser's acceptance and cost estimates, the takeover's
measurements, the AR floor's verdict, an opened draft model. A change that makes an estimate
meaningless drops it (another model drafter: another draft price).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from engine.cost.chooser import WindowChooser
from engine.cost.draft_cost import DraftCost, draft_model_cost, early_exit_cost, model_rows
from engine.cost.floor import ArFloor
from engine.cost.plan import Cause
from engine.cost.probe import card_profile
from engine.errors import ParameterError
from engine.limits import MAX_ROWS
from engine.model.runtime import RowScores, Runtime, Session
from engine.speculation.events import DraftReport
from engine.speculation.drafters import Drafter, LookupDrafter, TreeDrafter, tree_rows
from engine.speculation.llamacpp_ngram import LlamaCppNgramDrafter
from engine.speculation.model_drafters import make_model_drafter, size_warning
from engine.speculation.policies import (ArFloorPolicy, FixedPolicy, Learning, PlainPolicy,
                                         PricedPolicy, PricedTakeoverPolicy, TakeoverPolicy,
                                         WindowPolicy)
from engine.speculation.sampling import Rng, SamplingConfig
from engine.speculation.settings import (DRAFTERS, LLAMACPP_DRAFTERS, MATCH_RULES, MODEL_DRAFTERS,
                                         DecodeSettings)
from engine.speculation.takeover import Takeover
from engine.speculation.tree import TokenTree
from engine.speculation.verify import VerifyOutcome, verify_greedy, verify_greedy_top_k, verify_sampled

NGRAM_DEPTH = DecodeSettings().depth   # the n-gram tree's depth when it takes over a window


def make_drafter(name: str, match: str = "recent") -> Drafter | None:
    """The n-gram drafter for `--draft name` ("none" -> None: plain decoding). The tree ranks by
    recurrence, so `match` only applies to the lookup drafter. It lives here, above the drafters
    it builds, so drafters.py never imports a subclass of its own base."""
    if name not in DRAFTERS:
        raise ParameterError(f"drafter must be one of {', '.join(DRAFTERS)}, got {name!r}")
    if name == "none":
        return None
    if name == "lookup":
        return LookupDrafter(match)
    if name in LLAMACPP_DRAFTERS:               # llama.cpp's drafters, ported line for line
        return LlamaCppNgramDrafter(name)
    if match not in MATCH_RULES:
        raise ParameterError(f"match rule must be one of {', '.join(MATCH_RULES)}, got {match!r}")
    return TreeDrafter()


@dataclass(frozen=True)
class Verifier:
    """The verdict on a window's scores: greedy on the top-k alone (the fast path: greedy, no
    penalties, no observer of a detailed run's logits), greedy on the full logits, or rejection
    sampling. `summary`: the fast path of a run that shows its rows asks the pass for each row's
    normaliser and its logits of the window's tokens too (RowScores), enough for every row's
    top 5 probabilities and p without the whole logits; the verdict is the same either way."""

    sampling: SamplingConfig
    tie_margin: float
    need_logits: bool
    summary: bool = False

    def __call__(self, tree: TokenTree, scores: RowScores, context: list[int],
                 rng: Rng) -> VerifyOutcome:
        if scores.logits is None:
            return verify_greedy_top_k(tree, scores.top_values, scores.top_ids, self.tie_margin)
        if self.sampling.greedy:
            return verify_greedy(tree, scores.logits, context, self.sampling, self.tie_margin)
        return verify_sampled(tree, scores.logits, context, self.sampling, rng)


@dataclass(frozen=True)
class Parts:
    drafters: dict[str, Drafter]     # by the name a plan gives (Plan.drafter)
    policy: WindowPolicy
    verifier: Verifier


def _drafter_spec(s: DecodeSettings) -> tuple:
    """What the drafter is built from: its kind, and the match rule if it is the lookup drafter
    (the tree drafter ranks by recurrence and keeps its statistics across match changes), the
    exit layer of the early-exit drafter, the file of the draft model."""
    return (s.draft, s.match if s.draft == "lookup" else None,
            s.exit_layer if s.draft == "early-exit" else None,
            s.draft_model if s.draft == "model" else None)


class PartsFactory:
    """Builds a run's parts from settings and keeps what they learned (module docstring).

    profile: the device's cost profile for --adaptive (None: the saved one, or a probe);
    draft_runtime: an opened --draft-model (else `open_model(path)` opens it, on the target's
    device and in its dtype: engine.session.draft_opener); progress(stage, fraction): where a
    one-time cost probe reports."""

    def __init__(self, runtime: Runtime, profile: Any = None, draft_runtime: Runtime | None = None,
                 open_model: Callable[[str], Runtime] | None = None,
                 progress: Callable[[str, float], None] | None = None,
                 draft_for: str | None = None) -> None:
        self.rt = runtime
        self.profile = profile
        self.draft_rt = draft_runtime
        # the --draft-model path draft_rt was opened for (`draft_for`: a given one's)
        self._draft_rt_for = draft_for if draft_runtime is not None else None
        self.open_model = open_model
        self.progress = progress
        self.draft_load_s = 0.0
        self.notice = ""            # a one-time line for the user (a draft model's size warning)
        self.drafter: Drafter | None = None
        self._spec: tuple | None = None
        self.ngram: TreeDrafter | None = None       # the n-gram tree beside a model (--takeover)
        self.takeover: Takeover | None = None
        self.chooser: WindowChooser | None = None   # --adaptive: built (and priced) when asked
        self.floor: ArFloor | None = None
        self.draft_cost: DraftCost | None = None    # --adaptive model drafts: their draft price

    # -- drafters --------------------------------------------------------------------------
    def main_drafter(self, s: DecodeSettings, session: Session | None = None) -> Drafter | None:
        """The drafter the settings name, rebuilt only when what it is built from changed; a
        draft model is opened here the first time and checked against the target's vocabulary.
        Built during a run (`session`), it begins on the run's session."""
        spec = _drafter_spec(s)
        if spec == self._spec:
            return self.drafter
        if self._spec is not None and (s.draft in MODEL_DRAFTERS or self._spec[0] in MODEL_DRAFTERS):
            self.chooser = None            # another model drafter: another draft price
        if self._spec is not None:
            self.takeover = None
        self._spec = spec
        self.drafter = self._build_drafter(s)
        if self.drafter is not None and session is not None:
            self.drafter.begin(session)
        return self.drafter

    def _build_drafter(self, s: DecodeSettings) -> Drafter | None:
        if s.draft not in MODEL_DRAFTERS:
            return make_drafter(s.draft, s.match)
        if s.draft == "model":
            self._open_draft_model(s.draft_model)
        drafter = make_model_drafter(s.draft, self.rt, s.exit_layer,
                                     self.draft_rt if s.draft == "model" else None)
        if s.draft == "model":
            self.notice = size_warning(self.rt, self.draft_rt)
        return drafter

    def _open_draft_model(self, path: str) -> None:
        if self.draft_rt is not None and self._draft_rt_for == path:
            return
        if self.open_model is None:
            raise ParameterError("this decoder was given no way to open a draft model "
                                 "(engine.session.draft_opener)")
        t0 = time.perf_counter()
        self.draft_rt = self.open_model(path)
        self.draft_load_s = time.perf_counter() - t0
        self._draft_rt_for = path

    # -- the parts -------------------------------------------------------------------------
    def build(self, s: DecodeSettings, session: Session | None = None,
              detail: bool = True, observed: bool = False) -> Parts:
        """The parts for settings `s`. `session`: the run's, once it holds the request (a cost
        probe then runs in its scratch slots, a new drafter begins on it). `detail`: the run's
        events carry per-row detail; `observed`: an observer reads each window's scores, and
        with detail it is given the whole logits (Decoder's on_verify)."""
        drafter = self.main_drafter(s, session)
        model = s.draft in MODEL_DRAFTERS
        if s.takeover and model:
            # adaptive: priced on the cost model (priced_takeover); else measured as it goes
            self.takeover = None if s.adaptive else (self.takeover or Takeover(model_name=s.draft))
            if self.ngram is None:
                self.ngram = TreeDrafter()
                if session is not None:
                    self.ngram.begin(session)
        else:
            self.takeover = self.ngram = None
        if s.adaptive and s.draft != "none" and self.chooser is None:
            self.chooser = self._build_chooser(s, session)
        # adaptive off: the chooser (and what it learned) stays for a later switch back on
        # the floor times plain steps as plain decoding runs them: where the session queues plain
        # steps (graphs), the timed one queued behind an untimed lead
        self.floor = ((self.floor or ArFloor(lead=int(self.rt.use_graphs)))
                      if s.ar_floor and s.draft != "none" else None)
        drafters = {} if drafter is None else {s.draft: drafter}
        if self.ngram is not None:
            drafters["tree"] = self.ngram
        fast = s.sampling.greedy and not s.sampling.penalized and not (detail and observed)
        return Parts(drafters, self._policy(s),
                     Verifier(s.sampling, self.rt.tie_margin, not fast, detail and fast))

    def _policy(self, s: DecodeSettings) -> WindowPolicy:
        chooser = self.chooser if s.adaptive and s.draft != "none" else None
        width = 1 if s.draft == "lookup" or s.draft in LLAMACPP_DRAFTERS else s.width   # chains
        if s.draft == "none":
            policy: WindowPolicy = PlainPolicy()
        elif self.ngram is not None and chooser is not None:
            policy = PricedTakeoverPolicy(chooser, s.draft, s.depth, s.width, NGRAM_DEPTH)
        elif self.takeover is not None:
            policy = TakeoverPolicy(self.takeover, s.draft, s.depth, s.width, NGRAM_DEPTH, tree_rows)
        elif chooser is not None:
            policy = PricedPolicy(chooser, s.draft, s.depth, width,
                                  needs_match=s.draft not in MODEL_DRAFTERS)
        elif s.draft in MODEL_DRAFTERS:
            policy = FixedPolicy(s.draft, s.depth, s.width, model_rows, Cause.MODEL_FIXED,
                                 exit_layer=s.exit_layer)
        else:
            policy = FixedPolicy(s.draft, s.depth, width,
                                 tree_rows if s.draft == "tree" else lambda d, w: 1 + d)
        if self.chooser is not None and chooser is None:
            policy = Learning(policy, self.chooser)
        if self.floor is not None:
            policy = ArFloorPolicy(policy, self.floor, s.draft)
        return policy

    # -- pricing ---------------------------------------------------------------------------
    def _build_chooser(self, s: DecodeSettings, session: Session | None) -> WindowChooser:
        """The window chooser on the device's profile; a model drafter is registered with its
        window shape and its draft cost (engine.cost.draft_cost)."""
        ch = WindowChooser(self._cost_profile(session), MAX_ROWS, MAX_ROWS, max_rows=MAX_ROWS)
        ch.register("tree", rows_of=tree_rows)
        if s.draft in MODEL_DRAFTERS:
            self.draft_cost = self._draft_cost(s, session)
            ch.register(s.draft, rows_of=model_rows, draft_ms=self.draft_cost.draft_ms)
        return ch

    def _cost_profile(self, session: Session | None):
        """The device's verify-cost profile: a saved or bundled one, else a quick probe. Before
        the run at the profile's usual context; during a run (adaptive switched on from the
        workbench) on the run's session at its committed length, so only scratch slots are
        written."""
        if self.profile is None:
            self.profile = card_profile(self.rt, progress=self.progress, check=True,
                                        context=session.length if session is not None else None,
                                        on=session)
        return self.profile

    def _draft_cost(self, s: DecodeSettings, session: Session | None) -> DraftCost:
        """What this device pays per draft pass: the early exit's from the profile's probed exit
        layers (or timed now); a draft model's from its own cost profile (saved, or probed)."""
        if s.draft == "early-exit":
            limit = self.rt.config.max_context - MAX_ROWS - 1
            ctx = session.length if session is not None else min(self.profile.context or 1024, limit)
            return early_exit_cost(self.profile, s.exit_layer, self.rt.config.n_layers,
                                   runtime=session or self.rt, context=max(1, ctx))
        stream = getattr(self.drafter, "stream", None) if session is not None else None
        prof = card_profile(self.draft_rt, progress=self.progress, check=True,
                            context=stream.length if stream is not None else None, on=stream)
        return draft_model_cost(prof, f"draft model {self.draft_rt.model_id}")

    def draft_report(self, s: DecodeSettings) -> DraftReport | None:
        """The report's lines on a model drafter's draft passes and its model."""
        d = self.drafter
        if s.draft not in MODEL_DRAFTERS or d is None:
            return None
        per_token = round(d.ms_per_token, 4) if d.draft_passes else None
        if s.draft != "model":
            return DraftReport(round(d.draft_ms, 3), per_token)
        return DraftReport(round(d.draft_ms, 3), per_token, str(self.draft_rt.loaded.source),
                           round(self.draft_load_s, 4), self.draft_rt.weights_label)
