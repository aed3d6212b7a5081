"""Do two engine trees' packed matmul kernels give the same bits? (A kernel source rearranged
without meaning to change its arithmetic: run `save` with each tree first on PYTHONPATH, then
`compare`.) Every packed type, bf16 and float32 activations, rows 1, 2, 17, 33, 64, two shapes
each (one split, one not), the SwiGLU epilogue and the split-K partials; seeded inputs.

    PYTHONPATH=/tmp/old:$PYTHONPATH python3 bench/kernel_same_bits.py save OLD.pt [TYPE ..]
    python3 bench/kernel_same_bits.py save NEW.pt [TYPE ..]
    python3 bench/kernel_same_bits.py compare OLD.pt NEW.pt   (or two lists, comma-separated)

One process a type compiles in parallel (bench/kernel_same_bits.sh runs both trees so).
"""

from __future__ import annotations

import os
import sys

import torch

TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K", "Q6_K8")
SHAPES = ((1024, 4096), (12288, 4096), (1536, 576))
ROWS = (1, 2, 17, 64)


def save(path: str, types=TYPES) -> None:
    sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))
    import engine
    from bench_packed_matmul import make_weight
    from engine.kernels import triton_kernels as tk
    print("engine from", engine.__file__, flush=True)
    out = {}
    g = torch.Generator(device="cuda").manual_seed(0)
    for qt in types:
        for n, k in SHAPES:
            if k % (256 if "_K" in qt else 32):
                continue
            w = make_weight(qt, n, k, seed=n + k, device="cuda")
            x = torch.randn(64, k, device="cuda", generator=g)
            for dt in (torch.bfloat16, torch.float32):
                xd = x.to(dt)
                calls = {f"M{m}": (lambda m=m: tk.packed_matmul(xd[:m], w)) for m in ROWS}
                calls["partials"] = lambda: tk.packed_partials(xd[:5], w)
                if 2 * tk.swiglu_block(w, x.device) <= n and n % (2 * tk.swiglu_block(w, x.device)) == 0:
                    calls["swiglu"] = lambda: tk.packed_swiglu(xd[:17], w)
                for name, call in calls.items():
                    try:
                        out[f"{qt} {n}x{k} {dt} {name}"] = call().cpu()
                    except Exception as e:  # noqa: BLE001 - both trees must fail alike
                        out[f"{qt} {n}x{k} {dt} {name}"] = type(e).__name__
        print(qt, "done", flush=True)
    torch.save(out, path)
    print(len(out), "outputs ->", path)


def _load(paths: str) -> dict:
    out = {}
    for p in paths.split(","):
        out.update(torch.load(p))
    return out


def compare(a: str, b: str) -> None:
    A, B = _load(a), _load(b)
    keys = sorted(set(A) | set(B))
    def same(x, y):
        return x == y if isinstance(x, str) or isinstance(y, str) else torch.equal(x, y)
    bad = [k for k in keys if k not in A or k not in B or not same(A[k], B[k])]
    errs = [k for k in keys if isinstance(A.get(k), str)]
    print(f"identical {len(keys) - len(bad)}/{len(keys)}" + (f"; differ: {bad[:20]}" if bad else "")
          + (f"; failing alike in both ({len(errs)}): {errs[:10]}" if errs else ""))


if __name__ == "__main__":
    if sys.argv[1] == "save":
        save(sys.argv[2], tuple(sys.argv[3:]) or TYPES)
    else:
        compare(sys.argv[2], sys.argv[3])
