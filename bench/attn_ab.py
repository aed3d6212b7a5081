"""The layout attention kernel of one engine tree, timed as a pass runs it and saved for a bitwise
comparison with another tree's (run it once with each tree first on PYTHONPATH).

    PYTHONPATH=/tmp/old python3 bench/attn_ab.py save OLD.pt
    python3 bench/attn_ab.py save NEW.pt
    python3 bench/attn_ab.py compare OLD.pt NEW.pt

Each case: one launch per layer over that layer's own cache (as a pass: no layer's keys sit in
the L2 from the last), captured in one CUDA graph and replayed; µs a launch, median of 30
replays. Shapes: the bundled SmolLM2 (9 query heads over 3 kv heads of 64) and the 8B-like
model (32 over 8 of 128), 1, 16 and 25 rows (a chain), bfloat16 and float32, contexts short to long.
"""

from __future__ import annotations

import os
import statistics
import sys

import torch

# window rows a case (ATTN_AB_ROWS=16,25 to save a card's time)
ROWS = tuple(int(r) for r in os.environ.get("ATTN_AB_ROWS", "1,16,25").split(","))
CASES = [  # name, layers, Hq, Hkv, D, capacity, contexts
    ("bundled", 30, 9, 3, 64, 2048, (300, 1000, 1900)),
    ("8b", 36, 32, 8, 128, 4096, (1000, 3000)),
]


def save(path: str) -> None:
    import engine
    from engine.kernels.triton_attention import layout_attention_triton
    from engine.kernels.window_layout import WindowLayout, ancestor_table
    print("engine from", engine.__file__, flush=True)
    out, times = {}, {}
    g = torch.Generator(device="cuda").manual_seed(0)
    for name, L, Hq, Hkv, D, C, contexts in CASES:
        for dt in (torch.bfloat16, torch.float32):
            kv = [torch.randn(2, Hkv, C, D, device="cuda", generator=g).to(dt) for _ in range(L)]
            for rows in ROWS:
                q = torch.randn(rows, Hq, D, device="cuda", generator=g).to(dt)
                depths = list(range(rows))
                anc = ancestor_table(depths, torch.ones(rows, rows, dtype=torch.bool).tril()).cuda()
                for n in contexts:
                    lay = WindowLayout(torch.tensor(n, device="cuda"),
                                       torch.tensor(depths, device="cuda"), anc)
                    run = lambda: [layout_attention_triton(q, k[0], k[1], lay) for k in kv]
                    res = run()
                    torch.cuda.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        res = run()
                    ts = []
                    for _ in range(30):
                        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
                        a.record(); graph.replay(); b.record(); b.synchronize()
                        ts.append(a.elapsed_time(b) * 1e3 / L)
                    key = f"{name} {str(dt)[6:]} rows {rows} ctx {n}"
                    times[key] = statistics.median(ts)
                    out[key] = torch.stack([r.float() for r in res]).cpu()
                    print(f"{key:<40} {times[key]:8.2f} µs a launch", flush=True)
    torch.save({"out": out, "times": times}, path)


def compare(a: str, b: str) -> None:
    A, B = torch.load(a), torch.load(b)
    same = [k for k in A["out"] if torch.equal(A["out"][k], B["out"][k])]
    print(f"{'case':<40} {'µs A':>8} {'µs B':>8} {'B/A':>6}  same bits")
    for k in A["out"]:
        ta, tb = A["times"][k], B["times"][k]
        print(f"{k:<40} {ta:8.2f} {tb:8.2f} {tb / ta:6.2f}  {k in same}")
    print(f"identical {len(same)}/{len(A['out'])}")


if __name__ == "__main__":
    if sys.argv[1] == "save":
        save(sys.argv[2])
    else:
        compare(sys.argv[2], sys.argv[3])
