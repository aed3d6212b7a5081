"""Exactness on the GPU, op by op and for the whole model: does a verify window's row equal the
one-row decode step of the same token, bit for bit? And what does it cost?

    python3 bench/gpu_exact.py ops                      # kernels alone (random data, no model)
    python3 bench/gpu_exact.py model --model M.gguf     # the bundled model: rows + pass cost
    python3 bench/gpu_exact.py cpu --model M.gguf       # pass cost on this machine's CPU

ops:   cuBLAS (F.linear) vs the row-invariant Triton dense kernel, for M = 1..64 rows; the
       layout-invariant Triton attention against SDPA (values) and against itself with the row
       alone / at other slots / in other windows (bits), and its cost vs SDPA over the capacity.
model: per dtype and weight form, AR logits of 40 tokens vs the same tokens verified as chains
       of 2..33 rows (graph buckets 2..64) and as tree rows on side branches after decoy rows;
       then the verify pass at 1, 2, 32 and 64 rows, context 900, with the new attention and
       kernels and with the old (SDPA over the cache capacity, cuBLAS), interleaved, medians.
Writes JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.kernels.window_layout import WindowLayout, ancestor_table  # noqa: E402


def _ms(fn, reps: int = 50) -> float:
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3 / reps)
    return statistics.median(ts)


def tree(parents: list[int]) -> tuple[list[int], torch.Tensor]:
    """(depths, ancestors [R, R] bool) of a tree given each row's parent (-1 for the root)."""
    R = len(parents)
    depths = [0] * R
    anc = torch.zeros(R, R, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            depths[i] = depths[p] + 1
            anc[i] = anc[p]
        anc[i, i] = True
    return depths, anc


def ops() -> dict:
    from engine.kernels.triton_attention import layout_attention_triton
    from engine.kernels.triton_dense import dense_matmul
    dev = "cuda"
    out: dict = {"linear": {}, "attention": {}}
    g = torch.Generator(device=dev).manual_seed(0)
    for dt in (torch.bfloat16, torch.float32):
        for n, k in ((1728, 576), (576, 576), (3072, 576), (576, 1536), (49152, 576), (12288, 4096)):
            w = torch.randn(n, k, device=dev, generator=g).to(dt) * 0.05
            x = torch.randn(64, k, device=dev, generator=g).to(dt)
            row = {}
            for name, fn in (("cublas", lambda a: F.linear(a, w)), ("triton", lambda a: dense_matmul(a, w))):
                alone = torch.cat([fn(x[i:i + 1]) for i in range(64)])
                bad = [m for m in (2, 3, 4, 8, 16, 17, 32, 64) if not torch.equal(fn(x[:m]), alone[:m])]
                ref = (x.double() @ w.double().T)
                err = ((fn(x).double() - ref).abs().max() / ref.abs().max()).item()
                row[name] = {"row_invariant": not bad, "differs_at_M": bad, "rel_err": err,
                             "ms_M1": _ms(lambda: fn(x[:1])), "ms_M32": _ms(lambda: fn(x[:32]))}
            out["linear"][f"{str(dt)[6:]} {n}x{k}"] = row
            print(str(dt)[6:], n, k, json.dumps(row), flush=True)
    # attention: SmolLM2 (3 kv heads x 3, D 64) and Qwen3-8B-like (8 x 4, D 128)
    for hkv, G, D in ((3, 3, 64), (8, 4, 128)):
        for dt in (torch.bfloat16, torch.float32):
            C = 2048
            k = torch.randn(hkv, C, D, device=dev, generator=g).to(dt)
            v = torch.randn(hkv, C, D, device=dev, generator=g).to(dt)
            res: dict = {}
            parents = [-1, 0, 1, 2, 3, 4, 0] + list(range(6, 16))       # decoys, then the chain
            depths, anc = tree(parents)
            R = len(parents)
            real = [0] + list(range(6, R))
            bits_ok = True
            for n in (0, 5, 63, 64, 255, 256, 700, 1329, 1900):
                if n + R > C:
                    continue
                q = torch.randn(R, hkv * G, D, device=dev, generator=g).to(dt)
                lay = WindowLayout(torch.tensor(n, device=dev), torch.tensor(depths, device=dev),
                                   ancestor_table(depths, anc).to(dev))
                got = layout_attention_triton(q, k, v, lay)
                # the real chain's rows alone: row at depth d is a 1-row window at n + d, its
                # keys moved down to where a plain decode would have them
                k2, v2 = k.clone(), v.clone()
                for d, r in enumerate(real):
                    k2[:, n + d], v2[:, n + d] = k[:, n + r], v[:, n + r]
                for d, r in enumerate(real):
                    one = WindowLayout(torch.tensor(n + d, device=dev), torch.tensor([0], device=dev),
                                       torch.zeros(1, 1, dtype=torch.long, device=dev))
                    alone = layout_attention_triton(q[r:r + 1], k2, v2, one)
                    bits_ok &= torch.equal(alone[0], got[r])
                mask = torch.zeros(R, n + R, dtype=torch.bool, device=dev)
                mask[:, :n] = True
                mask[:, n:] = anc.to(dev)
                ref = F.scaled_dot_product_attention(
                    q.float().transpose(0, 1), k[:, :n + R].float().repeat_interleave(G, 0),
                    v[:, :n + R].float().repeat_interleave(G, 0), attn_mask=mask).transpose(0, 1)
                res.setdefault("max_abs_vs_sdpa", 0.0)
                res["max_abs_vs_sdpa"] = max(res["max_abs_vs_sdpa"], (got.float() - ref).abs().max().item())
            res["tree_rows_equal_alone"] = bool(bits_ok)
            # cost at context 900: ours vs SDPA over the whole capacity with a mask (the old way)
            for rows in (1, 2, 32, 64):
                depths_c = list(range(rows))
                lay = WindowLayout(torch.tensor(900, device=dev), torch.tensor(depths_c, device=dev),
                                   ancestor_table(depths_c, torch.ones(rows, rows, dtype=torch.bool).tril()).to(dev))
                q = torch.randn(rows, hkv * G, D, device=dev, generator=g).to(dt)
                bias = torch.zeros(1, 1, G * rows, C, device=dev, dtype=dt)
                bias[..., 900 + rows:] = float("-inf")
                qg = q.transpose(0, 1).reshape(1, hkv, G * rows, D)
                kk, vv = k.unsqueeze(0), v.unsqueeze(0)
                res[f"ms_rows{rows}"] = {
                    "triton": _ms(lambda: layout_attention_triton(q, k, v, lay)),
                    "sdpa_capacity": _ms(lambda: F.scaled_dot_product_attention(qg, kk, vv, attn_mask=bias))}
            out["attention"][f"{hkv}x{G}x{D} {str(dt)[6:]}"] = res
            print(hkv, G, D, dt, json.dumps(res), flush=True)
    return out


def _ar_logits(rt, prompt, toks):
    from engine.model.runtime import chain
    ses = rt.session(len(prompt) + len(toks) + 80)
    ses.prefill(prompt)
    out = []
    for t in toks:
        out.append(ses.verify([t], *chain(1)).logits)
        ses.advance(1)
    ses.close()
    return torch.cat(out)


def model_rows(rt, ids) -> dict:
    from engine.model.runtime import chain
    prompt, toks = ids[:-40], ids[-40:]
    ref = _ar_logits(rt, prompt, toks)
    res: dict = {"chains": {}, "trees": {}}
    for R in (2, 3, 5, 9, 17, 33):
        ses = rt.session(len(ids) + 80)
        ses.prefill(prompt)
        got = ses.verify(toks[:R], *chain(R)).logits
        ses.close()
        res["chains"][R] = (got - ref[:R]).abs().max().item()
    for n_decoy in (1, 5, 14):
        for at in (0, 3):                       # decoys under the root, or under row 3
            real_len = 12
            chain_rows = list(range(real_len))
            parents = [-1] + list(range(0, real_len - 1))        # the real chain first
            tokens = list(toks[:real_len])
            p = at
            for j in range(n_decoy):                             # then decoys branching off
                tokens.append((toks[j] * 7 + 13) % 49152)
                parents.append(p)
                p = len(parents) - 1
            # and the real chain again, after the decoys: placed at later slots
            base = len(tokens)
            tokens += toks[:real_len][1:]
            parents += [0] + list(range(base, base + real_len - 2))
            depths, anc = tree(parents)
            ses = rt.session(len(ids) + 80)
            ses.prefill(prompt)
            got = ses.verify(tokens, depths, anc).logits
            ses.close()
            late = [0] + list(range(base, base + real_len - 1))
            res["trees"][f"decoys{n_decoy}_at{at}_R{len(tokens)}"] = {
                "first_branch": (got[chain_rows] - ref[:real_len]).abs().max().item(),
                "side_branch": (got[late] - ref[:real_len]).abs().max().item()}
    res["all_equal"] = all(v == 0 for v in res["chains"].values()) and all(
        v["first_branch"] == 0 and v["side_branch"] == 0 for v in res["trees"].values())
    return res


def pass_cost(rt, modes: dict, rows=(1, 2, 32, 64), ctx=900, rounds=3) -> dict:
    times: dict = {m: {r: [] for r in rows} for m in modes}
    for _ in range(rounds):
        for m, set_mode in modes.items():
            set_mode()
            ses = rt.session(ctx + max(rows))      # a new session: graphs captured afresh
            for r in rows:
                ses.time_verify_pass(r, ctx)
                times[m][r] += [ses.time_verify_pass(r, ctx) for _ in range(15)]
    return {m: {r: statistics.median(v) for r, v in d.items()} for m, d in times.items()}


def model(path: str, device: str, cost: bool = True) -> dict:
    from engine.io.load import load_model
    from engine.model.runtime import Runtime
    lm = load_model(path)
    ids = lm.tokenizer.encode(
        "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n"
        "class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n"
        "        self.items.append(x)\n" * 12)
    out: dict = {}
    configs = ([("bfloat16", "auto"), ("bfloat16", "dequantized"), ("float32", "auto")]
               if device == "cuda" else [("float32", "packed")])
    for dt, weights in configs:
        rt = Runtime(lm, device, dt, weights=weights, capacity=2048)
        key = f"{dt} {rt.weights_mode}"
        new_attn = rt.model.verify_attention

        def new():
            rt.model.verify_attention = new_attn

        def old():
            rt.model.verify_attention = None

        rows = model_rows(rt, ids)
        print(key, json.dumps(rows), flush=True)
        out[key] = {"rows": rows}
        if cost:
            ms = pass_cost(rt, {"new": new, "old": old})
            print(key, "pass ms", json.dumps(ms), flush=True)
            out[key].update(pass_ms=ms, ratio_new_old={r: ms["new"][r] / ms["old"][r] for r in ms["new"]})
        new()

        torch.cuda.empty_cache() if device == "cuda" else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["ops", "model", "cpu"])
    ap.add_argument("--model", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--rows-only", action="store_true", help="model/cpu: the bitwise rows, not the pass cost")
    a = ap.parse_args()
    if a.what == "ops":
        res = ops()
    else:
        if a.what == "cpu":
            torch.set_num_threads(1)
        res = model(a.model, "cuda" if a.what == "model" else "cpu", cost=not a.rows_only)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
