"""Optional fast CPU layout: 4-bit GGUF weights on torch's int4 weight-only matmul (AVX-512).

``prepare_cpu(w)`` turns a Q4_0 / Q4_1 / Q4_K ``PackedWeight`` into a ``CpuFastWeight`` for
``torch.ops.aten._weight_int4pack_mm_for_cpu`` (group size 32), and ``cpu_fast_linear(x, cw)``
runs it. Every 32-value group of these types is exactly "nibble q in 0..15, one scale, one
offset", which is torch's convention ``w = (q - 8) * scale + zero``:

    Q4_0:  scale = d,         zero = 0                         (w = (q - 8) * d)
    Q4_1:  scale = d,         zero = m + 8 d                   (w = q d + m)
    Q4_K:  scale = d * sc,    zero = 8 d sc - dmin * mn        (w = d sc q - dmin mn, per sub-block)

with the nibbles unchanged. torch's fast kernel is bfloat16 only (the float32/float16 variants
are a scalar loop, ~30x slower), so ``scale``/``zero`` are stored as bfloat16, activations are
rounded to bfloat16 and the output comes back as bfloat16 (accumulation is float32 inside).
**This path is not bit-identical to the float32 reference**: expect relative errors of a few
1e-3 (max |err| / max |ref|), i.e. bfloat16 level. It is *row-invariant*: the kernel computes
each output as one float32 FMA chain over K in order, whatever M, the M-blocking (1..4 rows)
or the thread split (over rows/column blocks, never over K), so speculative verification stays
lossless against a 1-row decode that uses the same path.

Speed (``tests/engine/weights/bench_cpu_matmul.py``; figures in BENCHMARKS.md, "Engine model and kernel timings (moved from code comments)"):
the gain is in streaming fewer weight bytes, so it shows on a decode step's cold sweep over
every linear weight, largest at one row; a single small matrix re-read from L2 gains nothing
(the bfloat16 casts cost about what the smaller reads save).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.errors import NumericalError

from .dequant import nibbles
from .packed import PackedWeight

__all__ = ["CPU_FAST_TYPES", "CpuFastWeight", "prepare_cpu", "cpu_fast_linear",
           "CpuInt8Blocks", "prepare_cpu_q8", "cpu_int8_blocks_linear", "cpu_int8_blocks_top"]

CPU_FAST_TYPES = ("Q4_0", "Q4_1", "Q4_K")
GROUP = 32
_N_ALIGN = 16  # the int4pack kernel wants N % 16 == 0; other N are zero-padded


@dataclass(frozen=True, eq=False)
class CpuFastWeight:
    """A [N, K] weight in torch's CPU int4pack layout (see module doc)."""

    qtype: str
    shape: tuple[int, int]
    int4: torch.Tensor            # uint8 [N_pad, K/2], _convert_weight_to_int4pack_for_cpu output
    scales_zeros: torch.Tensor    # bfloat16 [K/32, N_pad, 2]: (scale, zero) per group

    @property
    def nbytes(self) -> int:
        return (self.int4.numel() * self.int4.element_size()
                + self.scales_zeros.numel() * self.scales_zeros.element_size())


