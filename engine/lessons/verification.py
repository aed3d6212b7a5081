"""Two lessons on what verification must get right: `penalties` (seed 002 § 04: every verify
row is penalized against its own history H_i) and `rejection` (seed 002 § 03: accept x with
min(1, p(x)/q(x)), else draw from (p - q)+; the control draws from p instead and is biased)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from engine.lessons import seeds as S
from engine.lessons.figure import Comparison, LessonResult, Panel, fmt, series
from engine.lessons.runs import LessonContext, chat_ids, decode
from engine.speculation.events import Provenance
from engine.speculation.sampling import Rng, SamplingConfig, penalize_rows, target_probs
from engine.speculation.settings import DecodeSettings
from engine.speculation.tree import TokenTree
from engine.speculation.verify import TreeRejection, greedy_path, score_rows

# a request whose answer repeats itself: drafts carry tokens the last W tokens do not
TV_ZERO = 1e-9      # float32 softmax noise: a row moved less than this did not move
PENALTY_PROMPT = ("Write the word list 'alpha, beta, gamma, delta' five times, one list per line, "
                  "then the same list in reverse order five times.")


@dataclass(frozen=True)
class RowVerdict:
    window: int
    row: int
    depth: int
    right: int          # the argmax under the row's own history H_i
    wrong: int          # the argmax under one history (the committed context) for every row
    right_text: str
    wrong_text: str
    tv: float           # total variation between the row's distributions under the two histories


def one_history(logits: torch.Tensor, context_before: list[int], cfg: SamplingConfig) -> torch.Tensor:
    """Every row penalized against the same history, the last W committed tokens (the bug seed
    002 § 04 fixes): [R, V] penalized logits."""
    h0 = list(context_before[-cfg.penalty_window:])
    return penalize_rows(logits, [h0] * logits.shape[0], cfg)[0]


class RowJudge:
    """Per window of the penalized run: each row's verdict under its own history H_i (as
    verified) and under one history for every row, and what the window would then emit."""

    def __init__(self, tok, ids: list[int], cfg: SamplingConfig):
        self.tok, self.cfg = tok, cfg
        self.context = list(ids)
        self.verdicts: list[RowVerdict] = []
        self.windows: list[dict] = []

    def __call__(self, ev, logits, tree) -> None:
        before = self.context[:ev.committed_len]
        tree_ = TokenTree(ev.root_token, tuple(ev.tokens), tuple(ev.parents), tuple(ev.provenance))
        own = score_rows(tree_, logits, before, self.cfg).logits          # H_i per row, as verified
        one = one_history(logits, before, self.cfg)
        tv = (0.5 * (own.softmax(-1) - one.softmax(-1)).abs().sum(-1)).tolist()
        wrong = one.argmax(-1).tolist()
        right = [r.target_token for r in ev.rows]
        for r in ev.rows:
            self.verdicts.append(RowVerdict(ev.index, r.row, r.depth, right[r.row], wrong[r.row],
                                            self.tok.token_text(right[r.row]), self.tok.token_text(wrong[r.row]),
                                            tv[r.row]))
        path = greedy_path(tree_, wrong)
        wrong_emitted = [ev.tokens[i] for i in path] + [wrong[path[-1] + 1 if path else 0]]
        self.windows.append({"index": ev.index, "rows": len(ev.rows), "emitted": list(ev.emitted),
                             "wrong_emitted": wrong_emitted[:len(ev.emitted)],
                             "flipped_rows": [r for r in range(len(ev.rows)) if right[r] != wrong[r]]})
        self.context.extend(ev.emitted)


def _penalty_panel(verdicts: list[RowVerdict]) -> Panel:
    flips = [v for v in verdicts if v.right != v.wrong]
    same = [v for v in verdicts if v.right == v.wrong]
    moved = [v for v in same if v.tv > TV_ZERO]
    return Panel("each verify row: how far one history moves its distribution",
                 "depth of the row in the draft tree (0 = the root)",
                 "total variation, own H_i vs one history (log)",
                 (series(f"same verdict ({len(same) - len(moved)} more rows at 0: the roots, "
                         "and rows whose path adds no token new to the history)",
                         [v.depth for v in moved], [v.tv for v in moved], style="points", color="neutral"),
                  series("verdict flipped by the per-row history", [v.depth for v in flips],
                         [v.tv for v in flips], style="points", color="bad",
                         labels=tuple(f"{v.right_text!r} not {v.wrong_text!r}" for v in flips))),
                 log_y=True)


def _penalty_comparisons(judge: RowJudge, tok_s: float):
    verdicts = judge.verdicts
    flips = sum(v.right != v.wrong for v in verdicts)
    differing = sum(w["emitted"] != w["wrong_emitted"] for w in judge.windows)
    deep = [v.tv for v in verdicts if v.depth >= 1]
    n_moved = sum(t > TV_ZERO for t in deep)
    return (
        Comparison("presence penalty", S.PRESENCE_PENALTY, S.PRESENCE_PENALTY, ""),
        Comparison("row i penalized against", None, None,
                   write_up_text="H_i = last W of prompt ‖ emitted ‖ drafts[0..i)",
                   here_text="the same (engine.speculation.verify.row_histories)"),
        Comparison("rows whose distribution one history moves", None, n_moved, "rows",
                   write_up_text="dropping it changes the distribution",
                   here_text=(f"{n_moved} of {len(deep)} draft rows; largest total "
                              f"variation {fmt(max(deep, default=0.0))}")),
        Comparison("rows whose verdict one history would flip", None, flips, "rows",
                   here_text=f"{flips} of {len(verdicts)} rows"),
        Comparison("windows that would emit other tokens", None, differing, "windows",
                   here_text=f"{differing} of {len(judge.windows)} windows"),
        Comparison("host vs GPU penalties, same emitted IDs", S.PENALTY_PROMPTS_IDENTICAL[0], None, "prompts",
                   write_up_text="24 of 24 prompts", here_text="(one implementation here: the host's)"),
        Comparison("AR tok/s neutral vs penalized", S.PENALTY_AR_TOK_S[0], tok_s, "tok/s",
                   write_up_text=f"{S.PENALTY_AR_TOK_S[0]} vs {S.PENALTY_AR_TOK_S[1]} (Strix Halo)",
                   here_text=f"{fmt(tok_s)} tok/s penalized, speculating"),
    )


def penalties_why(flips: int, rows: int, moved: int, deep: int, differing: int) -> str:
    """What one history does on this prompt, from the counts: verdicts flipped of all rows,
    draft rows whose distribution moved of all draft rows, windows that would emit otherwise."""
    head = ("A draft token enters the history of the rows below it only, so the root row never differs "
            "and deeper rows differ more")
    if flips:
        return (f"{head}; a verdict flips only where the model wanted to repeat a draft token the last W "
                f"committed tokens lack: {flips} of {rows} rows here, {differing} window(s) would emit other "
                "tokens; how often depends on how repetitive the text is, not on the device.")
    if moved:
        return (f"{head}: one history moved {moved} of {deep} draft rows' distributions on this prompt but "
                "flipped no greedy verdict, so the emitted text is the same here; at a temperature, or on "
                "more repetitive text, the moved distributions are sampled and the bug shows.")
    return (f"{head}; on this prompt no draft row's history gained a token the committed history lacked "
            f"(0 of {deep} rows moved), so one history changes nothing here: the text never repeated a draft.")


def penalties(ctx: LessonContext) -> LessonResult:
    cfg = SamplingConfig(presence_penalty=S.PRESENCE_PENALTY, penalty_window=64)
    settings = DecodeSettings(draft="tree", depth=8, width=3, sampling=cfg,
                              max_new_tokens=2 * ctx.budget.new_tokens)
    tok = ctx.rt.tokenizer
    ids = chat_ids(ctx, PENALTY_PROMPT)
    judge = RowJudge(tok, ids, cfg)
    run = decode(ctx, ids, settings, label="presence penalty 1.5", on_window=judge)
    verdicts, windows = judge.verdicts, judge.windows
    differing = [w for w in windows if w["emitted"] != w["wrong_emitted"]]
    deep = [v for v in verdicts if v.depth >= 1]
    why = penalties_why(sum(v.right != v.wrong for v in verdicts), len(verdicts),
                        sum(v.tv > TV_ZERO for v in deep), len(deep), len(differing))
    caption = ("Every verify row of a greedy run with presence penalty 1.5 (token tree, depth 8 x 3), by its "
               "depth: how far its distribution (softmax of the penalized logits) moves when it is "
               "penalized against one history for the whole window instead of its own H_i (prompt, "
               "emitted, the draft path above it). Red: the argmax, the greedy verdict, flips; the label "
               "says which token (right, not wrong).")
    example = [f"window {w['index']}: emitted {tok.decode(w['emitted'])!r}, one history would emit "
               f"{tok.decode(w['wrong_emitted'])!r}" for w in differing[:3]]
    return LessonResult(
        name="penalties", title="penalties on every verify row",
        claim=("each verify row i is penalized against H_i = last W tokens of (prompt ‖ emitted ‖ "
               "drafts[0..i)); a window that drops this (0.4.0 did) samples from another distribution."),
        source=S.SEED_002 + ", § 04", caption=caption, panels=(_penalty_panel(verdicts),),
        comparisons=_penalty_comparisons(judge, run.report["tok_s"]), why=why, here=ctx.here,
        device=ctx.device, model=ctx.model, budget=ctx.budget.label,
        settings={"presence penalty": S.PRESENCE_PENALTY, "penalty window": 64, "temperature": 0,
                  "drafter": "tree 8 x 3", "examples": "; ".join(example) or "none"},
        data={"run": run, "verdicts": verdicts, "windows": windows})


# ---- rejection sampling -------------------------------------------------------------------------

class ResidualIsP(TreeRejection):
    """The failing control: after a rejection, draw from p instead of norm((p - q)+)."""

    def residual(self, p_prime, q, x):
        return p_prime


REJECTION_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
SHOWN_TOKENS = 10
SHOWN_ROWS = 24         # drafted rows drawn (the run's first); the rest are in data["rows"]


def first_tokens(walker: type[TreeRejection], p: torch.Tensor, q: torch.Tensor, root: int,
                 n: int, seed: int) -> torch.Tensor:
    """The first emitted token of n windows with one draft token each: the draft x ~ q (as the
    early exit drafts at this temperature), then the walk: accept with min(1, p(x)/q(x)), else
    a draw from the walker's residual. p: [2, V] (root row, the draft's row), q: [V]. [n] ids."""
    g = torch.Generator().manual_seed(seed)
    drafts = torch.multinomial(q.double(), n, replacement=True, generator=g)
    out = torch.empty(n, dtype=torch.long)
    rng = Rng(seed + 1)
    for x in drafts.unique().tolist():
        idx = (drafts == x).nonzero().flatten()
        tree = TokenTree(root, (x,), (-1,), (Provenance(0, 0, "early-exit"),), (q,))
        last, tok = walker(tree, p).run(len(idx), rng.uniforms)
        out[idx] = torch.where(last < 0, tok, torch.full_like(tok, x))
    return out


def chi_square(samples: torch.Tensor, p: torch.Tensor) -> tuple[float, float, int]:
    """(statistic, p-value, degrees of freedom) of samples against p; categories expected fewer
    than 20 times are pooled into one."""
    counts = torch.bincount(samples, minlength=p.shape[0]).double()
    p = p.double() / p.sum()
    expected = p * samples.numel()
    big = expected >= 20
    obs = torch.cat([counts[big], counts[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = max(1, int(keep.sum()) - 1)
    pval = float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))
    return stat, pval, df


class WindowPicker:
    """Per window of the early-exit run: its drafted rows, and the window where drawing the
    replacement from p instead of the residual is most biased (the one to replay)."""

    def __init__(self, cfg: SamplingConfig):
        self.cfg = cfg
        self.rows: list[dict] = []
        self.best: dict = {}

    def __call__(self, ev, logits, tree) -> None:
        for r in ev.rows:
            if r.node >= 0 and r.accept_prob is not None:
                self.rows.append({"window": ev.index, "row": r.row, "text": r.draft_text, "p": r.p, "q": r.q,
                                  "accept": r.accept_prob, "accepted": r.outcome == "accepted"})
        if tree is None or tree.q is None:
            return
        p = target_probs(logits[:2].float(), self.cfg)          # no penalties: the rows' p as verified
        q0 = tree.q[0].detach().float().cpu()
        p0 = p[0].double()
        reject = 1.0 - float(torch.minimum(p0, q0.double()).sum())
        # the control's bias at this window: reject·p − (p − q)+, summed over |·| / 2
        bias = 0.5 * float((reject * p0 - (p0 - q0.double()).clamp_min(0)).abs().sum())
        if bias > self.best.get("bias", -1.0):
            self.best.update(reject=reject, bias=bias, p=p, q=q0, root=ev.root_token, window=ev.index)


def pv(x: float) -> str:
    return f"= {x:.3g}" if x >= 1e-12 else "< 1e-12"


@dataclass(frozen=True)
class Replays:
    """The first tokens of n replays of one window, by rejection sampling and by the control,
    against the target's p: χ² (statistic, p-value, dof), total variation and shares."""
    n: int
    p0: torch.Tensor
    right: torch.Tensor
    control: torch.Tensor

    def share(self, samples: torch.Tensor) -> torch.Tensor:
        return torch.bincount(samples, minlength=self.p0.shape[0]).double() / self.n

    def tv(self, samples: torch.Tensor) -> float:
        return 0.5 * float((self.share(samples) - self.p0).abs().sum())

    @property
    def distorted(self) -> bool:
        """The control fails the test and is further from p than rejection sampling."""
        return chi_square(self.control, self.p0)[1] < 1e-3 and self.tv(self.control) > self.tv(self.right)


