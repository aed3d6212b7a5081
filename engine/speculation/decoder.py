"""The window loop: propose -> verify -> commit -> emit, one frozen WindowEvent per window.

    ids = prompt; session <- prefill(ids[:-1]); root = ids[-1]
    each window: plan = policy.plan(...)                 (who drafts, how deep and wide, why)
                 tree = drafter.propose(request)         (empty tree: one plain decode step)
                 scores = session.verify([root] + tree.tokens, tree.row_depths, tree.ancestor_mask())
                 outcome = verifier(tree, scores)        (penalties on every row)
                 session.commit([root row] + accepted rows); root = last emitted token
                 emit the WindowEvent; policy.observe(event)

On a card, a drafting window's pass is launched without waiting (engine.model.runtime.launch),
and where the policy learns nothing from events the window before it is emitted meanwhile: the
same events in the same order, each built while the next pass runs (Decoder._loop).

The parts (drafters, policy, verifier) come from engine.speculation.factory; setting changes
arrive on a queue and rebuild them at the next window boundary; a stop flag ends the run between
windows. The decoder knows nothing of Qt.
"""

from __future__ import annotations

import dataclasses
import math
import queue
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from engine.cost.acceptance import DepthTally
from engine.cost.baseline import Baseline, decode_tok_s, plain_baseline
from engine.cost.plan import Plan
from engine.errors import NumericalError, ParameterError
from engine.limits import MAX_ROWS
from engine.model.device import synchronize
from engine.model.plain_queue import Step
from engine.model.runtime import RowScores, Runtime, Session, launch
from engine.speculation import events as E
from engine.speculation.drafters import DraftRequest, Drafter
from engine.speculation.factory import Parts, PartsFactory, Verifier
from engine.speculation.ngram import NgramIndex
from engine.speculation.policies import PlanContext, plain_ahead
from engine.speculation.sampling import Rng
from engine.speculation.settings import DecodeSettings
from engine.speculation.tree import TokenTree
from engine.speculation.verify import VerifyOutcome
from engine.speculation.window_events import verify_rows, window_event


class RunStats:
    """What a run has done so far: tokens, windows, drafts proposed and accepted by depth."""

    def __init__(self) -> None:
        self.new_tokens: list[int] = []
        self.windows = 0
        self.proposed = 0
        self.accepted = 0
        self.depths = DepthTally()
        self.wall_s = 0.0
        self.first_s: float | None = None    # prefill start .. the first new token
        self.first_tokens = 0                # tokens emitted with it (the first window's)
        self.plain_ms: list[float] = []      # ms of each window that drafted nothing (plain steps)

    def count(self, tree: TokenTree, outcome: VerifyOutcome, emitted: list[int]) -> None:
        self.windows += 1
        self.new_tokens.extend(emitted)
        self.proposed += len(tree.tokens)
        self.accepted += len(outcome.accepted)
        self.depths.add(tree.parents, outcome.accepted)

    def timed(self, tree: TokenTree, window_s: float, elapsed_s: float) -> None:
        """A counted window's times: its own (a plain step's feeds the baseline) and the run's
        clock at its end (the first that emitted starts decode_tok_s's span)."""
        self.wall_s = elapsed_s
        if not tree.tokens and window_s > 0:
            self.plain_ms.append(1000.0 * window_s)
        if self.first_s is None and self.new_tokens:
            self.first_s, self.first_tokens = elapsed_s, len(self.new_tokens)

    def decode_tok_s(self) -> float | None:
        return decode_tok_s(len(self.new_tokens), self.wall_s, self.first_s, self.first_tokens)

    def stats(self, ar_floor: str) -> E.WindowStats:
        n, w = len(self.new_tokens), self.windows
        return E.WindowStats(
            new_tokens=n, forward_passes=w, tokens_per_pass=n / w if w else 0.0,
            proposed_draft_tokens=self.proposed, accepted_draft_tokens=self.accepted,
            accept_rate_by_depth=self.depths.rates(),
            tok_s=n / self.wall_s if self.wall_s > 0 else 0.0, elapsed_s=self.wall_s,
            ar_floor=ar_floor)


