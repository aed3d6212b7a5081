"""One verify pass on the CPU, per weight form and row count, interleaved (the decision record
behind `weights="auto"` on the CPU and the fast path's parts).

    dequantized    float32 weights, MKL, SDPA (the old CPU default)
    packed         the fast path: int4 layers, bfloat16 LM head, row-invariant attention
    packed-f32head the same with the float32 LM head (what the bfloat16 head saves)
    packed-sdpa    the same with torch's SDPA (what row invariance costs; not lossless)
    packed-exact   cpu_kernels="exact" (float32 tiles, --exact)

    .venv/bin/python bench/bench_cpu_passes.py --threads 1 --context 700 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.io.load import load_model  # noqa: E402
from engine.model.runtime import Runtime  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--context", type=int, default=700)
    p.add_argument("--rows", default="1,4,8,9,25")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--exact", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    loaded = load_model(a.model)
    cfgs = {"dequantized": Runtime(loaded, "cpu", "float32", weights="dequantized"),
            # "auto": the fast int4 kernels (an explicit float32 means the exact ones since 5b71de0)
            "packed": Runtime(loaded, "cpu", "auto", weights="packed")}
    f32head = cfgs["packed-f32head"] = Runtime(loaded, "cpu", "auto", weights="packed")
    f32head.model.lm_head.parts = [f32head.model.embed]
    sdpa = cfgs["packed-sdpa"] = Runtime(loaded, "cpu", "auto", weights="packed")
    sdpa.model.row_invariant = False
    if a.exact:
        cfgs["packed-exact"] = Runtime(loaded, "cpu", "float32", weights="packed", cpu_kernels="exact")
    rows = [int(x) for x in a.rows.split(",")]
    ms: dict[tuple[str, int], list[float]] = {(c, r): [] for c in cfgs for r in rows}
    for _ in range(a.repeats):
        for c, rt in cfgs.items():            # interleaved: every config each round
            for r in rows:
                ms[(c, r)].append(rt.time_verify_pass(r, a.context))
    print(f"ms per verify pass, median of {a.repeats}, context {a.context}, {a.threads} thread(s)")
    print("| weights | " + " | ".join(f"{r} rows" for r in rows) + " |")
    print("| --- | " + " | ".join("---:" for _ in rows) + " |")
    for c in cfgs:
        print(f"| {c} | " + " | ".join(f"{statistics.median(ms[(c, r)]):.1f}" for r in rows) + " |")


if __name__ == "__main__":
    main()
