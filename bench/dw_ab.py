"""A/B of two load-side settings of the Q4_K packed matmul, each the same arithmetic:

* DW: the f16 d / dmin planes read as aligned 4-byte words (triton_tiles._kscales), which the
  pipeliner copies ahead with the tile, instead of 2-byte loads, which are synchronous (Nsight
  Compute on the H100, bench/ncu_session.sh: a fifth of the one-row kernel's stall samples
  waited on global loads, the two f16 scale loads first among them);
* MAXNREG 128: a register cap, so four programs fit an SM instead of three (168 registers),
  at the price of spills (the sm_90 compile: 80 bytes of stack).

For each shape of an 8B-like layer (and the big 28672 x 8192): bit-equality of every variant
against the default at rows 1, 2, 3, 16, 17, 33, 64 and for the partials; then µs at 1 and 16
rows, graph-replayed over weight copies that defeat the L2, rounds A B C D then D C B A.

    python3 bench/dw_ab.py --json OUT.json
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

SHAPES = {"big 28672x8192": (28672, 8192), "gate|up 24576x4096": (24576, 4096),
          "down 4096x12288": (4096, 12288), "qkv 6144x4096": (6144, 4096), "o 4096x4096": (4096, 4096)}
VARIANTS = {"base": {"DW": 0}, "DW": {"DW": 1}, "DW+R128": {"DW": 1, "MAXNREG": 128},
            "R128": {"DW": 0, "MAXNREG": 128}}
CHECK_ROWS = (1, 2, 3, 16, 17, 33, 64)


def _warm(job):
    """(n, k, override, rows): compile every row-slice variant in a worker process."""
    n, k, override, rows = job
    import torch

    from bench_packed_matmul import make_weight
    from engine.kernels import triton_kernels as tk
    t0, err = time.time(), None
    w = make_weight("Q4_K", n, k, seed=0, device="cuda")
    x = torch.randn(64, k, device="cuda", dtype=torch.bfloat16)
    for m in rows:
        try:
            tk.packed_matmul(x[:m], w, **override)
            tk.packed_partials(x[:m], w, **override)
        except Exception as e:  # noqa: BLE001 - reported, the rest goes on
            err = f"M={m}: {e!r}"[:300]
    torch.cuda.synchronize()
    return n, k, override, err, time.time() - t0


def start(shapes: dict, variants: dict, workers: int):
    """(the result dict, naming the card, and a seeded CUDA generator) after every variant of
    every shape was compiled in worker processes; then, per shape: ``shape_setup``."""
    import torch

    from q4k_native_ab import compile_in_workers
    dev = torch.cuda.get_device_properties(0)
    res = {"device": dev.name, "sms": dev.multi_processor_count, "variants": variants, "shapes": {}}
    compile_in_workers(_warm, [(n, k, o, CHECK_ROWS) for n, k in shapes.values() for o in variants.values()],
                       workers, res)
    return res, torch.Generator(device="cuda").manual_seed(5)


def shape_setup(n: int, k: int, g, block_bytes: int):
    """(x [64, k] bf16, the weight's bytes, Q4_K weight copies enough to defeat the L2)."""
    import torch

    from bench_packed_matmul import make_weight
    x = torch.randn(64, k, device="cuda", generator=g).to(torch.bfloat16)
    nbytes = n * k * block_bytes // 256
    copies = max(2, (160 << 20) // nbytes + 1)
    return x, nbytes, [make_weight("Q4_K", n, k, seed=s, device="cuda") for s in range(copies)]


def finish(res: dict, same: int, total: int, t0: float, out: str, word: str) -> None:
    """The check's count and the wall time, printed and kept in res; res to `out` if named."""
    res["identical"] = [same, total]
    res["wall_s"] = time.time() - t0
    print(f"{word} {same}/{total}; {res['wall_s']:.0f}s", flush=True)
    if out:
        Path(out).write_text(json.dumps(res, indent=1, default=str))


def time_variants(variants: dict, ws: list, x, rows: list) -> tuple[dict, dict]:
    """(µs lists, their means) [variant][rows] of packed_matmul over the weight copies ws,
    graph-replayed, the variants interleaved (A B C .., then .. C B A)."""
    from bench_packed_matmul import graph_time_us
    from engine.kernels import triton_kernels as tk
    us = {v: {m: [] for m in rows} for v in variants}
    order = list(variants)
    for rnd in range(2):
        for m in rows:
            for v in (order if rnd == 0 else order[::-1]):
                fns = [lambda w=w, xm=x[:m], o=variants[v]: tk.packed_matmul(xm, w, **o) for w in ws]
                us[v][m].append(graph_time_us(fns) / len(ws))
    return us, {v: {m: statistics.mean(t) for m, t in d.items()} for v, d in us.items()}


def print_rows(mean: dict, rows: list, nbytes: int) -> None:
    """One line a row count: each variant's µs, its speed-up on "base" and its GB/s."""
    for m in rows:
        base = mean["base"][m]
        print(f"  M{m:<3}" + "  ".join(f"{v} {d[m]:7.2f}us ({base / d[m]:4.2f}x, {nbytes / d[m] / 1e3:6.0f} GB/s)"
                                       for v, d in mean.items()), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default="")
    ap.add_argument("--rows", default="1,16")
    ap.add_argument("--workers", type=int, default=16)
    args = ap.parse_args()
    import torch

    from engine.kernels import triton_kernels as tk
    rows = [int(r) for r in args.rows.split(",")]
    res, g = start(SHAPES, VARIANTS, args.workers)
    t0 = time.time()
    same = total = 0
    for name, (n, k) in SHAPES.items():
        x, nbytes, ws = shape_setup(n, k, g, 148)
        bad = []
        for v, o in VARIANTS.items():
            for m in CHECK_ROWS:
                total += 1
                ok = torch.equal(tk.packed_matmul(x[:m], ws[0], **o), tk.packed_matmul(x[:m], ws[0], DW=0))
                ok = ok and torch.equal(tk.packed_partials(x[:m], ws[0], **o), tk.packed_partials(x[:m], ws[0], DW=0))
                same += ok
                if not ok:
                    bad.append((v, m))
        us, mean = time_variants(VARIANTS, ws, x, rows)
        res["shapes"][name] = {"n": n, "k": k, "bytes": nbytes, "copies": len(ws), "bad": bad, "us": us,
                               "mean_us": mean, "config": tk.kernel_config("Q4_K", n, k, res["sms"])}
        print(f"{name}: identical {'all' if not bad else bad}", flush=True)
        print_rows(mean, rows, nbytes)
        del ws
        torch.cuda.empty_cache()
    finish(res, same, total, t0, args.json, "identical")


if __name__ == "__main__":
    main()