class Decoder:
    """One request: `windows()` yields its events, `run()` runs it and returns the report.

    profile: the cost profile for --adaptive (None: the device's, or a probe); draft_runtime /
    open_model: a --draft-model runtime, or how to open one (engine.session.draft_opener);
    progress(stage, fraction): where a one-time cost probe reports; on_verify(tree, scores): an
    observer (engine.lessons reads it), called once per window before its event is yielded,
    with the tree the window verified (its q rows, for a model draft; empty for a plain step)
    and the target's scores of that pass (`logits` raw, before penalties; None on the fast
    path: greedy, no penalties, detail=False); it must not change them. Without an observer a
    greedy run without penalties verifies on the fast path with detail too: the rows' detail
    comes from the pass's summary (RowScores), not the whole logits."""

    def __init__(self, runtime: Runtime, prompt_ids: list[int], settings: DecodeSettings,
                 controls: "queue.Queue[DecodeSettings] | None" = None,
                 stop: threading.Event | None = None, detail: bool = True, profile=None,
                 draft_runtime: Runtime | None = None,
                 open_model: Callable[[str], Runtime] | None = None,
                 progress: Callable[[str, float], None] | None = None,
                 on_verify: Callable[[TokenTree, RowScores], None] | None = None):
        if not prompt_ids:
            raise ParameterError("the prompt is empty: give some text to continue")
        self.rt = runtime
        self.prompt_ids = list(prompt_ids)
        self.settings = settings
        self.controls = controls
        self.stop = stop or threading.Event()
        self.detail = detail
        self.on_verify = on_verify
        self.tok = runtime.tokenizer
        s = settings
        # the committed stream (prompt, then every emitted token); its last token is the next
        # window's root
        self.context: list[int] = list(prompt_ids)
        self.index = NgramIndex(s.ngram_min, s.ngram_max)
        self.index.extend(self.context)
        self.rng = Rng(s.seed)
        self.factory = PartsFactory(runtime, profile, draft_runtime, open_model, progress,
                                    draft_for=s.draft_model)
        self.factory.main_drafter(s)          # a bad drafter or draft model fails here
        self.session: Session | None = None   # this request's stream (while it runs)
        self.run_stats = RunStats()
        self.finish_reason = ""

    # the facade's read-outs
    drafter = property(lambda self: self.factory.drafter)
    notice = property(lambda self: self.factory.notice)
    draft_cost = property(lambda self: self.factory.draft_cost)
    profile = property(lambda self: self.factory.profile)

    def use_profile(self, profile) -> None:
        """Price windows on this cost profile (one the caller timed apart from the run)."""
        self.factory.profile = profile
    new_tokens = property(lambda self: self.run_stats.new_tokens)
    windows_done = property(lambda self: self.run_stats.windows)
    wall_s = property(lambda self: self.run_stats.wall_s)

    def accept_rate_by_depth(self) -> list[float]:
        return self.run_stats.depths.rates()

    # -- the loop -------------------------------------------------------------------------
    def windows(self) -> Iterator[E.WindowEvent]:
        s = self.settings
        parts = self._build(s)                  # may probe: before the clock starts
        # every token the run commits, plus window rows only for a run that drafts (a window
        # never takes more rows than are free, so a prompt that fits plain decoding runs)
        session = self.session = self.rt.session(len(self.prompt_ids) + s.max_new_tokens,
                                                 spare=MAX_ROWS + 1 if s.draft != "none" else 0)
        try:
            yield from self._loop(session, parts)
        finally:
            self.session = None
            session.close()

    def _loop(self, session: Session, parts: Parts) -> Iterator[E.WindowEvent]:
        """The windows. Where the policy learns nothing from events and the card runs a pass
        without the host waiting (runtime.launch), a window's event is yielded after the NEXT
        window's pass is launched: same events, same tokens; a stop seen after such a yield
        drops that pass uncommitted."""
        session.warm_up()
        for d in parts.drafters.values():
            d.begin(session)
        t_start = time.perf_counter()
        session.prefill(self.prompt_ids[:-1])
        # a GPU prefill runs on after the call returns: wait, so that the first window's time
        # (which the AR floor compares with) is that window's, not the prompt's
        synchronize(self.rt.device)
        self._cycle_at = time.perf_counter()    # where the next window's cycle starts (the floor's clock)
        eos = set(self.tok.eos_ids)
        stats = self.run_stats
        held: Callable[[], E.WindowEvent] | None = None    # the last window's event, not yet built
        while True:
            if self.stop.is_set():
                if held is not None:
                    yield held()
                self.finish_reason = "stopped"
                return
            rebuilt = self._apply_controls(parts, session)
            if rebuilt is not parts:            # a rebuild (it may probe the card) is no window's cost
                parts, self._cycle_at = rebuilt, time.perf_counter()
            remaining = self.settings.max_new_tokens - len(stats.new_tokens)
            if remaining <= 0:
                if held is not None:
                    yield held()
                self.finish_reason = "length"
                return
            t0 = time.perf_counter()
            plan = parts.policy.plan(PlanContext(remaining, lambda: bool(self.index.lookup()[1])))
            tree = self._propose(plan, parts.drafters.get(plan.drafter), session)
            t1 = time.perf_counter()
            # a plain step followed by another whatever its token: queue that one on the device
            # behind it (Session.verify's ahead), as long as the request has a token left for it
            ahead = plan.plain and remaining > 1 and plain_ahead(parts.policy)
            pending = self._launch(tree, session, parts.verifier, ahead)
            emit_s = 0.0
            if held is not None:                # the last window's event, while the card runs
                te = time.perf_counter()
                yield held()
                held = None
                emit_s = time.perf_counter() - te
                if self.stop.is_set():          # this window's pass is dropped, uncommitted
                    if isinstance(pending, Step):
                        pending.scores()
                    self.finish_reason = "stopped"
                    return
            scores = self._scores(pending, session)
            build, finish = _close_window(self, parts, plan, tree, scores, session, remaining, eos,
                                          (t0, t1, time.perf_counter()), emit_s, t_start)
            if finish or not isinstance(pending, Step) or getattr(parts.policy, "observes", True):
                yield build()
                if finish:
                    return
            else:
                held = build

    def _launch(self, tree: TokenTree, session: Session, verifier: Verifier,
                ahead: bool) -> "Step | RowScores":
        return launch(session, [tree.root, *tree.tokens], tree.row_depths, tree.ancestor_mask(),
                      need_logits=verifier.need_logits, summary=verifier.summary, ahead=ahead)

    def _scores(self, pending: "Step | RowScores", session: Session) -> RowScores:
        scores = pending.scores() if isinstance(pending, Step) else pending
        if not all(map(math.isfinite, scores.top_values[:, 0].tolist())):   # NaN ranks first
            raise NumericalError(
                f"the model's logits are NaN or infinite at position {session.length}: its weights or "
                "metadata are broken" + ("; or float16 overflowed: try --dtype bfloat16 or float32"
                                         if self.rt.dtype_name == "float16" else ""))
        return scores

    def _propose(self, plan: Plan, drafter: Drafter | None, session: Session) -> TokenTree:
        root = self.context[-1]
        if drafter is None or plan.plain:
            return TokenTree.empty(root)
        rows = min(MAX_ROWS, plan.rows, session.window_room())   # never more than a pass holds
        return drafter.propose(DraftRequest(self.context, self.index, root, plan.depth,
                                            plan.width, rows, self.settings.sampling, self.rng))

    def _commit(self, outcome: VerifyOutcome, session: Session, remaining: int,
                eos: set[int]) -> tuple[list[int], list[str], str]:
        """Keep the accepted rows; the emitted tokens, cut at the end of text or the request's
        length, join the stream. Returns (emitted, their kinds, the finish reason or "")."""
        session.commit(outcome.keep_rows)
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
        return emitted, kinds, finish

    def _emit(self, plan: Plan, parts: Parts, settings: DecodeSettings, tree: TokenTree,
              outcome: VerifyOutcome, rows: list[E.VerifyRow], emitted: list[int],
              kinds: list[str], finish: str, times_s: tuple[float, float, float],
              notice: str, cycle_ms: float) -> E.WindowEvent:
        """The window's event, built before the next window is counted (its statistics are the
        run's after this window); the policy learns from it before they are read (the AR
        floor's state is the one after this window)."""
        ev = window_event(index=self.run_stats.windows - 1, context=self.context, tree=tree,
                          outcome=outcome, rows=rows, emitted=emitted, kinds=kinds,
                          times_s=times_s, plan=plan, settings=settings,
                          stats=self.run_stats.stats("off"), finish=finish,
                          text=self.tok.token_text, notice=notice, cycle_ms=cycle_ms)
        parts.policy.observe(ev)
        floor = self._floor_state()
        return ev if floor == "off" else dataclasses.replace(ev, stats=self.run_stats.stats(floor))

    def _floor_state(self) -> str:
        return self.factory.floor.state if self.factory.floor is not None else "off"

    def _apply_controls(self, parts: Parts, session: Session) -> Parts:
        """Settings changes queued since the last window: the parts rebuilt through the factory
        (what they learned stays), the n-gram index and the RNG where their settings moved."""
        changed = False
        while self.controls is not None:
            try:
                s = self.controls.get_nowait()
            except queue.Empty:
                break
            if s.seed != self.settings.seed:
                self.rng = Rng(s.seed)
            self.settings, changed = s, True
        if not changed:
            return parts
        s = self.settings
        if self.index.n_min != s.ngram_min or self.index.n_max != s.ngram_max:
            self.index = NgramIndex(s.ngram_min, s.ngram_max)
            self.index.extend(self.context)
        return self._build(s, session)

    def _build(self, s: DecodeSettings, session: Session | None = None) -> Parts:
        return self.factory.build(s, session, self.detail, observed=self.on_verify is not None)

    def run(self) -> dict[str, Any]:
        for _ in self.windows():
            pass
        return self.report()

    # -- reporting ------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """The run's report as JSON-ready values (RunReport.to_dict)."""
        return self.run_report().to_dict()

    def run_report(self) -> E.RunReport:
        return run_report(self)

    def baseline(self) -> Baseline | None:
        """Plain decoding's decode speed for this run (engine.cost.baseline.plain_baseline): its
        own plain steps (windows that drafted nothing: the AR floor's timings, retired steps), else
        the cost profile's one-row pass when the run has one."""
        profile = self.factory.profile
        return plain_baseline(self.run_stats.plain_ms, profile.ar_ms if profile is not None else None)

    def run_header(self, prompt: Any = None) -> E.RunHeader:
        """The header a recording of this run starts with."""
        rt = self.rt
        return E.RunHeader(self.settings.to_dict(), Path(str(rt.model_id)).name, rt.device_name,
                           rt.dtype_name, rt.weights_label, prompt, len(self.prompt_ids))


