"""The window loop: propose -> verify -> commit, one frozen WindowEvent per window.

    ids = prompt; cache <- prefill(ids[:-1]); root = ids[-1]
    each window: tree = drafter.propose(...)           (empty tree: one plain decode step)
                 scores = runtime.verify([root] + tree.tokens, tree.row_depths, tree.ancestor_mask())
                 outcome = verify_greedy / verify_sampled (penalties on every row)
                 cache.commit([root row] + accepted rows); root = last emitted token

Setting changes arrive on a queue and apply at the next window boundary; a stop flag ends the run
between windows. The decoder knows nothing of Qt.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Iterator


from engine.cost.chooser import ArFloor, Choice, WindowChooser
from engine.cost.draft_cost import DraftCost, draft_model_cost, early_exit_cost
from engine.cost.probe import card_profile
from engine.errors import NumericalError, ParameterError
from engine.model.runtime import Runtime
from engine.speculation import events as E
from engine.speculation.drafters import Drafter, TreeDrafter, make_drafter, tree_rows
from engine.speculation.model_drafters import make_model_drafter, model_tree_rows, size_warning
from engine.speculation.ngram import NgramIndex
from engine.speculation.sampling import Rng
from engine.speculation.settings import LLAMACPP_DRAFTERS, MODEL_DRAFTERS, DecodeSettings
from engine.speculation.takeover import NGRAM, PLAIN, Takeover, priced_takeover
from engine.speculation.tree import TokenTree
from engine.speculation.verify import VerifyOutcome, verify_greedy, verify_greedy_top_k, verify_sampled
from engine.speculation.window_events import verify_rows, window_event

MAX_ROWS = 64   # rows one verify pass may use (the largest graph bucket)
NGRAM_DEPTH = DecodeSettings().depth   # the n-gram tree's depth when it takes over a window


def _model_rows(depth: int, width: int) -> int:
    """Verify rows of a model-drafted window: a chain, or the level-by-level tree."""
    return 1 + depth if width <= 1 else model_tree_rows(depth, width)


def _drafter_spec(s: DecodeSettings) -> tuple:
    """What the drafter is built from: its kind, and the match rule if it is the lookup drafter
    (the tree drafter ranks by recurrence and keeps its statistics across match changes), the
    exit layer of the early-exit drafter, the file of the draft model."""
    return (s.draft, s.match if s.draft == "lookup" else None,
            s.exit_layer if s.draft == "early-exit" else None,
            s.draft_model if s.draft == "model" else None)


class Decoder:
    def __init__(self, runtime: Runtime, prompt_ids: list[int], settings: DecodeSettings,
                 controls: "queue.Queue[DecodeSettings] | None" = None,
                 stop: threading.Event | None = None, detail: bool = True, profile=None,
                 draft_runtime: Runtime | None = None,
                 open_model: Callable[[str], Runtime] | None = None):
        if not prompt_ids:
            raise ParameterError("the prompt is empty: give some text to continue")
        self.rt = runtime
        self.prompt_ids = list(prompt_ids)
        self.settings = settings
        self.controls = controls
        self.stop = stop or threading.Event()
        self.detail = detail
        self.tok = runtime.tokenizer
        s = settings
        # the committed stream (prompt, then every emitted token); its last token is the next
        # window's root
        self.context: list[int] = list(prompt_ids)
        self.index = NgramIndex(s.ngram_min, s.ngram_max)
        self.index.extend(self.context)
        self.rng = Rng(s.seed)
        # --draft model: the draft's runtime, given or opened from settings.draft_model with
        # open_model (engine.session.draft_opener: the target's device and dtype)
        self.draft_rt = draft_runtime
        self.open_model = open_model
        self._draft_rt_for = s.draft_model if draft_runtime is not None else None
        self.draft_load_s = 0.0
        self.notice = ""            # a one-time line for the user (a draft model's size warning)
        self._needed = 0            # cache slots of this request (known once the run starts)
        self.drafter: Drafter | None = self._build_drafter(s)
        self._drafter_spec = _drafter_spec(s)
        # --takeover (model drafts): the n-gram tree beside the model, and who drafts each window
        self.takeover: Takeover | None = None
        self.ngram_drafter: TreeDrafter | None = None
        self._kind: str | None = None
        self.chooser: WindowChooser | None = None   # --adaptive: built (and priced) at the start
        self.floor: ArFloor | None = None
        # results
        self.new_tokens: list[int] = []
        self.windows_done = 0
        self.proposed = 0
        self.accepted = 0
        self.depth_tried: list[int] = []
        self.depth_accepted: list[int] = []
        self.wall_s = 0.0
        self.finish_reason = ""
        self.profile = profile     # a CostProfile for --adaptive (None: the device's, or a probe)
        self.draft_cost: DraftCost | None = None    # --adaptive model drafts: their draft price
        self.progress = None        # callable(stage, fraction) for the one-time profile probe
        self._running = False       # prefill done: the cache holds this request

    # -- settings -------------------------------------------------------------------------
    def _apply_controls(self) -> None:
        if self.controls is None:
            return
        while True:
            try:
                s = self.controls.get_nowait()
            except queue.Empty:
                return
            if s.seed != self.settings.seed:
                self.rng = Rng(s.seed)
            self.settings = s
            self._configure()

    def _build_drafter(self, s: DecodeSettings) -> Drafter | None:
        """The drafter these settings ask for; a draft model is opened here the first time (on
        the target's device, in its dtype) and checked against the target's vocabulary."""
        if s.draft not in MODEL_DRAFTERS:
            return make_drafter(s.draft, s.match)
        if s.draft == "model" and (self.draft_rt is None or self._draft_rt_for != s.draft_model):
            if self.open_model is None:
                raise ParameterError("this decoder was given no way to open a draft model "
                                     "(engine.session.draft_opener)")
            t0 = time.perf_counter()
            self.draft_rt = self.open_model(s.draft_model)
            self.draft_load_s = time.perf_counter() - t0
            self._draft_rt_for = s.draft_model
        drafter = make_model_drafter(s.draft, self.rt, s.exit_layer,
                                     self.draft_rt if s.draft == "model" else None)
        if s.draft == "model":
            self.notice = size_warning(self.rt, self.draft_rt)
        if self._needed:                   # switched to in the middle of a run
            drafter.reset(self._needed, MAX_ROWS + 1)
        return drafter

    def _configure(self) -> None:
        """Bring the drafter, the chooser, the AR floor and the n-gram index in line with
        self.settings. Building the chooser may probe the device's cost profile."""
        s = self.settings
        if _drafter_spec(s) != self._drafter_spec:
            self.drafter = self._build_drafter(s)
            if s.draft in MODEL_DRAFTERS or self._drafter_spec[0] in MODEL_DRAFTERS:
                self.chooser = None            # another model drafter: another draft price
            self._drafter_spec = _drafter_spec(s)
            self.takeover = None
        if s.takeover and s.draft in MODEL_DRAFTERS:
            # adaptive: priced on the cost model (priced_takeover); else measured as it goes
            if self.takeover is None and not s.adaptive:
                self.takeover = Takeover(model_name=s.draft)
            if s.adaptive:
                self.takeover = None
            if self.ngram_drafter is None:
                self.ngram_drafter = TreeDrafter()
        else:
            self.takeover = self.ngram_drafter = None
        if s.adaptive and s.draft != "none":
            if self.chooser is None:
                self.chooser = self._build_chooser(s)
            self.chooser.max_depth = max(s.depth, NGRAM_DEPTH) if self.ngram_drafter else s.depth
            self.chooser.max_width = s.width
        # adaptive off: the chooser (and what it learned) stays for a later switch back on,
        # but prices nothing (_plan reads it only while adaptive is on)
        if s.ar_floor and s.draft != "none":
            if self.floor is None:
                self.floor = ArFloor()
        else:
            self.floor = None
        if self.index.n_min != s.ngram_min or self.index.n_max != s.ngram_max:
            idx = NgramIndex(s.ngram_min, s.ngram_max)
            idx.extend(self.context)
            self.index = idx

    # -- the loop -------------------------------------------------------------------------
    def windows(self) -> Iterator[E.WindowEvent]:
        s = self.settings
        rt = self.rt
        ids = self.prompt_ids
        self._configure()          # may probe the device's cost profile: before the clock starts
        # every token the run commits, plus window rows only for a run that drafts (a window
        # never takes more rows than are free, so a prompt that fits plain decoding runs)
        self._needed = len(ids) + s.max_new_tokens
        rt.start(self._needed, spare=MAX_ROWS + 1 if s.draft != "none" else 0)
        rt.warm_up()
        if s.draft in MODEL_DRAFTERS:
            self.drafter.reset(self._needed, MAX_ROWS + 1)
        t_start = time.perf_counter()
        rt.prefill(ids[:-1])
        self._running = True
        eos = set(self.tok.eos_ids)
        index = 0
        while True:
            if self.stop.is_set():
                self.finish_reason = "stopped"
                break
            self._apply_controls()
            s = self.settings
            remaining = s.max_new_tokens - len(self.new_tokens)
            if remaining <= 0:
                self.finish_reason = "length"
                break
            root = self.context[-1]
            t0 = time.perf_counter()
            plan = self._plan(remaining)
            tree = self._propose(root, plan)
            t1 = time.perf_counter()
            fast = s.sampling.greedy and not s.sampling.penalized and not self.detail
            scores = rt.verify([root, *tree.tokens], tree.row_depths, tree.ancestor_mask(),
                               need_logits=not fast)
            t2 = time.perf_counter()
            if not bool(scores.top_values[:, 0].isfinite().all()):   # NaN ranks first in topk
                raise NumericalError(
                    f"the model's logits are NaN or infinite at position {rt.cache.length}: its weights or "
                    "metadata are broken" + ("; or float16 overflowed: try --dtype bfloat16 or float32"
                                             if rt.dtype_name == "float16" else ""))
            outcome = self._verify(tree, scores)
            self.rt.cache.commit(outcome.keep_rows)
            emitted, kinds = list(outcome.emitted), list(outcome.kinds)
            finish = ""
            for j, t in enumerate(emitted):
                if t in eos:
                    emitted, kinds, finish = emitted[:j + 1], kinds[:j + 1], "eos"
                    break
            if len(emitted) >= remaining:
                emitted, kinds = emitted[:remaining], kinds[:remaining]
                finish = finish or "length"
            self.context.extend(emitted)
            self.index.extend(emitted)
            self.new_tokens.extend(emitted)
            used = {NGRAM: self.ngram_drafter, PLAIN: None}.get(self._kind, self.drafter)
            if used is not None:
                used.observe(outcome)
            self._count(tree, outcome)
            t3 = time.perf_counter()
            window_ms = (t3 - t0) * 1e3
            if self.takeover is not None and self._kind is not None:
                self.takeover.observe(self._kind, len(outcome.emitted), window_ms)
            if self.floor is not None:
                if plan.plain and self.floor.want_plain_step():
                    self.floor.record_plain(window_ms)
                elif len(tree.tokens):
                    self.floor.record_window(window_ms, len(emitted))
            self.windows_done += 1
            self.wall_s = t3 - t_start
            self.finish_reason = finish
            rows_ev = verify_rows(tree, scores, outcome, self.tok.token_text) if self.detail else []
            ev = window_event(index=index, context=self.context, tree=tree, outcome=outcome,
                              rows=rows_ev, emitted=emitted, kinds=kinds,
                              times_s=(t1 - t0, t2 - t1, t3 - t2), plan=plan, settings=s,
                              stats=self._stats(), finish=finish, text=self.tok.token_text,
                              notice=self.notice,
                              drafter={NGRAM: "tree", PLAIN: "none"}.get(self._kind, s.draft))
            self.notice = ""
            if self.chooser is not None:
                self.chooser.observe_event(ev)
            yield ev
            index += 1
            if finish:
                break

    def run(self) -> dict[str, Any]:
        for _ in self.windows():
            pass
        return self.report()

    def _build_chooser(self, s: DecodeSettings) -> WindowChooser:
        """The window chooser on the device's profile; a model drafter is registered with its
        window shape and its draft cost (engine.cost.draft_cost)."""
        ch = WindowChooser(self._cost_profile(), s.depth, s.width, max_rows=MAX_ROWS)
        ch.register("tree", rows_of=tree_rows)
        if s.draft in MODEL_DRAFTERS:
            self.draft_cost = self._draft_cost(s)
            ch.register(s.draft, rows_of=_model_rows, draft_ms=self.draft_cost.draft_ms)
        return ch

    def _draft_cost(self, s: DecodeSettings) -> DraftCost:
        """What this device pays per draft pass: the early exit's from the profile's probed exit
        layers (or timed now); a draft model's from its own cost profile (saved, or probed)."""
        running = self._running
        if s.draft == "early-exit":
            limit = self.rt.config.max_context - MAX_ROWS - 1
            ctx = self.rt.cache.length if running else min(self.profile.context or 1024, limit)
            return early_exit_cost(self.profile, s.exit_layer, self.rt.config.n_layers,
                                   runtime=self.rt, context=max(1, ctx))
        drt = self.draft_rt
        prof = card_profile(drt, progress=self.progress, check=True,
                            context=drt.cache.length if running else None)
        return draft_model_cost(prof, f"draft model {drt.model_id}")

    def _cost_profile(self):
        """The device's verify-cost profile: a saved or bundled one, else a quick probe."""
        if self.profile is None:
            # before the run: probe at the profile's usual context; during a run (adaptive
            # switched on from the workbench): at the committed length, so only scratch slots
            # are written
            context = self.rt.cache.length if self._running else None
            self.profile = card_profile(self.rt, progress=self.progress, check=True, context=context)
        return self.profile

    def _plan(self, remaining: int) -> Choice:
        """This window's depth and width: fixed settings, the chooser's pick, or the AR floor;
        with --takeover, also who drafts it (self._kind)."""
        s = self.settings
        self._kind = None
        depth = max(0, min(s.depth, remaining - 1))
        width = 1 if s.draft == "lookup" or s.draft in LLAMACPP_DRAFTERS else s.width   # chains
        if self.drafter is None or depth == 0:
            return Choice(0, 0, 1, float("nan"), 1.0, "plain decode: no drafter" if self.drafter
                          is None else "plain decode: the last token of the request")
        if self.floor is not None and self.floor.want_plain_step():
            return Choice(0, 0, 1, float("nan"), 1.0, f"AR floor: {self.floor.reason}")
        chooser = self.chooser if s.adaptive else None
        if self.ngram_drafter is not None and chooser is not None:    # priced takeover
            ngram_depth = max(0, min(max(depth, NGRAM_DEPTH), remaining - 1))
            self._kind, c, why = priced_takeover(chooser, bool(self.index.lookup()[1]),
                                                 s.draft, ngram_depth, depth, s.width)
            return Choice(c.depth, c.width, c.rows, c.predicted_ms, c.expected_tokens, why)
        if self.takeover is not None:
            self._kind, why = self.takeover.choose(bool(self.index.lookup()[1]))
            if self._kind == NGRAM:    # copies run long: the tree drafter's own default depth
                d = max(0, min(max(depth, NGRAM_DEPTH), remaining - 1))
                return Choice(d, s.width, tree_rows(d, s.width), float("nan"), float("nan"), why)
            if self._kind == PLAIN:
                return Choice(0, 0, 1, float("nan"), 1.0, why)
            return Choice(depth, 1, 1 + depth, float("nan"), float("nan"), why)   # a chain
        if s.draft in MODEL_DRAFTERS and chooser is not None:
            return chooser.choose(s.draft, available_depth=depth, available_width=s.width)
        if s.draft in MODEL_DRAFTERS:
            who = f"the first {s.exit_layer} layers" if s.draft == "early-exit" else "the draft model"
            if s.width > 1:
                return Choice(depth, s.width, model_tree_rows(depth, s.width), float("nan"),
                              float("nan"), f"{who} draft a tree of depth {depth}, width {s.width}")
            return Choice(depth, 1, 1 + depth, float("nan"), float("nan"),
                          f"{who} draft a chain of {depth}")
        if chooser is not None:
            if not self.index.lookup()[1]:
                return chooser.choose(s.draft, available_depth=0)
            return chooser.choose(s.draft, available_depth=depth, available_width=width)
        rows = tree_rows(depth, width) if s.draft == "tree" else 1 + depth
        return Choice(depth, width, rows, float("nan"), float("nan"), "fixed depth and width")

    def _propose(self, root: int, plan: Choice) -> TokenTree:
        if self.drafter is None or plan.depth == 0:
            return TokenTree.empty(root)
        # never more rows than one pass holds
        s = self.settings
        rows = tree_rows(plan.depth, plan.width) if s.draft == "tree" else 1 + plan.depth
        budget = min(MAX_ROWS, rows, self.rt.window_room())
        if self._kind == NGRAM:
            budget = min(MAX_ROWS, plan.rows, self.rt.window_room())
            return self.ngram_drafter.propose(self.index, root, plan.depth, plan.width, budget)
        if s.draft in MODEL_DRAFTERS:
            budget = min(MAX_ROWS, plan.rows, self.rt.window_room())
            return self.drafter.propose(self.index, root, plan.depth, plan.width, budget,
                                        sampling=s.sampling, rng=self.rng)
        return self.drafter.propose(self.index, root, plan.depth, plan.width, budget)

    def _verify(self, tree: TokenTree, scores) -> VerifyOutcome:
        if scores.logits is None:
            return verify_greedy_top_k(tree, scores.top_values, scores.top_ids, self.rt.tie_margin)
        cfg = self.settings.sampling
        if cfg.greedy:
            return verify_greedy(tree, scores.logits, self.context, cfg, self.rt.tie_margin)
        return verify_sampled(tree, scores.logits, self.context, cfg, self.rng)

    def _count(self, tree: TokenTree, outcome: VerifyOutcome) -> None:
        """Acceptance by depth: depth d was tried when a node at depth d hung below the accepted
        prefix (d <= accepted length + 1), and accepted when the path reached it."""
        self.proposed += len(tree.tokens)
        self.accepted += len(outcome.accepted)
        if not tree.tokens:
            return
        reached = len(outcome.accepted)
        last = outcome.accepted[-1] if outcome.accepted else -1
        tried = reached + (1 if tree.children(last) else 0)
        while len(self.depth_tried) < tried:
            self.depth_tried.append(0)
            self.depth_accepted.append(0)
        for d in range(tried):
            self.depth_tried[d] += 1
            self.depth_accepted[d] += d < reached

    # -- reporting ------------------------------------------------------------------------
    def accept_rate_by_depth(self) -> list[float]:
        return [a / t if t else 0.0 for a, t in zip(self.depth_accepted, self.depth_tried)]

    def _stats(self) -> E.WindowStats:
        n = len(self.new_tokens)
        return E.WindowStats(
            new_tokens=n, forward_passes=self.windows_done,
            tokens_per_pass=n / self.windows_done if self.windows_done else 0.0,
            proposed_draft_tokens=self.proposed, accepted_draft_tokens=self.accepted,
            accept_rate_by_depth=self.accept_rate_by_depth(),
            tok_s=n / self.wall_s if self.wall_s > 0 else 0.0, elapsed_s=self.wall_s,
            ar_floor=self.floor.state if self.floor is not None else "off",
        )

    def report(self) -> dict[str, Any]:
        st = self._stats()
        rt = self.rt
        return {
            "text": self.tok.decode(self.new_tokens, skip_special_tokens=True),
            "tokens": list(self.new_tokens),
            "new_tokens": st.new_tokens,
            "prompt_tokens": len(self.prompt_ids),
            "windows": self.windows_done,
            "forward_passes": st.forward_passes,
            "proposed_draft_tokens": st.proposed_draft_tokens,
            "accepted_draft_tokens": st.accepted_draft_tokens,
            "tokens_per_pass": round(st.tokens_per_pass, 4),
            "accept_rate_by_depth": [round(a, 4) for a in st.accept_rate_by_depth],
            "tok_s": round(st.tok_s, 3),
            "wall_s": round(self.wall_s, 4),
            "load_s": round(rt.load_s, 4),
            "finish_reason": self.finish_reason,
            "retired": bool(self.floor is not None and self.floor.retired),
            "ar_windows": self.floor.ar_windows if self.floor is not None else 0,
            "ar_floor": self.floor.reason if self.floor is not None else "off",
            "profile": self.profile.id if self.profile is not None else None,
            "device": rt.device_name,
            "dtype": rt.dtype_name,
            "weights": rt.weights_mode,
            "weight_format": rt.weights_label,
            "weight_bytes": rt.weight_bytes,
            "model": str(rt.loaded.source),
            "config": self.settings.to_dict(),
            **self._draft_report(),
        }

    def _draft_report(self) -> dict[str, Any]:
        d = self.drafter
        if self.settings.draft not in MODEL_DRAFTERS or d is None:
            return {}
        out = {"draft_ms": round(d.draft_ms, 3), "draft_ms_per_token": (round(d.ms_per_token, 4) if d.draft_passes else None)}
        if self.settings.draft == "model":
            out.update(draft_model=str(self.draft_rt.loaded.source),
                       draft_load_s=round(self.draft_load_s, 4),
                       draft_weight_format=self.draft_rt.weights_label)
        return out
