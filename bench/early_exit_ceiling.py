"""How far early exit could go on this model: the acceptance each exit layer offers against the
acceptance it must reach to beat plain decoding on a cost profile.

For Spec-Bench questions (default: writing and roleplay), the target decodes --new-tokens
greedily; then for each exit layer K, one pass of the first K layers over the whole text gives
the early exit's logits at every position, and for each width w the rate at which the target's
own next token is among the exit's top w (the acceptance of a depth-1 tree of width w: the
best any drafter at that layer can do at depth 1, greedy).

Against it, from the profile (a `specscope roofline` JSON with exit-layer timings): the
acceptance a depth-1 window of width w needs to beat plain decoding,

    need(K, w) = (pass_K(1) + verify(1 + w)) / verify(1) - 1

(a window emits 1 + accepted tokens). Where offered < needed at every K and w, no early-exit
window pays on that card, whatever the chooser does; deeper windows need more, not less (each
further draft token costs another pass_K and is accepted at most as often).

    .venv/bin/python bench/early_exit_ceiling.py --profile bench/results/drafts_h200/roofline_profile.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import record, specbench  # noqa: E402

import torch  # noqa: E402

from engine.cost.draft_cost import early_exit_cost  # noqa: E402
from engine.cost.profile import CostProfile  # noqa: E402
from engine.io.prompts import encode_prompt  # noqa: E402
from engine.model.runtime import chain  # noqa: E402
from engine.session import open_runtime  # noqa: E402
from engine.speculation.decoder import Decoder  # noqa: E402
from engine.speculation.settings import DecodeSettings  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, help="a roofline profile JSON with exit_ms")
    ap.add_argument("--categories", nargs="+", default=["writing", "roleplay"])
    ap.add_argument("--per-category", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--layers", type=int, nargs="+", default=[4, 8, 12, 16, 20, 24, 28])
    ap.add_argument("--widths", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--out", default="early_exit_ceiling")
    a = ap.parse_args()
    torch.set_num_threads(1)
    prof = CostProfile.load(a.profile)
    rt = open_runtime(None, "cpu", "float32", weights="dequantized")
    L = rt.config.n_layers
    hits = {(k, w): 0 for k in a.layers for w in a.widths}
    total = 0
    for q in specbench(tuple(a.categories), a.per_category):
        ids = encode_prompt(rt.tokenizer, [{"role": "user", "content": q["turns"][0]}])
        new = Decoder(rt, ids, DecodeSettings(draft="none", max_new_tokens=a.new_tokens),
                      detail=False).run()["tokens"]
        seq = ids + new
        n = len(seq)
        with torch.inference_mode():
            for k in a.layers:
                ses = rt.session(n)
                logits = ses.verify(seq, *chain(n), exit_layer=k).logits      # [n, V]
                ses.close()
                # the row before each new token predicts it
                rows = logits[len(ids) - 1:n - 1]
                target = torch.tensor(new)
                for w in a.widths:
                    top = rows.topk(w, dim=-1).indices
                    hits[k, w] += int((top == target[:, None]).any(-1).sum())
        total += len(new)
        print(f"{q['category']}-{q['question_id']}: {len(new)} tokens", flush=True)
    print(f"\nP(target's next token in the top w of the first K layers' logits), {total} tokens, "
          f"{', '.join(a.categories)}; need = acceptance a depth-1 window must reach on "
          f"{prof.device} ({prof.model}, one row {prof.ms(1):.3f} ms)")
    print(f"{'K':>4} {'pass ms':>8}  " + "  ".join(f"{'w' + str(w) + ' has/need':>13}" for w in a.widths))
    table = {}
    for k in a.layers:
        cost = early_exit_cost(prof, k, L)
        cells = []
        for w in a.widths:
            need = (cost.one_row_ms + prof.ms(1 + w)) / prof.ms(1) - 1
            has = hits[k, w] / total
            table[f"{k}:{w}"] = {"offered": has, "needed": need}
            cells.append(f"{has:>6.2f}/{need:<5.2f}" + ("*" if has > need else " "))
        print(f"{k:>4} {cost.one_row_ms:>8.3f}  " + "  ".join(f"{c:>13}" for c in cells))
    print("(* : this window would pay)")
    print("recorded", record(a.out, {"profile": prof.id, "layers": a.layers, "widths": a.widths,
                                     "tokens": total, "categories": a.categories, "table": table}))


if __name__ == "__main__":
    main()
