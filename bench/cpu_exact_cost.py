"""What the exact CPU paths cost: plain and lookup decoding tok/s of this tree against another
checkout's engine (--against DIR, e.g. a `git worktree` of an earlier commit), in float32 with
dequantized weights and on the default (auto) path, alternating the two trees run by run in
fresh processes (the machine is shared: quote the medians of the pairs).

    .venv/bin/python bench/cpu_exact_cost.py --against /tmp/oldrepo --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, statistics, sys, time
root = sys.argv[1]
# an editable install's finder would import this tree's engine whatever sys.path says
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()
                    and "editable" not in type(f).__name__.lower()]
sys.path.insert(0, root)
import torch
torch.set_num_threads(1)
from engine.io.load import load_model
from engine.io.prompts import encode_prompt
from engine.io.workloads import load_workload
from engine.model.runtime import Runtime
from engine.speculation.decoder import Decoder
from engine.speculation.settings import DecodeSettings
import engine
assert engine.__file__.startswith(root), engine.__file__
dtype, weights, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
lm = load_model()
rt = Runtime(lm, "cpu", dtype, weights=weights)
out = {}
for p in list(load_workload("code-edit"))[:2]:
    ids = encode_prompt(rt.tokenizer, list(p.messages))
    for name, s in (("plain", DecodeSettings(draft="none", max_new_tokens=n)),
                    ("lookup", DecodeSettings(draft="lookup", depth=8, max_new_tokens=n))):
        Decoder(rt, ids, DecodeSettings(draft="none", max_new_tokens=2)).run()     # warm
        rep = Decoder(rt, ids, s).run()
        out.setdefault(name, []).append(rep["new_tokens"] / rep["wall_s"])
print(json.dumps({k: statistics.median(v) for k, v in out.items()}))
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", required=True, help="another checkout's root (its engine/)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    res: dict = {}
    for dtype, weights in (("float32", "dequantized"), ("auto", "auto")):
        for r in range(a.repeats):
            for tree, root in (("this", str(ROOT)), ("against", os.path.abspath(a.against))):
                p = subprocess.run([sys.executable, "-c", CHILD, root, dtype, weights, str(a.new_tokens)],
                                   capture_output=True, text=True, timeout=900)
                if p.returncode:
                    print(p.stderr[-2000:], file=sys.stderr)
                    return 1
                got = json.loads(p.stdout.strip().splitlines()[-1])
                for k, v in got.items():
                    res.setdefault(f"{dtype}/{weights}", {}).setdefault(k, {}).setdefault(tree, []).append(v)
                print(f"{dtype}/{weights} #{r} {tree}: " + ", ".join(f"{k} {v:.1f}" for k, v in got.items()),
                      file=sys.stderr, flush=True)
    for cfg, kinds in res.items():
        for k, trees in kinds.items():
            this, other = statistics.median(trees["this"]), statistics.median(trees["against"])
            print(f"{cfg:22s} {k:6s} this {this:6.1f} tok/s   against {other:6.1f}   ratio {this / other:.2f}")
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
