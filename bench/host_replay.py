"""The host's own work per window, with the pass taking no time (issue 36 item 2).

    python3 bench/host_replay.py [MODEL.gguf] [--prompts 4] [--tokens 64] [--rounds 5] [--json OUT]

On a card the host's work between two drafting windows (plan, drafter, upload, read-back,
verdict, commit, the event) runs while the card waits: bench/tree_ceiling.py's window cost c
holds it. On this CPU the pass itself takes 20-90 ms and evicts the host's caches, so timing the
host around real passes overstates it. Here each setting decodes each prompt once for real
(the runtime's graph buckets, run eagerly on the CPU as the tests run them) while every bucket
run's outputs are recorded; then the same requests run again with each bucket run handing back
the recorded outputs in order instead of computing them. Decoding is deterministic, so the rerun
takes the same windows (checked: the same tokens), and what is timed is the decoder's host work
alone: a window's median time from one yield to the next, and its parts (the event's propose /
verify / after and the rest: the event, the policy, the consumer). What a card adds (the
pinned upload, the graph launch, the read-back's wait) is not in it. The user default is left
out: its AR floor times the passes, so with passes that take no time it takes other windows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SETTINGS = {
    "plain": dict(draft="none"),
    "tree d8 w3": dict(draft="tree", depth=8, width=3),
    "tree d16 w3": dict(draft="tree", depth=16, width=3),
}


class Recorder:
    """GraphBucket._run in two modes: `record` runs the pass and keeps its outputs, `replay`
    hands them back in the same order."""

    def __init__(self, real_run) -> None:
        self.real_run, self.tape, self.at, self.mode = real_run, [], 0, "record"

    def __call__(self, bucket) -> None:
        if self.mode == "record":
            self.real_run(bucket)
            self.tape.append((bucket.logits, bucket.top_values, bucket.top_ids, bucket.top))
            return
        bucket.logits, bucket.top_values, bucket.top_ids, bucket.top = self.tape[self.at]
        self.at += 1


def decode(rt, ids, settings, tokens, detail, profile=None):
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    dec = Decoder(rt, ids, DecodeSettings(max_new_tokens=tokens, **settings), detail=detail)
    marks, parts = [], []
    for ev in dec.windows():
        marks.append(time.perf_counter())
        parts.append((ev.propose_ms, ev.verify_ms, ev.commit_ms, len(ev.tokens) + 1))
        if profile is not None and len(marks) == 1:    # the windows after the prefill's
            profile.enable()
    if profile is not None:
        profile.disable()
    steps = [1e3 * (b - a) for a, b in zip(marks, marks[1:])]    # ms; the first has the prefill
    return dec.new_tokens, steps, parts[1:]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", help="a .gguf (default: the bundled model)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--detail", action="store_true", help="the workbench's row detail on")
    ap.add_argument("--profile", action="store_true",
                    help="then cProfile one more replay of tree d8 w3: the host functions by own time")
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    from common import specbench_ids
    from engine.io.load import default_model_path, load_model
    from engine.model import graphs
    from engine.model.runtime import Runtime
    rt = Runtime(load_model(a.model or str(default_model_path())), device="cpu", capacity=2048,
                 graphs=True)
    rt.tokenizer.eos_ids = ()                     # every run takes all its windows
    prompts = specbench_ids(rt.tokenizer, a.prompts)
    print(f"{rt.device_name} {rt.dtype_name} {rt.weights_label}, torch {torch.__version__}; "
          f"prompts of {', '.join(str(len(p)) for p in prompts)} tokens, {a.tokens} new each, "
          f"detail {'on' if a.detail else 'off'}", flush=True)
    rec = Recorder(graphs.GraphBucket._run)
    graphs.GraphBucket._run = lambda bucket: rec(bucket)
    out = {"device": rt.device_name, "model": rt.model_id, "tokens": a.tokens, "detail": a.detail,
           "by_setting": {}}
    tapes = {}
    for name, s in SETTINGS.items():              # the real passes, recorded
        for i, p in enumerate(prompts):
            rec.tape, rec.mode = [], "record"
            toks, _, _ = decode(rt, p, s, a.tokens, a.detail)
            tapes[name, i] = (rec.tape, toks)
    rec.mode = "replay"
    for _ in range(a.rounds):                     # the settings interleaved, round by round
        for name, s in SETTINGS.items():
            for i, p in enumerate(prompts):
                rec.tape, want = tapes[name, i]
                rec.at = 0
                toks, steps, parts = decode(rt, p, s, a.tokens, a.detail)
                if toks != want or rec.at != len(rec.tape):
                    raise SystemExit(f"{name}, prompt {i}: the replay left the recorded run")
                out["by_setting"].setdefault(name, []).append((steps, parts))
    print(f"{'setting':<12}{'windows':>9}{'rows':>6}{'window us':>11}{'propose':>9}"
          f"{'verify':>8}{'after':>7}{'rest':>7}")
    out["medians_us"] = {}
    for name, runs in out["by_setting"].items():
        steps = [x for st, _ in runs for x in st]
        parts = [x for _, ps in runs for x in ps]
        med = lambda xs: 1e3 * statistics.median(xs)
        m = {"window": med(steps), "propose": med([p[0] for p in parts]),
             "verify": med([p[1] for p in parts]), "after": med([p[2] for p in parts]),
             "rest": med([st - sum(p[:3]) for st, p in zip(steps, parts)]),
             "rows": statistics.median(p[3] for p in parts), "windows": len(steps) // a.rounds}
        out["medians_us"][name] = m
        print(f"{name:<12}{m['windows']:>9}{m['rows']:>6.0f}{m['window']:>11.1f}{m['propose']:>9.1f}"
              f"{m['verify']:>8.1f}{m['after']:>7.1f}{m['rest']:>7.1f}")
    del out["by_setting"]
    if a.profile:
        import cProfile
        import io
        import pstats
        pr = cProfile.Profile()
        for i, p in enumerate(prompts):
            (rec.tape, _), rec.at = tapes["tree d8 w3", i], 0
            decode(rt, p, SETTINGS["tree d8 w3"], a.tokens, a.detail, pr)
        windows = sum(len(tapes["tree d8 w3", i][0]) for i in range(len(prompts)))
        st = pstats.Stats(pr, stream=io.StringIO()).stats
        top = sorted(st.items(), key=lambda kv: -kv[1][2])[:40]
        print(f"cProfile of tree d8 w3 ({windows} windows): own and cumulative us a window")
        for (file, line, fn), (_, calls, own, cum, _) in top:
            where = f"{Path(file).name}:{line}({fn})" if line else fn
            print(f"{1e6 * own / windows:9.1f}{1e6 * cum / windows:9.1f}{calls / windows:7.1f}  {where}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
