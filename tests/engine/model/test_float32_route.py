"""float32 means float32 arithmetic on every x86 CPU: the layout-invariant attention's matmuls
(engine.model.attention.float32_bmm) never take oneDNN's bfloat16 math mode on a CPU that honours
it (AVX512-BF16, AMX), even when the process-wide flag was left at "bf16" by someone else; and
the flag is restored afterwards."""

import torch

from engine.kernels.window_layout import WindowLayout, ancestor_table
from engine.model.attention import float32_bmm, layout_attention, onednn_bf16_mode_is_fp32


def test_the_probe_matches_the_cpu():
    """The route is picked by measuring what the bfloat16 mode does here, not by the CPU's flags:
    an AMD EPYC that lists avx512_bf16 (2026-12-05) still computes float32 products in that
    mode, an Intel Xeon with AMX rounds to bfloat16. The probe must agree with a product of
    another shape taken in the mode."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(2, 64, 96, generator=g), torch.randn(2, 96, 32, generator=g)
    mm = torch.backends.mkldnn.matmul
    prev = mm.fp32_precision
    try:
        mm.fp32_precision = "bf16"
        flagged = torch.bmm(a, b)
    finally:
        mm.fp32_precision = prev
    err = (flagged.double() - a.double() @ b.double()).abs().max().item()
    # the control: where the probe says bfloat16, the flag really costs ~1e-1 here
    assert (err < 1e-3) == onednn_bf16_mode_is_fp32(), err


def test_float32_bmm_is_float32_whatever_the_flag():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(3, 128, 64, generator=g), torch.randn(3, 64, 40, generator=g)
    mm = torch.backends.mkldnn.matmul
    prev = mm.fp32_precision
    try:
        for flag in ("bf16", "ieee"):
            mm.fp32_precision = flag
            with float32_bmm():
                got = torch.bmm(a, b)
            assert mm.fp32_precision == flag            # restored
            assert (got.double() - a.double() @ b.double()).abs().max() < 1e-4
    finally:
        mm.fp32_precision = prev


def test_layout_attention_is_float32_with_the_flag_forced():
    """What failed on an AMX Xeon (max error 0.015 against 1e-5): the attention against SDPA in
    float64, with the process-wide flag forced to bfloat16 before the call."""
    g = torch.Generator().manual_seed(0)
    hkv, G, D, n, R = 3, 3, 64, 130, 4
    k = torch.randn(hkv, 512, D, generator=g) * 2
    v = torch.randn(hkv, 512, D, generator=g)
    q = torch.randn(R, hkv * G, D, generator=g)
    depths = [0, 1, 1, 2]
    anc = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    mm = torch.backends.mkldnn.matmul
    prev = mm.fp32_precision
    try:
        mm.fp32_precision = "bf16"
        got = layout_attention(q, k, v, WindowLayout(n, torch.tensor(depths), ancestor_table(depths, anc)))
        assert mm.fp32_precision == "bf16"
    finally:
        mm.fp32_precision = prev
    mask = torch.zeros(R, n + R, dtype=torch.bool)
    mask[:, :n], mask[:, n:] = True, anc
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.double().transpose(0, 1), k[:, :n + R].double().repeat_interleave(G, 0),
        v[:, :n + R].double().repeat_interleave(G, 0), attn_mask=mask).transpose(0, 1)
    assert (got.double() - ref).abs().max() < 1e-5
