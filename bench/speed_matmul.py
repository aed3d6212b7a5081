"""The packed matmul alone on the 8B's big matrices (bench/gpu_speed.py `matmul`).

For each matrix: random valid packed planes (bench_packed_matmul.make_weight), timed for each
row count with the call the model makes (engine.weights.matmul.packed_linear, or
triton_kernels.packed_matmul with --override), replayed from one CUDA graph over enough
distinct copies of the weight to defeat the L2 cache, CUDA events, median of `reps` replays.
Achieved bandwidth counts the packed weight bytes once per call, against --peak-gbs. Each
matrix is also checked for row invariance (the M-row call against one-row calls of each of
its rows, bit for bit), which greedy speculation's exactness rests on, and optionally timed as
bf16 F.linear on its dequantized weight (the vendor GEMM, for scale).

On a CPU (a dry run of the script, `--device cpu`) the Triton kernels run in Triton's
interpreter when TRITON_INTERPRET=1 is set before the start (float32 activations: the
interpreter's bfloat16 dot is wrong), else the torch path; times are wall-clock there.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Callable

import torch
import torch.nn.functional as F

from bench_packed_matmul import L2_DEFEAT_BYTES, graph_time_us, make_weight
from engine.weights.matmul import packed_linear
from engine.weights.packed import dequantize_packed

# name -> (qtype, N, K): the big Q4_K matrix, the 8B's gate|up (fused as the model
# runs it), its down projection and its LM head (Q6_K in Q4_K_M; Q6_K8: the same widened to
# int8, what the GPU loader makes of a Q6_K weight)
SHAPES = {
    "q4k_28672x8192": ("Q4_K", 28672, 8192),
    "q4k_gate_up_24576x4096": ("Q4_K", 24576, 4096),
    "q6k_down_4096x12288": ("Q6_K", 4096, 12288),
    "q6k_lm_head_49152x4096": ("Q6_K", 49152, 4096),
    "q6k8_down_4096x12288": ("Q6_K8", 4096, 12288),
    "q6k8_lm_head_49152x4096": ("Q6_K8", 49152, 4096),
}
TINY = {          # for the CPU dry run
    "q4k_tiny_64x512": ("Q4_K", 64, 512),
    "q6k_tiny_32x512": ("Q6_K", 32, 512),
    "q6k8_tiny_32x512": ("Q6_K8", 32, 512),
}
ROWS = (1, 2, 4, 8, 16, 64)


def parse_shapes(text: str) -> dict:
    """--shapes: names from SHAPES / TINY, or QTYPE:NxK (e.g. Q4_K:5120x4096, the 8B's q|k)."""
    from engine.weights.packed import PACKED_TYPES
    known = {**SHAPES, **TINY}
    out = {}
    for item in (t.strip() for t in text.split(",") if t.strip()):
        if item in known:
            out[item] = known[item]
            continue
        try:
            qt, nk = item.split(":")
            n, k = (int(v) for v in nk.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--shapes: {item!r} is neither a known matrix ({', '.join(known)}) "
                             f"nor QTYPE:NxK") from None
        if qt.upper() not in PACKED_TYPES or n < 1 or k < 1:
            raise SystemExit(f"--shapes: {item!r}: the type must be one of {', '.join(PACKED_TYPES)}")
        out[f"{qt.lower()}_{n}x{k}"] = (qt.upper(), n, k)
    return out


def _caller(override: dict, device: str) -> tuple[Callable, str]:
    """The call timed: what the model calls (packed_linear) unless a kernel override is given,
    or the CPU dry run is under Triton's interpreter (packed_linear sends CPU tensors to torch)."""
    interp = device == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"
    if not override and not interp:
        return packed_linear, "engine.weights.matmul.packed_linear"
    from engine.kernels import triton_kernels
    return (lambda x, w: triton_kernels.packed_matmul(x, w, **override)), \
        "triton_kernels.packed_matmul" + (" (interpreter)" if interp else f" {override}")


def _wall_us(fns: list[Callable], reps: int) -> float:
    for f in fns:
        f()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for f in fns:
            f()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def invariance(call: Callable, x: torch.Tensor, w, rows) -> dict:
    """Rows of the largest call against each row alone and against smaller calls, bitwise."""
    big = call(x, w)
    alone = torch.cat([call(x[i:i + 1], w) for i in range(x.shape[0])])
    bad_rows = [i for i in range(x.shape[0]) if not torch.equal(big[i], alone[i])]
    bad_m = [m for m in rows if not torch.equal(call(x[:m], w), big[:m])]
    return {"row_invariant": not bad_rows and not bad_m, "bad_rows": bad_rows[:8], "bad_m": bad_m}


def bench_shape(qtype: str, n: int, k: int, rows=ROWS, device: str = "cuda",
                dtype: torch.dtype = torch.bfloat16, reps: int = 7, peak_gbs: float = 4800.0,
                override: dict | None = None, linear: bool = False, check: bool = True) -> dict:
    call, how = _caller(override or {}, device)
    cuda = device == "cuda"
    w0 = make_weight(qtype, n, k, seed=1, device=device)
    copies = max(1, min(24, -(-L2_DEFEAT_BYTES // w0.nbytes))) if cuda else 1
    ws = [w0] + [make_weight(qtype, n, k, seed=2 + i, device=device) for i in range(copies - 1)]
    gen = torch.Generator(device=device).manual_seed(5)
    x = (torch.randn(max(rows), k, device=device, generator=gen) * 0.5).to(dtype)
    res: dict = {"qtype": qtype, "n": n, "k": k, "nbytes": w0.nbytes, "copies": copies, "call": how,
                 "dtype": str(dtype).replace("torch.", ""),
                 "timer": "cuda graph + events" if cuda else "wall clock (CPU dry run)",
                 "us": {}, "gbs": {}, "pct_peak": {}}
    timer = graph_time_us if cuda else _wall_us
    for m in rows:
        xm = x[:m].contiguous()
        us = timer([lambda w=w, xm=xm: call(xm, w) for w in ws], reps) / copies
        res["us"][m] = us
        res["gbs"][m] = w0.nbytes / us / 1e3
        res["pct_peak"][m] = 100.0 * res["gbs"][m] / peak_gbs
    res["ratio_to_1"] = {m: res["us"][m] / res["us"][rows[0]] for m in rows}
    if check:
        res.update(invariance(call, x, w0, rows))
        ref = x.float() @ dequantize_packed(w0).T
        res["rel_err"] = ((call(x, w0).float() - ref).abs().max() / ref.abs().max()).item()
    if linear:
        wbf = dequantize_packed(w0).to(dtype)
        lc = max(1, min(8, -(-L2_DEFEAT_BYTES // (wbf.numel() * wbf.element_size())))) if cuda else 1
        wl = [wbf] + [wbf.clone() for _ in range(lc - 1)]
        res["linear_us"] = {m: timer([lambda w=w, xm=x[:m].contiguous(): F.linear(xm, w) for w in wl], reps) / lc
                            for m in rows}
        del wl, wbf
    del ws
    if cuda:
        torch.cuda.empty_cache()
    return res


def run(shapes: dict, rows=ROWS, device: str = "cuda", dtype: torch.dtype = torch.bfloat16,
        reps: int = 7, peak_gbs: float = 4800.0, override: dict | None = None,
        linear: bool = False, check: bool = True, log=print) -> dict:
    out: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                 "dtype": str(dtype).replace("torch.", ""), "peak_gbs": peak_gbs,
                 "override": override or {}, "rows": list(rows), "shapes": {}}
    for name, (qt, n, k) in shapes.items():
        t0 = time.perf_counter()
        try:
            r = bench_shape(qt, n, k, rows, device, dtype, reps, peak_gbs, override, linear, check)
        except Exception as e:  # noqa: BLE001 - one shape failing must not lose the others
            r = {"qtype": qt, "n": n, "k": k, "error": f"{type(e).__name__}: {e}"[:600]}
        r["seconds"] = round(time.perf_counter() - t0, 1)
        out["shapes"][name] = r
        log(format_shape(name, r, peak_gbs))
    return out


def format_shape(name: str, r: dict, peak_gbs: float) -> str:
    if "error" in r:
        return f"{name}: ERROR {r['error']}"
    head = (f"{name} ({r['qtype']} {r['n']}x{r['k']}, {r['nbytes'] / 1e6:.1f} MB packed, "
            f"{r['copies']} copies, {r['seconds']} s)")
    if "row_invariant" in r:
        head += f": row-invariant {'yes' if r['row_invariant'] else 'NO ' + str(r['bad_rows'] or r['bad_m'])}"
        head += f", rel err {r['rel_err']:.1e}"
    lines = [head, f"  {'rows':>6} {'µs':>9} {'GB/s':>8} {'% peak':>7} {'x 1 row':>8}"
             + (f"  {r['dtype']} F.linear µs" if "linear_us" in r else "")]
    for m in r["us"]:
        lines.append(f"  {m:>6} {r['us'][m]:>9.1f} {r['gbs'][m]:>8.0f} {r['pct_peak'][m]:>7.1f} "
                     f"{r['ratio_to_1'][m]:>8.2f}" + (f"  {r['linear_us'][m]:>9.1f}" if "linear_us" in r else ""))
    return "\n".join(lines)
