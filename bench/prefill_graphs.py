"""Prefill from graphs against eager prefill, on a GPU: the same committed context and the
prompt's time (engine.model.runtime, PREFILL_BUCKETS).

    python3 bench/prefill_graphs.py MODEL.gguf [--dtype bfloat16] [--lengths 20,300,512,700]

For each prompt length: the eager runtime (graphs off) and the graph runtime each prefill the
prompt, then run one verify pass on the next token; prints the top-1 agreement, the largest
logit difference (a padded chunk multiplies other shapes: not bit-identical, like any batch
change) and the median prefill ms of 5 (graph: after the eager first use and the capture).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--lengths", default="20,300,512,700")
    a = ap.parse_args()
    import torch
    from engine.io.load import load_model
    from engine.model.device import synchronize
    from engine.model.runtime import Runtime, chain
    lm = load_model(a.model)
    eager = Runtime(lm, device="cuda", dtype=a.dtype, graphs=False)
    graph = Runtime(lm, device="cuda", dtype=a.dtype)
    text = Path(__file__).resolve().parent.parent.joinpath("README.md").read_text()
    all_ids = lm.tokenizer.encode(text * 4)
    for L in (int(x) for x in a.lengths.split(",")):
        ids = all_ids[:L + 1]
        res = {}
        for name, rt in (("eager", eager), ("graph", graph)):
            ses = rt.session(L + 64)
            times = []
            for i in range(7):
                ses.truncate(0)
                synchronize(rt.device)
                t0 = time.perf_counter()
                ses.prefill(ids[:-1])
                synchronize(rt.device)
                if i >= 2:
                    times.append(time.perf_counter() - t0)
            out = ses.verify([ids[-1]], *chain(1))
            res[name] = (statistics.median(times) * 1e3, out)
            ses.close()
        (te, oe), (tg, og) = res["eager"], res["graph"]
        diff = (oe.logits - og.logits).abs().max().item()
        print(f"{L:5d} tokens: eager {te:7.2f} ms ({L / te * 1e3:8.0f} tok/s), graph {tg:7.2f} ms "
              f"({L / tg * 1e3:8.0f} tok/s), {te / tg:4.2f}x; top-1 equal "
              f"{bool(torch.equal(oe.top_ids[:, 0], og.top_ids[:, 0]))}, max |logit diff| {diff:.3g}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
