"""GPU correctness and speed check of the runtime (run on the device machine).

1. graph-replayed verify vs eager verify on the same GPU (a 20-node tree): max |diff| and argmax
2. greedy AR through graphs vs eager: identical tokens?
3. AR per-token time vs one graph-replayed single-row forward (goal <= 1.2)

    python bench/gpu_check.py --model /tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf [--out F]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import code_edit_prompts, record  # noqa: E402

from engine.speculation.decoder import Decoder  # noqa: E402
from engine.io.load import load_model  # noqa: E402
from engine.io.prompts import encode_prompt  # noqa: E402
from engine.model.runtime import Runtime  # noqa: E402
from engine.speculation.settings import DecodeSettings  # noqa: E402
from engine.speculation.tree import TokenTree  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--out", default=None)
    ap.add_argument("--compile", action="store_true", help="torch.compile inside the graphs")
    a = ap.parse_args()
    loaded = load_model(a.model)
    graph = Runtime(loaded, "cuda", a.dtype, capacity=2048, compile=a.compile)
    t0 = time.perf_counter()
    ses = graph.session(1)
    ses.warm_up()
    ses.close()
    warm_s = time.perf_counter() - t0
    print(f"0. captured graph buckets in {warm_s:.1f} s (compile={a.compile})")
    eager = Runtime(loaded, "cuda", a.dtype, capacity=2048, graphs=False)
    out: dict = {"device": graph.device_name, "dtype": graph.dtype_name, "compile": a.compile,
                 "warm_up_s": warm_s}
    prompts = code_edit_prompts()
    ids = encode_prompt(loaded.tokenizer, prompts[0]["messages"])

    # 1. one tree, both paths
    rng = random.Random(0)
    R = 21
    tokens = [ids[-1]] + [rng.randrange(30000) for _ in range(R - 1)]
    tree = TokenTree.from_rows(tokens, [-1] + [rng.randrange(i) for i in range(1, R)])
    res = []
    for rt in (graph, eager):
        ses = rt.session(len(ids) + 128)
        ses.warm_up()
        ses.prefill(ids[:-1])
        res.append(ses.verify(tokens, tree.row_depths, tree.ancestor_mask()))
        ses.close()
    diff = (res[0].logits - res[1].logits).abs().max().item()
    same_argmax = torch.equal(res[0].top_ids[:, 0], res[1].top_ids[:, 0])
    out["tree_graph_vs_eager_max_abs"] = diff
    out["tree_graph_vs_eager_argmax_equal"] = same_argmax
    print("1. tree verify graph vs eager: max|diff|", diff, "argmax equal", same_argmax)

    # 2. AR greedy graphs vs eager, and speculative vs AR
    s = DecodeSettings(draft="none", max_new_tokens=a.new_tokens)
    runs = {}
    for name, rt, st in [("graph_ar", graph, s), ("eager_ar", eager, s),
                         ("graph_tree", graph, DecodeSettings(draft="tree", max_new_tokens=a.new_tokens)),
                         ("graph_lookup", graph, DecodeSettings(draft="lookup", max_new_tokens=a.new_tokens))]:
        Decoder(rt, ids, st, detail=False).run()        # warm
        r = Decoder(rt, ids, st, detail=False).run()
        runs[name] = r
        print(f"2. {name}: {r['tok_s']:.1f} tok/s, {r['tokens_per_pass']:.2f} tok/pass")
    out["runs"] = {k: {kk: v[kk] for kk in ("tok_s", "tokens_per_pass", "new_tokens", "wall_s")}
                   for k, v in runs.items()}
    out["ar_graph_equals_eager"] = runs["graph_ar"]["tokens"] == runs["eager_ar"]["tokens"]
    out["tree_equals_ar"] = runs["graph_tree"]["tokens"] == runs["graph_ar"]["tokens"]
    out["lookup_equals_ar"] = runs["graph_lookup"]["tokens"] == runs["graph_ar"]["tokens"]
    print("   AR graph == eager:", out["ar_graph_equals_eager"], " tree == AR:", out["tree_equals_ar"],
          " lookup == AR:", out["lookup_equals_ar"])

    # roofline points: one pass per bucket
    out["pass_ms_by_rows"] = {}
    for rows in (1, 2, 4, 8, 16, 32, 64):
        ts = [graph.time_verify_pass(rows, len(ids)) for _ in range(30)][5:]
        out["pass_ms_by_rows"][rows] = statistics.median(ts)
    print("   pass ms by rows:", {k: round(v, 3) for k, v in out["pass_ms_by_rows"].items()})

    # 3. AR per token vs one graph-replayed single-row pass
    ses = graph.session(2048)
    ses.warm_up()
    one = [ses.time_verify_pass(1, len(ids)) for _ in range(200)][20:]
    one_ms = statistics.median(one)
    per_tok = 1e3 / runs["graph_ar"]["tok_s"]
    out.update(one_row_graph_ms=one_ms, ar_ms_per_token=per_tok, ar_over_graph=per_tok / one_ms)
    # a raw replay without host work, for reference
    b = graph._bucket(1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        b.graph.replay()
    torch.cuda.synchronize()
    out["raw_replay_1row_ms"] = (time.perf_counter() - t0) / 200 * 1e3
    print(f"3. AR {per_tok:.3f} ms/token, one graph pass {one_ms:.3f} ms (raw replay "
          f"{out['raw_replay_1row_ms']:.3f} ms): ratio {per_tok / one_ms:.2f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    else:
        record("gpu_check", out)


if __name__ == "__main__":
    main()
