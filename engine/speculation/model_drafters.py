"""Drafts from a model: a separate draft model, or the target's own first K layers.

Both propose a chain of up to `depth` tokens rooted at the last committed token, one draft pass
per token, and keep q, the distribution each token was drawn from, on the tree (TokenTree.q):

- greedy target: the draft takes its argmax; q is the draft's softmax (shown, not used: greedy
  verification only compares tokens);
- sampled target: the draft samples its token from q = the draft's logits through the request's
  own temperature / top-k / top-p / min-p, so q is close to p where the draft is good; the tree
  rejection sampler (verify.py) then accepts with min(1, p/q) and the output is distributed as p
  whatever q is.

Penalties: the draft scores its row against the same history a target row would see (the
committed context plus the draft path so far) with the same penalties, so under a repetition
penalty it proposes what the penalized target would pick. Correctness never depends on it: the
target's rows are penalized as always and the verifier uses the q the token was really drawn from.

Self-speculation (`EarlyExitDrafter`, Elhoushi et al. 2024, "LayerSkip"; Zhang et al. 2023,
"Draft & Verify"): the target's first K layers, its final norm and LM head. The draft passes
write those K layers' keys and values into the window's scratch slots (row i at slot n + i, as
the verify pass will), and the committed prefix is the target's own cache: nothing to keep in
step. The verify pass then overwrites every slot it uses with the full model's values.

Draft model (`DraftModelDrafter`): its own runtime and cache, holding the committed text. The
cache remembers which token each slot holds; at the next proposal it keeps the longest prefix
that still agrees with the committed text (the accepted draft path is already in place, as in
the target's cache) and computes the rest together with the root in one pass.
"""

from __future__ import annotations

import time
from typing import Sequence

import torch

from engine.errors import ParameterError
from engine.model.runtime import Runtime, Session, chain
from engine.speculation.drafters import DraftRequest, DrafterBase
from engine.speculation.events import Provenance
from engine.speculation.sampling import Rng, SamplingConfig, penalize, target_probs
from engine.speculation.stream import Stream, TargetStream
from engine.speculation.tree import TokenTree
CATCH_UP_ROWS = 32      # committed tokens the draft model computes in its first draft pass;
                        # more (a new prompt) go through a chunked prefill first


def draft_token(logits: torch.Tensor, history: Sequence[int], cfg: SamplingConfig,
                rng: Rng | None) -> tuple[int, torch.Tensor]:
    """One draft step from the draft's logits [V]: (token, q [V] float32).

    The draft row is penalized against `history` (the last cfg.penalty_window tokens a target
    row would see). Greedy: the argmax, q the softmax; sampled: a draw from q = target_probs.
    """
    if cfg.penalized:
        logits, _ = penalize(logits, list(history)[-cfg.penalty_window:], cfg)
    logits = logits.float()
    if cfg.greedy or rng is None:
        return int(logits.argmax()), logits.softmax(-1)
    q = target_probs(logits, cfg)
    return rng.categorical(q), q


def draft_children(logits: torch.Tensor, history: Sequence[int], cfg: SamplingConfig,
                   rng: Rng | None, width: int) -> list[tuple[int, torch.Tensor]]:
    """`width` children from one draft row [V]: greedy, the top `width` tokens (distinct, q the
    softmax); sampled, `width` independent draws from q (duplicates allowed)."""
    if cfg.greedy or rng is None:
        first, q = draft_token(logits, history, cfg, None)
        top = q.topk(min(width, q.shape[-1])).indices.tolist()
        return [(t, q) for t in [first] + [t for t in top if t != first]][:width]
    tok, q = draft_token(logits, history, cfg, rng)
    return [(tok, q)] + [(rng.categorical(q), q) for _ in range(width - 1)]


def _path(parents: list[int], tokens: list[int], node: int) -> list[int]:
    """The tokens from the root's child down to `node` (-1: none)."""
    out = []
    while node >= 0:
        out.append(tokens[node])
        node = parents[node]
    return out[::-1]


_PROV = Provenance(match=0, position=-1, source="draft")


def fit_vocab(logits: torch.Tensor, vocab: int) -> torch.Tensor:
    """Draft logits [..., V_d] as [..., vocab]: the target's width (models pad their embedding
    differently; the tokenizers are equal). Extra ids are dropped, missing ones get -inf."""
    v = logits.shape[-1]
    if v == vocab:
        return logits
    if v > vocab:
        return logits[..., :vocab]
    pad = torch.full((*logits.shape[:-1], vocab - v), float("-inf"), dtype=logits.dtype)
    return torch.cat([logits, pad], dim=-1)


