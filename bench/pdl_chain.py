"""Chains of the pass's own kernels replayed from a CUDA graph, with and without programmatic
dependent launch (engine.kernels.pdl): microseconds a launch, medians of interleaved rounds.

    python3 bench/pdl_chain.py [--json OUT]

Synthetic inputs (random bytes as Q4_1 / Q4_K quants, small scales): what is timed is launch
and latency, not the values. Kernels: the bundled model's residual + norm (576), its q|k|v and
gate|up matmuls at one row (Q4_1), and an 8B-like 4096x4096 Q4_K matmul at one row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.kernels import pdl  # noqa: E402
from engine.kernels.triton_fused import residual_norm  # noqa: E402
from engine.kernels.triton_kernels import packed_partials  # noqa: E402
from engine.weights import PackedWeight, plane_shapes  # noqa: E402

N_LAUNCH = 60


def _packed(qtype: str, n: int, k: int, dev) -> PackedWeight:
    planes = {}
    for p, (shape, dt) in plane_shapes(qtype, n, k).items():
        if dt.is_floating_point:
            planes[p] = (torch.rand(shape, device=dev) * 1e-3).to(dt)
        else:
            planes[p] = torch.randint(0, 127, shape, device=dev, dtype=torch.int32).to(dt)
    return PackedWeight(qtype, (n, k), planes)


def chains(dev) -> dict:
    x = torch.randn(1, 576, device=dev, dtype=torch.bfloat16)
    h = torch.empty_like(x)
    w = torch.ones(576, device=dev, dtype=torch.bfloat16)
    qkv, gu = _packed("Q4_1", 960, 576, dev), _packed("Q4_1", 3072, 576, dev)
    x8 = torch.randn(1, 4096, device=dev, dtype=torch.bfloat16)
    o8 = _packed("Q4_K", 4096, 4096, dev)
    return {
        "residual norm 576": lambda: residual_norm(None, x, h, w, 1e-5),
        "Q4_1 960x576 partials": lambda: packed_partials(x, qkv),
        "Q4_1 3072x576 partials": lambda: packed_partials(x, gu),
        "Q4_K 4096x4096 partials": lambda: packed_partials(x8, o8),
    }


def time_chain(fn, reps: int = 20) -> float:
    for _ in range(2):
        fn()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(N_LAUNCH):
            fn()
    g.replay()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) * 1000 / N_LAUNCH)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), "PDL probe:", pdl._probe(dev))
    res: dict = {}
    fns = chains(dev)
    for r in range(a.rounds):
        for mode in ((0, 2, 1) if r % 2 == 0 else (1, 2, 0)):
            pdl.MODE = mode
            for name, fn in fns.items():
                res.setdefault(name, {}).setdefault(mode, []).append(time_chain(fn))
    for name, by in res.items():
        med = {m: statistics.median(v) for m, v in sorted(by.items())}
        print(f"{name:26s} " + "  ".join(f"pdl={m}: {v:6.2f} us" for m, v in med.items())
              + f"   2/0: {med[2] / med[0]:.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
