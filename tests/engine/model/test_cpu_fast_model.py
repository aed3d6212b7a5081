"""The bundled model on the fast CPU kernels (weights packed, cpu_kernels="fast"): Q4_1 layers on
torch's int4 matmul with bfloat16 activations, a bfloat16 LM head, row-invariant attention.

Approximate by design, so the checks are: how far from the float32 path (an honest tolerance and
the greedy agreement it gives), and exactness where losslessness needs it: a window's rows equal
one-row passes bit for bit, so speculation reproduces plain decoding token for token.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from engine.io.load import load_model
from engine.io.prompts import encode_prompt
from engine.model.attention import padded_keys, row_invariant_attention
from engine.model.linear import cpu_fast_available
from engine.model.runtime import Runtime, chain, cpu_fast_fits
from engine.speculation.decoder import Decoder
from engine.speculation.settings import DecodeSettings
from engine.weights import CpuFastWeight, PackedWeight

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
from make_model import SHAPES, write_model  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"),
                                reason="this torch has no CPU int4pack matmul")


@pytest.fixture(scope="module")
def fast_runtime(loaded_model):
    return Runtime(loaded_model, "cpu", "float32", weights="packed")


def test_fast_runtime_layout(fast_runtime, loaded_model):
    m = fast_runtime.model
    assert m.cpu_fast and m.row_invariant
    for L in m.layers:
        for k in ("qkv", "o", "gate_up", "down"):
            assert L[k].kernels == {"cpu_fast"}, k
    assert isinstance(m.layers[0]["qkv"].parts[0], CpuFastWeight)
    assert m.lm_head.parts[0].dtype == torch.bfloat16         # the tied Q8_0 head, halved
    assert m.embed.dtype == torch.float32                      # the lookup stays exact
    assert fast_runtime.weights_label.startswith("Q4_1 packed")
    exact = Runtime(loaded_model, "cpu", "float32", weights="packed", cpu_kernels="exact")
    assert not exact.model.cpu_fast and not exact.model.row_invariant
    assert isinstance(exact.model.layers[0]["qkv"].parts[0], PackedWeight)
    assert exact.model.lm_head.parts[0].dtype == torch.float32


def test_auto_packs_on_the_cpu_only_what_the_int4_kernels_take(loaded_model, tmp_path):
    avx512 = torch.backends.cpu.get_cpu_capability().startswith("AVX512")
    assert cpu_fast_fits(loaded_model) == avx512                 # Q4_1 layers
    rt = Runtime(loaded_model, "cpu", "float32")
    assert rt.weights_mode == ("packed" if avx512 else "dequantized")
    assert rt.model.cpu_fast == avx512
    # Q4_K_M keeps some layers in Q6_K, which has no int4 layout: auto stays float32 there
    q4km = load_model(write_model(tmp_path / "m.gguf", SHAPES["tiny"], "Q4_K_M", progress=None))
    assert not cpu_fast_fits(q4km)
    assert Runtime(q4km, "cpu", "float32").weights_mode == "dequantized"
    # asked for, it is packed: Q4_K on the int4 kernels, Q6_K on the exact path
    rt = Runtime(q4km, "cpu", "float32", weights="packed")
    kinds = {k for L in rt.model.layers for v in L.values() if hasattr(v, "kernels")
             for k in v.kernels}
    assert kinds == ({"cpu_fast", "packed"} if cpu_fast_available() else {"packed"})


def test_fast_logits_near_float32(fast_runtime, cpu_runtime, code_edit_prompts):
    # measured (2026-12-01): max|diff| / max|ref| per row, median 0.0086, max 0.043; argmax
    # agreement 97.7 % of positions, 100 % where float32's top-2 margin exceeds 1 logit
    tot = agree = 0
    for p in code_edit_prompts:
        ids = encode_prompt(cpu_runtime.tokenizer, p["messages"])
        n = len(ids)
        t, pos = torch.tensor(ids), torch.arange(n)
        mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
        with torch.inference_mode():
            ref, got = (rt.model.forward(t, pos, mask, rt.model.new_cache(n + 8), pos)
                        for rt in (cpu_runtime, fast_runtime))
        rel = (got - ref).abs().amax(-1) / ref.abs().amax(-1)
        assert rel.median() < 0.015 and rel.max() < 0.08, (p["id"], rel.median(), rel.max())
        top2 = ref.topk(2, dim=-1).values
        clear = top2[:, 0] - top2[:, 1] > 1.0
        same = got.argmax(-1) == ref.argmax(-1)
        assert same[clear].all(), p["id"]
        tot, agree = tot + n, agree + int(same.sum())
    assert agree / tot > 0.96


def _ar_logits(rt, prompt, toks):
    rt.start(len(prompt) + len(toks) + 8)
    rt.prefill(prompt)
    out = []
    for t in toks:
        out.append(rt.verify([t], *chain(1)).logits)
        rt.cache.advance(1)
    return torch.cat(out)


def test_window_rows_equal_one_row_passes_bitwise(fast_runtime, code_edit_prompts):
    rt = fast_runtime
    for p in code_edit_prompts[:2]:
        ids = encode_prompt(rt.tokenizer, p["messages"])
        prompt, toks = ids[:-33], ids[-33:]
        ref = _ar_logits(rt, prompt, toks)
        for r in (2, 3, 5, 9, 17, 33):
            rt.start(len(ids) + 8)
            rt.prefill(prompt)
            got = rt.verify(toks[:r], *chain(r)).logits
            assert torch.equal(got, ref[:r]), (p["id"], r, (got - ref[:r]).abs().max().item())


def test_lookup_reproduces_ar_on_the_fast_path(fast_runtime, code_edit_prompts):
    for p in code_edit_prompts[:3]:
        ids = encode_prompt(fast_runtime.tokenizer, p["messages"])
        want = Decoder(fast_runtime, ids, DecodeSettings(draft="none", max_new_tokens=64)).run()
        got = Decoder(fast_runtime, ids, DecodeSettings(draft="lookup", max_new_tokens=64)).run()
        assert got["tokens"] == want["tokens"], p["id"]


@pytest.mark.parametrize("hkv,g,d", [(3, 3, 64), (8, 4, 128)])
def test_row_invariant_attention_random(hkv, g, d):
    """Rows of an R-row causal window vs the same rows alone, keys crossing the 64-key padding
    block and the 1024-key p @ V chunk."""
    gen = torch.Generator().manual_seed(0)
    cap = 2048
    kc = torch.randn(hkv, cap, d, generator=gen) * 2
    vc = torch.randn(hkv, cap, d, generator=gen)

    def attend(q, rows, n):
        R = len(rows)
        S = padded_keys(n + (rows[0] + 1 if R == 1 else R), cap)
        mask = torch.zeros(R, S, dtype=torch.bool)
        for i, r in enumerate(rows):
            mask[i, :n + r + 1] = True
        bias = torch.zeros(g * R, S).masked_fill_(~mask.repeat(g, 1), float("-inf"))
        qg = q[rows].transpose(0, 1).reshape(hkv, g * R, d)
        out = row_invariant_attention(qg, kc[:, :S], vc[:, :S], bias)     # [hkv, g*R, d]
        return out.reshape(hkv * g, R, d).transpose(0, 1)

    for n in (0, 3, 60, 500, 1000, 1023, 1990):
        q = torch.randn(40, hkv * g, d, generator=gen)
        alone = torch.cat([attend(q, [r], n) for r in range(40)])
        for R in (2, 7, 25, 40):
            assert torch.equal(attend(q, list(range(R)), n), alone[:R]), (n, R)
