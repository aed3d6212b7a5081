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
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from dw_ab import CHECK_ROWS, SHAPES, finish, print_rows, shape_setup, start, time_variants  # noqa: E402  (shared)

VARIANTS = {"base": {"SF": 0}, "SF": {"SF": 1}, "SF-JS4": {"SF": 1, "JS": 4},
            "SF-BN128": {"SF": 1, "BN": 128, "num_warps": 8}}


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

    from engine.kernels import triton_kernels as tk
    from engine.weights.packed import dequantize_packed
    rows = [int(r) for r in args.rows.split(",")]
    shapes = {s: SHAPES[s] for s in args.shapes.split(",")}
    res, g = start(shapes, VARIANTS, args.workers)
    t0 = time.time()
    same = total = 0
    for name, (n, k) in shapes.items():
        x, nbytes, ws = shape_setup(n, k, g, 144)
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
        us, mean = time_variants(VARIANTS, ws, x, rows)
        res["shapes"][name] = {"n": n, "k": k, "bytes": nbytes, "copies": len(ws), "bad": bad, "us": us,
                               "mean_us": mean, "max_rel_err": err}
        print(f"{name}: row-invariant {'all' if not bad else bad}; max error / max |y|: "
              + ", ".join(f"{v} {e:.2e}" for v, e in err.items()), flush=True)
        print_rows(mean, rows, nbytes)
        del ws
        torch.cuda.empty_cache()
    finish(res, same, total, t0, args.json, "row-invariant")


if __name__ == "__main__":
    main()
