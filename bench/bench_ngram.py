"""How much drafting costs: the n-gram index and the drafters on a 4,000-token code stream.

The stream: each code-edit workload prompt (a stdlib function plus an edit instruction),
followed by the answer a coding agent gives (the function re-emitted with the rename),
tokenized with the bundled model's tokenizer (engine.tokenizer over SmolLM2's GGUF), cut at
4,000 tokens. Per token of that stream we time `extend` (index one more token), `lookup`
(longest suffix n-gram with an earlier match) and one `propose` for each drafter, as the decoder
does once per window.

Second part (--no-oracle skips it): tokens per verify pass when the target emits each answer
exactly (engine.speculation.oracle: greedy verification against an oracle target), linear
lookup vs tree.

    .venv/bin/python bench/bench_ngram.py [--tokens 4000] [--record]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import code_edit_prompts, median, record  # noqa: E402

from engine.speculation.drafters import DraftRequest, LookupDrafter, TreeDrafter  # noqa: E402
from engine.io.gguf_file import read_gguf  # noqa: E402
from engine.io.load import default_model_path  # noqa: E402
from engine.speculation.ngram import NgramIndex  # noqa: E402
from engine.speculation.oracle import oracle_tokens_per_pass  # noqa: E402
from engine.io.tokenizer import Tokenizer  # noqa: E402


def answer_text(item: dict) -> str:
    code = re.search(r"```python\n(.*?)```", item["messages"][0]["content"], re.S).group(1)
    return "```python\n" + re.sub(rf"\b{item['old_name']}\b", item["new_name"], code) + "```"


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def time_index(stream: list[int], n_min: int, n_max: int, depth: int, width: int) -> dict:
    idx = NgramIndex(n_min, n_max)
    drafters = {"lookup-recent": LookupDrafter("recent"), "lookup-frequent": LookupDrafter("frequent"),
                f"tree {depth}x{width}": TreeDrafter()}
    t_extend: list[float] = []
    t_lookup: list[float] = []
    t_propose: dict[str, list[float]] = {k: [] for k in drafters}
    clock = time.perf_counter_ns
    for tok in stream:
        t0 = clock()
        idx.append(tok)
        t1 = clock()
        idx.lookup()
        t2 = clock()
        t_extend.append((t1 - t0) / 1e3)
        t_lookup.append((t2 - t1) / 1e3)
    # propose over the last quarter of the stream, where the context is longest
    idx = NgramIndex(n_min, n_max)
    idx.extend(stream[: 3 * len(stream) // 4])
    for tok in stream[3 * len(stream) // 4:]:
        idx.append(tok)
        for name, d in drafters.items():
            t0 = clock()
            d.propose(DraftRequest.of(idx, depth, width, 1 + depth * width))
            t_propose[name].append((clock() - t0) / 1e3)
    out = {"extend_us": {"median": median(t_extend), "p99": percentile(t_extend, 0.99)},
           "lookup_us": {"median": median(t_lookup), "p99": percentile(t_lookup, 0.99)}}
    for name, ts in t_propose.items():
        out[f"propose_us[{name}]"] = {"median": median(ts), "p99": percentile(ts, 0.99)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--ngram-min", type=int, default=1)
    ap.add_argument("--ngram-max", type=int, default=4)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--width", type=int, default=3)
    ap.add_argument("--no-oracle", action="store_true")
    ap.add_argument("--record", action="store_true", help="write bench/results/ngram.json")
    args = ap.parse_args()
    torch.set_num_threads(1)

    tok = Tokenizer.from_gguf_fields(read_gguf(default_model_path()).metadata)
    items = code_edit_prompts()
    pairs = [(tok.encode(it["messages"][0]["content"], add_special_tokens=False),
              tok.encode(answer_text(it), add_special_tokens=False)) for it in items]
    stream: list[int] = []
    while len(stream) < args.tokens:
        for p, a in pairs:
            stream += p + a
    stream = stream[:args.tokens]

    figures = time_index(stream, args.ngram_min, args.ngram_max, args.depth, args.width)
    print(f"n-gram index on a {len(stream)}-token code-edit stream "
          f"(n {args.ngram_min}..{args.ngram_max}, SmolLM2 tokenizer), microseconds per call:")
    for name, f in figures.items():
        print(f"  {name:32s} median {f['median']:8.2f}   p99 {f['p99']:8.2f}")

    payload = {"stream_tokens": len(stream), "tokenizer": "engine.tokenizer (SmolLM2-135M GGUF)",
               **figures}
    if not args.no_oracle:
        print("\noracle target (emits the edited function exactly), greedy, tokens per verify pass:")
        print(f"  {'prompt':30s} {'answer':>6s} {'recent d8':>9s} {'first d8':>9s} "
              f"{'tree ' + str(args.depth) + 'x' + str(args.width):>9s}")
        oracle = {}
        for it, (p, a) in zip(items, pairs):
            r = oracle_tokens_per_pass(p, a, LookupDrafter("recent"), args.depth, 1)
            f = oracle_tokens_per_pass(p, a, LookupDrafter("first"), args.depth, 1)
            t = oracle_tokens_per_pass(p, a, TreeDrafter(), args.depth, args.width)
            oracle[it["id"]] = {"recent": r, "first": f, "tree": t}
            print(f"  {it['id']:30s} {len(a):6d} {r:9.2f} {f:9.2f} {t:9.2f}")
        payload["oracle_tokens_per_pass"] = oracle
    if args.record:
        print("recorded", record("ngram", payload))


if __name__ == "__main__":
    main()
