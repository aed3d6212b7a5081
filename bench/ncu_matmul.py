"""What limits the packed Q4_K matmul at one row: the card's own read bandwidth beside it, and a
run for Nsight Compute to profile.

    python3 bench/ncu_matmul.py bw --json OUT.json     # streaming-read ceiling vs the matmul
    ncu --clock-control none --kernel-name regex:_packed_mm_kernel --launch-skip 3 \\
        --launch-count 1 --set full --import-source yes -o REP \\
        python3 bench/ncu_matmul.py run --rows 1   # the same calls, for the profiler

``bw``: a plain Triton streaming read (each program sums ITERS blocks of 16-byte loads and
stores one word) over as many bytes as the big matrix's planes, swept over block, warps and
trips per program, graph-replayed over copies that defeat the L2; then ``packed_matmul`` on
the same shape at 1 and 16 rows timed the same way. The best read is this card's achievable
bandwidth at this size: the ceiling a matmul at one row is measured against.

``run``: compiles, then calls ``packed_matmul`` (big 28672 x 8192 Q4_K, bf16) and the read
kernel a few times each, nothing else, so a profiler's launch filter picks them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

SHAPES = {"big": (28672, 8192), "gate|up": (24576, 4096), "down": (4096, 12288),
          "qkv": (6144, 4096), "o": (4096, 4096)}
PEAK_GBS = 4800.0          # H200 (the datasheet); an H100's 3,350 is used there (peak_gbs in the JSON)


@triton.jit
def _read_kernel(p, out, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * BLOCK * ITERS
    acc = tl.zeros([BLOCK], tl.int32)
    for i in range(ITERS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(p + offs)
    tl.store(out + pid, tl.sum(acc))


def read_fn(buf: torch.Tensor, block: int, iters: int, warps: int):
    words = buf.numel()
    programs = words // (block * iters)
    out = torch.empty(programs, dtype=torch.int32, device=buf.device)
    return lambda: _read_kernel[(programs,)](buf, out, BLOCK=block, ITERS=iters, num_warps=warps), \
        programs * block * iters * 4


def plane_bytes(w) -> int:
    return sum(p.numel() * p.element_size() for p in w.planes.values())


def graph_us(fns, reps: int = 9) -> float:
    from bench_packed_matmul import graph_time_us
    return graph_time_us(fns, reps) / len(fns)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("bw", "run"))
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--json", default="")
    ap.add_argument("--override", default="", help="k=v,k=v kernel_config overrides (run mode)")
    args = ap.parse_args()
    from bench_packed_matmul import make_weight
    from engine.kernels import triton_kernels as tk
    n, k = SHAPES["big"]
    dev = torch.device("cuda")
    override = {a: int(b) for a, b in (kv.split("=") for kv in args.override.split(",") if kv)}
    if args.mode == "run":
        w = make_weight("Q4_K", n, k, seed=0, device="cuda")
        x = torch.randn(args.rows, k, device=dev, dtype=torch.bfloat16)
        buf = torch.randint(0, 1 << 20, (plane_bytes(w) // 4,), dtype=torch.int32, device=dev)
        rd, _ = read_fn(buf, 2048, 8, 8)
        for _ in range(6):
            tk.packed_matmul(x, w, **override)
            rd()
        torch.cuda.synchronize()
        print("ran", args.rows, "rows", flush=True)
        return
    peak = 3350.0 if "H100" in torch.cuda.get_device_name(0) else PEAK_GBS
    res = {"device": torch.cuda.get_device_name(0), "sms": torch.cuda.get_device_properties(0).multi_processor_count,
           "torch": torch.__version__, "triton": triton.__version__, "peak_gbs": peak, "read": [], "matmul": []}
    w0 = make_weight("Q4_K", n, k, seed=0, device="cuda")
    nbytes = plane_bytes(w0)
    copies = 3
    bufs = [torch.randint(0, 1 << 20, (nbytes // 4,), dtype=torch.int32, device=dev) for _ in range(copies)]
    t0 = time.time()
    for block in (512, 1024, 2048, 4096):
        for warps in (4, 8):
            for iters in (1, 4, 8, 16, 32):
                if bufs[0].numel() // (block * iters) < 132:
                    continue
                fns, got = zip(*[read_fn(b, block, iters, warps) for b in bufs])
                us = graph_us(list(fns))
                gbs = got[0] / us / 1e3
                res["read"].append({"block": block, "warps": warps, "iters": iters, "us": round(us, 2),
                                    "bytes": got[0], "gbs": round(gbs, 1), "pct": round(100 * gbs / peak, 1)})
    best = max(res["read"], key=lambda r: r["gbs"])
    res["read_best"] = best
    print(f"read sweep {time.time() - t0:.1f}s; best {best}", flush=True)
    del bufs
    for name, (nn, kk) in SHAPES.items():
        cps = max(2, (160 << 20) // (nn * kk * 148 // 256) + 1)
        ws = [make_weight("Q4_K", nn, kk, seed=s, device="cuda") for s in range(cps)]
        x = torch.randn(64, kk, device=dev, dtype=torch.bfloat16)
        for m in (1, 16):
            us = graph_us([lambda w=w: tk.packed_matmul(x[:m], w) for w in ws])
            b = plane_bytes(ws[0])
            gbs = b / us / 1e3
            row = {"shape": name, "n": nn, "k": kk, "rows": m, "us": round(us, 2), "bytes": b,
                   "gbs": round(gbs, 1), "pct_peak": round(100 * gbs / peak, 1),
                   "pct_read_best": round(100 * gbs / best["gbs"], 1),
                   "read_floor_us": round(b / best["gbs"] / 1e3, 2)}
            res["matmul"].append(row)
            print(row, flush=True)
    # the read kernel at exactly each shape's bytes, the best config (small sizes have their own limit)
    res["read_at_shape"] = []
    for name, (nn, kk) in SHAPES.items():
        b = plane_bytes(make_weight("Q4_K", nn, kk, seed=0, device="cuda"))
        cps = max(2, (160 << 20) // b + 1)
        bs = [torch.randint(0, 1 << 20, (b // 4,), dtype=torch.int32, device=dev) for _ in range(cps)]
        rows = []
        for block, warps, iters in ((1024, 4, 4), (2048, 8, 4), (2048, 8, 8), (4096, 8, 8), (1024, 4, 16)):
            if b // 4 // (block * iters) < 1:
                continue
            fns, got = zip(*[read_fn(x, block, iters, warps) for x in bs])
            us = graph_us(list(fns))
            rows.append((got[0] / us / 1e3, us, block, warps, iters))
        g, us, block, warps, iters = max(rows)
        res["read_at_shape"].append({"shape": name, "bytes": b, "us": round(us, 2), "gbs": round(g, 1),
                                     "cfg": [block, warps, iters]})
        print(res["read_at_shape"][-1], flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
