"""CPU decode with packed weights (the int4 kernels) vs dequantized float32, beside llama.cpp.

One run, interleaved (specscope.bench.run_benchmark: for each repeat, for each prompt, every row
once in a rotating order), so the shared machine's load hits every row alike:

    ours-packed-ar, ours-packed-lookup   Runtime(weights="packed"): Q4_x layers on torch's int4
                                         kernels, bfloat16 LM head, row-invariant attention
    ours-ar, ours-lookup                 Runtime(weights="dequantized"): float32 throughout
    llamacpp-plain, llamacpp-pld10/2     llama-cpp-python on the same GGUF (if installed)

Figures: decode tok/s (after each prompt's first token) and tok/s, medians over repeats; ratios
paired per repeat: packed / dequantized (AR, lookup), ours / llama.cpp (each of ours vs
llama.cpp plain and vs llama.cpp's best row); greedy identity of every lookup row vs its AR.

    .venv/bin/python bench/bench_cpu_weights.py --threads 1 --repeats 3 --new-tokens 128
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.io.load import load_model  # noqa: E402
from engine.io.prompts import encode_prompt  # noqa: E402
from engine.io.workloads import load_workload  # noqa: E402
from engine.model.runtime import Runtime  # noqa: E402
from specscope.bench import BenchConfig, run_benchmark  # noqa: E402
from specscope.bench_report import write_results  # noqa: E402
from specscope.peers import PeerSkipped, llamacpp_rows, our_rows  # noqa: E402


def paired(summary: dict, a: str, b: str, key: str) -> dict | None:
    """a's per-repeat `key` over b's, median and min-max over repeats."""
    if a not in summary or b not in summary:
        return None
    r = [x[key] / y[key] for x, y in zip(summary[a]["per_repeat"], summary[b]["per_repeat"])
         if x[key] and y[key]]
    return {"median": round(statistics.median(r), 3), "min": round(min(r), 3),
            "max": round(max(r), 3)} if r else None


def identical(summary: dict, a: str, b: str) -> dict | None:
    if a not in summary or b not in summary:
        return None
    ref = {(s["repeat"], s["prompt"]): s["tokens"] for s in summary[b]["samples"]}
    pairs = [(s["tokens"], ref.get((s["repeat"], s["prompt"]))) for s in summary[a]["samples"]]
    return {"compared": len(pairs), "identical": sum(x == y for x, y in pairs)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--workload", default="code-edit")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--ours", default="ar,lookup")
    p.add_argument("--llamacpp-pld", default="10,2", help="llama.cpp lookup rows ('' for none)")
    p.add_argument("--no-llamacpp", action="store_true")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "cpu_packed"))
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    kinds = tuple(k for k in a.ours.split(",") if k)
    cfg = BenchConfig(workload=a.workload, new_tokens=a.new_tokens, repeats=a.repeats,
                      ours=kinds, peers=() if a.no_llamacpp else ("llamacpp",), threads=a.threads)
    prompts = load_workload(cfg.workload, cfg.per_category, cfg.prompts)
    loaded = load_model(a.model)
    deq = Runtime(loaded, "cpu", "float32", weights="dequantized")
    packed = Runtime(loaded, "cpu", "float32", weights="packed")
    rows = [dataclasses.replace(r, name=r.name.replace("ours-", "ours-packed-"),
                                label=r.label + " (packed)") for r in our_rows(packed, kinds)]
    rows += our_rows(deq, kinds)
    skipped = []
    if not a.no_llamacpp:
        longest = max(len(encode_prompt(deq.tokenizer, list(q.messages))) for q in prompts)
        n_ctx = 1 << (longest + cfg.new_tokens + 64).bit_length()
        pld = tuple(int(x) for x in a.llamacpp_pld.split(",") if x)
        try:
            rows += llamacpp_rows(loaded.source, deq.device, n_ctx, tuple(deq.tokenizer.eos_ids),
                                  threads=a.threads, pld=pld)
        except PeerSkipped as e:
            skipped.append({"peer": "llamacpp", "engine": "llama.cpp", "reason": str(e)})
    t0 = time.perf_counter()

    def say(msg: str, frac: float | None) -> None:
        print(f"[{time.perf_counter() - t0:6.0f}s] {msg}", file=sys.stderr, flush=True)

    res = run_benchmark(cfg, deq, rows, prompts, skipped, say,
                        {"command": "python bench/bench_cpu_weights.py " + " ".join(sys.argv[1:]),
                         "weights": {"packed": packed.weights_label,
                                     "dequantized": deq.weights_label}})
    s = res["rows"]
    llama = [n for n in s if n.startswith("llamacpp-")]
    best_llama = max(llama, key=lambda n: s[n]["decode_tok_s"]["median"], default=None)
    fig = {"decode_tok_s": {n: s[n]["decode_tok_s"] for n in s},
           "tok_s": {n: s[n]["tok_s"] for n in s},
           "tokens_per_pass": {n: s[n]["tokens_per_pass"] for n in s},
           "packed_over_dequantized_decode": {
               k: paired(s, f"ours-packed-{k}", f"ours-{k}", "decode_tok_s") for k in kinds},
           "best_llamacpp_decode": best_llama,
           "ours_over_llamacpp_decode": {
               n: {"plain": paired(s, n, "llamacpp-plain", "decode_tok_s"),
                   "best": paired(s, n, best_llama, "decode_tok_s") if best_llama else None}
               for n in s if n.startswith("ours-")},
           "identical_to_ar": {n: identical(s, n, n.rsplit("-", 1)[0] + "-ar")
                               for n in s if n.startswith("ours-") and not n.endswith("-ar")},
           "packed_ar_vs_dequantized_ar": identical(s, "ours-packed-ar", "ours-ar")}
    res["cpu_weights"] = fig
    paths = write_results(res, Path(a.out))
    print(json.dumps(fig, indent=1))
    print(f"json: {paths.get('json')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
