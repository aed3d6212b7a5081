"""Tree shape at a fixed verify budget (25 rows): one linear branch of 24 (lookup d24), three
even branches of 8 (the first tree drafter), or the tree drafter's spine of 16 plus two
alternatives of 4 (tree d16 w3). Tokens per pass pooled over the five code-edit prompts.

    python bench/bench_shape.py [--new-tokens 128] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import code_edit_prompts, record  # noqa: E402

from engine.speculation.decoder import Decoder  # noqa: E402
from engine.speculation.drafters import TreeDrafter  # noqa: E402
from engine.io.prompts import encode_prompt  # noqa: E402
from engine.session import open_runtime  # noqa: E402
from engine.speculation.settings import DecodeSettings  # noqa: E402
from engine.speculation.tree import TokenTree, build_trie  # noqa: E402


class EvenTree(TreeDrafter):
    """Every branch to the full depth (the drafter's first shape), for comparison."""

    def propose(self, req):
        cands = self.candidates(req.index, req.depth, req.width)
        return (build_trie(req.root, cands, 1 + req.depth * req.width) if cands
                else TokenTree.empty(req.root))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default=None)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    rt = open_runtime(a.model, a.device, "auto")
    n = a.new_tokens
    configs = [("lookup d24 (25 rows)", DecodeSettings(draft="lookup", depth=24, max_new_tokens=n), None),
               ("even tree 3 x 8 (25 rows)", DecodeSettings(draft="tree", depth=8, width=3, max_new_tokens=n), EvenTree),
               ("spine tree 16 + 4 + 4 (25 rows)", DecodeSettings(draft="tree", depth=16, width=3, max_new_tokens=n), None)]
    totals = {name: [0, 0] for name, _, _ in configs}
    per_prompt: dict[str, dict[str, float]] = {}
    for p in code_edit_prompts():
        ids = encode_prompt(rt.tokenizer, p["messages"])
        for name, s, cls in configs:
            dec = Decoder(rt, ids, s, detail=False)
            if cls is not None:          # the factory keeps it while the settings' drafter stays
                dec.factory.drafter = cls()
            r = dec.run()
            totals[name][0] += r["new_tokens"]
            totals[name][1] += r["windows"]
            per_prompt.setdefault(p["id"], {})[name] = r["tokens_per_pass"]
            print(f"{p['id']:32s} {name:32s} {r['tokens_per_pass']:.3f} tokens/pass", flush=True)
    pooled = {k: t / w for k, (t, w) in totals.items()}
    for k, v in pooled.items():
        print(f"pooled  {k:32s} {v:.3f}")
    out = {"command": " ".join(sys.argv), "device": rt.device_name, "dtype": rt.dtype_name,
           "model": rt.model_id, "new_tokens": n, "per_prompt": per_prompt, "pooled": pooled}
    print("recorded", record(f"shape_{rt.device.type}", out))


if __name__ == "__main__":
    main()
