"""A drafter's ceiling on a known text: greedy speculation against a target that emits `answer`.

The oracle target needs no model. Row r's logits are one-hot at the answer's next token when the
draft path down to row r agrees with the answer so far (and all zero otherwise), so greedy
verification accepts exactly the drafted prefix the answer confirms and then emits the answer's
next token. The tokens per verify pass this gives is what the drafter would reach with a target
that agreed with its copies whenever the text does.
"""

from __future__ import annotations

from typing import Sequence

import torch

from engine.speculation.drafters import DraftRequest, Drafter
from engine.speculation.ngram import NgramIndex
from engine.speculation.sampling import SamplingConfig
from engine.speculation.tree import TokenTree
from engine.speculation.verify import verify_greedy


def oracle_tokens_per_pass(prompt: Sequence[int], answer: Sequence[int], drafter: Drafter | None,
                           depth: int, width: int, ngram: tuple[int, int] = (1, 4)) -> float:
    """Tokens per verify pass while the oracle target emits `answer` after `prompt`
    (drafter None: plain decoding, 1.0). Every window has the budget of a full tree,
    1 + depth * width rows."""
    if not prompt or not answer:
        raise ValueError("the oracle needs a prompt and an answer of at least one token each")
    vocab = {t: i for i, t in enumerate(dict.fromkeys([*prompt, *answer]))}   # compact ids
    prompt = [vocab[t] for t in prompt]
    answer = [vocab[t] for t in answer]
    idx = NgramIndex(*ngram)
    idx.extend(prompt)
    context, done, passes = list(prompt), 0, 0
    while done < len(answer):
        tree = (TokenTree.empty(context[-1]) if drafter is None else
                drafter.propose(DraftRequest.of(idx, depth, width, 1 + depth * width)))
        logits = torch.zeros(tree.n_rows, len(vocab))      # [R, V]
        for r in range(tree.n_rows):
            path = tree.path_tokens(r - 1) if r else []
            k = done + len(path)
            if answer[done:k] == path and k < len(answer):
                logits[r, answer[k]] = 1.0
        emitted = verify_greedy(tree, logits, context, SamplingConfig()).emitted[:len(answer) - done]
        context.extend(emitted)
        idx.extend(emitted)
        done += len(emitted)
        passes += 1
    return len(answer) / passes