def _accept_panel(rows: list[dict]) -> Panel:
    shown = rows[:SHOWN_ROWS]
    xs = list(range(len(shown)))
    return Panel(f"the first {len(shown)} drafted rows: p(x), q(x) and min(1, p/q)", "drafted row (in order)",
                 "probability",
                 (series("p(x): target, T 0.7", [i - 0.25 for i in xs], [r["p"] for r in shown],
                         style="bars", color="card"),
                  series("q(x): the early exit", xs, [r["q"] for r in shown], style="bars", color="reference"),
                  series("accept probability min(1, p/q)", [i + 0.25 for i in xs],
                         [r["accept"] for r in shown], style="bars", color="good",
                         labels=tuple(repr(r["text"]) for r in shown))),
                 y_range=(0.0, 1.0))


def _replay_panel(rp: Replays, labels: tuple[str, ...], top: list[int], window: int) -> Panel:
    xs = list(range(len(top)))
    emp_r, emp_c = rp.share(rp.right), rp.share(rp.control)
    ys = [float(v[t]) for v in (rp.p0, emp_r, emp_c) for t in top]
    return Panel(f"first emitted token, {rp.n:,} replays of window {window}",
                 "token (the target's top by p)", "share of windows",
                 (series("p: the target", [x - 0.27 for x in xs], [float(rp.p0[t]) for t in top], style="bars",
                         color="card", labels=labels),
                  series(f"rejection sampling (χ² p {pv(chi_square(rp.right, rp.p0)[1])})", xs,
                         [float(emp_r[t]) for t in top], style="bars", color="good"),
                  series(f"control, residual := p (χ² p {pv(chi_square(rp.control, rp.p0)[1])})",
                         [x + 0.27 for x in xs], [float(emp_c[t]) for t in top], style="bars", color="bad")),
                 x_ticks=tuple((float(x), lab) for x, lab in zip(xs, labels)),
                 y_range=(0.0, min(1.0, 1.15 * max(ys, default=1.0))))


