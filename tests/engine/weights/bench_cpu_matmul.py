"""CPU matmul micro-benchmark for the bundled 135M model's shapes (standalone script, not a test).

    .venv/bin/python tests/engine/weights/bench_cpu_matmul.py [--threads 1] [--reps 200]

Prints the median time (microseconds) of y = x @ W.T for M = 1, 2, 4, 8 rows with:
  f32       float32 F.linear on the dequantized weight (the engine's CPU path today)
  bf16      bfloat16 F.linear on a bfloat16 copy of the weight
  i4_bf16   torch int4pack (group 32) with bfloat16 activations/scales  (_weight_int4pack_mm_for_cpu)
  i4_f32    the same op with float32 activations/scales
  i8_bf16   torch int8 weight-only with a per-row scale, bfloat16 activations (_weight_int8pack_mm)
  cpu_fast  engine.weights.cpu_fast.cpu_fast_linear (Q4_0/Q4_1 -> int4pack) on the float32 input
  packed    engine.weights.packed_linear_torch (dequantize tiles + float32 BLAS; the reference path)
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

SHAPES = [  # (name, N out, K in)
    ("q/o 576x576", 576, 576),
    ("k/v 192x576", 192, 576),
    ("gate/up 1536x576", 1536, 576),
    ("down 576x1536", 576, 1536),
    ("lm_head 49152x576", 49152, 576),
]


def q4_1_raw(n: int, k: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    bs, ts = GGML_QUANT_SIZES[T.Q4_1]
    raw = rng.integers(0, 256, (n, k // bs, ts), dtype=np.uint8)
    raw[:, :, 0:2] = rng.uniform(1e-3, 1e-2, (n, k // bs, 1)).astype(np.float16).view(np.uint8)
    raw[:, :, 2:4] = rng.uniform(-8e-2, -1e-3, (n, k // bs, 1)).astype(np.float16).view(np.uint8)
    return torch.from_numpy(raw.reshape(n, -1))


def median_us(fn, reps: int) -> float:
    for _ in range(5):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--ms", default="1,2,4,8")
    ap.add_argument("--skip", default="", help="comma list of methods to skip")
    ap.add_argument("--sweep", action="store_true",
                    help="time a whole decode step's worth of distinct weights (30 layers x q,k,v,o,"
                         "gate,up,down = 210 matrices, ~424 MB as float32): caches are cold, as in "
                         "the real model, instead of one small matrix re-read from L2")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from engine.weights import dequantize, pack, packed_linear_torch
    try:
        from engine.weights.cpu_fast import cpu_fast_linear, prepare_cpu
    except ImportError:  # before phase 2 landed
        cpu_fast_linear = prepare_cpu = None

    ms = [int(m) for m in args.ms.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    if args.sweep:
        sweep(ms, skip, max(5, args.reps // 20), cpu_fast_linear, prepare_cpu)
        return
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, median of {args.reps} (us)")
    for name, n, k in SHAPES:
        raw = q4_1_raw(n, k)
        w = pack(raw, "Q4_1")
        W = dequantize(raw, "Q4_1")
        Wb = W.to(torch.bfloat16)
        q = torch.randint(0, 16, (n, k), dtype=torch.int32)
        i4 = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        sz = torch.stack([torch.rand(k // 32, n) * 1e-2, torch.randn(k // 32, n) * 1e-2], -1)
        sz_b = sz.to(torch.bfloat16)
        i8 = torch.randint(-128, 127, (n, k), dtype=torch.int8)
        s8 = torch.rand(n).to(torch.bfloat16)
        cw = prepare_cpu(w) if prepare_cpu is not None else None
        methods = {
            "f32": lambda x: F.linear(x, W),
            "bf16": lambda x: F.linear(x.to(torch.bfloat16), Wb),
            "i4_bf16": lambda x: torch.ops.aten._weight_int4pack_mm_for_cpu(x.to(torch.bfloat16), i4, 32, sz_b),
            "i4_f32": lambda x: torch.ops.aten._weight_int4pack_mm_for_cpu(x, i4, 32, sz),
            "i8_bf16": lambda x: torch.ops.aten._weight_int8pack_mm(x.to(torch.bfloat16), i8, s8),
        }
        if cw is not None:
            methods["cpu_fast"] = lambda x: cpu_fast_linear(x, cw)
        if n * k <= 1536 * 576:
            methods["packed"] = lambda x: packed_linear_torch(x, w)
        for label, fn in methods.items():
            if label in skip:
                continue
            reps = args.reps if label not in ("packed", "i4_f32") else max(10, args.reps // 10)
            if n > 10000:
                reps = max(10, reps // 10)
            row = []
            for m in ms:
                x = torch.randn(m, k)
                row.append(f"M={m}: {median_us(lambda: fn(x), reps):9.1f}")
            print(f"{name:18s} {label:9s} " + "  ".join(row), flush=True)


def sweep(ms, skip, reps, cpu_fast_linear, prepare_cpu) -> None:
    from engine.weights import dequantize, pack
    layer = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]
    shapes = layer * 30
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, sweep of {len(shapes)} "
          f"matrices ({sum(n * k for n, k in shapes) / 1e6:.1f}M weights), median of {reps} (ms)")
    ws = []
    for i, (n, k) in enumerate(shapes):
        raw = q4_1_raw(n, k, seed=i)
        ws.append((n, k, raw))
    builders = {
        "f32": lambda n, k, raw: (lambda W: lambda x: F.linear(x, W))(dequantize(raw, "Q4_1")),
        "bf16": lambda n, k, raw: (lambda W: lambda x: F.linear(x.to(torch.bfloat16), W))(
            dequantize(raw, "Q4_1").to(torch.bfloat16)),
        "i4_bf16": lambda n, k, raw: (lambda i4, sz: lambda x: torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.to(torch.bfloat16), i4, 32, sz))(
            torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.randint(0, 16, (n, k), dtype=torch.int32), 1),
            torch.rand(k // 32, n, 2).to(torch.bfloat16)),
        "i8_bf16": lambda n, k, raw: (lambda i8, s8: lambda x: torch.ops.aten._weight_int8pack_mm(
            x.to(torch.bfloat16), i8, s8))(
            torch.randint(-128, 127, (n, k), dtype=torch.int8), torch.rand(n).to(torch.bfloat16)),
    }
    if prepare_cpu is not None:
        builders["cpu_fast"] = lambda n, k, raw: (lambda cw: lambda x: cpu_fast_linear(x, cw))(
            prepare_cpu(pack(raw, "Q4_1")))
    # methods are timed interleaved (one step of each in turn) so that load from other
    # processes on the machine hits them all alike
    built = {label: [(k, build(n, k, raw)) for n, k, raw in ws]
             for label, build in builders.items() if label not in skip}
    for m in ms:
        xs = {k: torch.randn(m, k) for k in (576, 1536)}
        times: dict[str, list[float]] = {label: [] for label in built}
        for rep in range(reps + 2):
            for label, fns in built.items():
                t = time.perf_counter()
                for k, fn in fns:
                    fn(xs[k])
                if rep >= 2:
                    times[label].append(time.perf_counter() - t)
        f32 = statistics.median(times["f32"]) if "f32" in times else None
        for label, ts in times.items():
            med = statistics.median(ts) * 1e3
            ratio = f"  ({f32 * 1e3 / med:4.2f}x f32)" if f32 else ""
            print(f"sweep M={m} {label:9s} median {med:8.2f} ms  min {min(ts) * 1e3:8.2f} ms{ratio}",
                  flush=True)

if __name__ == "__main__":
    main()
