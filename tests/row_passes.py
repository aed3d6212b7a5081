"""One-row passes: what plain decoding computes for each token of a run, the reference a verify
window's rows are compared with bit for bit."""

from __future__ import annotations

import torch

from engine.model.runtime import chain


def one_row_logits(rt, prompt: list[int], toks: list[int]) -> torch.Tensor:
    """Logits [len(toks), V] of `toks` decoded one row a pass after `prompt` is prefilled."""
    ses = rt.session(len(prompt) + len(toks) + 8)
    ses.prefill(prompt)
    out = []
    for t in toks:
        out.append(ses.verify([t], *chain(1)).logits)
        ses.advance(1)
    ses.close()
    return torch.cat(out)