def _rejection_comparisons(rp: Replays, rows: list[dict], exit_layer: int, n_layers: int):
    pv_r, pv_c = chi_square(rp.right, rp.p0)[1], chi_square(rp.control, rp.p0)[1]
    n_acc = sum(r["accepted"] for r in rows)
    acc = n_acc / len(rows) if rows else 0.0
    return (
        Comparison("trials per case", S.REJECTION_TRIALS, rp.n, "windows"),
        Comparison("rejection sampling: emitted tokens follow p", None, pv_r, "χ² p-value",
                   write_up_text="yes", here_text=f"χ² p {pv(pv_r)}, total variation {rp.tv(rp.right):.4f}"),
        Comparison("control (residual := p) fails", None, pv_c, "χ² p-value",
                   write_up_text="in every control case",
                   here_text=f"{'yes' if rp.distorted else 'NO'}: χ² p {pv(pv_c)}, total variation "
                             f"{rp.tv(rp.control):.4f}"),
        Comparison("draft tokens accepted (early exit, T 0.7)", None, acc, "",
                   here_text=f"{n_acc} of {len(rows)} drafted rows ({acc:.0%}; the first {exit_layer} of {n_layers} layers)"),
    )


def rejection_why(follows: bool, distorted: bool, reject: float, bias: float, model: str) -> str:
    """What the replays show, from their verdicts: does rejection sampling follow p (`follows`),
    does the control fail (`distorted`), and how much the control moves in the replayed window."""
    where = (f"here p and q come from one real window of {model} (the one where the control is most "
             f"biased: the draft is rejected with probability {fmt(reject)}, and drawing from p instead "
             f"of the residual moves {fmt(bias)} of the probability)")
    if follows and distorted:
        return (f"As in the write-up, rejection sampling keeps p and the control does not; the write-up's "
                f"test drew its cases from distributions of its own, {where}, so how visible the control's "
                "error is depends on how much this early exit and the target disagree.")
    if follows:
        return (f"Rejection sampling keeps p, but the control's error does not show in these replays: {where}, "
                "too little for the test to see at this many trials.")
    return (f"Rejection sampling does NOT follow p in these replays, against the write-up: {where}; a "
            "verifier that fails this test is a bug.")


