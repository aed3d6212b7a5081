"""The window loop: propose -> verify -> commit, one frozen WindowEvent per window.

    ids = prompt; cache <- prefill(ids[:-1]); root = ids[-1]
    each window: tree = drafter.propose(...)           (empty tree: one plain decode step)
                 scores = runtime.verify([root] + tree.tokens, parents)
                 outcome = verify_greedy / verify_sampled (penalties on every row)
                 cache.commit([root row] + accepted rows); root = last emitted token

Setting changes arrive on a queue and apply at the next window boundary; a stop flag ends the run
between windows. The decoder knows nothing of Qt.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Iterator


from engine.speculation import events as E
from engine.cost.probe import card_profile
from engine.cost.chooser import ArFloor, Choice, WindowChooser
from engine.speculation.drafters import make_drafter, tree_rows
from engine.errors import ParameterError
from engine.speculation.ngram import NgramIndex
from engine.model.runtime import Runtime
from engine.speculation.sampling import Rng
from engine.speculation.settings import DecodeSettings
from engine.speculation.tree import TokenTree
from engine.speculation.verify import VerifyOutcome, verify_greedy, verify_sampled

MAX_ROWS = 64   # rows one verify pass may use (the largest graph bucket)


class Decoder:
    def __init__(self, runtime: Runtime, prompt_ids: list[int], settings: DecodeSettings,
                 controls: "queue.Queue[DecodeSettings] | None" = None,
                 stop: threading.Event | None = None, detail: bool = True, profile=None):
        if not prompt_ids:
            raise ParameterError("the prompt is empty: give some text to continue")
        self.rt = runtime
        self.prompt_ids = list(prompt_ids)
        self.settings = settings
        self.controls = controls
        self.stop = stop or threading.Event()
        self.detail = detail
        self.tok = runtime.tokenizer
        # results
        self.new_tokens: list[int] = []
        self.windows_done = 0
        self.proposed = 0
        self.accepted = 0
        self.depth_tried: list[int] = []
        self.depth_accepted: list[int] = []
        self.wall_s = 0.0
        self.finish_reason = ""
        self.chooser: WindowChooser | None = None
        self.floor: ArFloor | None = None
        self.profile = profile     # a CostProfile for --adaptive (None: the device's, or a probe)
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

    def _configure(self) -> None:
        s = self.settings
        if getattr(self, "drafter", None) is None or self.drafter.name != s.draft or \
                getattr(self.drafter, "match", s.match) != s.match:
            self.drafter = make_drafter(s.draft, s.match)
        if s.adaptive and s.draft != "none":
            if self.chooser is None:
                self.chooser = WindowChooser(
                    self._cost_profile(), s.depth, s.width, max_rows=MAX_ROWS,
                    rows_of=tree_rows if s.draft == "tree" else None)
            self.chooser.max_depth, self.chooser.max_width = s.depth, s.width
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
        self.context = list(ids)
        self.index = NgramIndex(s.ngram_min, s.ngram_max)
        self.index.extend(self.context)
        self.rng = Rng(s.seed)
        self._configure()          # may probe the device's cost profile: before the clock starts
        rt.start(len(ids) + s.max_new_tokens + MAX_ROWS + 1)
        rt.warm_up()
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
            rows = [root, *tree.tokens]
            parents = [-1] + [p + 1 for p in tree.parents]
            fast = s.sampling.greedy and not s.sampling.penalized and not self.detail
            scores = rt.verify(rows, parents, need_logits=not fast)
            t2 = time.perf_counter()
            outcome = self._verify(tree, scores)
            self.rt.cache.commit([0] + [a + 1 for a in outcome.accepted])
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
            if self.drafter is not None:
                self.drafter.observe(outcome)
            self._count(tree, outcome)
            t3 = time.perf_counter()
            window_ms = (t3 - t0) * 1e3
            if self.floor is not None:
                if plan.plain and self.floor.want_plain_step():
                    self.floor.record_plain(window_ms)
                elif len(tree.tokens):
                    self.floor.record_window(window_ms, len(emitted))
            self.windows_done += 1
            self.wall_s = t3 - t_start
            self.finish_reason = finish
            ev = self._event(index, tree, scores, outcome, emitted, kinds,
                             (t1 - t0, t2 - t1, t3 - t2), finish, plan)
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
        """This window's depth and width: fixed settings, the chooser's pick, or the AR floor."""
        s = self.settings
        depth = max(0, min(s.depth, remaining - 1))
        width = 1 if s.draft == "lookup" else s.width
        if self.drafter is None or depth == 0:
            return Choice(0, 0, 1, float("nan"), 1.0, "plain decode: no drafter" if self.drafter
                          is None else "plain decode: the last token of the request")
        if self.floor is not None and self.floor.want_plain_step():
            return Choice(0, 0, 1, float("nan"), 1.0, f"AR floor: {self.floor.reason}")
        if self.chooser is not None:
            if not self.index.lookup()[1]:
                return self.chooser.choose(s.draft, available_depth=0)
            return self.chooser.choose(s.draft, available_depth=depth, available_width=width)
        rows = tree_rows(depth, width) if s.draft == "tree" else 1 + depth
        return Choice(depth, width, rows, float("nan"), float("nan"), "fixed depth and width")

    def _propose(self, root: int, plan: Choice) -> TokenTree:
        if self.drafter is None or plan.depth == 0:
            return TokenTree.empty(root)
        # never more rows than one pass holds
        rows = tree_rows(plan.depth, plan.width) if self.settings.draft == "tree" else 1 + plan.depth
        budget = min(MAX_ROWS, rows, self.rt.cache.room() - 1)
        return self.drafter.propose(self.index, root, plan.depth, plan.width, budget)

    def _verify(self, tree: TokenTree, scores) -> VerifyOutcome:
        if scores.logits is None:
            return verify_greedy_top(tree, scores)
        cfg = self.settings.sampling
        if cfg.greedy:
            return verify_greedy(tree, scores.logits, self.context, cfg)
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
            "load_s": round(getattr(rt.loaded, "load_s", 0.0), 4),
            "finish_reason": self.finish_reason,
            "retired": bool(self.floor is not None and self.floor.retired),
            "ar_windows": self.floor.ar_windows if self.floor is not None else 0,
            "ar_floor": self.floor.reason if self.floor is not None else "off",
            "profile": self.profile.id if self.profile is not None else None,
            "device": rt.device_name,
            "dtype": rt.dtype_name,
            "model": str(rt.loaded.source),
            "config": self.settings.to_dict(),
        }

    def _event(self, index, tree, scores, outcome, emitted, kinds, times, finish,
               plan: Choice) -> E.WindowEvent:
        tok = self.tok
        propose_ms, verify_ms, commit_ms = (t * 1e3 for t in times)
        rows: list[E.VerifyRow] = []
        if self.detail:
            probs = outcome.probs if outcome.probs is not None else None
            for r in range(1 + len(tree.tokens)):
                node = r - 1
                if probs is not None:
                    pv, pi = probs[r].topk(5)
                    top = [(int(i), tok.token_text(int(i)), float(v)) for v, i in zip(pv, pi)]
                else:
                    top = [(int(i), tok.token_text(int(i)), float(v))
                           for v, i in zip(scores.top_values[r], scores.top_ids[r])]
                dt = tree.tokens[node] if node >= 0 else None
                led = outcome.ledgers[r] if outcome.ledgers else None
                if led is not None:
                    led = led.to_event(tok.token_text)
                rows.append(E.VerifyRow(
                    row=r, node=node, depth=0 if node < 0 else tree.depths[node],
                    draft_token=dt, draft_text="" if dt is None else tok.token_text(dt),
                    target_token=outcome.target_tokens[r],
                    target_text=tok.token_text(outcome.target_tokens[r]),
                    top=top, p=outcome.p_draft[r], q=outcome.q_draft[r],
                    accept_prob=outcome.accept_probs[r], outcome=outcome.row_outcomes[r],
                    near_tie=outcome.near_ties[r], penalty=led,
                ))
        s = self.settings
        return E.WindowEvent(
            index=index, committed_len=len(self.context) - len(emitted),
            root_token=self.context[-len(emitted) - 1] if emitted else self.context[-1],
            root_text=tok.token_text(self.context[-len(emitted) - 1] if emitted else self.context[-1]),
            tokens=list(tree.tokens), texts=[tok.token_text(t) for t in tree.tokens],
            parents=list(tree.parents), depths=list(tree.depths),
            provenance=list(tree.provenance), rows=rows, accepted_path=list(outcome.accepted),
            emitted=emitted, emitted_texts=[tok.token_text(t) for t in emitted],
            emitted_kinds=kinds, propose_ms=propose_ms, verify_ms=verify_ms, commit_ms=commit_ms,
            window_ms=propose_ms + verify_ms + commit_ms, stats=self._stats(),
            drafter=s.draft, depth=plan.depth, width=plan.width, greedy=s.sampling.greedy,
            predicted_ms=None if plan.predicted_ms != plan.predicted_ms else plan.predicted_ms,
            reason=plan.reason, finished=bool(finish), finish_reason=finish, settings=s.to_dict(),
        )


def verify_greedy_top(tree: TokenTree, scores) -> VerifyOutcome:
    """Greedy acceptance from each row's top-k only (no penalties, no full logits): the GPU fast
    path, where only [R, k] values and ids leave the device."""
    argmax = scores.top_ids[:, 0].tolist()
    n = len(tree.tokens)
    children: dict[int, list[int]] = {}
    for i, p in enumerate(tree.parents):
        children.setdefault(p, []).append(i)
    accepted: list[int] = []
    node, row = -1, 0
    while True:
        nxt = next((c for c in children.get(node, []) if tree.tokens[c] == argmax[row]), None)
        if nxt is None:
            break
        accepted.append(nxt)
        node, row = nxt, nxt + 1
    emitted = [tree.tokens[a] for a in accepted] + [argmax[row]]
    last_kind = (E.TARGET if n == 0 else E.BONUS if not children.get(node) else E.CORRECTION)
    kinds = [E.FROM_DRAFT] * len(accepted) + [last_kind]
    outcomes = [E.ROOT] + [E.NOT_REACHED] * n
    on = set(accepted)
    tried = {c for a in [-1, *accepted] for c in children.get(a, [])}
    for i in range(n):
        outcomes[i + 1] = E.ACCEPTED if i in on else E.REJECTED if i in tried else E.NOT_REACHED
    gap = (scores.top_values[:, 0] - scores.top_values[:, 1]).tolist()
    return VerifyOutcome(
        accepted=accepted, emitted=emitted, kinds=kinds, row_outcomes=outcomes,
        accept_probs=[None] + [1.0 if i in on else 0.0 if i in tried else None for i in range(n)],
        p_draft=[None] * (n + 1), q_draft=[None] * (n + 1), target_tokens=argmax,
        near_ties=[g < 1e-4 for g in gap], ledgers=[], flipped=[False] * (n + 1), probs=None,
    )
