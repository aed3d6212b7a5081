"""The figures of issue 22's kernel steps (BENCHMARKS.md, "The steps"), on a GPU, one process:
the verify pass by rows at context 1000 (graph replay, medians of 25), a 512-token prefill
(median of 5), the per-kernel table of one eager one-row pass (torch.profiler), and with
`exact` the bitwise check of chains against one-row passes (bench/gpu_exact.py model_rows).

    python3 bench/speed_steps.py MODEL.gguf [exact|quick]
    SPECSCOPE_FUSED=0 ...                 the plain (unfused) forward
    SPECSCOPE_DENSE_PREFILL=0 ...         prefill on the packed kernels
    SPECSCOPE_ATTN_SPLIT_BLOCKS=N ...     attention splits of N x 64 positions
"""
import sys, time, collections, json, os, torch
sys.path.insert(0, '.'); sys.path.insert(0, 'bench')
from engine.io.load import load_model
from engine.model.runtime import Runtime, chain
path = sys.argv[1]
lm = load_model(path)
t0 = time.time()
rt = Runtime(lm, device="cuda", dtype="bfloat16", capacity=2048)
print("fused:", rt.model.fused is not None, "load", round(time.time() - t0, 1), "s", flush=True)
S = rt.session(1100)
S.warm_up()
print("warm", round(time.time() - t0, 1), "s", flush=True)
def one(rows):
    S.scratch([1]*rows, *chain(rows), at=1000, need_logits=False)
for _ in range(3): one(1)
torch.cuda.synchronize()
res = {}
for rows in (1, 2, 4, 8, 16, 32, 64):
    ts = []
    for _ in range(25):
        torch.cuda.synchronize(); t0 = time.perf_counter(); one(rows); torch.cuda.synchronize(); ts.append((time.perf_counter()-t0)*1e3)
    ts.sort(); res[rows] = ts[12]
print("pass ms by rows:", " ".join(f"{r}:{v:.3f}" for r, v in res.items()), f"| 16/1 {res[16]/res[1]:.3f}", flush=True)
if len(sys.argv) > 2 and sys.argv[2] == "quick":
    sys.exit(0)
# prefill 512 tokens
ids = [(i * 7919) % 49000 + 10 for i in range(512)]
ts = []
for _ in range(5):
    S.truncate(0); torch.cuda.synchronize(); t0 = time.perf_counter(); S.prefill(ids); torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
ts.sort(); print(f"prefill 512: {ts[2]*1e3:.1f} ms = {512/ts[2]:.0f} tok/s", flush=True)
from torch.profiler import profile, ProfilerActivity
S.truncate(0)
b = S._bucket(1)
with torch.inference_mode():
    b.packed[2] = 1000
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            b.run()
        torch.cuda.synchronize()
agg = collections.defaultdict(lambda: [0, 0.0])
for e in prof.events():
    if e.device_type.name == "CUDA":
        agg[e.name][0] += 1; agg[e.name][1] += e.device_time
L = rt.config.n_layers
tot = sum(v[1] for v in agg.values()) / 5
n = sum(v[0] for v in agg.values()) / 5
print(f"one-row forward (eager, profiled): {n:.0f} launches ({n/L:.1f}/layer), kernel time {tot/1e3:.3f} ms")
for k, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:16]:
    print(f"{c/5:7.0f} {c/5/L:5.1f}/L {t/5:9.1f}us  {k[:100]}")
if len(sys.argv) > 2 and sys.argv[2] == "exact":
    from gpu_exact import model_rows
    ids = lm.tokenizer.encode("def fib(n):\n    if n < 2:\n        return n\n" * 20)
    S.close()
    r = model_rows(rt, ids)
    print("exact rows:", r["all_equal"], json.dumps(r["chains"]), flush=True)
