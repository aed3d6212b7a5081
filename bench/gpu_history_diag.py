"""Where does a used GPU runtime part from a fresh one? (issue 31; a diagnostic, not a check)

A fresh runtime gives the references (plain, N new tokens) of a 2,000- and a 2,100-token prompt;
a second runtime decodes the 2,000 one, then the 2,100 one with early-exit drafts, then the
2,000 one again, and variants tell where the difference lives: a new session instead of the
pooled one, the pooled one with its graphs dropped, the prefill's keys compared slot by slot.

    python3 bench/gpu_history_diag.py --model /tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import gpu_exact_all as G  # noqa: E402
from engine.io.load import load_model  # noqa: E402
from engine.model.runtime import MAX_ROWS, Runtime  # noqa: E402
from engine.speculation.decoder import Decoder  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--new-tokens", type=int, default=32)
    a = ap.parse_args()
    lm = load_model(a.model)
    pool = dict(G.prompt_pool(lm.tokenizer))
    P20, P21 = pool["long-copy-2000"], pool["long-specbench-2100"]
    N = a.new_tokens

    def rt_new():
        return Runtime(lm, a.device, a.dtype)

    def run(rt, ids, name):
        return Decoder(rt, ids, G.settings_for(name, N)).run()["tokens"]

    def first_diff(x, y):
        return next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), None)

    def _unused_kv_of(rt, ids):
        s = rt.session(len(ids) + N, spare=MAX_ROWS + 1)
        s.prefill(ids[:-1])
        kv = s.cache.kv[:, :, :, :len(ids) - 1].float().cpu().clone()
        cap = s.capacity
        s.close()
        return kv, cap

    import os
    if os.environ.get("DIAG_CAPACITY"):
        base = None
        for name, cap, graphs, fused in (("cap auto, graphs", None, None, "1"),
                                         ("cap 4096, graphs", 4096, None, "1"),
                                         ("cap 4096, graphs, unfused", 4096, None, "0"),
                                         ("cap auto, graphs, unfused", None, None, "0"),
                                         ("cap 4096, eager", 4096, False, "1"),
                                         ("cap 8192, graphs", 8192, None, "1")):
            os.environ["SPECSCOPE_FUSED"] = fused
            rt = Runtime(lm, a.device, a.dtype, capacity=cap, graphs=graphs)
            got = run(rt, P20, "plain")
            base = base or got
            print(f"{name:28s}: {'ok' if got == base else f'D{first_diff(got, base)}'}", flush=True)
            del rt
            torch.cuda.empty_cache()
        return 0
    import engine.kernels.triton_attention as TA
    orig_counters = TA._counters

    def fresh_counters(device, need):            # zeros made inside each pass (a memset node)
        return torch.zeros(max(need, 4096), dtype=torch.int32, device=device)

    variants = {
        "baseline": {},
        "private pools": {"pools": None},
        "per-pass counters": {"counters": fresh_counters},
        "both": {"pools": None, "counters": fresh_counters},
        "no graphs": {"graphs": False},
    }
    for name, v in variants.items():
        TA._counters = v.get("counters", orig_counters)

        def make():
            rt = Runtime(lm, a.device, a.dtype, graphs=v.get("graphs"))
            if "pools" in v:
                rt._pool = rt._prefill_pool = None
            return rt
        F = make()
        ref20, ref21 = run(F, P20, "plain"), run(F, P21, "plain")
        del F
        U = make()
        got = [run(U, P20, "plain"), run(U, P21, "plain"), run(U, P20, "plain"), run(U, P21, "plain"),
               run(U, P20, "default"), run(U, P21, "early exit")]
        refs = [ref20, ref21, ref20, ref21, ref20, ref21]
        print(f"{name:18s}: " + " ".join("ok" if g == r else f"D{first_diff(g, r)}"
                                          for g, r in zip(got, refs)), flush=True)
        del U
        torch.cuda.empty_cache()
    TA._counters = orig_counters
    return 0


if __name__ == "__main__":
    sys.exit(main())
