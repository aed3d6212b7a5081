"""The AR floor's decisions, replayed over real acceptance with a card's costs (issue 36: the
user default below the fixed tree it wraps).

    python3 bench/floor_sim.py [--model F.gguf] [--prompts design|tvl] [--tokens 128]
        [--window 1.38] [--noise 0.05] [--seeds 20] [--out bench/results/floor_sim.json]

Greedy decoding is deterministic, so what a d8 w3 tree window emits at each point of a request
is a function of the point alone: the drafter (engine.speculation.drafters.TreeDrafter) is a
function of the stream, and greedy verification accepts the longest path of the tree that the
plain greedy tokens follow. This script decodes each prompt once, plainly, on the CPU (the
bundled model, float32; cached beside --out), computes that count at every point, and then
replays decoding policies over it with costs in plain steps: a timed plain step queued behind
another 1.0, the first one after a window (not queued) and a window without a draft 1.15, a
drafted window `--window` (H100, bundled model, d8 w3's median 11 rows: 1.38-1.43 plain steps,
BENCHMARKS "A window's event while the next pass runs") plus 0.0093 a row beyond 11, each cost
times a log-normal noise. Policies: plain decoding, the fixed tree always, and the fixed tree
behind the real engine.cost.floor.ArFloor (lead 1, as on a GPU: the default, the rule before
2026-12-07 as engine.cost.floor.seed_floor, and any --floor variants) with the decoder's rules of
what the floor is told (engine.speculation.policies.ArFloorPolicy). It prints, per prompt and
in all, tokens per unit of time relative to plain decoding, medians over --seeds noise draws.

`--prompts design` (the default) takes Spec-Bench rows the card's tree_vs_llamacpp run does not
(categories summarization, qa, rag, math, writing, translation, reasoning, coding: rows 5-8 of
each); `--prompts tvl` the 14 that run uses (code edits 0-4; summarization, qa and rag 0-2).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

DEPTH, WIDTH = 8, 3
QUEUED, UNQUEUED, ROW = 1.0, 1.15, 0.0093
DESIGN_CATS = ("summarization", "qa", "rag", "math_reasoning", "writing", "translation",
               "reasoning", "coding")


def prompts(kind: str, model: str) -> list[dict]:
    """The prompts rendered with the model's chat template: tree_vs_llamacpp's 14 (`tvl`), or
    rows 5-8 of each design category (bench/llamacpp_spec.prompt_texts renders both)."""
    from llamacpp_spec import prompt_texts
    if kind == "tvl":
        return prompt_texts(model, "code-edit,specbench:summarization,qa,rag", 3, None)
    ps = prompt_texts(model, "specbench:" + ",".join(DESIGN_CATS), 9, None)
    return [p for c in DESIGN_CATS for p in [q for q in ps if q["category"] == c][5:9]]


def greedy_streams(model: str, ps: list[dict], tokens: int, cache: Path) -> dict[str, dict]:
    """prompt id -> {"prompt": ids, "new": greedy ids} (plain decoding on the CPU, cached)."""
    from engine.io.load import load_model
    from engine.model.runtime import Runtime
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    have = json.loads(cache.read_text()) if cache.exists() else {}
    cache.parent.mkdir(parents=True, exist_ok=True)
    lm = rt = None
    for n, p in enumerate(ps):
        key = f"{p['id']}:{tokens}"
        if key in have:
            continue
        if lm is None:
            lm = load_model(model)
            rt = Runtime(lm, device="cpu", dtype="float32")
        ids = lm.tokenizer.encode(p["text"], add_special_tokens=False)
        dec = Decoder(rt, ids, DecodeSettings(draft="none", max_new_tokens=tokens), detail=False)
        for _ in dec.windows():
            pass
        have[key] = {"prompt": ids, "new": list(dec.run_stats.new_tokens)}
        print(f"  decoded {n + 1}/{len(ps)} {p['id']}: {len(have[key]['new'])} tokens", flush=True)
        cache.write_text(json.dumps(have))
    return {p["id"]: have[f"{p['id']}:{tokens}"] for p in ps}


def emitted_at(stream: dict) -> list[tuple[int, int]]:
    """For each point i of the request (i tokens emitted): (tokens a d8 w3 window there emits,
    its rows; 0 rows = no draft, the window is a plain step)."""
    from engine.speculation.drafters import DraftRequest, TreeDrafter, tree_rows
    from engine.speculation.ngram import NgramIndex
    idx = NgramIndex(1, 4)
    idx.extend(stream["prompt"])
    new, drafter, out = stream["new"], TreeDrafter(), []
    for i in range(len(new)):
        tree = drafter.propose(DraftRequest.of(idx, DEPTH, WIDTH, tree_rows(DEPTH, WIDTH)))
        node, k = -1, i                       # walk the tree along the greedy tokens
        while k < len(new) - 1:
            kids = [j for j, par in enumerate(tree.parents) if par == node and tree.tokens[j] == new[k]]
            if not kids:
                break
            node, k = kids[0], k + 1
        out.append((k - i + 1, 1 + len(tree.tokens) if tree.tokens else 0))
        idx.append(new[i])
    return out


def simulate(at: list[tuple[int, int]], policy: str, window: float, noise: float, rng: random.Random,
             floor_kw: dict | None = None) -> float:
    """Time (in plain steps) to emit the request's tokens under `policy`: plain, tree or floor."""
    from engine.cost.floor import ArFloor, seed_floor
    floor = None
    if policy == "floor":
        floor = seed_floor(lead=1) if floor_kw is None else ArFloor(lead=1, **floor_kw)

    def jitter(c: float) -> float:
        return c * math.exp(rng.gauss(0.0, noise))

    i, t, after_window = 0, 0.0, True
    n = len(at)
    while i < n:
        remaining = n - i
        plain = policy == "plain" or (floor is not None and remaining > 1 and floor.want_plain_step())
        if plain:
            c = jitter(UNQUEUED if after_window else QUEUED)
            if floor is not None and floor.want_plain_step():
                floor.record_plain(c)
            i, t, after_window = i + 1, t + c, False
            continue
        emitted, rows = at[i]
        if rows == 0:                          # no draft: the window is a plain step, unqueued
            c = jitter(UNQUEUED)
            emitted = 1
        else:
            c = jitter(window + ROW * (rows - 11))
            emitted = min(emitted, remaining)
            if floor is not None:
                floor.record_window(c, emitted)
        i, t, after_window = i + emitted, t + c, True
    return t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="default: the bundled model")
    ap.add_argument("--prompts", choices=("design", "tvl"), default="design")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--window", type=float, default=1.38)
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--floor", action="append", default=[],
                    help="an ArFloor variant as JSON keyword arguments (repeatable), beside the default and the rule before")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "floor_sim.json"))
    a = ap.parse_args(argv)

    from engine.io.load import default_model_path
    a.model = a.model or str(default_model_path())
    ps = prompts(a.prompts, a.model)
    out = Path(a.out)
    streams = greedy_streams(a.model, ps, a.tokens, out.with_name("floor_sim_streams.json"))
    variants = {"plain": ("plain", None), "tree": ("tree", None),
                "floor (the rule before 2026-12-07)": ("floor", None), "floor (default)": ("floor", {})}
    for f in a.floor:
        variants[f"floor {f}"] = ("floor", json.loads(f))
    rows, speed = [], {k: [] for k in variants}
    for p in ps:
        at = emitted_at(streams[p["id"]])
        n = len(at)
        row = {"prompt": p["id"], "category": p["category"], "tokens": n,
               "mean_emitted": statistics.mean(e for e, r in at if r) if any(r for _, r in at) else 1.0}
        for name, (pol, kw) in variants.items():
            ts = [simulate(at, pol, a.window, a.noise, random.Random(s), kw) for s in range(a.seeds)]
            row[name] = n / statistics.median(ts)          # tokens a plain step's time
            speed[name].append(row[name])
        rows.append(row)
        print(f"{p['id']:<28} " + " ".join(f"{k} {row[k]:.2f}" for k in variants), flush=True)
    best = [max(r["plain"], r["tree"]) for r in rows]
    speed["best of plain and tree, per prompt"] = best
    summary = {k: {"median": statistics.median(v), "geomean": math.exp(statistics.mean(map(math.log, v))),
                   "below_best_of_plain_and_tree": sum(1 for x, b in zip(v, best) if x < 0.97 * b)}
               for k, v in speed.items()}
    print(json.dumps(summary, indent=1))
    out.write_text(json.dumps({"prompts": a.prompts, "window": a.window, "noise": a.noise,
                               "seeds": a.seeds, "summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
