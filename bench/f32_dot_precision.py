"""How accurate is each float32 ``tl.dot`` precision Triton offers, against float64?

    python bench/f32_dot_precision.py            (CPU, ~1 minute; no GPU, no Triton needed)

The kernels' float32 dots (engine.kernels.dot_precision) must pick a precision each backend
has: CUDA takes tf32x3, ROCm (RDNA) only ieee / bf16x3 / bf16x6. Triton's CPU interpreter
cannot say how accurate these are: its ``tl.dot`` is ``np.matmul`` in float32 whatever
``input_precision`` says (triton/runtime/interpreter.py, ``create_dot``), so ieee and tf32x3
give the same bits there, and it rejects bf16x3 / bf16x6 outright (its allowed list is CUDA's
tf32, tf32x3, ieee); both checked below when Triton is installed. So this script emulates,
in torch on the CPU, what Triton 3.6 lowers each precision to (lib/Dialect/TritonGPU/Transforms/
F32DotTC.cpp):

    split(a, n):  hi = bf16(a); r = a - hi; mid = bf16(r); lo = bf16(r - mid)  (n parts)
    bf16x3:  hi*mid + mid*hi, then + hi*hi        (bf16 products, exact in float32; float32 sums)
    bf16x6:  mid*mid + lo*hi + hi*lo + mid*hi + hi*mid, then + hi*hi
    tf32x3:  (a - tf32(a)) * tf32(b) + tf32(a) * (b - tf32(b)), then + tf32(a) * tf32(b)
             (tf32 = 10 mantissa bits, the hardware reads the small parts truncated to tf32)
    ieee:    float32 products and sums

and runs it the way the packed kernel does: a dot per 256-value K tile, accumulated in float32
over K, for the kernel's operands (activations ~ N(0, 1), weights = dequantized GGUF values) and
the shapes of a 8B-class model layer. The float32 matmul products of bf16 parts are exact
(8 x 8 bits), so only the summation order differs from the card's matrix units.
Prints, per precision, the error against float64 (max |err| / max |ref|, and the median of
|err| / |ref| per output) and the same for the whole torch float32 matmul for scale.
"""

from __future__ import annotations

import os
import subprocess
import sys

import torch

TILE = 256


def _bf16(a: torch.Tensor) -> torch.Tensor:
    return a.to(torch.bfloat16).to(torch.float32)


def _tf32(a: torch.Tensor, trunc: bool = False) -> torch.Tensor:
    """float32 -> tf32 (10 mantissa bits) as float32: round to nearest (cvt.rna), or truncate."""
    bits = a.view(torch.int32)
    if not trunc:
        bits = bits + (1 << 12)                 # round half away from zero on the magnitude
    return (bits & ~((1 << 13) - 1)).view(torch.float32)


def _split(a: torch.Tensor, n: int) -> list[torch.Tensor]:
    parts = []
    for i in range(n):
        p = _bf16(a)
        parts.append(p)
        if i != n - 1:
            a = a - p
    return parts


def tile_dot(a: torch.Tensor, b: torch.Tensor, prec: str) -> torch.Tensor:
    """a [M, T] @ b [T, N] as Triton lowers ``tl.dot(a, b, input_precision=prec)`` (float32)."""
    mm = torch.matmul
    if prec == "ieee":
        return mm(a, b)
    if prec == "tf32x3":
        ab, bb = _tf32(a), _tf32(b)
        small = mm(_tf32(a - ab, trunc=True), bb) + mm(ab, _tf32(b - bb, trunc=True))
        return mm(ab, bb) + small
    n = {"bf16x3": 2, "bf16x6": 3}[prec]
    ah, bh = _split(a, n), _split(b, n)
    hi, mid, lo = 0, 1, 2
    r = torch.zeros(a.shape[0], b.shape[1])
    if n == 3:
        r = r + mm(ah[mid], bh[mid])
        r = r + mm(ah[lo], bh[hi])
        r = r + mm(ah[hi], bh[lo])
    r = r + mm(ah[mid], bh[hi])
    r = r + mm(ah[hi], bh[mid])
    return r + mm(ah[hi], bh[hi])


