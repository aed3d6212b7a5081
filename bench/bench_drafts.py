"""Model drafts against n-gram drafts and plain decoding: tokens per pass and tok/s vs AR.

Workloads: the code-edit prompts and the Spec-Bench summarization, writing and roleplay
questions (the first --per-category of each). Per prompt and sampling mode (greedy, and
temperature 0.7 with a fixed seed), every configuration runs back to back:

    ar            plain decoding (draft none): the baseline
    tree          the n-gram tree drafter, depth 8 x width 3
    ee-K          early exit: the target's first K layers draft a chain of --ee-depth tokens,
                  for each K of --exit-layers (the sweep)
    eetree-K      early exit at the largest K, a tree of width 2 (the draft's top 2 at the 2
                  most likely nodes of each depth)
    takeover-K    early exit at the largest K with --takeover: each window, the n-gram tree
                  (width 3) drafts instead when it is priced cheaper per token
                  (engine.speculation.takeover)
  with --adaptive (the cost model prices every window, draft passes included):
    tree-ad       the n-gram tree, depth and width chosen per window (up to 8 x 3)
    ee-ad-K       early exit at K, depth and width chosen per window (up to --ee-depth x 3),
                  for each K of --exit-layers
    takeover-ad-K the priced takeover with early exit at the largest K
                  (n-gram tree, early exit or plain step, each window priced on one clock)
    self-draft    (--self-draft) the model as a draft model of itself, the draft's weights
                  --draft-weights (packed: a Q4 draft of the float target): every draft
                  accepted where the two agree, the cost of a second model's passes visible

Tokens per pass = new tokens / verify passes; tok/s = decoding tok/s, the tokens after the
first window over the time after it (the prefill, the same for every configuration, left out),
the median of --repeats rounds, each round running every configuration once (interleaved). Greedy runs are checked against AR token for
token. Figures per category and per configuration land in bench/results/drafts_<device>.json.

    .venv/bin/python bench/bench_drafts.py --per-category 1 --code-prompts 1 --exit-layers 16 24
    python3 bench/bench_drafts.py --device cuda --dtype bfloat16 --model /tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))    # this checkout's engine
from common import code_edit_prompts, median, record, run_after_first_window, specbench  # noqa: E402

import torch  # noqa: E402

from engine.io.prompts import encode_prompt  # noqa: E402
from engine.session import draft_opener, open_runtime  # noqa: E402
from engine.speculation.decoder import Decoder  # noqa: E402
from engine.speculation.settings import DecodeSettings  # noqa: E402

CATEGORIES = ("summarization", "writing", "roleplay")
MODES = {"greedy": 0.0, "t0.7": 0.7}


def configs(exit_layers: list[int], ee_depth: int, takeover: bool, self_draft: bool,
            model: str | None, adaptive: bool = False,
            fixed_layers: list[int] | None = None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {"ar": {"draft": "none"},
                                      "tree": {"draft": "tree", "depth": 8, "width": 3}}
    if adaptive:
        k = max(exit_layers)
        out["tree-ad"] = {"draft": "tree", "depth": 8, "width": 3, "adaptive": True}
        for kk in exit_layers:
            out[f"ee-ad-{kk}"] = {"draft": "early-exit", "exit_layer": kk, "depth": ee_depth,
                                  "width": 3, "adaptive": True}
        out[f"takeover-ad-{k}"] = {"draft": "early-exit", "exit_layer": k, "depth": ee_depth,
                                   "width": 3, "adaptive": True, "takeover": True}
        exit_layers = fixed_layers if fixed_layers is not None else [k]
        if not exit_layers:
            exit_layers = [k]
    for k in exit_layers:
        out[f"ee-{k}"] = {"draft": "early-exit", "exit_layer": k, "depth": ee_depth, "width": 1}
    k = max(exit_layers)
    out[f"eetree-{k}"] = {"draft": "early-exit", "exit_layer": k, "depth": ee_depth, "width": 2}
    if takeover:     # the model side drafts a chain, the n-gram side a tree of width 3
        out[f"takeover-{k}"] = {"draft": "early-exit", "exit_layer": k, "depth": ee_depth,
                                "takeover": True, "width": 3}
    if self_draft:
        out["self-draft"] = {"draft": "model", "draft_model": model or "", "depth": ee_depth,
                             "width": 1}
    return out


def prompts(code: int, per_category: int) -> list[tuple[str, str, list[dict]]]:
    """(id, category, messages) of the workload."""
    rows = [(it["id"], "code-edit", it["messages"]) for it in code_edit_prompts()[:code]]
    rows += [(f"{r['category']}-{r['question_id']}", r["category"],
              [{"role": "user", "content": r["turns"][0]}])
             for r in specbench(CATEGORIES, per_category)]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="GGUF or HF folder (default: the bundled GGUF)")
    ap.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    ap.add_argument("--weights", default="auto", choices=["auto", "packed", "dequantized"])
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--code-prompts", type=int, default=5)
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--exit-layers", type=int, nargs="+", default=[12, 18, 24, 27])
    ap.add_argument("--ee-depth", type=int, default=4)
    ap.add_argument("--no-takeover", action="store_true")
    ap.add_argument("--adaptive", action="store_true",
                    help="also the priced configurations (tree-ad, ee-ad-K, takeover-ad-K)")
    ap.add_argument("--only", nargs="+", default=None,
                    help="run only these configurations (ar is always run)")
    ap.add_argument("--fixed-layers", type=int, nargs="*", default=None,
                    help="with --adaptive: the fixed ee-K chains to run (default: the largest K)")
    ap.add_argument("--self-draft", action="store_true", help="also the model as its own draft")
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--draft-weights", default="packed", choices=["auto", "packed", "dequantized"],
                    help="self-draft: the draft's weights (packed: a Q4 draft of the float self)")
    ap.add_argument("--threads", type=int, default=1, help="CPU: torch threads (1: see BENCHMARKS.md)")
    ap.add_argument("--out", default=None, help="results name (default drafts_<device>)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    rt = open_runtime(a.model, a.device, a.dtype, weights=a.weights)
    opened: dict[str, Any] = {}       # the self-draft is opened once and reused by every run
    open_draft = draft_opener(rt, weights=a.draft_weights)

    def opener(path: str):
        if path not in opened:
            opened[path] = open_draft(path)
        return opened[path]

    cfgs = configs(a.exit_layers, a.ee_depth, not a.no_takeover, a.self_draft,
                   str(rt.loaded.source), a.adaptive, a.fixed_layers)
    if a.only:
        unknown = set(a.only) - set(cfgs)
        if unknown:
            ap.error(f"--only: no configuration {', '.join(sorted(unknown))}; known: {', '.join(cfgs)}")
        cfgs = {k: v for k, v in cfgs.items() if k == "ar" or k in a.only}
    if a.adaptive:       # the device's cost profile (and exit-layer timings) before any clock
        from engine.cost.probe import card_profile
        t0 = time.perf_counter()
        prof = card_profile(rt, check=True)
        print(f"cost profile {prof.id} ({time.perf_counter() - t0:.1f} s): one row {prof.ms(1):.3f} ms, "
              f"8 rows {prof.ms(8):.3f} ms, exit layers {prof.extra.get('exit_ms')}", flush=True)
    work = prompts(a.code_prompts, a.per_category)
    ids = {pid: encode_prompt(rt.tokenizer, msgs) for pid, _, msgs in work}
    cat_of = {pid: cat for pid, cat, _ in work}
    print(f"{len(work)} prompts x {len(cfgs)} configurations x {len(a.modes)} modes x "
          f"{a.repeats} repeats, {a.new_tokens} new tokens, {rt.device_name} {rt.dtype_name} "
          f"({rt.weights_label})", flush=True)

    runs: dict = defaultdict(lambda: defaultdict(dict))     # mode -> prompt -> config -> result
    t_start = time.perf_counter()
    for pid in ids:       # untimed: each prompt's first run pays one-time costs (AR ran first)
        Decoder(rt, ids[pid], DecodeSettings(draft="none", max_new_tokens=8), detail=False).run()
    def decode(pid: str, s: DecodeSettings) -> dict:
        """One run; decode_tok_s: the tokens after the first window over the time after it (the
        prefill, the same for every configuration, left out: it is noise in a 128-token run)."""
        return run_after_first_window(Decoder(rt, ids[pid], s, detail=False, open_model=opener))

    for mode in a.modes:
        for pid in ids:
            reps: dict = defaultdict(list)
            # interleaved: every configuration once per round, so drift on a shared machine
            # falls on all of them alike; the median of the rounds is kept
            for rep in range(a.repeats):
                for name, cfg in cfgs.items():
                    s = DecodeSettings.from_dict({"max_new_tokens": a.new_tokens, "seed": rep,
                                                  "temperature": MODES[mode], **cfg})
                    reps[name].append(decode(pid, s))
            for name in cfgs:
                r0 = reps[name][0]
                runs[mode][pid][name] = {
                    "tokens": r0["tokens"], "new_tokens": r0["new_tokens"],
                    "passes": r0["forward_passes"],
                    "tok_s": median([r["decode_tok_s"] for r in reps[name]]),
                    "e2e_tok_s": median([r["tok_s"] for r in reps[name]]),
                    "accepted": r0["accepted_draft_tokens"], "proposed": r0["proposed_draft_tokens"],
                    "draft_ms_per_token": r0.get("draft_ms_per_token")}
                print(f"  [{time.perf_counter() - t_start:6.0f}s] {mode} {pid} {name}: "
                      f"{r0['new_tokens']} tokens, {r0['forward_passes']} passes, "
                      f"{runs[mode][pid][name]['tok_s']:.1f} tok/s decoding", flush=True)

    figures: dict = {}
    w = 12
    for mode, per in runs.items():
        cats = sorted({cat_of[p] for p in per})
        print(f"\n{mode}: tokens per pass / decoding tok/s vs AR, pooled per category "
              f"({a.new_tokens} new tokens, {rt.device_name} {rt.dtype_name})")
        print(f"{'category':16s} " + " ".join(f"{c:>{w}s}" for c in cfgs))
        fig = figures.setdefault(mode, {})
        for cat in cats:
            names = [p for p in per if cat_of[p] == cat]
            row_tpp, row_x = [], []
            for c in cfgs:
                toks = sum(per[p][c]["new_tokens"] for p in names)
                passes = sum(per[p][c]["passes"] for p in names)
                # tok/s vs AR: the ratio of summed wall times for the same token counts
                wall = sum(per[p][c]["new_tokens"] / per[p][c]["tok_s"] for p in names)
                wall_ar = sum(per[p]["ar"]["new_tokens"] / per[p]["ar"]["tok_s"] for p in names)
                tok_s, tok_s_ar = toks / wall, sum(per[p]["ar"]["new_tokens"] for p in names) / wall_ar
                fig.setdefault(cat, {})[c] = {"tokens_per_pass": toks / passes,
                                              "tok_s": tok_s, "vs_ar": tok_s / tok_s_ar}
                row_tpp.append(f"{toks / passes:>{w}.2f}")
                row_x.append(f"{tok_s / tok_s_ar:>{w - 1}.2f}x")
            print(f"{cat:16s} " + " ".join(row_tpp))
            print(f"{'':16s} " + " ".join(row_x))
        if mode == "greedy":
            bad = [f"{p} {c}" for p in per for c in cfgs if per[p][c]["tokens"] != per[p]["ar"]["tokens"]]
            fig["lossless"] = not bad
            print("greedy outputs equal to AR: " + ("all" if not bad else "NOT " + ", ".join(bad)))
        # the takeover goal: never below the better of its two drafters by more than 5 %
        for c in cfgs:
            if not c.startswith("takeover-"):
                continue
            k = c.split("-")[-1]
            pair = ("tree-ad", f"ee-ad-{k}") if "-ad-" in c else ("tree", f"ee-{k}")
            if not all(p in cfgs for p in pair):
                continue
            worst = min(fig[cat][c]["tok_s"] / max(fig[cat][pair[0]]["tok_s"], fig[cat][pair[1]]["tok_s"])
                        for cat in cats)
            fig[f"{c}_worst_vs_better_drafter"] = worst
            print(f"{c}: worst category vs the better of {pair[0]} and {pair[1]}: {worst:.2f} (goal >= 0.95)")

    path = record(a.out or f"drafts_{rt.device.type}", {
        "device": rt.device_name, "dtype": rt.dtype_name, "weights": rt.weights_label,
        "model": str(rt.loaded.source), "new_tokens": a.new_tokens, "repeats": a.repeats,
        "configs": cfgs, "prompts": [p for p, _, _ in work], "figures": figures,
        "per_prompt": {m: {p: {c: {k: v for k, v in r.items() if k != "tokens"}
                               for c, r in per.items()} for p, per in pr.items()}
                       for m, pr in runs.items()}})
    print("recorded", path)


if __name__ == "__main__":
    main()
