"""A/B of the Q4_K packed matmul against Q4_KN (the same weight in GGUF's own 144-byte block
order, engine.weights.packed.native_q4_k; switched on in the model by SPECSCOPE_Q4K_NATIVE=1).

Q4_KN's tile loads a superblock with >= 4-byte aligned loads only (d | dmin as one word, the
6-bit scales gathered as bytes in 4s, the qs as 16-byte vectors), so the pipeliner can copy all
of them ahead; Q4_K's 2-byte d / dmin loads are synchronous. The arithmetic, dot shapes and K
order are Q4_K's, with Q4_K's configuration: the outputs must be bit-identical.

On the GPU (H200: ~2 minutes, most of it compiling in parallel workers):

* bit-equality, Q4_K vs Q4_KN, for every row count 1..64 on each shape (bf16 activations),
  plus the SwiGLU epilogue of the gate|up shape and the split-K partials: ``identical k/n``;
* timing, Q4_K vs Q4_KN through ``packed_matmul`` at 1, 2, 4, 8, 16, 64 rows: CUDA graphs
  replaying over weight copies that defeat the L2 (bench/bench_packed_matmul.py's
  graph_time_us), interleaved A/B twice (A B, then B A), the mean of the two rounds;
  % of 4.8 TB/s counts GGUF's 144 bytes a superblock for both (Q4_K's planes stream 148);
* a small sweep of Q4_KN tile configurations (the two ways of reading the scales, HDR 1 / 0;
  two superblocks a loop trip, SB 2; BN 32/64/128, warps 4/8, stages 2/3/4) at 1 and 16
  rows on 28672x8192, each also checked against Q4_K run with the same configuration.

    python3 bench/q4k_native_ab.py --json /tmp/q4k_native_ab.json

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

PEAK_GBS = 4800.0
SHAPES = {"big 28672x8192": (28672, 8192), "gate|up 24576x4096": (24576, 4096),
          "down 4096x12288": (4096, 12288), "qkv 6144x4096": (6144, 4096), "o 4096x4096": (4096, 4096)}
ROWS = (1, 2, 4, 8, 16, 64)
# HDR: how the tile reads the packed scales (1, the default: [BN, 4] word loads, fewer ALU
# ops; 0: [BN, 8] byte gathers, fewer loads); loads only, the same bits
# SB 2: two superblocks a loop trip (the same dots in the same order)
SWEEP = (({"HDR": 1}, {"HDR": 0}, {"SB": 2}, {"SB": 2, "HDR": 0})
         + tuple({"BN": bn, "num_warps": w, "num_stages": s}
                 for bn in (32, 64, 128) for w in (4, 8) for s in (2, 3, 4)))
# a control: Q4_K with SB 2, whose d / dmin pairs are meant as 4-byte loads (the sm_90 SASS
# still has 2 synchronous LDG.E.U16 a loop trip there, against 4 with SB 1)
SWEEP_Q4K = ({"SB": 2},)
SWEEP_ROWS = (1, 16)
CPU_SHAPES = {"tiny 128x512": (128, 512), "tiny split 64x1024": (64, 1024)}
CPU_ROWS = (1, 16, 17)
CPU_SWEEP = ({"HDR": 0}, {"BN": 32, "num_warps": 4, "num_stages": 2})
L2_DEFEAT_BYTES = 160 << 20


def gguf_bytes(n: int, k: int) -> int:
    return n * (k // 256) * 144


def weights(n: int, k: int, seed: int, device: str):
    """(Q4_K, Q4_KN) of the same random values (bench_packed_matmul.make_weight's planes)."""
    from bench_packed_matmul import make_weight
    from engine.weights.packed import native_q4_k
    w = make_weight("Q4_K", n, k, seed=seed, device=device)
    return w, native_q4_k(w)


def _warm(job):
    """(n, k, override, rows): compile every row-slice variant (a worker process)."""
    n, k, override, rows = job
    import torch

    from engine.kernels import triton_kernels as tk
    t0 = time.time()
    err = None
    w, wn = weights(n, k, 0, "cuda")
    x = torch.randn(64, k, device="cuda", dtype=torch.bfloat16)
    for m in rows:
        for ww in (w, wn):
            try:
                tk.packed_matmul(x[:m], ww, **override)
            except Exception as e:  # noqa: BLE001 - reported, the rest goes on
                err = f"{ww.qtype} M={m}: {e!r}"[:300]
    if not override and 2 * tk.swiglu_block(w, x.device) <= n:
        for ww in (w, wn):
            tk.packed_swiglu(x[:1], ww)
            tk.packed_partials(x[:1], ww)
    torch.cuda.synchronize()
    return n, k, override, err, time.time() - t0


def device_facts(cpu: bool, **extra) -> tuple[int, dict]:
    """(SM count, the result dict's header) of this run's device (the CPU dry run: 16 SMs)."""
    import torch
    import triton
    if cpu:
        sms, res = 16, {"device": "cpu (TRITON_INTERPRET=1, dry run)"}
    else:
        dev = torch.cuda.get_device_properties(0)
        sms, res = dev.multi_processor_count, {"device": dev.name, "sms": dev.multi_processor_count}
    res.update(torch=torch.__version__, triton=triton.__version__, peak_gbs=PEAK_GBS, **extra)
    return sms, res


def compile_in_workers(warm, jobs: list, workers: int, res: dict) -> None:
    """Run warm(job) for every job in spawned workers (Triton's on-disk cache then serves this
    process); compile_s and compile_errors ((n, k, what, error) of each job that failed) go into res."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as ex:
        done = list(ex.map(warm, jobs))
    res["compile_s"] = time.time() - t0
    res["compile_errors"] = [list(w[:4]) for w in done if w[3]]
    print(f"compiled {len(jobs)} jobs in {res['compile_s']:.1f}s", flush=True)
    for e in res["compile_errors"]:
        print("COMPILE/LAUNCH ERROR", e, flush=True)


def time_us(fns, copies: int, cpu: bool) -> float:
    """µs a call: graph-replayed on the GPU; wall clock in the CPU dry run (meaningless there)."""
    if cpu:
        t0 = time.perf_counter()
        for f in fns:
            f()
        return (time.perf_counter() - t0) * 1e6 / copies
    from bench_packed_matmul import graph_time_us
    return graph_time_us(fns) / copies


def activations(shapes: dict, device: str, cpu: bool):
    """64 rows of random activations as wide as the widest shape (float16 in the interpreter,
    whose bf16 dots are broken; bfloat16 on the GPU)."""
    import torch
    gen = torch.Generator(device=device).manual_seed(123)
    x = torch.randn(64, max(k for _, k in shapes.values()), device=device, generator=gen)
    return x.to(torch.float16 if cpu else torch.bfloat16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default="", help="write the results here")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--no-sweep", action="store_true", help="skip the Q4_KN configuration sweep")
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 4))
    args = ap.parse_args()
    cpu = args.device == "cpu"
    if cpu:
        os.environ["TRITON_INTERPRET"] = "1"      # before triton is imported
    import torch

    from engine.kernels import triton_kernels as tk
    t_start = time.time()
    shapes = CPU_SHAPES if cpu else SHAPES
    rows = CPU_ROWS if cpu else ROWS
    sweep = () if args.no_sweep else (CPU_SWEEP if cpu else SWEEP)
    sweep_rows = (1, 16) if cpu else SWEEP_ROWS
    check_rows = (1, 2, 3, 16, 17) if cpu else tuple(range(1, 65))
    big = next(iter(shapes.values()))
    sms, res = device_facts(cpu, shapes={}, sweep=[], identical=None)
    if not cpu:
        jobs = [(n, k, {}, tuple(sorted({1, 17, 33, 49} | set(rows)))) for n, k in shapes.values()]
        jobs += [(big[0], big[1], o, sweep_rows) for o in sweep]
        compile_in_workers(_warm, jobs, args.workers, res)

    def timer(fns, copies):
        return time_us(fns, copies, cpu)

    xall = activations(shapes, args.device, cpu)

    # -- bit-equality and timing, shape by shape --------------------------------------------
    n_same = n_all = 0
    for name, (n, k) in shapes.items():
        x = xall[:, :k].contiguous()
        w, wn = weights(n, k, 1, args.device)
        cfg = tk.kernel_config("Q4_K", n, k, sms)
        assert tk.kernel_config("Q4_KN", n, k, sms) == cfg
        bad = []
        for m in check_rows:
            same = torch.equal(tk.packed_matmul(x[:m], w), tk.packed_matmul(x[:m], wn))
            n_all += 1
            n_same += same
            if not same:
                bad.append(m)
        extra = {}
        hb = tk.swiglu_block(w, x.device)
        if 2 * hb <= n and n % (2 * hb) == 0:
            for m in (1, 16, 64) if not cpu else (1, 17):
                same = torch.equal(tk.packed_swiglu(x[:m], w), tk.packed_swiglu(x[:m], wn))
                extra[f"swiglu M{m}"] = same
        for m in (1, 16) if not cpu else (1,):
            extra[f"partials M{m}"] = torch.equal(tk.packed_partials(x[:m], w), tk.packed_partials(x[:m], wn))
        n_all += len(extra)
        n_same += sum(extra.values())
        # timing: weight copies beyond the L2, A B then B A
        copies = 1 if cpu else max(1, min(24, -(-L2_DEFEAT_BYTES // w.nbytes)))
        pairs = [(w, wn)] + [weights(n, k, 2 + i, args.device) for i in range(copies - 1)]
        us = {"Q4_K": {m: [] for m in rows}, "Q4_KN": {m: [] for m in rows}}
        for rnd in range(2):
            order = (0, 1) if rnd == 0 else (1, 0)
            for m in rows:
                for which in order:
                    qt = ("Q4_K", "Q4_KN")[which]
                    fns = [lambda ww=p[which], xm=x[:m]: tk.packed_matmul(xm, ww) for p in pairs]
                    us[qt][m].append(timer(fns, copies))
        gb = gguf_bytes(n, k)
        row = {"n": n, "k": k, "config": {a: b for a, b in cfg.items() if not a.startswith("I8")},
               "copies": copies, "bad_rows": bad, "extra_checks": extra,
               "us": us, "mean_us": {q: {m: statistics.mean(v) for m, v in d.items()} for q, d in us.items()}}
        row["pct_peak"] = {q: {m: 100.0 * gb / (t * 1e3) / PEAK_GBS for m, t in d.items()}
                           for q, d in row["mean_us"].items()}
        res["shapes"][name] = row
        print(f"\n{name}  (BN{cfg['BN']} w{cfg['num_warps']} s{cfg['num_stages']} SB{cfg['SB']} "
              f"JS{cfg['JS']} splits {cfg['splits']}; {copies} weight copies)   "
              f"identical {len(check_rows) - len(bad)}/{len(check_rows)} rows"
              + "".join(f", {a} {'ok' if b else 'DIFFERS'}" for a, b in extra.items())
              + (f"  BAD ROWS {bad[:10]}" if bad else ""), flush=True)
        print(f"  {'rows':>4}  {'Q4_K us':>9} {'%peak':>6}  {'Q4_KN us':>9} {'%peak':>6}  {'K/KN':>5}"
              f"   (rounds: Q4_K | Q4_KN)")
        for m in rows:
            a, b = row["mean_us"]["Q4_K"][m], row["mean_us"]["Q4_KN"][m]
            print(f"  {m:>4}  {a:9.1f} {row['pct_peak']['Q4_K'][m]:5.1f}%  {b:9.1f} "
                  f"{row['pct_peak']['Q4_KN'][m]:5.1f}%  {a / b:5.2f}   "
                  f"({' '.join(f'{t:.1f}' for t in us['Q4_K'][m])} | "
                  f"{' '.join(f'{t:.1f}' for t in us['Q4_KN'][m])})", flush=True)
        del pairs, w, wn
        if not cpu:
            torch.cuda.empty_cache()
    res["identical"] = [n_same, n_all]
    print(f"\nidentical {n_same}/{n_all}   (Q4_K vs Q4_KN outputs, torch.equal: row counts "
          f"{check_rows[0]}..{check_rows[-1]} ({len(check_rows)}) per shape, SwiGLU, partials)", flush=True)

    # -- Q4_KN configuration sweep on the big shape -----------------------------------------
    if sweep:
        n, k = big
        x = xall[:, :k].contiguous()
        copies = 1 if cpu else max(1, min(24, -(-L2_DEFEAT_BYTES // gguf_bytes(n, k))))
        pairs = [weights(n, k, 1 + i, args.device) for i in range(copies)]
        dflt = {a: b for a, b in tk.kernel_config("Q4_KN", n, k, sms).items()
                if a in ("BN", "num_warps", "num_stages", "SB", "JS")}
        print(f"\nQ4_KN configurations, {n}x{k} (default {dflt}, HDR 1); Q4_K with SB 2 as a "
              f"control (half its d / dmin loads pipelined)")
        for qt, o in [("Q4_KN", o) for o in sweep] + [("Q4_K", o) for o in SWEEP_Q4K]:
            ent = {"qtype": qt, "override": o}
            which = 0 if qt == "Q4_K" else 1
            try:
                ent["us"] = {m: timer([lambda ww=p[which], xm=x[:m]: tk.packed_matmul(xm, ww, **o)
                                       for p in pairs], copies)
                             for m in sweep_rows}
                ent["same_as_q4k"] = all(torch.equal(tk.packed_matmul(x[:m], pairs[0][0], **o),
                                                     tk.packed_matmul(x[:m], pairs[0][1], **o))
                                         for m in sweep_rows)
                print(f"  {qt:<5} {' '.join(f'{a}={b}' for a, b in o.items()):<34}: "
                      + "  ".join(f"M{m} {t:7.1f}us {100.0 * gguf_bytes(n, k) / (t * 1e3) / PEAK_GBS:5.1f}%"
                                  for m, t in ent["us"].items())
                      + f"   Q4_KN same bits as Q4_K (same config) {ent['same_as_q4k']}", flush=True)
            except Exception as e:  # noqa: BLE001 - a config that does not fit is reported
                ent["error"] = repr(e)[:300]
                print(f"  {qt} {o}: {e!r}"[:300], flush=True)
            res["sweep"].append(ent)
        ok = [e for e in res["sweep"] if "us" in e and e["qtype"] == "Q4_KN"]
        for m in sweep_rows:
            if ok:
                best = min(ok, key=lambda e: e["us"][m])
                print(f"  best Q4_KN at {m} rows: {best['override']} {best['us'][m]:.1f}us", flush=True)
                res[f"sweep_best_M{m}"] = best
        del pairs

    res["wall_s"] = time.time() - t_start
    print(f"\ndone in {res['wall_s']:.0f}s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=str)


if __name__ == "__main__":
    main()