def kernel_like(x: torch.Tensor, w: torch.Tensor, prec: str) -> torch.Tensor:
    """x [M, K] @ w[N, K].T, one dot per K tile, float32 accumulation (the packed kernel)."""
    acc = torch.zeros(x.shape[0], w.shape[0])
    for k0 in range(0, x.shape[1], TILE):
        acc = acc + tile_dot(x[:, k0:k0 + TILE], w[:, k0:k0 + TILE].T, prec)
    return acc


def errors(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    err = (got.double() - ref).abs()
    return (err.max() / ref.abs().max()).item(), (err / ref.abs().clamp_min(1e-30)).median().item()


def gguf_like_weights(n: int, k: int, seed: int) -> torch.Tensor:
    """Q4_K-like dequantized values: 4-bit quants times per-32 scales minus per-32 mins."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (n, k), generator=g).float()
    sc = torch.rand(n, k // 32, generator=g).repeat_interleave(32, 1) * 0.02
    mn = torch.rand(n, k // 32, generator=g).repeat_interleave(32, 1) * 0.1
    return (sc * q - mn).float()


def interpreter_ignores_precision() -> str:
    """Run the packed kernel under TRITON_INTERPRET=1 with every precision code."""
    code = r"""
import torch, engine.kernels.dot_precision as dp
from engine.kernels import triton_kernels as tk
from engine.kernels.kernel_catalog import random_packed
w, ref = random_packed("Q4_K", 64, 512)
x = torch.randn(3, 512, generator=torch.Generator().manual_seed(0))
want = x.double() @ ref.double().T
outs, notes = {}, []
for p in ("ieee", "tf32x3", "bf16x3", "bf16x6"):
    dp.F32_DOT["cuda"] = p
    try:
        outs[p] = tk.packed_matmul(x, w)
        err = ((outs[p].double() - want).abs().max() / want.abs().max()).item()
        notes.append(f"{p}: error {err:.2e}")
    except Exception as e:
        notes.append(f"{p}: rejected ({'input_precision must be one of' in str(e) and 'not in its list' or type(e).__name__})")
ran = list(outs)
same = all(torch.equal(outs[ran[0]], outs[p]) for p in ran)
print("; ".join(notes) + f"; same bits for {', '.join(ran)}: {same}")
"""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.getcwd())
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if r.returncode:
        return f"not run: {r.stderr.strip().splitlines()[-1][:200] if r.stderr.strip() else r.returncode}"
    return r.stdout.strip()


def main() -> None:
    torch.manual_seed(0)
    cases = (("q/o 4096x4096, 16 rows", 16, 4096, 4096), ("down 4096x12288, 16 rows", 16, 4096, 12288),
             ("SmolLM2 gate/up 1536x576, 16 rows", 16, 1536, 512))
    print(f"{'case':36s} {'precision':9s} {'max err / max|ref|':>19s} {'median rel err':>15s}")
    for name, m, n, k in cases:
        x = torch.randn(m, k)
        w = gguf_like_weights(n, k, seed=n + k)
        ref = x.double() @ w.double().T
        for prec in ("ieee", "tf32x3", "bf16x6", "bf16x3"):
            mx, med = errors(kernel_like(x, w, prec), ref)
            print(f"{name:36s} {prec:9s} {mx:19.2e} {med:15.2e}")
        mx, med = errors(x @ w.T, ref)
        print(f"{name:36s} {'torch f32':9s} {mx:19.2e} {med:15.2e}")
    try:
        import triton  # noqa: F401
    except ImportError:
        print("interpreter: triton not installed")
        return
    print("interpreter (TRITON_INTERPRET=1, packed Q4_K kernel, float32):",
          interpreter_ignores_precision())


if __name__ == "__main__":
    main()
