"""The quantized-weights figures on a GPU machine, in one run; results as JSON under --out.

    python bench/gpu_quant.py big --out $OUT          # the 8B-like model, Q4_K_M packed vs BF16
    python bench/gpu_quant.py bundled --model F --out $OUT   # the bundled Q4_1 model

`big` writes (under /tmp/m, once) a random-weight Qwen3-8B-like GGUF in llama.cpp's Q4_K_M mix
and the same shape in BF16 (bench/make_model.py), then for each: peak anonymous host memory and
GPU memory while loading (a fresh process each, twice: the second load finds the file in the
page cache), the roofline (`specscope roofline`), and greedy decoding of 256 tokens
(`specscope generate --draft none`). `bundled`: pass times packed vs dequantized bf16, and
greedy output on the five code-edit prompts packed vs float32 and bf16.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
HBM = 4.8e12      # H200 bytes/s
PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."


def sh(args: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{os.environ.get('PYTHONPATH', '')}")
    t0 = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    print(f"$ {' '.join(args)}  [{time.perf_counter() - t0:.1f} s, rc {r.returncode}]", flush=True)
    if r.returncode:
        print(r.stderr[-3000:], flush=True)
    return r


DEVICE = "cuda"


def peak(model: Path, weights: str, context: int = 4096) -> dict:
    r = sh([sys.executable, "tests/engine/peak_memory.py", str(model), "--device", DEVICE,
            "--dtype", "bfloat16", "--weights", weights, "--context", str(context)])
    return json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr[-2000:]}


def roofline(model: Path, weights: str, out: Path) -> dict:
    r = sh([sys.executable, "-m", "specscope.cli", "roofline", "--model", str(model), "--device", DEVICE,
            "--weights", weights, "--context", "1000", "--out", str(out)])
    print(r.stdout[-2500:], flush=True)
    return json.loads(out.read_text()) if r.returncode == 0 else {"error": r.stderr[-2000:]}


def generate(model: Path, weights: str, n: int, draft: str = "none", prompt: str = PROMPT,
             dtype: str = "auto") -> dict:
    r = sh([sys.executable, "-m", "specscope.cli", "generate", "--model", str(model), "--device", DEVICE,
            "--dtype", dtype, "--weights", weights, "--draft", draft, "--max-new-tokens", str(n),
            "--prompt", prompt, "--json"])
    return json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr[-2000:]}


def breakdown(model: Path, weights: str, n: int = 256) -> dict:
    """Where a decode step's time goes, in-process: prefill, then per window the verify call
    (graph replay and the host copy of its results) against the whole window."""
    import statistics

    from engine.io.prompts import encode_prompt
    from engine.model.device import synchronize
    from engine.session import open_runtime
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings

    rt = open_runtime(str(model), DEVICE, "auto", weights=weights)
    ids = encode_prompt(rt.tokenizer, PROMPT)
    dec = Decoder(rt, ids, DecodeSettings(draft="none", max_new_tokens=n))
    marks, events = [], []
    t0 = time.perf_counter()
    for ev in dec.windows():
        marks.append(time.perf_counter())
        events.append(ev)
    synchronize(rt.device)
    steps = [b - a for a, b in zip(marks, marks[1:])]
    return {"tokens": len(dec.new_tokens), "first_window_s": marks[0] - t0,
            "step_ms_median": statistics.median(steps) * 1e3,
            "verify_ms_median": statistics.median(e.verify_ms for e in events[1:]),
            "propose_ms_median": statistics.median(e.propose_ms for e in events[1:]),
            "commit_ms_median": statistics.median(e.commit_ms for e in events[1:]),
            "wall_s": dec.wall_s}


def big(a: argparse.Namespace) -> dict:
    from make_model import SHAPES, write_model
    m = Path("/tmp/m")
    files = {"Q4_K_M": m / f"{a.shape}.Q4_K_M.gguf", "BF16": m / f"{a.shape}.BF16.gguf"}
    res: dict = {"date": time.strftime("%Y-%m-%d"), "shape": a.shape}
    for recipe, f in files.items():
        if not f.exists():
            t0 = time.perf_counter()
            write_model(f, SHAPES[a.shape], recipe, Path(a.tokenizer_from) if a.tokenizer_from else None)
            print(f"wrote {f} ({f.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t0:.0f} s", flush=True)
        res[f"file_bytes_{recipe}"] = f.stat().st_size
    modes = (("Q4_K_M", "packed"),) if a.packed_only else (("Q4_K_M", "packed"), ("BF16", "dequantized"))
    for recipe, weights in modes:
        key = f"{recipe}_{weights}"
        res[key] = {"load": [peak(files[recipe], weights) for _ in range(2)]}
        print(json.dumps(res[key]["load"]), flush=True)
    for recipe, weights in modes:
        key = f"{recipe}_{weights}"
        res[key]["roofline"] = roofline(files[recipe], weights, Path(a.out) / f"roofline_{key}.json")
        g = generate(files[recipe], weights, a.tokens)
        res[key]["generate"] = {k: g.get(k) for k in ("new_tokens", "wall_s", "tok_s", "load_s", "weight_format",
                                                      "weight_bytes", "error")}
        print(json.dumps(res[key]["generate"]), flush=True)
        res[key]["breakdown"] = breakdown(files[recipe], weights, a.tokens)
        print(json.dumps(res[key]["breakdown"]), flush=True)
    summarize(res)
    return res


def summarize(res: dict) -> None:
    p, b = res.get("Q4_K_M_packed", {}), res.get("BF16_dequantized") or res.get("bf16_reference", {})
    try:
        pts = {int(r): ms for r, ms in p["roofline"]["ms_by_rows"].items()}
        bpts = {int(r): ms for r, ms in b["roofline"]["ms_by_rows"].items()}
        wbytes = p["load"][-1]["weight_bytes"]
        s = {
            "gpu_with_cache_4096_GB": p["load"][-1].get("gpu_with_cache", 0) / 1e9,
            "gpu_reserved_with_graphs_GB": p["load"][-1].get("gpu_reserved_with_graphs", 0) / 1e9,
            "peak_host_anon_GB": p["load"][-1]["peak_gain"] / 1e9,
            "largest_tensor_GB": p["load"][-1]["largest_tensor_bytes"] / 1e9,
            "load_s_page_cache": p["load"][-1]["load_s"],
            "one_row_ms": pts.get(1), "weight_stream_ms": wbytes / HBM * 1e3,
            "one_row_over_stream": pts.get(1) / (wbytes / HBM * 1e3),
            "packed_over_bf16_one_row": pts.get(1) / bpts.get(1),
            "rows_over_one": {r: pts[r] / pts[1] for r in sorted(pts) if 2 <= r <= 32},
            "bf16_one_row_ms": bpts.get(1),
        }
        g = p["generate"]
        s["decode_ms_per_token"] = g["wall_s"] / g["new_tokens"] * 1e3
        s["decode_over_one_row"] = s["decode_ms_per_token"] / pts[1]
        res["summary"] = s
        print(json.dumps(s, indent=1), flush=True)
    except (KeyError, TypeError, ZeroDivisionError) as e:
        print(f"summary incomplete: {e!r}", flush=True)


def bundled(a: argparse.Namespace) -> dict:
    """Pass times packed vs dequantized, and greedy output on the code-edit prompts: packed bf16
    and dequantized bf16 against dequantized float32 (agreement, since the formats round
    differently), and lookup / tree drafts against plain decoding within each configuration
    (lossless: identical)."""
    from engine.io.prompts import encode_prompt
    from engine.io.workloads import load_workload
    from engine.session import open_runtime
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings

    res: dict = {"date": time.strftime("%Y-%m-%d"), "model": a.model}
    for weights in ("packed", "dequantized") if not a.no_roofline else ():
        res[f"roofline_{weights}"] = roofline(Path(a.model), weights, Path(a.out) / f"roofline_bundled_{weights}.json")
    prompts = load_workload("code-edit")
    drafts = {"none": DecodeSettings(draft="none", max_new_tokens=a.tokens),
              "lookup": DecodeSettings(draft="lookup", depth=8, max_new_tokens=a.tokens),
              "tree": DecodeSettings(draft="tree", depth=8, width=3, max_new_tokens=a.tokens)}
    tokens: dict = {}
    for dtype, weights in (("float32", "dequantized"), ("bfloat16", "packed"), ("bfloat16", "dequantized")):
        rt = open_runtime(a.model, DEVICE, dtype, weights=weights)
        key = f"{dtype}_{weights}"
        for p in prompts:
            ids = encode_prompt(rt.tokenizer, list(p.messages))
            for name, st in drafts.items():
                rep = Decoder(rt, ids, st).run()
                tokens.setdefault(key, {}).setdefault(name, {})[p.id] = rep["tokens"]
                res.setdefault("tok_s", {}).setdefault(key, {}).setdefault(name, []).append(rep["tok_s"])
        del rt

    def first_diff(x, y):
        return next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))

    ref = tokens["float32_dequantized"]["none"]
    res["ar_vs_float32"] = {k: {pid: {"identical": t == ref[pid], "first_difference": first_diff(t, ref[pid])}
                                for pid, t in v["none"].items()} for k, v in tokens.items()}
    res["spec_vs_ar"] = {k: {d: sum(v[d][pid] == v["none"][pid] for pid in v["none"]) for d in ("lookup", "tree")}
                         for k, v in tokens.items()}
    res["spec_vs_ar_of"] = len(prompts)
    print(json.dumps({k: res[k] for k in ("ar_vs_float32", "spec_vs_ar", "tok_s")}, indent=1), flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["big", "bundled"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default=None)
    ap.add_argument("--tokenizer-from", default=None)
    ap.add_argument("--shape", default="qwen3-8b")
    ap.add_argument("--bf16-reference", default=None, help="big --packed-only: an earlier run's JSON")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the script itself")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--packed-only", action="store_true", help="big: skip the BF16 model")
    ap.add_argument("--no-roofline", action="store_true", help="bundled: skip the two probes")
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device
    sys.path.insert(0, str(ROOT / "bench"))
    if a.bf16_reference:
        ref = json.loads(Path(a.bf16_reference).read_text())
        ref_key = "BF16_dequantized"
    res = big(a) if a.what == "big" else bundled(a)
    if a.what == "big" and a.bf16_reference:
        res["bf16_reference"] = ref[ref_key]
        summarize(res)
    (Path(a.out) / f"gpu_quant_{a.what}.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
