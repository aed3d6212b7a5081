"""Where a decode step's time goes between passes (issue 36 item 2): the pass alone against the
decoder's step, by setting, and a profile of the host side of plain decoding.

    python3 bench/host_steps.py MODEL.gguf [--device cuda] [--tokens 96] [--json OUT]

For each setting (plain `--draft none`, the user default `--adaptive --ar-floor`, a fixed tree d8 w3;
detail off as `generate` runs, and plain with the workbench's detail on) over the same prompts
(Spec-Bench text, EOS ignored so every run takes all its steps): the median time between
consecutive windows (a step, what tg measures), the window's own parts (propose / verify / after:
the decoder's times_s) and the rest (the consumer and the loop); beside them the pass alone at the
same context, one row and the d8 w3 windows' median row count (Session.time_verify_pass: upload, replay, the top-k
back), and the d8 w3 window's cost in plain steps split into its pass alone and the rest (what
bench/tree_ceiling.py calls c). Then cProfile of one plain run, the host functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SETTINGS = {
    "plain": dict(draft="none"),
    "plain+detail": dict(draft="none"),
    "default": dict(draft="tree", adaptive=True, ar_floor=True),
    "tree d8 w3": dict(draft="tree", depth=8, width=3),
}


def run(rt, ids, name, tokens, profile=None):
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    dec = Decoder(rt, ids, DecodeSettings(max_new_tokens=tokens, **SETTINGS[name]),
                  detail=name.endswith("detail"))
    marks, parts = [], []
    eos, rt.tokenizer.eos_ids = rt.tokenizer.eos_ids, ()
    try:
        if profile is not None:
            profile.enable()
        for ev in dec.windows():
            marks.append(time.perf_counter())
            parts.append(((ev.propose_ms / 1e3, ev.verify_ms / 1e3, ev.commit_ms / 1e3), len(ev.emitted),
                          len(ev.tokens) + 1))          # rows verified: the drafts and the root
        if profile is not None:
            profile.disable()
    finally:
        rt.tokenizer.eos_ids = eos
    steps = [b - a for a, b in zip(marks, marks[1:])]
    parts = parts[1:]
    ms = lambda xs: statistics.median(xs) * 1e3 if xs else float("nan")
    return {"step_ms": ms(steps), "tokens_per_step": sum(p[1] for p in parts) / max(1, len(parts)),
            "tok_s": sum(p[1] for p in parts) / sum(steps) if steps else float("nan"),
            "propose_ms": ms([p[0][0] for p in parts]), "verify_ms": ms([p[0][1] for p in parts]),
            "after_ms": ms([p[0][2] for p in parts]),
            "rest_ms": ms([s - sum(p[0]) for s, p in zip(steps, parts)]), "windows": len(marks),
            "rows": statistics.median(p[2] for p in parts) if parts else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--json")
    a = ap.parse_args()
    from common import specbench_ids
    from engine.io.load import load_model
    from engine.model.runtime import Runtime
    rt = Runtime(load_model(a.model), device=a.device, capacity=2048)
    prompts = specbench_ids(rt.tokenizer, a.prompts)
    print(f"{rt.device_name} {rt.dtype_name} {rt.weights_label}; prompts of "
          f"{', '.join(str(len(p)) for p in prompts)} tokens, {a.tokens} new each", flush=True)
    run(rt, prompts[0], "plain", 8)                 # graphs captured, kernels compiled
    out = {"device": rt.device_name, "dtype": rt.dtype_name, "model": rt.model_id, "by_setting": {}}
    for rnd in range(2):                              # two rounds, the settings interleaved
        for name in SETTINGS:
            for p in prompts:
                r = run(rt, p, name, a.tokens)
                out["by_setting"].setdefault(name, []).append(r)
    # the d8 w3 windows' median row count (up to 25: the root and 8 x 3 drafts)
    tree_rows = max(1, round(statistics.median(r["rows"] for r in out["by_setting"]["tree d8 w3"])))
    s = rt.session(2048)
    try:         # one row (a plain step's pass) and that many rows, each timed alone
        alone = {n: statistics.median(s.time_verify_pass(n, len(p) + a.tokens // 2)
                                      for p in prompts for _ in range(15)) for n in (1, tree_rows)}
    finally:
        s.close()
    out["pass_alone_ms"], out["pass_alone_ms_by_rows"] = alone[1], alone
    print(f"pass alone (upload, replay, top-k back): 1 row {alone[1]:.3f} ms, "
          f"{tree_rows} rows (the d8 w3 windows' median) {alone[tree_rows]:.3f} ms")
    keys = ("step_ms", "tok_s", "tokens_per_step", "rows", "propose_ms", "verify_ms", "after_ms", "rest_ms")
    print(f"{'setting':<14}" + "".join(f"{k:>16}" for k in keys))
    med = {}
    for name, rs in out["by_setting"].items():
        med[name] = {k: statistics.median(r[k] for r in rs) for k in keys}
        print(f"{name:<14}" + "".join(f"{med[name][k]:>16.3f}" for k in keys))
    out["medians"] = med
    # a drafting window's cost in plain steps, split: its pass alone (against the plain step) and
    # the rest (host work between passes: the drafter, the upload, the read-back); and the knee,
    # its pass alone against the one-row pass alone
    plain, tree = med["plain"]["step_ms"], med["tree d8 w3"]["step_ms"]
    out["window_cost"] = {"in_plain_steps": tree / plain, "pass_alone": alone[tree_rows] / plain,
                          "rest": (tree - alone[tree_rows]) / plain,
                          "knee_pass_over_pass": alone[tree_rows] / alone[1]}
    print("tree d8 w3 window = {in_plain_steps:.2f} plain steps: its pass alone {pass_alone:.2f}, "
          "the rest {rest:.2f} (the knee, pass over pass: {knee_pass_over_pass:.2f})"
          .format(**out["window_cost"]))
    pr = cProfile.Profile()
    run(rt, prompts[0], "plain", a.tokens, profile=pr)
    st = io.StringIO()
    pstats.Stats(pr, stream=st).sort_stats("tottime").print_stats(28)
    text = st.getvalue()
    print(text[text.find("ncalls") - 4:])
    out["profile_plain"] = text
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
