"""The fast CPU path's LM head (the bundled model's tied Q8_0 head, 49,152 x 576): a verify pass
that returns every logit (int8 blocks over the whole vocabulary) against a greedy pass that
returns each row's top 5 (the per-row int8 screen, then the exact blocks for its candidates
only: engine.weights.cpu_fast.cpu_int8_blocks_top), interleaved, on real prompts; and how many
vocabulary rows the screen keeps for the exact step.

    .venv/bin/python bench/bench_cpu_head.py --threads 1 --repeats 7 --out bench/results/cpu_head/run1.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.io.load import load_model  # noqa: E402
from engine.io.prompts import encode_prompt  # noqa: E402
from engine.io.workloads import code_edit_rows  # noqa: E402
from engine.model.runtime import Runtime, chain  # noqa: E402
from engine.weights import cpu_fast  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rows", default="1,2,4,8,9,16")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--prompts", type=int, default=3)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    rt = Runtime(load_model(), "cpu", "auto", weights="packed")
    head = rt.model.lm_head.parts[0]
    if not isinstance(head, cpu_fast.CpuInt8Blocks) or head.screen is None:
        raise SystemExit(f"this CPU's fast path has no screened Q8_0 head ({type(head).__name__}); "
                         "it needs torch's int4 CPU kernels and a Q8_0 head")
    kept: list[int] = []
    rows_of = cpu_fast.CpuInt8Blocks.rows

    def counting(self, idx):
        kept.append(len(idx))
        return rows_of(self, idx)

    cpu_fast.CpuInt8Blocks.rows = counting
    rows = [int(r) for r in a.rows.split(",")]
    times: dict[str, dict[int, list[float]]] = {m: {r: [] for r in rows} for m in ("logits", "top5")}
    cands: dict[int, list[int]] = {r: [] for r in rows}
    sessions = []
    for pr in code_edit_rows()[:a.prompts]:
        ids = encode_prompt(rt.tokenizer, pr["messages"])
        ses = rt.session(len(ids) + 8)
        ses.prefill(ids[:-max(rows)])
        sessions.append((ses, ids[-max(rows):]))
    load = os.getloadavg()[0]
    for rep in range(a.repeats):
        for ses, toks in sessions:
            for r in rows:
                order = ("logits", "top5") if rep % 2 == 0 else ("top5", "logits")
                for mode in order:
                    kept.clear()
                    t0 = time.perf_counter()
                    ses.verify(toks[:r], *chain(r), need_logits=mode == "logits")
                    times[mode][r].append(time.perf_counter() - t0)
                    if mode == "top5":
                        cands[r].extend(kept)
    res = {"threads": a.threads, "repeats": a.repeats, "prompts": a.prompts, "load_start": load,
           "load_end": os.getloadavg()[0], "cpu": torch.backends.cpu.get_cpu_capability(),
           "rows": {}}
    print(f"load {load:.1f} -> {res['load_end']:.1f}; pass ms (median), {a.threads} thread(s)")
    print("rows  all logits  top 5 (screen)  ratio  exact rows kept (median / max)")
    for r in rows:
        lo, tp = statistics.median(times["logits"][r]) * 1e3, statistics.median(times["top5"][r]) * 1e3
        res["rows"][r] = {"logits_ms": lo, "top5_ms": tp, "kept_median": statistics.median(cands[r]),
                          "kept_max": max(cands[r])}
        print(f"{r:>4}  {lo:10.2f}  {tp:14.2f}  {tp / lo:5.2f}  {statistics.median(cands[r]):.0f} / {max(cands[r])}")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