def rejection(ctx: LessonContext) -> LessonResult:
    n_layers = int(ctx.rt.config.n_layers)
    exit_layer = max(1, n_layers // 2)
    cfg = SamplingConfig(temperature=0.7)
    settings = DecodeSettings(draft="early-exit", exit_layer=exit_layer, depth=3, width=1, sampling=cfg,
                              seed=7, max_new_tokens=ctx.budget.new_tokens)
    pick = WindowPicker(cfg)
    ctx.say("drafting with the early exit", 0.0)
    run = decode(ctx, chat_ids(ctx, REJECTION_PROMPT), settings, label=f"early exit at layer {exit_layer}, T 0.7",
                 span=(0.0, 0.6), on_window=pick)
    best, rows, n = pick.best, pick.rows, ctx.budget.trials
    if not best:
        raise ValueError("the early exit drafted no window: nothing to verify")
    ctx.say(f"replaying window {best['window']}'s verification {n:,} times", 0.65)
    right = first_tokens(TreeRejection, best["p"], best["q"], best["root"], n, seed=11)
    ctx.say(f"the control: {n:,} more with the residual replaced by p", 0.8)
    rp = Replays(n, best["p"][0].double(), right,
                 first_tokens(ResidualIsP, best["p"], best["q"], best["root"], n, seed=11))
    top = torch.argsort(rp.p0, descending=True)[:SHOWN_TOKENS].tolist()
    labels = tuple(repr(ctx.rt.tokenizer.token_text(t)) for t in top)
    chi = {"right": chi_square(rp.right, rp.p0), "control": chi_square(rp.control, rp.p0)}
    caption = (f"Left: each drafted row of a T 0.7 run drafted by the first {exit_layer} layers: the target's "
               f"p of the draft token, the draft's own q, and the acceptance min(1, p/q). Right: the first "
               f"token of {n:,} replays of one window's verification, drafts drawn from q each time, against p: "
               "rejection sampling matches p; drawing the replacement from p instead of the residual "
               "(p - q)+ over-weights the tokens q favours.")
    return LessonResult(
        name="rejection", title="rejection sampling keeps the target's distribution",
        claim=("accept the draft x with min(1, p(x)/q(x)), else draw from (p - q)+ renormalized; the "
               "emitted tokens follow p exactly. Drawing the replacement from p instead fails the same "
               "test in every control case (200,000 trials per case)."),
        source=S.SEED_002 + ", § 03", caption=caption,
        panels=(_accept_panel(rows), _replay_panel(rp, labels, top, best["window"])),
        comparisons=_rejection_comparisons(rp, rows, exit_layer, n_layers),
        why=rejection_why(chi["right"][1] > 1e-3, rp.distorted, best["reject"], best["bias"], ctx.model),
        device=ctx.device, model=ctx.model, budget=ctx.budget.label, here=ctx.here,
        settings={"drafter": f"early exit, {exit_layer} of {n_layers} layers", "temperature": 0.7,
                  "depth": 3, "seed": 7},
        data={"run": run, "rows": rows, "window": best, "right": rp.right, "control": rp.control, "chi2": chi,
              "tv": {"right": rp.tv(rp.right), "control": rp.tv(rp.control)}, "distorted": rp.distorted})
