"""Dequantization speed (standalone script, not a test).

    .venv/bin/python tests/engine/weights/bench_dequant.py [--threads 1] [--shape 28672x8192] [--types Q4_K,...]

For each type: ``compute`` = the dequantizer filling an already-touched float32 buffer (min of
3), ``call`` = a whole ``dequantize(raw, qtype)`` call, which also pays for the first touch
(page faults) of a fresh output tensor (median of 3); ``touch`` = that first-touch cost alone.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shape", default="28672x8192")
    ap.add_argument("--types", default="Q4_K,Q5_K,Q6_K,Q8_0,Q4_0,Q4_1,Q5_0,Q5_1,Q2_K,Q3_K,F16,BF16")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from engine.weights import dequant as dq

    n, k = (int(v) for v in args.shape.split("x"))
    buf = torch.empty(n, k)
    buf.fill_(0)
    touch = []
    for _ in range(3):
        t = time.perf_counter()
        a = torch.empty(n, k)
        a.fill_(0)
        touch.append(time.perf_counter() - t)
        del a
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, {n}x{k} "
          f"({n * k * 4 / 2**20:.0f} MiB float32); first touch of a fresh output: "
          f"{statistics.median(touch):.3f} s")
    for name in args.types.split(","):
        qt = T[name]
        bs, ts = GGML_QUANT_SIZES[qt]
        if name in ("F16", "BF16", "F32"):  # finite values, as in a real file (random bytes hold NaNs)
            dt = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32}[name]
            raw = torch.randn(n, k).to(dt).view(torch.uint8)
        else:
            raw = torch.randint(0, 256, (n, k // bs * ts), dtype=torch.uint8)
        comp = []
        if qt in dq.KERNELS:
            split, fill = dq.KERNELS[qt]
            nb = k // bs
            step = dq.chunk_rows(k) * dq._OUTER_CHUNKS
            for _ in range(3):
                t = time.perf_counter()
                for r0 in range(0, n, step):
                    r1 = min(n, r0 + step)
                    qf, fac = split(raw[r0:r1].view(r1 - r0, nb, ts))
                    dq.fill_rows(buf[r0:r1], qf, fac, fill, bs)
                comp.append(time.perf_counter() - t)
        calls = []
        for _ in range(3):
            t = time.perf_counter()
            out = dq.dequantize(raw, qt)
            calls.append(time.perf_counter() - t)
            del out
        c = f"compute {min(comp):.3f} s   " if comp else " " * 18
        print(f"{name:5s} {c}call {statistics.median(calls):.3f} s  "
              f"({n * k / statistics.median(calls) / 1e9:.2f} Gvalues/s)", flush=True)


if __name__ == "__main__":
    main()
