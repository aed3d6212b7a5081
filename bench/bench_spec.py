"""Speculation performance: tokens per forward pass and tok/s for plain / lookup / tree decoding on
the five code-edit prompts, beside transformers' prompt lookup on the same GGUF, in one run.

Per prompt, every configuration runs back to back (interleaved), --repeats times; tok/s is the
median over repeats (tokens per pass is deterministic: greedy). Configurations:

    none          plain decoding (draft none)
    lookup        prompt lookup, match rule recent, depth 8 (9 rows)
    tree          tree drafter, depth 8 x width 3 (25 rows)
    lookup-d24    prompt lookup, depth 24: the tree's row budget (25 rows) spent on depth
    tree-d10      tree drafter, depth 10 x width 3 (31 rows): the depth transformers' lookup uses
    lookup+rp, tree+rp     the same with repeat penalty 1.3 (window --penalty-window)
    hf-pld        transformers generate(prompt_lookup_num_tokens=10), greedy
    hf-pld+rp     the same with repetition_penalty=1.3 (transformers penalizes the whole context)

Tokens per pass = new tokens / verify passes. Ours: one pass per window (the prompt's prefill,
which emits nothing, is not counted). transformers': every forward call of the model during
generate (a forward hook counts them); its first call runs the prompt together with the first
candidates and emits tokens, so it counts.

Figures (bench/results/spec_<device>.json): pooled tokens per pass (all new tokens / all passes)
per configuration, tree / hf-pld (goal >= 1.2), tree / lookup-d24 at the same row budget overall
and on prompts whose code has near-duplicate lines (>= 25 % of its non-trivial lines have a
near-duplicate, difflib ratio >= 0.8: there lookup finds several matches that disagree, the case
for verifying them side by side as a tree, as SpecInfer does, arXiv:2305.09781; goal >= 1.15), and
what repeat penalty 1.3 does to acceptance.

    .venv/bin/python bench/bench_spec.py --new-tokens 128 --repeats 1          # CPU, slow
    python bench/bench_spec.py --device cuda --dtype bfloat16 --model /tmp/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import code_edit_prompts, median, record  # noqa: E402

from engine.speculation.decoder import Decoder  # noqa: E402
from engine.model.device import synchronize  # noqa: E402
from engine.io.prompts import encode_prompt  # noqa: E402
from engine.session import open_runtime  # noqa: E402
from engine.speculation.settings import DecodeSettings  # noqa: E402

REPEAT = 1.3
OURS: dict[str, dict[str, Any]] = {
    "none": {"draft": "none"},
    "lookup": {"draft": "lookup", "match": "recent", "depth": 8, "width": 1},
    "tree": {"draft": "tree", "depth": 8, "width": 3},
    "lookup-d24": {"draft": "lookup", "match": "recent", "depth": 24, "width": 1},
    "tree-d10": {"draft": "tree", "depth": 10, "width": 3},
    "lookup+rp": {"draft": "lookup", "match": "recent", "depth": 8, "width": 1, "repeat_penalty": REPEAT},
    "tree+rp": {"draft": "tree", "depth": 8, "width": 3, "repeat_penalty": REPEAT},
}
HF: dict[str, dict[str, Any]] = {
    "hf-pld": {"prompt_lookup_num_tokens": 10},
    "hf-pld+rp": {"prompt_lookup_num_tokens": 10, "repetition_penalty": REPEAT},
}
DUP_RATIO, DUP_SHARE = 0.8, 0.25


def near_duplicate_share(item: dict[str, Any]) -> float:
    """Share of the prompt's non-trivial code lines (>= 8 characters stripped) that have a
    near-duplicate among the others (difflib ratio >= 0.8)."""
    m = re.search(r"```python\n(.*?)```", item["messages"][0]["content"], re.S)
    lines = [l.strip() for l in (m.group(1) if m else "").splitlines() if len(l.strip()) >= 8]
    if not lines:
        return 0.0
    dup = sum(any(j != i and difflib.SequenceMatcher(None, a, b).ratio() >= DUP_RATIO
                  for j, b in enumerate(lines)) for i, a in enumerate(lines))
    return dup / len(lines)


class PassCounter:
    """Counts forward calls of a transformers model (one per verify pass in generate)."""

    def __init__(self, model: torch.nn.Module):
        self.n = 0
        model.register_forward_hook(self._hook)

    def _hook(self, *_):
        self.n += 1


def run_ours(rt, ids: list[int], cfg: dict[str, Any], new_tokens: int, window: int) -> dict:
    # cfg is flat: drafting fields beside sampler ones (repeat_penalty)
    s = DecodeSettings.from_dict({"max_new_tokens": new_tokens, "penalty_window": window, **cfg})
    r = Decoder(rt, ids, s, detail=False).run()
    return {"tokens": r["tokens"], "passes": r["forward_passes"], "tok_s": r["tok_s"],
            "wall_s": r["wall_s"]}


def run_hf(model, counter: PassCounter, ids: list[int], kw: dict[str, Any], new_tokens: int,
           device: torch.device, eos: list[int]) -> dict:
    inp = torch.tensor([ids], device=device)
    counter.n = 0
    synchronize(device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(inp, attention_mask=torch.ones_like(inp), max_new_tokens=new_tokens,
                             do_sample=False, eos_token_id=eos, pad_token_id=eos[0], **kw)
    synchronize(device)
    wall = time.perf_counter() - t0
    toks = out[0, len(ids):].tolist()
    return {"tokens": toks, "passes": counter.n, "tok_s": len(toks) / wall, "wall_s": wall}


def pooled(results: dict, names: list[str], cfg: str) -> float:
    toks = sum(len(results[n][cfg]["tokens"]) for n in names)
    passes = sum(results[n][cfg]["passes"] for n in names)
    return toks / passes if passes else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="GGUF or HF folder (default: the bundled GGUF)")
    ap.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=5)
    ap.add_argument("--penalty-window", type=int, default=DecodeSettings().sampling.penalty_window)
    ap.add_argument("--no-hf", action="store_true", help="skip transformers' prompt lookup")
    a = ap.parse_args()

    rt = open_runtime(a.model, a.device, a.dtype)
    items = code_edit_prompts()[:a.prompts]
    ids = {it["id"]: encode_prompt(rt.tokenizer, it["messages"]) for it in items}
    dup = {it["id"]: near_duplicate_share(it) for it in items}
    configs = list(OURS) + ([] if a.no_hf else list(HF))

    hf = counter = None
    if not a.no_hf:
        from transformers import AutoModelForCausalLM
        path = rt.loaded.source
        t0 = time.perf_counter()
        hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                  dtype=rt.dtype).to(rt.device).eval()
        counter = PassCounter(hf)
        print(f"transformers {__import__('transformers').__version__} loaded the GGUF in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    eos = list(rt.tokenizer.eos_ids)

    print(f"{len(items)} prompts x {len(configs)} configurations x {a.repeats} repeats, "
          f"{a.new_tokens} new tokens, {rt.device_name} {rt.dtype_name}", flush=True)
    runs: dict[str, dict[str, list[dict]]] = {n: {c: [] for c in configs} for n in ids}
    t_start = time.perf_counter()
    for rep in range(a.repeats):
        for name, pid in ids.items():
            for c in configs:
                if c in OURS:
                    r = run_ours(rt, pid, OURS[c], a.new_tokens, a.penalty_window)
                else:
                    r = run_hf(hf, counter, pid, HF[c], a.new_tokens, rt.device, eos)
                runs[name][c].append(r)
                print(f"  [{time.perf_counter() - t_start:6.0f}s] repeat {rep + 1} {name} {c}: "
                      f"{len(r['tokens'])} tokens, {r['passes']} passes, {r['tok_s']:.1f} tok/s",
                      flush=True)

    # per prompt: tokens per pass (the first repeat: greedy is deterministic), median tok/s
    results = {n: {c: {"tokens": rs[0]["tokens"], "passes": rs[0]["passes"],
                       "tokens_per_pass": len(rs[0]["tokens"]) / rs[0]["passes"],
                       "tok_s": median([r["tok_s"] for r in rs])}
                   for c, rs in per.items()} for n, per in runs.items()}
    names = list(ids)
    dup_names = [n for n in names if dup[n] >= DUP_SHARE]

    w = 11
    print(f"\ntokens per pass (tok/s median of {a.repeats}), {a.new_tokens} new tokens, "
          f"{rt.device_name} {rt.dtype_name}")
    print(f"{'prompt':30s} {'dup':>5s} " + " ".join(f"{c:>{w}s}" for c in configs))
    for n in names:
        cells = " ".join(f"{results[n][c]['tokens_per_pass']:>{w}.2f}" for c in configs)
        print(f"{n:30s} {dup[n]:5.2f} {cells}")
        print(f"{'':30s} {'':5s} " + " ".join(f"{results[n][c]['tok_s']:>{w - 5}.1f} tok/s"
                                             for c in configs))
    pool = {c: pooled(results, names, c) for c in configs}
    print(f"{'pooled':30s} {'':5s} " + " ".join(f"{pool[c]:>{w}.2f}" for c in configs))

    figures: dict[str, Any] = {"pooled_tokens_per_pass": pool}
    same_as_ar = {n: {c: results[n][c]["tokens"] == results[n]["none"]["tokens"]
                      for c in configs if "+rp" not in c} for n in names}
    figures["tokens_equal_to_plain_decoding"] = same_as_ar
    tree_vs_d24 = {n: results[n]["tree"]["tokens_per_pass"] / results[n]["lookup-d24"]["tokens_per_pass"]
                   for n in names}
    figures["tree_over_lookup_d24"] = {
        "per_prompt": tree_vs_d24, "pooled": pool["tree"] / pool["lookup-d24"],
        "repeated_line_prompts": dup_names,
        "pooled_repeated_lines": (pooled(results, dup_names, "tree")
                                  / pooled(results, dup_names, "lookup-d24")) if dup_names else None,
        "goal": 1.15}
    figures["repeat_penalty_effect"] = {
        c: {"without": pool[c], "with": pool[c + "+rp"]}
        for c in ("lookup", "tree", "hf-pld") if c + "+rp" in pool}
    print(f"\ntree d8x3 / lookup d24 (same 25 rows): pooled {figures['tree_over_lookup_d24']['pooled']:.2f}"
          + (f", on prompts with near-duplicate lines ({', '.join(dup_names)}): "
             f"{figures['tree_over_lookup_d24']['pooled_repeated_lines']:.2f}" if dup_names else "")
          + "   (goal >= 1.15)")
    if not a.no_hf:
        per = {n: results[n]["tree"]["tokens_per_pass"] / results[n]["hf-pld"]["tokens_per_pass"]
               for n in names}
        figures["tree_over_hf_pld"] = {"per_prompt": per, "pooled": pool["tree"] / pool["hf-pld"],
                                       "goal": 1.2}
        print(f"tree d8x3 / transformers prompt lookup (10): pooled "
              f"{figures['tree_over_hf_pld']['pooled']:.2f}   (goal >= 1.2); per prompt "
              + ", ".join(f"{n.split('_')[1]} {v:.2f}" for n, v in per.items()))
    print("repeat penalty 1.3, pooled tokens per pass without -> with: " + ", ".join(
        f"{c} {v['without']:.2f} -> {v['with']:.2f}" for c, v in figures["repeat_penalty_effect"].items()))
    bad = [f"{n} {c}" for n, per in same_as_ar.items() for c, ok in per.items() if not ok]
    print("outputs equal to plain decoding: " + ("all" if not bad else "NOT " + ", ".join(bad)))

    path = record(f"spec_{rt.device.type}", {
        "device": rt.device_name, "dtype": rt.dtype_name, "model": str(rt.loaded.source),
        "new_tokens": a.new_tokens, "repeats": a.repeats, "penalty_window": a.penalty_window,
        "configs": {**OURS, **({} if a.no_hf else HF)},
        "near_duplicate_share": dup,
        "per_prompt": {n: {c: {k: v for k, v in r.items() if k != "tokens"} | {"new_tokens": len(r["tokens"])}
                           for c, r in per.items()} for n, per in results.items()},
        "figures": figures})
    print("recorded", path)


if __name__ == "__main__":
    main()
