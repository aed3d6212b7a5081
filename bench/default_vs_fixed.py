"""Does the user default earn its place? (issue 33) The default (USER_DEFAULTS) against fixed
cells and plain decoding, per category, side by side in one run, on held-out prompts.

Groups: code-edit (the bundled prompts), Spec-Bench translation, summarization, qa,
math_reasoning, rag (rows --offset .. --offset + --per-category of each: the first rows are the
ones the policies were tuned on) and the MT-Bench categories together (one row of each of the
eight). For each prompt every setting runs once, in a rotating order; a setting's speedup on a
prompt is its decode tok/s over plain decoding's on that prompt, and a group's figure is the
median over its prompts. Prints per group: plain tok/s, each setting's speedup, the best fixed
cell, and default / best fixed. Every run's tokens are also compared with plain decoding's.

    python3 bench/default_vs_fixed.py --device cuda --model M --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from engine.model.device import leave_a_core_for_the_ui  # noqa: E402
from engine.io.prompts import encode_prompt  # noqa: E402
from engine.io.workloads import code_edit_rows, specbench_rows  # noqa: E402
from engine.session import open_runtime  # noqa: E402
from engine.speculation.decoder import Decoder  # noqa: E402
from engine.speculation.settings import DecodeSettings, user_defaults  # noqa: E402

FIXED = {
    "tree d4 w3": dict(draft="tree", depth=4, width=3),
    "tree d8 w3": dict(draft="tree", depth=8, width=3),
    "tree d16 w3": dict(draft="tree", depth=16, width=3),
    "tree d8 w1": dict(draft="tree", depth=8, width=1),
    "lookup d8": dict(draft="lookup", depth=8, width=1),
}
OTHER = {
    "default": {},                     # user_defaults(this device) as shipped (USER_DEFAULTS on a GPU)
    "adaptive + floor": dict(adaptive=True, ar_floor=True),   # the default before 2026-12-03
    "adaptive, no floor": dict(adaptive=True, ar_floor=False),
    "tree d8 w3 + floor": dict(draft="tree", depth=8, width=3, adaptive=False, ar_floor=True),
    "tree d8 w1 + floor": dict(draft="tree", depth=8, width=1, adaptive=False, ar_floor=True),
    "lookup d8 + floor": dict(draft="lookup", depth=8, width=1, adaptive=False, ar_floor=True),
}
MT_BENCH = ["writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"]


def settings(name: str, n: int, device_type: str | None = None) -> DecodeSettings:
    base = replace(user_defaults(device_type), max_new_tokens=n)
    if name == "plain":
        return replace(base, draft="none", adaptive=False, ar_floor=False)
    if name in FIXED:
        return replace(base, adaptive=False, ar_floor=False, **FIXED[name])
    return replace(base, **OTHER[name])


def groups(per: int, offset: int) -> dict[str, list[list[dict]]]:
    out = {"code-edit": [r["messages"] for r in code_edit_rows()]}
    for c in ("translation", "summarization", "qa", "math_reasoning", "rag"):
        rows = specbench_rows([c], offset + per)[offset:]
        out[c] = [[{"role": "user", "content": r["turns"][0]}] for r in rows]
    mt = specbench_rows(MT_BENCH, 6)
    out["mt-bench"] = [[{"role": "user", "content": r["turns"][0]}]
                       for c in MT_BENCH for r in [x for x in mt if x["category"] == c][5:6]]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default=None)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--per-category", type=int, default=3)
    ap.add_argument("--offset", type=int, default=20)
    ap.add_argument("--groups", default=None, help="comma-separated subset")
    ap.add_argument("--settings", default=None, help="comma-separated subset (plain always runs)")
    ap.add_argument("--mt", type=int, default=8, help="MT-Bench prompts (one per category)")
    ap.add_argument("--code", type=int, default=5, help="code-edit prompts")
    ap.add_argument("--json", default=None)
    ap.add_argument("--detail", action="store_true",
                    help="per-row detail as the window decodes (default: as `generate`, the sweep and the race)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (default: as `generate` and the window, every core but one)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    else:
        leave_a_core_for_the_ui()
    rt = open_runtime(a.model, a.device, "auto")
    names = ["plain", *FIXED, *OTHER]
    if a.settings:
        keep = {x.strip() for x in a.settings.split(",")}
        names = ["plain"] + [nm for nm in names[1:] if nm in keep]
    t0 = time.perf_counter()
    warm = encode_prompt(rt.tokenizer, [{"role": "user", "content": "Say hello."}])
    for nm in names:                      # graphs, kernels and the card profile (the default's probe)
        Decoder(rt, warm, settings(nm, 16, rt.device.type), detail=a.detail).run()
    print(f"# {rt.device_name}, {rt.dtype_name}, detail {a.detail}, warm-up {time.perf_counter() - t0:.0f} s", flush=True)
    G = groups(a.per_category, a.offset)
    if a.groups:
        G = {k: v for k, v in G.items() if k in a.groups.split(",")}
    if "code-edit" in G:
        G["code-edit"] = G["code-edit"][:a.code]
    if "mt-bench" in G:
        G["mt-bench"] = G["mt-bench"][:a.mt]
    results, same, total = {}, 0, 0
    for g, prompts in G.items():
        rows = []
        for i, msgs in enumerate(prompts):
            ids = encode_prompt(rt.tokenizer, msgs)
            order = names[i % len(names):] + names[:i % len(names)]
            got = {nm: Decoder(rt, ids, settings(nm, a.new_tokens, rt.device.type), detail=a.detail).run()
                   for nm in order}
            plain = got["plain"]
            for nm in names:
                total += 1
                same += got[nm]["tokens"] == plain["tokens"]
            rows.append({nm: got[nm]["tok_s"] for nm in names} | {"prompt_tokens": len(ids)})
            print(f"  {g} #{i} ({len(ids)} tok): " + " ".join(
                f"{nm}={got[nm]['tok_s'] / plain['tok_s']:.2f}" for nm in names[1:]), file=sys.stderr,
                flush=True)
        speed = {nm: statistics.median(r[nm] / r["plain"] for r in rows) for nm in names[1:]}
        best = max((nm for nm in FIXED if nm in speed), key=lambda nm: speed[nm])
        results[g] = dict(plain_tok_s=statistics.median(r["plain"] for r in rows), speedup=speed,
                          best_fixed=best, default_over_best=speed.get("default", float("nan")) / speed[best],
                          prompts=len(rows), runs=rows)
        print(f"{g:15s} plain {results[g]['plain_tok_s']:6.1f} tok/s | " + " ".join(
            f"{nm} {speed[nm]:.2f}" for nm in names[1:]) +
            f" | best fixed {best} | default/best {results[g]['default_over_best']:.2f}", flush=True)
    print(f"tokens identical to plain decoding: {same}/{total}")
    print(f"total {time.perf_counter() - t0:.0f} s")
    if a.json:
        Path(a.json).write_text(json.dumps(dict(device=rt.device_name, dtype=rt.dtype_name,
                                                new_tokens=a.new_tokens, groups=results,
                                                identical=[same, total]), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