def _close_window(self: Decoder, parts: Parts, plan: Plan, tree: TokenTree, scores: RowScores,
                  session: Session, remaining: int, eos: set[int],
                  marks: tuple[float, float, float], emit_s: float,
                  t_start: float) -> tuple[Callable[[], E.WindowEvent], str]:
    """A window's verdict, commit and statistics; returns (what builds its event, the
    finish reason or ""). `marks`: the clock at the window's start, after its drafter and
    after its pass; `emit_s`: time spent yielding the window before it meanwhile."""
    t0, t1, t2 = marks
    stats = self.run_stats
    outcome = parts.verifier(tree, scores, self.context, self.rng)
    emitted, kinds, finish = self._commit(outcome, session, remaining, eos)
    if not plan.plain:
        parts.drafters[plan.drafter].observe(outcome)
    stats.count(tree, outcome, emitted)
    t3 = time.perf_counter()
    stats.timed(tree, t3 - t0 - emit_s, t3 - t_start)
    self.finish_reason = finish
    if self.on_verify is not None:
        self.on_verify(tree, scores)
    # the rows' detail reads the pass's scores: taken now, before another pass runs
    rows = verify_rows(tree, scores, outcome, self.tok.token_text) if self.detail else []
    times = (t1 - t0, t2 - t1 - emit_s, t3 - t2)
    # the AR floor, before the next plan: the window's whole cycle, from the end of the window
    # before it (the event's yield, the consumer, the loop, the plan, the drafter, the pass, the
    # commit): what a token costs, for a plain step queued behind another as for a window
    cycle_ms, self._cycle_at = (t3 - self._cycle_at) * 1e3, t3
    told = getattr(parts.policy, "observe_window", None)
    if told is not None:
        told(plan.depth, bool(tree.tokens), cycle_ms, len(emitted))
    notice, self.factory.notice = self.factory.notice, ""
    settings = self.settings
    return (lambda: self._emit(plan, parts, settings, tree, outcome, rows, emitted, kinds,
                               finish, times, notice, cycle_ms)), finish


