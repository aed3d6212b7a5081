"""A/B of the Q4_K packed matmul's SF tile (engine.kernels.triton_sf: the sub-block scales folded
into small-integer fp16 weights, x made fp16 once a call) against the dequantizing tile.

For each Q4_K shape of an 8B-like layer (and the big 28672 x 8192): every SF variant's rows are
checked bit for bit across row counts (1, 2, 3, 16, 17, 33, 64 against the 64-row call, and the
partials), and its error against the exact product (float64 x @ dequantize_packed(w).T) beside
the default's; then µs at the given rows, graph-replayed over weight copies that defeat the L2,
the variants interleaved (A B C D, then D C B A). The SF figures include x's preparation launch.

    python3 bench/sf_ab.py [--rows 1,16,32,64] [--shapes NAMES] [--variants JSON] [--json OUT.json]

--variants replaces the four (base, SF, SF-JS4, SF-BN128) by any kernel_config overrides (the
split count, the row block): each is checked for row invariance against its own 64-row call.
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
VARIANTS = {"base": {"SF": 0}, "SF": {"SF": 1}, "SF-JS4": {"SF": 1, "JS": 4},
            "SF-BN128": {"SF": 1, "BN": 128, "num_warps": 8}}
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default="")
    ap.add_argument("--rows", default="1,16,32,64")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--variants", default="", help='JSON {"name": {override}, ...}; "base" first')
    args = ap.parse_args()
    global VARIANTS
    if args.variants:
        VARIANTS = json.loads(args.variants)
    import torch

    from bench_packed_matmul import graph_time_us, make_weight
    from engine.kernels import triton_kernels as tk
    from engine.weights.packed import dequantize_packed
    rows = [int(r) for r in args.rows.split(",")]
    shapes = {s: SHAPES[s] for s in args.shapes.split(",")}
    dev = torch.cuda.get_device_properties(0)
    res = {"device": dev.name, "sms": dev.multi_processor_count, "variants": VARIANTS, "shapes": {}}
    from q4k_native_ab import compile_in_workers
    compile_in_workers(_warm, [(n, k, o, CHECK_ROWS) for n, k in shapes.values() for o in VARIANTS.values()],
                       args.workers, res)
    g = torch.Generator(device="cuda").manual_seed(5)
    t0 = time.time()
    same = total = 0
    for name, (n, k) in shapes.items():
        x = torch.randn(64, k, device="cuda", generator=g).to(torch.bfloat16)
        nbytes = n * k * 144 // 256
        copies = max(2, (160 << 20) // nbytes + 1)
        ws = [make_weight("Q4_K", n, k, seed=s, device="cuda") for s in range(copies)]
        exact = x.double() @ dequantize_packed(ws[0]).to("cuda").double().T
        err = {}
        bad = []
        for v, o in VARIANTS.items():
            y64 = tk.packed_matmul(x, ws[0], **o)
            p64 = tk.packed_partials(x, ws[0], **o)
            err[v] = ((y64.double() - exact).abs().max() / exact.abs().max()).item()
            if v == "base":
                continue
            for m in CHECK_ROWS:
                total += 1
                ok = torch.equal(tk.packed_matmul(x[:m], ws[0], **o), y64[:m])
                ok = ok and torch.equal(tk.packed_partials(x[:m], ws[0], **o), p64[:, :m])
                same += ok
                if not ok:
                    bad.append((v, m))
        us = {v: {m: [] for m in rows} for v in VARIANTS}
        order = list(VARIANTS)
        for rnd in range(2):
            for m in rows:
                for v in (order if rnd == 0 else order[::-1]):
                    fns = [lambda w=w, xm=x[:m], o=VARIANTS[v]: tk.packed_matmul(xm, w, **o) for w in ws]
                    us[v][m].append(graph_time_us(fns) / copies)
        mean = {v: {m: statistics.mean(t) for m, t in d.items()} for v, d in us.items()}
        res["shapes"][name] = {"n": n, "k": k, "bytes": nbytes, "copies": copies, "bad": bad, "us": us,
                               "mean_us": mean, "max_rel_err": err}
        print(f"{name}: row-invariant {'all' if not bad else bad}; max error / max |y|: "
              + ", ".join(f"{v} {e:.2e}" for v, e in err.items()), flush=True)
        for m in rows:
            base = mean["base"][m]
            print(f"  M{m:<3}" + "  ".join(f"{v} {t:7.2f}us ({base / t:4.2f}x, {nbytes / t / 1e3:5.0f} GB/s)"
                                          for v, t in ((v, mean[v][m]) for v in VARIANTS)), flush=True)
        del ws
        torch.cuda.empty_cache()
    res["identical"] = [same, total]
    res["wall_s"] = time.time() - t0
    print(f"row-invariant {same}/{total}; {res['wall_s']:.0f}s", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