def _nibble_q(w: PackedWeight) -> torch.Tensor:
    """The 4-bit quants of w as int32 [N, K] in k order (0..15)."""
    n, k = w.shape
    qs = w.planes["qs"]
    if w.qtype in ("Q4_0", "Q4_1"):
        q = nibbles(qs.view(n, k // 32, 16))              # [n, nb, 2, 16]
    else:  # Q4_K: per 64 values, 32 bytes: low nibbles = first 32, high nibbles = next 32
        q = nibbles(qs.view(n, k // 64, 32))              # [n, k/64, 2, 32]
    return q.reshape(n, k).to(torch.int32)


def _scale_zero(w: PackedWeight) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 (scale, zero) [N, K/32] per 32-value group, computed in float32."""
    n, k = w.shape
    f = lambda name: w.planes[name].to(torch.float32)  # noqa: E731
    if w.qtype == "Q4_0":
        scale = f("d")
        zero = torch.zeros_like(scale)
    elif w.qtype == "Q4_1":
        scale = f("d")
        zero = f("m") + 8.0 * scale
    elif w.qtype == "Q4_K":
        d = f("d").repeat_interleave(8, dim=1)
        dmin = f("dmin").repeat_interleave(8, dim=1)
        scale = d * f("sc")
        zero = 8.0 * scale - dmin * f("mn")
    else:
        raise ValueError(w.qtype)
    return scale, zero


def prepare_cpu(w: PackedWeight) -> CpuFastWeight:
    """PackedWeight (Q4_0/Q4_1/Q4_K, on CPU) -> CpuFastWeight. Raises ValueError for other types."""
    if w.qtype not in CPU_FAST_TYPES:
        raise ValueError(f"prepare_cpu: {w.qtype} has no int4 CPU layout (supported: {CPU_FAST_TYPES})")
    if w.device.type != "cpu":
        raise ValueError("prepare_cpu: weight must be on the CPU")
    n, k = w.shape
    q = _nibble_q(w)
    scale, zero = _scale_zero(w)
    pad = (-n) % _N_ALIGN
    if pad:
        q = torch.cat([q, torch.full((pad, k), 8, dtype=torch.int32)])
        scale = torch.cat([scale, torch.zeros(pad, k // GROUP)])
        zero = torch.cat([zero, torch.zeros(pad, k // GROUP)])
    int4 = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.contiguous(), 1)
    sz = torch.stack([scale.t(), zero.t()], dim=-1).to(torch.bfloat16).contiguous()
    return CpuFastWeight(w.qtype, (n, k), int4, sz)


def cpu_fast_linear(x: torch.Tensor, cw: CpuFastWeight, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """x [..., K] -> [..., N] via the bfloat16 int4 matmul (approximate, row-invariant).

    The result is in ``out_dtype`` (default x.dtype); pass torch.bfloat16 to skip the upcast.
    """
    n, k = cw.shape
    if x.shape[-1] != k:
        raise ValueError(f"cpu_fast_linear: x has {x.shape[-1]} features, weight {cw.shape}")
    x2 = x if x.dim() == 2 else x.reshape(-1, k)
    xb = x2.to(torch.bfloat16)
    if not xb.is_contiguous():
        xb = xb.contiguous()
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(xb, cw.int4, GROUP, cw.scales_zeros)
    if y.shape[1] != n:
        y = y[:, :n]
    y = y.to(out_dtype or x.dtype)
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], n)


# ---------------------------------------------------------------------------------------------
# Q8_0 (an LM head tied to a Q8_0 embedding) and other dense weights of a fast-path verify pass


@dataclass(frozen=True, eq=False)
class Int8RowScreen:
    """A per-row int8 copy of a Q8_0 weight (one scale a row, not one a 32-value block) and, per
    row, ``beta``: a bound such that for any activations x (bfloat16 values)

        |screen(x)[n] - exact(x)[n]| <= ||x||_2 * beta[n]

    where exact is ``cpu_int8_blocks_linear`` and screen is one int8 matmul over all K (both
    in float32 rounded to bfloat16 by torch's kernel; see ``cpu_int8_blocks_top``). With
    w the Q8_0 row (its block scales in bfloat16), w' = q' d' the requantized row and
    delta = w' - w, by Cauchy-Schwarz:

        |exact - sum w x|  <= C_EXACT  * ||w||  * ||x||      (constants: ``error_bounds``)
        |screen - sum w x| <= ||delta|| * ||x|| + C_SCREEN * (||w|| + ||delta||) * ||x||

    so beta = (1 + C_SCREEN) ||delta|| + (C_EXACT + C_SCREEN) ||w||, rounded up."""

    q: torch.Tensor        # int8 [N, K]
    d: torch.Tensor        # bfloat16 [N]
    beta: torch.Tensor     # float32 [N]


def error_bounds(k: int) -> tuple[float, float]:
    """(C_SCREEN, C_EXACT): bounds on |computed - real| / sum |w x| of one output of a K-column
    product as torch's int8 kernel gives it. bfloat16 has an 8-bit significand, so its
    round-to-nearest is off by at most 2^-8 relative; float32 sums of n terms by at most
    (n - 1) 2^-24 / (1 - n 2^-24) of the sum of |terms|, whatever the order. The screen: one
    K-term sum, one bfloat16 rounding. The exact blocks: K/32 sums of 32 terms, each rounded to
    bfloat16, their float32 sum, and a second bfloat16 rounding where the caller's activations
    are bfloat16 (``.to(x.dtype)``). (K + 64) 2^-24 covers the float32 parts with room."""
    u16, u32 = 2.0 ** -8, 2.0 ** -24
    return u16 + (k + 64) * u32, 2 * u16 + (k + 64) * u32


@dataclass(frozen=True, eq=False)
class CpuInt8Blocks:
    """A Q8_0 [N, K] weight as K/32 int8 column blocks [N, 32] with each row's block scale, for
    torch's int8 weight-only matmul (``_weight_int8pack_mm``, one call a block).

    Why: the fast path's LM head was a bfloat16 ``F.linear``, and on a CPU without AVX512-BF16
    (an Intel Xeon of 2026-12-03) torch's bfloat16 matmul is not row-invariant (a 2-row window's
    logits differed from one-row passes by 0.06), which broke lossless speculation there. Each
    block's product is computed per row (every output one chain over its 32 values, whatever
    M; checked on that CPU) and the blocks are added in block order in float32, so a row's
    logits do not depend on the window around it. The int8 values are Q8_0's own quants (read
    28 MB, not 57 MB of bfloat16); the f16 block scales are rounded to bfloat16, the kernel's
    scale type, the same precision as the bfloat16 copy it replaces.

    ``screen`` (optional, an ``Int8RowScreen``) lets a greedy pass find each row's top-k without
    the K/32 block calls over the whole vocabulary (``cpu_int8_blocks_top``)."""

    qtype: str
    shape: tuple[int, int]
    q: tuple[torch.Tensor, ...]        # int8 [N, 32] each, K/32 of them
    d: tuple[torch.Tensor, ...]        # bfloat16 [N] each
    screen: Int8RowScreen | None = None

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)

    @property
    def tensors(self) -> list[torch.Tensor]:
        extra = [self.screen.q, self.screen.d, self.screen.beta] if self.screen is not None else []
        return list(self.q + self.d) + extra

    def rows(self, idx: torch.Tensor) -> "CpuInt8Blocks":
        """The weight's rows ``idx`` (long [n]) as blocks of their own, without a screen."""
        return CpuInt8Blocks(self.qtype, (len(idx), self.shape[1]),
                             tuple(q.index_select(0, idx) for q in self.q),
                             tuple(d.index_select(0, idx) for d in self.d))


def _row_screen(qs: torch.Tensor, d: torch.Tensor, chunk: int = 4096) -> Int8RowScreen:
    """The Int8RowScreen of Q8_0 quants qs (int8 [N, K]) with block scales d (bfloat16 [N, K/32]),
    computed in float64 ``chunk`` rows at a time (host memory bounded)."""
    n, k = qs.shape
    c_screen, c_exact = error_bounds(k)
    q_out = torch.empty(n, k, dtype=torch.int8)
    d_out = torch.empty(n, dtype=torch.bfloat16)
    beta = torch.empty(n, dtype=torch.float32)
    for r0 in range(0, n, chunk):
        r1 = min(n, r0 + chunk)
        w = (qs[r0:r1].double().view(r1 - r0, k // GROUP, GROUP)
             * d[r0:r1].double().unsqueeze(-1)).view(r1 - r0, k)
        top = w.abs().amax(dim=1)
        # bfloat16 rounds to nearest (relative error <= 2^-8): the 2^-7 margin keeps d' >= max / 127
        dp = (top / 127 * (1 + 2.0 ** -7)).to(torch.bfloat16)
        dp[top == 0] = 1.0
        dpf = dp.double().unsqueeze(1)
        qp = (w / dpf).round().clamp_(-127, 127)
        delta = (qp * dpf - w).norm(dim=1)
        b = (1 + c_screen) * delta + (c_exact + c_screen) * w.norm(dim=1)
        q_out[r0:r1] = qp.to(torch.int8)
        d_out[r0:r1] = dp
        beta[r0:r1] = (b * (1 + 1e-6)).float()
    return Int8RowScreen(q_out, d_out, beta)


def prepare_cpu_q8(w: PackedWeight, screen: bool = False) -> CpuInt8Blocks:
    """A Q8_0 PackedWeight (on the CPU) -> CpuInt8Blocks (with an Int8RowScreen if ``screen``:
    one more byte a weight)."""
    if w.qtype != "Q8_0":
        raise ValueError(f"prepare_cpu_q8: {w.qtype} is not Q8_0")
    n, k = w.shape
    qs, d = w.planes["qs"].view(torch.int8), w.planes["d"].to(torch.bfloat16)
    q = tuple(qs[:, b * GROUP:(b + 1) * GROUP].contiguous() for b in range(k // GROUP))
    s = tuple(d[:, b].contiguous() for b in range(k // GROUP))
    sc = _row_screen(qs.view(n, k), d) if screen else None
    return CpuInt8Blocks("Q8_0", (n, k), q, s, sc)


def cpu_int8_blocks_linear(x: torch.Tensor, cw: CpuInt8Blocks) -> torch.Tensor:
    """x [..., K] -> [..., N] (x.dtype): the sum over blocks, in order, of each block's int8
    product on bfloat16 activations (see CpuInt8Blocks)."""
    n, k = cw.shape
    x2 = x.reshape(-1, k).to(torch.bfloat16)
    acc = None
    for b, (q, d) in enumerate(zip(cw.q, cw.d)):
        y = torch.ops.aten._weight_int8pack_mm(x2[:, b * GROUP:(b + 1) * GROUP].contiguous(), q, d)
        acc = y.float() if acc is None else acc.add_(y.float())
    return acc.to(x.dtype).reshape(*x.shape[:-1], n)


def cpu_int8_blocks_top(x: torch.Tensor, cw: CpuInt8Blocks, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's top ``k`` of ``cpu_int8_blocks_linear(x, cw)``: (values float32 [M, k], ids
    long [M, k]), the values bit for bit those of the full product, ties to the lower id.

    One int8 matmul over all K on the screen's per-row copy gives every output within
    ||x|| beta[n] of the exact one (Int8RowScreen); the exact outputs are then computed only for
    the rows whose screened interval reaches F, the k-th largest lower bound. They contain the
    true top k: k outputs have exact values >= F, so the k-th largest exact value is >= F, and
    an output whose exact value reaches it has its interval's upper end >= F. The screen's one
    matmul takes about half the time of the K/32 block calls at one row and a quarter at 8
    (the bundled model's 49,152 x 576 head alone, 1 thread); a whole pass:
    bench/bench_cpu_head.py."""
    sc = cw.screen
    if sc is None:
        raise ValueError("cpu_int8_blocks_top: this weight has no screen (prepare_cpu_q8(w, screen=True))")
    n, kk = cw.shape
    x2 = x.reshape(-1, kk)
    xb = x2.to(torch.bfloat16)
    a = torch.ops.aten._weight_int8pack_mm(xb.contiguous(), sc.q, sc.d).float()      # [M, N]
    norm = (xb.double().norm(dim=1) * (1 + 1e-6)).float()                  # [M]
    if not bool(norm.isfinite().all()):
        # NaN or infinity in x (a norm overflowed): the screen's intervals are NaN, no row
        # would be a candidate and the caller would get an empty top k
        raise NumericalError("the model's hidden state reached the LM head as NaN or infinite values: its "
                             "weights or metadata are broken (a norm's scale too large?), or the compute "
                             "dtype overflowed: try --dtype float32")
    # + |a| 2^-20: what float32 rounding of a -/+ spread below may take off the interval
    spread = (norm.unsqueeze(1) * sc.beta.unsqueeze(0)).add_(a.abs(), alpha=2.0 ** -20)   # [M, N]
    floor = (a - spread).topk(k, dim=1).values[:, -1:]                               # [M, 1]
    cand = ((a + spread) >= floor).any(dim=0).nonzero().squeeze(1)                  # ascending ids
    if cand.numel() < k:        # only NaN in the screen gives fewer (finite: the k best lower bounds)
        raise NumericalError("the model's LM head computed NaN or infinite values: its weights are broken")
    exact = cpu_int8_blocks_linear(x2, cw.rows(cand)).float()                       # [M, |cand|]
    vals, order = torch.sort(exact, dim=1, descending=True, stable=True)
    return vals[:, :k].contiguous(), cand[order[:, :k]]