class _ChainDrafter(DrafterBase):
    """A chain of model drafts, one pass per token; subclasses say which stream drafts (a
    session of the draft model, or the target's session through its first K layers)."""

    name = "model"

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab               # the target's logits width
        self.stream: Session | Stream | None = None     # set by `begin`
        self.draft_ms = 0.0               # wall time of all draft passes (the report's)
        self.draft_passes = 0

    @property
    def ms_per_token(self) -> float:
        """Measured draft time per drafted token (nan before the first draft)."""
        return self.draft_ms / self.draft_passes if self.draft_passes else float("nan")

    def begin(self, target: TargetStream) -> None:
        """A new request on the target's session `target`: take the stream that drafts it and
        capture the draft pass's graphs now."""
        raise NotImplementedError

    def _first_logits(self, committed: list[int], root: int) -> torch.Tensor:
        """The draft's logits [V] after the root; the root's keys are written at slot n."""
        raise NotImplementedError

    def _step(self, token: int, slot: int) -> torch.Tensor:
        """Logits [V] after `token`, whose keys go to cache slot `slot` (the chain before it
        occupies the slots below)."""
        return self.stream.scratch([token], *chain(1), at=slot).logits[0]

    def propose(self, req: DraftRequest) -> TokenTree:
        """A chain of up to min(depth, rows - 1) tokens drafted after the root; with width > 1
        a tree (`_propose_tree`)."""
        cfg, rng, root = req.sampling, req.rng, req.root
        context = req.context
        length = min(req.depth, req.rows - 1)
        if length < 1:
            return TokenTree.empty(root)
        t0 = time.perf_counter()
        logits = self._first_logits(context[:-1], root)
        if req.width > 1:
            return self._propose_tree(context, root, logits, length, req.width, req.rows, cfg,
                                      rng, t0)
        n = self.stream.length                   # the root sits at slot n
        length = min(length, self.stream.room() - 1)
        history = list(context[-cfg.penalty_window:])
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        for i in range(length):
            tok, q = draft_token(fit_vocab(logits.float(), self.vocab), history, cfg, rng)
            tokens.append(tok)
            qs.append(q)
            history.append(tok)
            if i + 1 < length:
                logits = self._step(tok, n + i + 1)
        self.draft_ms += (time.perf_counter() - t0) * 1e3
        self.draft_passes += len(tokens)
        self._drafted(context[:-1], root, tokens[:-1])
        prov = Provenance(match=0, position=-1, source=self.name)
        return TokenTree(root, tuple(tokens), tuple(range(-1, len(tokens) - 1)),
                         (prov,) * len(tokens), tuple(qs))

    def _drafted(self, committed: list[int], root: int, fed: list[int]) -> None:
        """The proposal's keys now stand in the draft cache's scratch slots: the root at slot n,
        then the chain `fed` (a chain's last token is never fed back)."""

    def _propose_tree(self, context: list[int], root: int, root_logits: torch.Tensor, depth: int,
                      width: int, budget_rows: int, cfg: SamplingConfig, rng: Rng | None,
                      t0: float) -> TokenTree:
        """A tree, level by level (SpecInfer / EAGLE-2 style): at each depth the `width` nodes of
        highest cumulative draft probability get `width` children each: greedy, the draft's top
        `width` tokens; sampled, `width` independent draws from q (duplicates kept: the
        rejection sampler needs siblings drawn i.i.d. from q, so a node gets all of them or
        none). One draft pass per level, over every row so far (rows below the knee are
        nearly free on a GPU); row r at slot n + r, as the verify pass will place it."""
        n = self.stream.length
        # draft nodes: a draft model's own cache may hold fewer free slots than the target's
        budget = min(budget_rows - 1, self.stream.window_room() - 1)
        tokens: list[int] = []
        parents: list[int] = []
        qs: list[torch.Tensor] = []
        logq: list[float] = []
        frontier: list[tuple[int, torch.Tensor]] = [(-1, root_logits)]
        passes = 1
        fed = 0                                   # nodes whose keys a draft pass wrote
        for level in range(depth):
            frontier.sort(key=lambda f: -(logq[f[0]] if f[0] >= 0 else 0.0))
            new: list[int] = []
            for node, logits in frontier[:width]:
                if len(tokens) + width > budget:
                    break
                path = _path(parents, tokens, node)
                history = (list(context) + path)[-cfg.penalty_window:]
                for tok, q in draft_children(fit_vocab(logits.float(), self.vocab), history, cfg,
                                             rng, width):
                    tokens.append(tok)
                    parents.append(node)
                    qs.append(q)
                    logq.append((logq[node] if node >= 0 else 0.0) + float(torch.log(q[tok])))
                    new.append(len(tokens) - 1)
            if not new or level + 1 == depth:
                break
            rows = [root, *tokens]
            shape = TokenTree(root, tuple(tokens), tuple(parents), (_PROV,) * len(tokens))
            out = self.stream.scratch(rows, shape.row_depths, shape.ancestor_mask(),
                                      at=n).logits                      # [R, V]
            passes += 1
            fed = len(tokens)
            frontier = [(i, out[i + 1]) for i in new]
        self.draft_ms += (time.perf_counter() - t0) * 1e3
        self.draft_passes += passes
        # the draft cache keeps the root and the leading chain of fed nodes (node k at slot
        # n + 1 + k is the committed text's continuation only if it is the k-th of a chain)
        spine = 0
        while spine < fed and parents[spine] == spine - 1:
            spine += 1
        self._drafted(context[:-1], root, tokens[:spine])
        prov = Provenance(match=0, position=-1, source=self.name)
        return TokenTree(root, tuple(tokens), tuple(parents), (prov,) * len(tokens), tuple(qs))


