"""Cost-model benchmark (engine/cost/chooser.py): adaptive windows against a grid of fixed
(depth, width), and against plain AR on low-acceptance prompts, side by side in one run.

Goals: adaptive tok/s >= best fixed - 5% on code-edit and Spec-Bench summarization; adaptive
never more than 3% slower than AR on Spec-Bench writing / roleplay.

    python bench/bench_adaptive.py [--device cpu] [--new-tokens 128] [--repeats 1] [--prompts 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import code_edit_prompts, median, record, specbench  # noqa: E402

from engine.speculation.decoder import Decoder  # noqa: E402
from engine.io.prompts import encode_prompt  # noqa: E402
from engine.cost.probe import probe_profile  # noqa: E402
from engine.session import open_runtime  # noqa: E402
from engine.speculation.settings import DecodeSettings  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default=None)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=3, help="prompts per workload group")
    ap.add_argument("--depths", default="2,4,8")
    ap.add_argument("--widths", default="1,3")
    a = ap.parse_args()

    rt = open_runtime(a.model, a.device, "auto")
    t0 = time.perf_counter()
    profile = probe_profile(rt, save=True)
    print(f"probed {rt.device_name} in {time.perf_counter() - t0:.1f} s: knee "
          f"{profile.fit.knee_rows}, slope {profile.fit.slope_ms_per_row:.3f} ms/row", flush=True)
    groups = {
        "code-edit": [p["messages"] for p in code_edit_prompts()[: a.prompts]],
        "summarization": [[{"role": "user", "content": q["turns"][0]}]
                          for q in specbench(["summarization"], a.prompts)],
        "writing+roleplay": [[{"role": "user", "content": q["turns"][0]}]
                             for q in specbench(["writing", "roleplay"], max(1, a.prompts // 2 + 1))],
    }
    grid = [(d, w) for d, w in itertools.product(
        [int(x) for x in a.depths.split(",")], [int(x) for x in a.widths.split(",")])]
    configs = {"ar": DecodeSettings(draft="none", max_new_tokens=a.new_tokens),
               "adaptive": DecodeSettings(draft="tree", adaptive=True, ar_floor=True,
                                          depth=max(d for d, _ in grid), width=max(w for _, w in grid),
                                          max_new_tokens=a.new_tokens)}
    for d, w in grid:
        configs[f"tree d{d} w{w}"] = DecodeSettings(draft="tree", depth=d, width=w,
                                                   max_new_tokens=a.new_tokens)
    results: dict[str, dict[str, list[float]]] = {g: {c: [] for c in configs} for g in groups}
    total = a.repeats * sum(len(v) for v in groups.values()) * len(configs)
    done = 0
    t_start = time.perf_counter()
    for rep in range(a.repeats):
        for g, prompts in groups.items():
            for msgs in prompts:
                ids = encode_prompt(rt.tokenizer, msgs)
                for name, s in configs.items():      # interleaved: drift hits every row alike
                    r = Decoder(rt, ids, s, detail=False, profile=profile).run()
                    results[g][name].append(r["tok_s"])
                    done += 1
                print(f"[{done}/{total}] {g}: " + ", ".join(
                    f"{n} {results[g][n][-1]:.1f}" for n in configs), flush=True)
    summary = {}
    for g, rows in results.items():
        # per-prompt tok/s summed over prompts = tokens per second over the group
        med = {n: median(v) for n, v in rows.items()}
        fixed = {n: v for n, v in med.items() if n.startswith("tree")}
        best = max(fixed, key=fixed.get)
        summary[g] = {"median_tok_s": med, "best_fixed": best,
                      "adaptive_over_best_fixed": med["adaptive"] / fixed[best],
                      "adaptive_over_ar": med["adaptive"] / med["ar"]}
        print(f"{g}: AR {med['ar']:.1f}, best fixed {best} {fixed[best]:.1f}, adaptive "
              f"{med['adaptive']:.1f} tok/s -> adaptive/best {summary[g]['adaptive_over_best_fixed']:.3f}, "
              f"adaptive/AR {summary[g]['adaptive_over_ar']:.3f}")
    out = {"command": " ".join(sys.argv), "model": rt.model_id, "device": rt.device_name,
           "dtype": rt.dtype_name, "new_tokens": a.new_tokens, "repeats": a.repeats,
           "profile": profile.to_json() if hasattr(profile, "to_json") else profile.id,
           "samples": results, "summary": summary, "elapsed_s": time.perf_counter() - t_start}
    print("recorded", record(f"adaptive_{rt.device.type}", out))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
