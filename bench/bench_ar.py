"""Engine-foundation benchmark: our AR greedy decode against transformers' generate, side by
side in one run (same GGUF, same device and dtype, same prompts, interleaved), plus cold start
(process start to first token) and, on a GPU, AR per-token time over one graph-replayed
single-row forward.

    python bench/bench_ar.py [--device cpu] [--new-tokens 64] [--repeats 3] [--prompts 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import code_edit_prompts, median, record  # noqa: E402

from engine.speculation.decoder import Decoder  # noqa: E402
from engine.io.prompts import encode_prompt  # noqa: E402
from engine.session import open_runtime  # noqa: E402
from engine.speculation.settings import DecodeSettings  # noqa: E402


def cold_start(device: str, repeats: int) -> list[float]:
    """Seconds from process start to the first token: a fresh `specscope generate` asked for one
    token (its exit included, so this is an upper bound)."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "specscope.cli", "generate", "--device", device,
                        "--draft", "none", "--max-new-tokens", "1", "--json",
                        "--prompt", "def fibonacci(n):"], check=True, capture_output=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default=None, help="default: the bundled GGUF")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-start measurement")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--no-hf", action="store_true")
    a = ap.parse_args()

    rt = open_runtime(a.model, a.device, "auto")
    prompts = code_edit_prompts()[: a.prompts]
    ids = [encode_prompt(rt.tokenizer, p["messages"]) for p in prompts]
    settings = DecodeSettings(draft="none", max_new_tokens=a.new_tokens)

    hf = None
    if not a.no_hf:
        from transformers import AutoModelForCausalLM
        path = rt.loaded.source
        t0 = time.perf_counter()
        hf = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, torch_dtype=rt.dtype).to(rt.device).eval()
        hf_load = time.perf_counter() - t0
        print(f"transformers loaded the GGUF in {hf_load:.1f} s")

    ours, theirs, same = [], [], []
    for rep in range(a.repeats):
        for pid, p in zip(ids, prompts):
            dec = Decoder(rt, pid, settings, detail=False)
            r = dec.run()
            ours.append(r["tok_s"])
            if hf is not None:
                inp = torch.tensor([pid], device=rt.device)
                if rt.device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                with torch.inference_mode():
                    out = hf.generate(inp, max_new_tokens=a.new_tokens, do_sample=False,
                                      attention_mask=torch.ones_like(inp))
                if rt.device.type == "cuda":
                    torch.cuda.synchronize()
                dt = time.perf_counter() - t0
                new = out[0, len(pid):].tolist()
                theirs.append(len(new) / dt)
                same.append(new[: len(r["tokens"])] == r["tokens"][: len(new)])
            print(f"rep {rep} {p['id']}: ours {r['tok_s']:.1f} tok/s"
                  + (f", transformers {theirs[-1]:.1f} tok/s, identical={same[-1]}" if hf else ""))

    result = {"command": " ".join(sys.argv), "model": rt.loaded.source.name,
              "device": rt.device_name, "dtype": rt.dtype_name, "new_tokens": a.new_tokens,
              "ours_tok_s": ours, "ours_median": median(ours)}
    if hf is not None:
        result.update(transformers_tok_s=theirs, transformers_median=median(theirs),
                      ratio=median(ours) / median(theirs), greedy_identical=all(same))
    if rt.device.type == "cuda":
        ses = rt.session(1024)
        ses.warm_up()
        one = [ses.time_verify_pass(1, 512) for _ in range(50)]
        per_token = 1e3 / median(ours)
        result.update(graph_1row_ms=median(one[10:]), ar_ms_per_token=per_token,
                      ar_over_graph=per_token / median(one[10:]))
    if not a.no_cold:
        cs = cold_start(a.device, 3)
        result.update(cold_start_s=cs, cold_start_median=median(cs))
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, list)}, indent=1))
    print("recorded", record(f"ar_{rt.device.type}", result))


if __name__ == "__main__":
    main()