class EarlyExitDrafter(_ChainDrafter):
    """Self-speculation: the target's first `exit_layer` layers draft, sharing its cache."""

    name = "early-exit"

    def __init__(self, target: Runtime, exit_layer: int) -> None:
        L = target.config.n_layers
        if not 1 <= exit_layer <= L:
            raise ParameterError(f"--exit-layer must be between 1 and the model's {L} layers, "
                                 f"got {exit_layer}")
        super().__init__(target.config.vocab_size)
        self.exit_layer = exit_layer

    def begin(self, target: TargetStream) -> None:
        self.stream = target.first_layers(self.exit_layer)
        self.stream.warm_up()

    def _first_logits(self, committed: list[int], root: int) -> torch.Tensor:
        # the target's cache holds the committed text at every layer already
        return self._step(root, self.stream.length)


class DraftModelDrafter(_ChainDrafter):
    """A separate draft model with its own runtime and cache, kept in step with the text."""

    name = "model"

    def __init__(self, target: Runtime, draft_rt: Runtime) -> None:
        check_vocab(target.tokenizer, draft_rt.tokenizer)
        super().__init__(target.config.vocab_size)
        self.rt = draft_rt
        self._slots: list[int] = []       # the token whose keys each draft cache slot holds

    def begin(self, target: TargetStream) -> None:
        # the draft's own session, as large as the target's request
        if self.stream is None:
            self.stream = self.rt.session(target.needed, target.spare)
        else:
            self.stream.reserve(target.needed, target.spare)
        self._slots = []
        self.stream.warm_up()

    def _first_logits(self, committed: list[int], root: int) -> torch.Tensor:
        stream = self.stream
        keep = 0                                  # slots that agree with the committed text
        for a, b in zip(self._slots, committed):
            if a != b:
                break
            keep += 1
        if keep <= stream.length:
            stream.truncate(keep)
        else:
            stream.advance(keep - stream.length)  # the accepted draft path is already in place
        pending = committed[keep:]
        if len(pending) > CATCH_UP_ROWS:          # a new prompt: prefill it in chunks
            stream.prefill(pending)
            pending = []
        rows = pending + [root]
        logits = stream.verify(rows, *chain(len(rows))).logits[-1]
        stream.advance(len(pending))
        return logits

    def _drafted(self, committed: list[int], root: int, fed: list[int]) -> None:
        # slots [0, n) hold the committed text, n the root, n + 1 + i the i-th fed draft token
        self._slots = list(committed) + [root] + list(fed)


def check_vocab(target_tok, draft_tok) -> None:
    """The draft must share the target's vocabulary: same token for every id."""
    t, d = target_tok.backend, draft_tok.backend
    tv, dv = t.get_vocab(with_added_tokens=True), d.get_vocab(with_added_tokens=True)
    if tv == dv:
        return
    nt, nd = len(tv), len(dv)
    ti = {i: s for s, i in tv.items()}
    di = {i: s for s, i in dv.items()}
    first = next((i for i in range(max(nt, nd)) if ti.get(i) != di.get(i)), None)
    raise ParameterError(
        f"the draft model's vocabulary differs from the target's: the target has {nt} tokens, "
        f"the draft {nd}; the first differing token is id {first}: "
        f"{ti.get(first)!r} in the target, {di.get(first)!r} in the draft. "
        f"Pick a draft model of the same family (same tokenizer)")


def size_warning(target: Runtime, draft_rt: Runtime) -> str:
    """A line for the user when the draft is not smaller than the target ("" when it is)."""
    if draft_rt.weight_bytes < target.weight_bytes:
        return ""
    return (f"warning: the draft model ({draft_rt.weights_label}) is not smaller than the target "
            f"({target.weights_label}): drafting will cost more than it saves")


def make_model_drafter(name: str, target: Runtime, exit_layer: int,
                       draft_rt: Runtime | None) -> _ChainDrafter:
    if name == "early-exit":
        return EarlyExitDrafter(target, exit_layer)
    if draft_rt is None:
        raise ParameterError("--draft model needs --draft-model PATH (a .gguf file or an HF folder)")
    return DraftModelDrafter(target, draft_rt)
