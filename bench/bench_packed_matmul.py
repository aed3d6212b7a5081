"""GPU benchmark of the Triton packed-GGUF matmul (engine/kernels/triton_kernels.py).

For each type, random packed weights at Qwen3-8B-like shapes (q/o 4096x4096, k/v 1024x4096,
gate/up 12288x4096, down 4096x12288) plus a 28672x8192 Q4_K matrix:

* correctness against float32 ``x @ dequant(W).T`` (bf16 activations), next to the error of
  torch's bf16 ``F.linear`` on the bf16-rounded dequantized weight;
* row invariance, bitwise, for every M in 1..64: each M-row call agrees with the 64-row call
  on its rows, and every row agrees with a 1-row call;
* timing for M in {1, 2, 4, 8, 16, 32, 64}: CUDA graphs (which also shows the calls are
  capturable) replaying calls over enough distinct copies of the weight to defeat the L2
  cache, CUDA events, median of several replays. Achieved GB/s counts the packed weight
  bytes once per call. Also a whole layer (q, k, v, o, gate, up, down) over several distinct
  layers, and torch's bf16 ``F.linear`` on the dequantized weights for comparison.

Kernels are compiled first in parallel worker processes (Triton's on-disk cache then serves
the timed process). Needs torch, triton and what engine.weights needs (gguf, numpy): the
random weights are engine.weights.packed.PackedWeight planes built here in torch, and the
float32 reference is engine.weights.packed.dequantize_packed (bit-identical to gguf). Writes a
JSON to --out.

    python3 bench/bench_packed_matmul.py --out /tmp/packed.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from engine.weights.packed import PLANE_SPECS, PackedWeight, dequantize_packed  # noqa: E402

PEAK_GBS = 4800.0
TYPES = ("Q4_K", "Q6_K", "Q8_0", "Q4_0", "Q4_1", "Q5_K")
LAYER = {  # Qwen3-8B-like: name -> (N, K)
    "q": (4096, 4096), "k": (1024, 4096), "v": (1024, 4096), "o": (4096, 4096),
    "gate": (12288, 4096), "up": (12288, 4096), "down": (4096, 12288),
}
BIG = ("Q4_K", 28672, 8192)
MS = (1, 2, 4, 8, 16, 32, 64)
L2_DEFEAT_BYTES = 160 << 20


def load_kernels():
    """engine.kernels.triton_kernels (imported here, not at module level: --help needs no triton)."""
    from engine.kernels import triton_kernels
    return triton_kernels


def make_weight(qtype: str, n: int, k: int, seed: int = 0, device="cuda") -> PackedWeight:
    """Random valid planes: random quant bytes, 6-bit K-quant sub-scales, sane f16 scales."""
    gen = torch.Generator(device=device).manual_seed(seed)
    bs = 256 if "_K" in qtype else 32
    planes = {}
    for name, (dt, per) in PLANE_SPECS[qtype].items():
        rows, cols = n, k // bs * per
        if dt == torch.float16:
            lo, hi = {"d": (1e-3, 3e-3), "dmin": (1e-3, 3e-3), "m": (-0.1, 0.0)}[name]
            if qtype.startswith("Q6_K"):
                lo, hi = 1e-4, 3e-4
            t = torch.empty(rows, cols, device=device).uniform_(lo, hi, generator=gen).half()
        elif qtype in ("Q4_K", "Q5_K") and name in ("sc", "mn"):
            t = torch.randint(0, 64, (rows, cols), device=device, dtype=torch.uint8, generator=gen)
        else:
            t = torch.randint(0, 256, (rows, cols), device=device, dtype=torch.uint8,
                              generator=gen).view(dt)
        planes[name] = t.contiguous()
    return PackedWeight(qtype, (n, k), planes)


def _warm_job(job):
    """(qtype, n, k, override) -> compile every row-slice variant (run in a worker)."""
    qtype, n, k, override = job
    tk = load_kernels()
    w = make_weight(qtype, n, k)
    x = torch.randn(64, k, device="cuda", dtype=torch.bfloat16)
    t0 = time.time()
    err = None
    for m in (1, 17, 33, 49):
        try:
            tk.packed_matmul(x[:m], w, **dict(override))
        except Exception as e:  # noqa: BLE001 - reported, the rest goes on
            err = f"M={m}: {e!r}"[:300]
    torch.cuda.synchronize()
    return qtype, n, k, override, err, time.time() - t0


def graph_time_us(fns, reps: int = 7) -> float:
    """Median GPU time of one pass over ``fns`` (captured once in a CUDA graph), in us."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:            # warm (allocator, lazy init) outside the capture
            f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    del g
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 4))
    ap.add_argument("--sweep", default="I8=1;I8=1:I8_X2=0;I8=1:I8_X2=0:I8_BN64=128:I8_WARPS64=8;"
                    "I8=1:I8_BN=64:I8_WARPS=4:I8_X2=0:I8_STAGES=2:I8_STAGES32=2;"
                    "I8=1:I8_BN=128:I8_WARPS=8:I8_X2=0;I8=1:splits=2",
                    help="extra configs for the big Q4_K matrix (';'-separated, ':'-joined k=v); each is "
                         "timed and checked for row invariance")
    ap.add_argument("--layer-alt", default="I8=1", help="extra overrides (';'-separated) the layer is also timed with")
    ap.add_argument("--layers", type=int, default=3, help="distinct layers in the layer timing")
    ap.add_argument("--budget", type=float, default=1e9, help="stop starting new types after this many s")
    args = ap.parse_args()
    t_start = time.time()

    import triton
    tk = load_kernels()

    types = [t for t in args.types.split(",") if t]
    dev = torch.cuda.get_device_properties(0)
    sms = dev.multi_processor_count
    res = {"device": dev.name, "sms": sms, "torch": torch.__version__, "triton": triton.__version__,
           "peak_gbs": PEAK_GBS, "types": {}, "big": {}, "sweep": [], "layer": {}, "configs": {}}
    sweep = []
    for spec in [s for s in args.sweep.split(";") if s]:
        sweep.append(tuple(sorted((kv.split("=")[0], int(kv.split("=")[1])) for kv in spec.split(":"))))

    # -- compile everything in parallel --------------------------------------------------
    jobs = []
    for qt in types:
        for n, k in sorted(set(LAYER.values())):
            jobs.append((qt, n, k, ()))
    if BIG[0] in types:
        jobs.append((BIG[0], BIG[1], BIG[2], ()))
        jobs += [(BIG[0], BIG[1], BIG[2], o) for o in sweep]
    if "Q4_K" in types:
        for spec in [a for a in args.layer_alt.split(";") if a]:
            o = tuple(sorted((kv.split("=")[0], int(kv.split("=")[1])) for kv in spec.split(":")))
            jobs += [("Q4_K", n, k, o) for n, k in sorted(set(LAYER.values()))]
    t0 = time.time()
    import multiprocessing as mp
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=mp.get_context("spawn")) as ex:
        warm = list(ex.map(_warm_job, jobs))
    res["compile_s"] = time.time() - t0
    print(f"compiled {len(jobs)} shape configs in {res['compile_s']:.1f}s "
          f"(slowest {max(w[-1] for w in warm):.1f}s)", flush=True)
    res["compile_errors"] = [list(w[:5]) for w in warm if w[4]]
    for w in warm:
        if w[4]:
            print("COMPILE/LAUNCH ERROR", w[:5], flush=True)

    gen = torch.Generator(device="cuda").manual_seed(123)
    x64 = torch.randn(64, 12288, device="cuda", generator=gen).to(torch.bfloat16)

    def check(qt, n, k, w):
        x = x64[:, :k].contiguous()
        wd = dequantize_packed(w)                               # float32, bit-exact with gguf
        ref = x.float() @ wd.T
        y64 = tk.packed_matmul(x, w)
        lin = F.linear(x, wd.to(torch.bfloat16)).float()
        scale = ref.abs().max().item()
        out = {"max_abs_err": (y64.float() - ref).abs().max().item() / scale,
               "bf16_linear_max_abs_err": (lin - ref).abs().max().item() / scale}
        bad_m = [m for m in range(1, 64) if not torch.equal(tk.packed_matmul(x[:m], w), y64[:m])]
        bad_r = [r for r in range(64) if not torch.equal(tk.packed_matmul(x[r:r + 1], w), y64[r:r + 1])]
        out["row_invariant"] = not bad_m and not bad_r
        out["bad_m"], out["bad_rows"] = bad_m[:8], bad_r[:8]
        del wd
        return out

    def time_shape(qt, n, k, ms=MS, override=(), with_linear=True):
        w0 = make_weight(qt, n, k, seed=1)
        copies = max(1, min(24, -(-L2_DEFEAT_BYTES // w0.nbytes)))
        ws = [w0] + [make_weight(qt, n, k, seed=2 + i) for i in range(copies - 1)]
        x = x64[:, :k].contiguous()
        row = {"nbytes": w0.nbytes, "copies": copies, "us": {}, "gbs": {}, "pct_peak": {}}
        for m in ms:
            xm = x[:m]
            us = graph_time_us([lambda w=w, xm=xm: tk.packed_matmul(xm, w, **dict(override)) for w in ws]) / copies
            row["us"][m] = us
            row["gbs"][m] = w0.nbytes / us / 1e3
            row["pct_peak"][m] = 100.0 * row["gbs"][m] / PEAK_GBS
        row["ratio_to_1"] = {m: row["us"][m] / row["us"][1] for m in ms}
        if with_linear:
            wbf = dequantize_packed(w0).to(torch.bfloat16)
            lc = max(1, min(8, -(-L2_DEFEAT_BYTES // (wbf.numel() * 2))))
            wl = [wbf] + [wbf.clone() for _ in range(lc - 1)]
            row["linear_bf16_us"] = {m: graph_time_us([lambda w=w, xm=x[:m]: F.linear(xm, w) for w in wl]) / lc
                                     for m in ms}
            del wl, wbf
        del ws
        torch.cuda.empty_cache()
        return row

    # -- the big Q4_K matrix, default config and the sweep ---------------------------------
    if BIG[0] in types:
        qt, n, k = BIG
        try:
            w = make_weight(qt, n, k, seed=9)
            res["big"]["check"] = check(qt, n, k, w)
            del w
            res["big"]["default"] = time_shape(qt, n, k)
            res["big"]["config"] = tk.kernel_config(qt, n, k, sms)
            r = res["big"]["default"]
            print(f"BIG {qt} {n}x{k}: " + " ".join(f"M{m} {r['us'][m]:.1f}us {r['pct_peak'][m]:.0f}%" for m in MS)
                  + f" | cfg {res['big']['config']} | check {res['big']['check']}", flush=True)
        except Exception as e:  # noqa: BLE001
            res["big"]["error"] = repr(e)[:500]
            print("BIG ERROR", repr(e)[:500], flush=True)
        for o in sweep:
            try:
                rr = time_shape(qt, n, k, ms=(1, 2, 16, 32, 64), override=o, with_linear=False)
                w = make_weight(qt, n, k, seed=9)
                xx = x64[:, :k].contiguous()
                y64 = tk.packed_matmul(xx, w, **dict(o))
                bad = [m for m in range(1, 64) if not torch.equal(tk.packed_matmul(xx[:m], w, **dict(o)), y64[:m])]
                bad += [-r for r in range(64) if not torch.equal(tk.packed_matmul(xx[r:r + 1], w, **dict(o)), y64[r:r + 1])]
                ref = xx.float() @ dequantize_packed(w).T
                err = ((y64.float() - ref).abs().max() / ref.abs().max()).item()
                del w, ref
                res["sweep"].append({"override": dict(o), "us": rr["us"], "pct_peak": rr["pct_peak"],
                                     "invariant": not bad, "bad": bad[:8], "err": err})
                print(f"   sweep {dict(o)}: " + " ".join(f"M{m} {rr['us'][m]:.1f}us {rr['pct_peak'][m]:.0f}%"
                                                     for m in (1, 2, 16, 32, 64))
                      + f" inv {not bad} err {err:.2e}", flush=True)
            except Exception as e:  # noqa: BLE001 - a config that does not fit is reported
                res["sweep"].append({"override": dict(o), "error": repr(e)[:300]})
                print(f"   sweep {dict(o)}: {e!r}"[:300], flush=True)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)

    def run_type(qt):
        tres = {"check": {}, "time": {}}
        for name, (n, k) in LAYER.items():
            if name in ("v", "o", "up"):            # same shapes as k, q, gate
                continue
            w = make_weight(qt, n, k, seed=7)
            tres["check"][f"{n}x{k}"] = check(qt, n, k, w)
            res["configs"][f"{qt} {n}x{k}"] = tk.kernel_config(qt, n, k, sms)
            del w
        for n, k in sorted(set(LAYER.values())):
            tres["time"][f"{n}x{k}"] = time_shape(qt, n, k)
        # a whole layer (7 matmuls) over distinct layers, per M
        layers = [{nm: make_weight(qt, n, k, seed=100 * li + j) for j, (nm, (n, k)) in enumerate(LAYER.items())}
                  for li in range(args.layers)]
        lres = {"us": {}}
        for m in MS:
            fns = []
            for L in layers:
                for nm, (n, k) in LAYER.items():
                    fns.append(lambda w=L[nm], xm=x64[:m, :k].contiguous(): tk.packed_matmul(xm, w))
            lres["us"][m] = graph_time_us(fns) / args.layers
        lres["ratio_to_1"] = {m: lres["us"][m] / lres["us"][1] for m in MS}
        lres["alt"] = {}
        for spec in [a for a in args.layer_alt.split(";") if a] if qt == "Q4_K" else []:
            o = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in spec.split(":")}
            alt = {}
            for m in MS:
                fns = [lambda w=L[nm], xm=x64[:m, :k].contiguous(): tk.packed_matmul(xm, w, **o)
                       for L in layers for nm, (n, k) in LAYER.items()]
                alt[m] = graph_time_us(fns) / args.layers
            lres["alt"][spec] = alt
            print(f"   layer with {spec}: " + " ".join(f"M{m}={alt[m]:.1f}" for m in MS), flush=True)
        lbytes = sum(w.nbytes for w in layers[0].values())
        # the same layers as bf16 F.linear on the dequantized weights
        del layers
        torch.cuda.empty_cache()
        blayers = [{nm: dequantize_packed(make_weight(qt, n, k, seed=100 * li + j)).to(torch.bfloat16)
                    for j, (nm, (n, k)) in enumerate(LAYER.items())} for li in range(args.layers)]
        lres["linear_bf16_us"] = {}
        for m in MS:
            fns = [lambda w=L[nm], xm=x64[:m, :k].contiguous(): F.linear(xm, w)
                   for L in blayers for nm, (n, k) in LAYER.items()]
            lres["linear_bf16_us"][m] = graph_time_us(fns) / args.layers
        lres["ratio_to_bf16"] = {m: lres["us"][m] / lres["linear_bf16_us"][m] for m in MS}
        del blayers
        lres["gbs_1"] = lbytes / lres["us"][1] / 1e3
        lres["pct_peak_1"] = 100 * lres["gbs_1"] / PEAK_GBS
        res["layer"][qt] = lres
        torch.cuda.empty_cache()
        res["types"][qt] = tres
        c = tres["check"]
        print(f"{qt}: err {max(v['max_abs_err'] for v in c.values()):.2e} "
              f"(bf16 linear {max(v['bf16_linear_max_abs_err'] for v in c.values()):.2e}) "
              f"invariant {all(v['row_invariant'] for v in c.values())} | layer us "
              + " ".join(f"M{m}={lres['us'][m]:.1f}" for m in MS)
              + f" | ratio32 {lres['ratio_to_1'][32]:.3f} | layer {lres['pct_peak_1']:.0f}% peak | vs bf16 "
              + " ".join(f"M{m}={lres['ratio_to_bf16'][m]:.2f}" for m in MS), flush=True)
        for key, row in tres["time"].items():
            print(f"   {key}: " + " ".join(f"M{m} {row['us'][m]:.1f}us/{row['pct_peak'][m]:.0f}%" for m in (1, 2, 32, 64))
                  + "  | bf16 linear " + " ".join(f"M{m} {row['linear_bf16_us'][m]:.1f}" for m in (1, 32, 64)),
                  flush=True)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)

    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", args.out)

    # -- per type: correctness, invariance, timing ---------------------------------------
    for qt in types:
        if time.time() - t_start > args.budget:
            print(f"budget reached, skipping {qt} and later types", flush=True)
            res.setdefault("skipped", []).append(qt)
            continue
        try:
            run_type(qt)
        except Exception as e:  # noqa: BLE001 - reported, the other types go on
            import traceback
            res.setdefault("errors", {})[qt] = traceback.format_exc()[-2000:]
            print(f"{qt}: ERROR {e!r}"[:400], flush=True)
            torch.cuda.empty_cache()
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)

    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
