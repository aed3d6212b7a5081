"""How far n-gram drafting can take the tree on the prompts of a tree_vs_llamacpp.py run: the
tokens per verify pass the answers allow, and the ratio to llama.cpp's best n-gram speculation
they bound (issue 36's "tree ÷ llama.cpp's best n-gram type per prompt").

    .venv/bin/python bench/tree_ceiling.py --runs bench/results/issue36_sf_2026-12-06/tree \
        [--tokens 128] [--out OUT.json]

RUNS holds tree_vs_llamacpp.json (the card's tok/s per prompt: llama.cpp's best n-gram variant,
our plain decoding P, our tree d8 w3 R) and llamacpp_spec_gpu.json (its prompts, rendered with
the model's chat template as llamacpp_spec.py rendered them). Per prompt, on this CPU:

1. the answer: the bundled model's greedy tokens (float32; the card's bfloat16 answer can part
   from it at a near-tie, so T below is this answer's);
2. tokens per verify pass over that answer (engine.speculation.oracle: what greedy verification
   accepts when the target emits the answer; no model needed) for the tree d8 w3 the card ran,
   tree d16 w3, a wide tree d16 w8 and lookup d8;
3. from the card's figures: a d8 w3 window's cost in plain steps, c = P T / R;
4. the ratios to llama.cpp's best L: the tree's as measured (R / L), the best of plain and the
   tree (what the adaptive default can pick per prompt), the wide tree's tokens per pass at the
   same c (P T_wide / c / L), and the d8 w3 tree if its window cost one plain step (P T / L).
   The last two are bounds, not forecasts: a window of 129 rows costs more than one of 25, and
   a window costs more than a step. They say how much there is to draft, and how much the
   window's cost takes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from llamacpp_spec import prompt_texts  # noqa: E402

SHAPES = {"tree d8 w3": ("tree", 8, 3), "tree d16 w3": ("tree", 16, 3),
          "tree d16 w8": ("tree", 16, 8), "lookup d8": ("lookup", 8, 1)}


def tokens_per_pass(prompt: list[int], answer: list[int]) -> dict[str, float]:
    from engine.speculation.drafters import LookupDrafter, TreeDrafter
    from engine.speculation.oracle import oracle_tokens_per_pass
    out = {}
    for name, (kind, depth, width) in SHAPES.items():
        drafter = TreeDrafter() if kind == "tree" else LookupDrafter("recent")
        out[name] = oracle_tokens_per_pass(prompt, answer, drafter, depth, width)
    return out


def bounds(row: dict, t: dict[str, float]) -> dict[str, float]:
    """The ratios of step 4 from the card's row (tree_vs_llamacpp.json) and T."""
    lb, plain, tree = row["llama"]["tok_s"], row["ours"]["none"], row["ours"]["tree:8:3"]
    c = plain * t["tree d8 w3"] / tree              # a d8 w3 window in plain steps
    return {"window_cost_in_plain_steps": c, "tree_measured": tree / lb,
            "best_of_plain_and_tree": max(plain, tree) / lb,
            "wide_tree_at_the_same_cost": plain * t["tree d16 w8"] / c / lb,
            "tree_at_a_plain_steps_cost": plain * t["tree d8 w3"] / lb}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", required=True, help="a folder with tree_vs_llamacpp.json and llamacpp_spec_gpu.json")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    runs = Path(a.runs)
    card = json.loads((runs / "tree_vs_llamacpp.json").read_text())
    spec = json.loads((runs / "llamacpp_spec_gpu.json").read_text())

    from engine.io.load import default_model_path, load_model
    from engine.model.runtime import Runtime
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    model = str(default_model_path())
    texts = {p["id"]: p["text"] for p in prompt_texts(
        model, spec.get("workload", "code-edit,specbench:summarization,qa,rag"),
        int(spec.get("per_category", 2)), spec.get("prompt_limit"))}
    lm = load_model(model)
    rt = Runtime(lm, device="cpu", dtype="float32")
    rows = []
    print(f"{'prompt':<28} {'tokens a pass: ' + ', '.join(SHAPES):<45}  c     tree/L best/L wide/L c=1/L")
    for row in card["rows"]:
        ids = lm.tokenizer.encode(texts[row["prompt"]], add_special_tokens=False)
        answer = Decoder(rt, ids, DecodeSettings(draft="none", max_new_tokens=a.tokens)).run()["tokens"]
        t = tokens_per_pass(ids, answer)
        b = bounds(row, t)
        rows.append({"prompt": row["prompt"], "category": row["category"], "answer_tokens": len(answer),
                     "tokens_per_pass": t, **b})
        print(f"{row['prompt']:<28} " + " ".join(f"{v:5.2f}" for v in t.values()).ljust(45)
              + f"  {b['window_cost_in_plain_steps']:4.2f}  {b['tree_measured']:5.2f}  "
              f"{b['best_of_plain_and_tree']:5.2f}  {b['wide_tree_at_the_same_cost']:5.2f}  "
              f"{b['tree_at_a_plain_steps_cost']:5.2f}", flush=True)
    summary = {}
    for key in ("window_cost_in_plain_steps", "tree_measured", "best_of_plain_and_tree",
                "wide_tree_at_the_same_cost", "tree_at_a_plain_steps_cost"):
        summary[key] = statistics.median(r[key] for r in rows)
    by_cat: dict[str, list[dict]] = {}
    for r in rows:
        by_cat.setdefault(r["category"], []).append(r)
    summary["by_category"] = {
        cat: {"tokens_per_pass_d8w3": statistics.median(r["tokens_per_pass"]["tree d8 w3"] for r in rs),
              "tokens_per_pass_d16w8": statistics.median(r["tokens_per_pass"]["tree d16 w8"] for r in rs),
              "tree_measured": statistics.median(r["tree_measured"] for r in rs),
              "wide_tree_at_the_same_cost": statistics.median(r["wide_tree_at_the_same_cost"] for r in rs),
              "tree_at_a_plain_steps_cost": statistics.median(r["tree_at_a_plain_steps_cost"] for r in rs)}
        for cat, rs in by_cat.items()}
    print(json.dumps(summary, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps({"runs": str(runs), "device_of_the_answers": "cpu float32",
                                           "tokens": a.tokens, "summary": summary, "rows": rows},
                                          indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