def run_report(self: Decoder) -> E.RunReport:
    """Decoder.run_report: the run's report (RunReport; `report()` gives its JSON-ready dict)."""
    st = self.run_stats.stats(self._floor_state())
    rt, floor, profile = self.rt, self.factory.floor, self.factory.profile
    decode, base = self.run_stats.decode_tok_s(), self.baseline()
    return E.RunReport(
        text=self.tok.decode(self.new_tokens, skip_special_tokens=True),
        tokens=list(self.new_tokens), new_tokens=st.new_tokens,
        prompt_tokens=len(self.prompt_ids), windows=self.windows_done,
        forward_passes=st.forward_passes, proposed_draft_tokens=st.proposed_draft_tokens,
        accepted_draft_tokens=st.accepted_draft_tokens,
        tokens_per_pass=round(st.tokens_per_pass, 4),
        accept_rate_by_depth=[round(a, 4) for a in st.accept_rate_by_depth],
        tok_s=round(st.tok_s, 3), wall_s=round(self.wall_s, 4), load_s=round(rt.load_s, 4),
        finish_reason=self.finish_reason, retired=bool(floor is not None and floor.retired),
        ar_windows=floor.ar_windows if floor is not None else 0,
        ar_floor=floor.reason if floor is not None else "off",
        profile=profile.id if profile is not None else None,
        device=rt.device_name, dtype=rt.dtype_name,
        activation_dtype=getattr(rt, "activation_dtype", rt.dtype_name), weights=rt.weights_mode,
        weight_format=rt.weights_label, weight_bytes=rt.weight_bytes,
        model=str(rt.loaded.source), config=self.settings.to_dict(),
        draft=self.factory.draft_report(self.settings),
        first_token_s=None if self.run_stats.first_s is None else round(self.run_stats.first_s, 4),
        first_tokens=self.run_stats.first_tokens,
        decode_tok_s=None if decode is None else round(decode, 3),
        baseline=base.to_dict() if base is not None else None)
