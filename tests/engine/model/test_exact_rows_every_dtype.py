"""Every CPU runtime is exact, not only the fast one: float32 and bfloat16 with dequantized
weights (what `--dtype float32` / `--dtype bfloat16` and an AVX2 CPU's default run) give each
verify row, bit for bit, the logits of the one-row pass plain decoding runs for the same token,
wherever the row sits in the window (issue 31: CPU bfloat16 tree and lookup drafts gave the
plain tokens on 7 of 9 held-out runs)."""

from __future__ import annotations

import pytest
import torch

from engine.io.prompts import encode_prompt
from engine.model.runtime import Runtime
from engine.speculation.decoder import Decoder
from engine.speculation.settings import DecodeSettings
from row_passes import one_row_logits


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def dense_runtime(request, loaded_model):
    rt = Runtime(loaded_model, "cpu", request.param, weights="dequantized")
    assert rt.weights_mode == "dequantized" and not rt.model.cpu_fast
    return rt


def test_side_branch_rows_equal_one_row_passes_bitwise(dense_runtime, code_edit_prompts):
    """The real chain of 9 tokens placed after a decoy branch of 5 (its rows sit at later slots
    than their positions): every real row's logits equal the one-row passes', bit for bit."""
    rt = dense_runtime
    assert rt.exact_rows and rt.tie_margin == 0.0
    ids = encode_prompt(rt.tokenizer, code_edit_prompts[1]["messages"])
    prompt, toks = ids[:-9], ids[-9:]
    ref = one_row_logits(rt, prompt, toks)
    tokens = [toks[0]] + [(t * 7 + 13) % 49152 for t in toks[1:6]] + toks[1:]
    parents = [-1, 0, 1, 2, 3, 4] + [0] + list(range(6, 6 + 7))
    R = len(tokens)
    depths, anc = [0] * R, torch.zeros(R, R, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            depths[i], anc[i] = depths[p] + 1, anc[p]
        anc[i, i] = True
    ses = rt.session(len(prompt) + R + 8)
    ses.prefill(prompt)
    got = ses.verify(tokens, depths, anc).logits
    ses.close()
    real = [0] + list(range(6, R))
    assert torch.equal(got[real], ref)
    # the control: the decoy rows are other tokens at the same depths, other logits
    assert not torch.equal(got[1:6], ref[1:6])


# bfloat16 only: float32 with dequantized weights is the session's cpu_runtime, whose drafts
# equal plain decoding in tests/engine/speculation/test_lossless.py (lookup and tree d8 w3, 64
# tokens, with and without penalties; on the CPU no row is flagged a near-tie, so token for
# token) and test_history.py (also adaptive windows and the CPU's user default); its rows'
# exactness: the test above
@pytest.mark.parametrize("dense_runtime", ["bfloat16"], indirect=True)
def test_drafts_reproduce_plain_decoding(dense_runtime, code_edit_prompts):
    rt = dense_runtime
    assert rt.dtype_name == "bfloat16"
    ids = encode_prompt(rt.tokenizer, code_edit_prompts[2]["messages"])
    want = Decoder(rt, ids, DecodeSettings(draft="none", max_new_tokens=40)).run()["tokens"]
    for s in (DecodeSettings(draft="lookup", depth=8, max_new_tokens=40),
              DecodeSettings(draft="tree", depth=8, width=3, adaptive=False, ar_floor=False,
                             max_new_tokens=40),
              DecodeSettings(draft="tree", max_new_tokens=40)):          # the user default
        assert Decoder(rt, ids, s).run()["tokens"] == want, s
