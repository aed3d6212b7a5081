"""A/B of the Q4_K packed matmul's x loads at ONE activation row (every plain decode step).

Variants (engine.kernels.triton_kernels: kernel_config keys X1 / XP, in the model
SPECSCOPE_X1=1 / SPECSCOPE_XP=0|1; X1 off by default, XP on for the big Q4_K matrices on CUDA
since this A/B measured it, BENCHMARKS.md "The packed matmul, third round"; every variant
below names both keys, so "base" is XP off whatever the default):

* base: x's 16-row slice is copied per dot at the nibbles' K order, rows >= M masked (at one
  row 15 of 16 rows are zero-fills): 16 four-byte cp.async copies a superblock per thread;
* X1 (one-row launches only): x's one row loaded once per dot and widened to the 16-row dot
  operand in registers (triton_dequant._xload1);
* XP (any row count): x permuted on the host (one small copy per call, timed here) so that
  each dot's K order is contiguous: 4 sixteen-byte copies a superblock instead of 16 four-byte;
* X1+XP.

All four feed the dots the same values in the same order: the outputs must be bit-identical.

On the GPU (H200, < 90 s):

* bit-equality: each variant's one-row output == row 0 of base calls with 1..64 rows, XP with
  1..64 rows == base with as many rows, and the SwiGLU epilogue (gate|up) and split partials at
  one row: ``identical k/n``;
* timing through ``packed_matmul`` at one row (and base vs XP at 16 rows): CUDA graphs
  replaying over weight copies that defeat the L2 (bench/bench_packed_matmul.py's
  graph_time_us), interleaved twice (base X1 XP X1+XP, then the reverse), the mean of the two
  rounds; % of 4.8 TB/s counts GGUF's 144 bytes a superblock.

    python3 bench/x1_ab.py --json /tmp/x1_ab.json

``--device cpu`` is a tiny dry run under TRITON_INTERPRET=1 (small shapes, wall-clock timing:
the numbers mean nothing, the code paths are the GPU run's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from q4k_native_ab import (CPU_SHAPES, L2_DEFEAT_BYTES, PEAK_GBS, SHAPES, activations,  # noqa: E402
                           compile_in_workers, device_facts, gguf_bytes, time_us)

VARIANTS = {"base": {"X1": 0, "XP": 0}, "X1": {"X1": 1, "XP": 0}, "XP": {"X1": 0, "XP": 1},
            "X1+XP": {"X1": 1, "XP": 1}}
ROWS16 = 16          # base vs XP also timed at this many rows (XP applies at every row count)


def weight(n: int, k: int, seed: int, device: str):
    from bench_packed_matmul import make_weight
    return make_weight("Q4_K", n, k, seed=seed, device=device)


def _warm(job):
    """(n, k, task): compile what the run launches (a worker): a variant's one-row matmul,
    partials and SwiGLU, or ('rows', XP) the multi-row slices."""
    n, k, task = job
    import torch

    from engine.kernels import triton_kernels as tk
    t0 = time.time()
    err = None
    w = weight(n, k, 0, "cuda")
    x = torch.randn(64, k, device="cuda", dtype=torch.bfloat16)
    try:
        if task[0] == "rows":
            for m in (16, 17, 33, 49):
                tk.packed_matmul(x[:m], w, X1=0, XP=task[1])
            if not task[1] and 2 * tk.swiglu_block(w, x.device) <= n:
                _swiglu(tk, x[:17], w, 0, 0)
        else:
            o = VARIANTS[task[0]]
            tk.packed_matmul(x[:1], w, **o)
            tk.packed_partials(x[:1], w, **o)
            if 2 * tk.swiglu_block(w, x.device) <= n:
                _swiglu(tk, x[:1], w, o["X1"], o["XP"])
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - reported, the rest goes on
        err = repr(e)[:300]
    return n, k, task, err, time.time() - t0


def _swiglu(tk, x, w, x1: int, xp: int):
    """packed_swiglu with the X1 / XP defaults set (it takes no override: the model's path)."""
    old = tk._X1_DEFAULT, tk._XP_DEFAULT
    tk._X1_DEFAULT, tk._XP_DEFAULT = x1, xp
    tk._config.cache_clear()
    try:
        return tk.packed_swiglu(x, w)
    finally:
        tk._X1_DEFAULT, tk._XP_DEFAULT = old
        tk._config.cache_clear()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default="", help="write the results here")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 4))
    args = ap.parse_args()
    cpu = args.device == "cpu"
    if cpu:
        os.environ["TRITON_INTERPRET"] = "1"      # before triton is imported
    import torch

    from engine.kernels import triton_kernels as tk
    t_start = time.time()
    shapes = CPU_SHAPES if cpu else SHAPES
    check_rows = (1, 2, 3, 16, 17) if cpu else tuple(range(1, 65))
    sms, res = device_facts(cpu, variants=VARIANTS, shapes={}, identical=None)
    if not cpu:
        jobs = [(n, k, t) for n, k in shapes.values()
                for t in [(v,) for v in VARIANTS] + [("rows", 0), ("rows", 1)]]
        compile_in_workers(_warm, jobs, args.workers, res)

    def timer(fns, copies):
        return time_us(fns, copies, cpu)

    xall = activations(shapes, args.device, cpu)

    n_same = n_all = 0
    for name, (n, k) in shapes.items():
        x = xall[:, :k].contiguous()
        w = weight(n, k, 1, args.device)
        cfg = tk.kernel_config("Q4_K", n, k, sms)
        # -- bit-equality ---------------------------------------------------------------------
        base = {m: tk.packed_matmul(x[:m], w, X1=0, XP=0) for m in check_rows}
        checks = {}
        for vname, o in VARIANTS.items():
            y1 = tk.packed_matmul(x[:1], w, **o)
            checks[f"{vname} 1-row == row 0 of base 1..{check_rows[-1]}"] = \
                sum(torch.equal(y1[0], base[m][0]) for m in check_rows), len(check_rows)
            checks[f"{vname} partials 1-row"] = int(torch.equal(
                tk.packed_partials(x[:1], w, **o), tk.packed_partials(x[:1], w, X1=0, XP=0))), 1
        checks[f"XP m-row == base m-row, m 1..{check_rows[-1]}"] = \
            sum(torch.equal(tk.packed_matmul(x[:m], w, XP=1), base[m]) for m in check_rows), len(check_rows)
        hb = tk.swiglu_block(w, x.device)
        if 2 * hb <= n and n % (2 * hb) == 0:
            want = _swiglu(tk, x[:17], w, 0, 0)
            for vname, o in VARIANTS.items():
                checks[f"{vname} SwiGLU 1-row == row 0 of base 17"] = \
                    int(torch.equal(_swiglu(tk, x[:1], w, o["X1"], o["XP"])[0], want[0])), 1
        s_ok = sum(a for a, _ in checks.values())
        s_all = sum(b for _, b in checks.values())
        n_same += s_ok
        n_all += s_all
        # -- timing: weight copies beyond the L2, interleaved twice ---------------------------
        copies = 1 if cpu else max(1, min(24, -(-L2_DEFEAT_BYTES // w.nbytes)))
        ws = [w] + [weight(n, k, 2 + i, args.device) for i in range(copies - 1)]
        runs = [(v, 1) for v in VARIANTS] + [("base", ROWS16), ("XP", ROWS16)]
        us = {f"{v} M{m}": [] for v, m in runs}
        for rnd in range(2):
            for v, m in (runs if rnd == 0 else runs[::-1]):
                o = VARIANTS[v]
                fns = [lambda ww=ww, xm=x[:m], o=o: tk.packed_matmul(xm, ww, **o) for ww in ws]
                us[f"{v} M{m}"].append(timer(fns, copies))
        mean = {a: statistics.mean(b) for a, b in us.items()}
        gb = gguf_bytes(n, k)
        row = {"n": n, "k": k, "config": {a: b for a, b in cfg.items() if not a.startswith("I8")},
               "copies": copies, "checks": checks, "us": us, "mean_us": mean,
               "pct_peak": {a: 100.0 * gb / (t * 1e3) / PEAK_GBS for a, t in mean.items()}}
        res["shapes"][name] = row
        print(f"\n{name}  (BN{cfg['BN']} w{cfg['num_warps']} s{cfg['num_stages']} SB{cfg['SB']} "
              f"JS{cfg['JS']} splits {cfg['splits']}; {copies} weight copies)   identical {s_ok}/{s_all}"
              + "".join(f"\n    {a}: {c}/{t}" + ("" if c == t else "  DIFFERS")
                        for a, (c, t) in checks.items()), flush=True)
        b1 = mean["base M1"]
        for a, t in mean.items():
            ref = mean[f"base M{a.split(' M')[1]}"]
            print(f"  {a:<10} {t:8.1f} us {row['pct_peak'][a]:5.1f}%  base/this {ref / t:5.2f}   "
                  f"(rounds {' '.join(f'{r:.1f}' for r in us[a])})", flush=True)
        row["speedup_vs_base_M1"] = {v: b1 / mean[f"{v} M1"] for v in VARIANTS}
        del ws, w, base
        if not cpu:
            torch.cuda.empty_cache()
    res["identical"] = [n_same, n_all]
    print(f"\nidentical {n_same}/{n_all}   (torch.equal: every variant's one-row output against "
          f"row 0 of base calls with {check_rows[0]}..{check_rows[-1]} rows, XP at every row count, "
          f"split partials, SwiGLU)", flush=True)
    res["wall_s"] = time.time() - t_start
    print(f"done in {res['wall_s']:.0f}s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=str)


if __name__ == "__main__":
    main()
