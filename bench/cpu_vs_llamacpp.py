"""The CPU figure of issue 22 (item 4): the bundled model's decode at one thread, ours against
llama.cpp built on this machine, side by side in one run.

    python bench/cpu_vs_llamacpp.py --build /path/to/llama.cpp/build [--repeats 3] [--new-tokens 128]

Rows, interleaved (each repeat: each prompt: every row once, in an order rotated per prompt):
    ours-ar, ours-lookup            Runtime(weights="packed"), 1 torch thread; decode tok/s = the
                                    tokens after the first window over the time after it
    llamacpp-plain                  llama-speculative-simple -t 1 -n N --temp 0, never drafting
                                    (ngram-simple 1024/1024: it refuses to run with no type)
    llamacpp-<type>                 the same with an n-gram type: ngram-simple (defaults 12/48),
                                    ngram-simple n4 m16, ngram-map-k (defaults), ngram-mod at
                                    --spec-default's settings (n_match 24, n_min 48, n_max 64)
    llama-bench tg N at -t 1        once per repeat, at the depth of the median prompt
llama.cpp's figure is its own "decoded N tokens in S seconds" (the loop after the prompt's
encoding). Every ratio is paired per repeat (same repeat, same prompts), medians over prompts
first. The load average is recorded at the start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import run_after_first_window  # noqa: E402
from bench.llamacpp_spec import ACCEPTED, BUILD, DECODED, DRAFTED, NEVER_DRAFTS  # noqa: E402

LLAMA_TYPES = {
    "llamacpp-ngram-simple": ["--spec-type", "ngram-simple"],
    "llamacpp-ngram-simple-n4m16": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "4",
                                    "--spec-ngram-simple-size-m", "16"],
    "llamacpp-ngram-map-k": ["--spec-type", "ngram-map-k"],
    "llamacpp-ngram-mod": ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "24",
                           "--spec-ngram-mod-n-min", "48", "--spec-ngram-mod-n-max", "64"],
}


def llama_run(binary: Path, model: str, prompt_file: Path, n: int, flags: list[str]) -> dict:
    cmd = [str(binary), "-m", model, "-f", str(prompt_file), "-n", str(n), "--temp", "0", "-t", "1",
           "-tb", "1", *flags]
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=600)
    log = r.stdout + "\n" + r.stderr
    m = DECODED.search(log)
    if r.returncode or not m:
        raise SystemExit(f"failed: {shlex.join(cmd)}\n" + "\n".join(log.splitlines()[-5:]))
    d, a, b = DRAFTED.search(log), ACCEPTED.search(log), BUILD.search(log)
    return {"decode_tok_s": float(m.group(3)), "tokens": int(m.group(1)),
            "drafted": int(d.group(1)) if d else 0, "accepted": int(a.group(1)) if a else 0,
            "build": f"{b.group(1)} ({b.group(2)})" if b else None, "command": shlex.join(cmd)}


def ours_run(rt, ids: list[int], n: int, draft: str) -> dict:
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    r = run_after_first_window(Decoder(rt, ids, DecodeSettings(draft=draft, max_new_tokens=n),
                                       detail=False))
    return {"decode_tok_s": r["decode_tok_s"], "tokens": r["new_tokens"],
            "tokens_per_pass": r["tokens_per_pass"], "tok_s": r["tok_s"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--model", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=None)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cpu_vs_llamacpp.json"))
    a = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    from engine.io.load import load_model
    from engine.io.prompts import encode_prompt
    from engine.io.workloads import load_workload
    from engine.model.runtime import Runtime
    bindir = Path(a.build) / "bin"
    spec, bench = bindir / "llama-speculative-simple", bindir / "llama-bench"
    loaded = load_model(a.model)
    model = str(loaded.source)
    # dtype "auto", as `specscope generate` runs by default: the fast int4 kernels with
    # bfloat16 activations (an explicit float32 takes the exact kernels since 5b71de0, ~6x
    # slower here; a run of 12-03 measured that by mistake before this line was fixed)
    rt = Runtime(loaded, "cpu", "auto", weights="packed")
    if "cpu_fast" not in {k for L in rt.model.layers for v in L.values() if hasattr(v, "kernels")
                          for k in v.kernels}:
        print(f"!! the fast CPU kernels are not in use ({rt.weights_label}): the AR and lookup "
              "rows measure the exact kernels", file=sys.stderr, flush=True)
    prompts = load_workload("code-edit", 1, a.prompts)
    tok = loaded.tokenizer
    texts = {p.id: tok.render_chat(list(p.messages), add_generation_prompt=True) for p in prompts}
    ids = {p.id: encode_prompt(tok, list(p.messages)) for p in prompts}
    depth = int(statistics.median(len(v) for v in ids.values()))
    rows = ["ours-ar", "ours-lookup", "llamacpp-plain", *LLAMA_TYPES]
    samples: list[dict] = []
    tg: list[dict] = []
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for pid, text in texts.items():
            files[pid] = Path(tmp) / f"{pid}.txt"
            files[pid].write_text(text)
        for rep in range(a.repeats):
            for k, p in enumerate(prompts):
                order = rows[k % len(rows):] + rows[:k % len(rows)]
                for name in order:
                    if name == "ours-ar":
                        r = ours_run(rt, ids[p.id], a.new_tokens, "none")
                    elif name == "ours-lookup":
                        r = ours_run(rt, ids[p.id], a.new_tokens, "lookup")
                    else:
                        r = llama_run(spec, model, files[p.id], a.new_tokens, LLAMA_TYPES.get(name, NEVER_DRAFTS))
                    samples.append({"repeat": rep, "prompt": p.id, "row": name, **r})
                    print(f"[{time.perf_counter() - t0:6.0f}s] rep {rep} {p.id:<24} {name:<30} "
                          f"{r['decode_tok_s']:7.1f} tok/s", file=sys.stderr, flush=True)
            cmd = [str(bench), "-m", model, "-p", "0", "-n", str(a.new_tokens), "-d", str(depth),
                   "-t", "1", "-r", "3", "-o", "json"]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            rec = json.loads(out)[0]
            tg.append({"repeat": rep, "tok_s": rec["avg_ts"], "command": shlex.join(cmd),
                       "build": f"{rec['build_number']} ({rec['build_commit']})"})
            print(f"[{time.perf_counter() - t0:6.0f}s] rep {rep} llama-bench tg{a.new_tokens} @ d{depth} -t 1: "
                  f"{rec['avg_ts']:.1f} tok/s", file=sys.stderr, flush=True)
            # every repeat leaves a complete file: a long run on a shared machine may be cut
            partial = summarize(samples, tg, rows)
            partial.update(partial=True, repeats_done=rep + 1, loadavg_start=load0,
                           loadavg_now=os.getloadavg(), samples=samples, tg=tg)
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).write_text(json.dumps(partial, indent=1))
    load1 = os.getloadavg()
    res = summarize(samples, tg, rows)
    res.update(date=time.strftime("%Y-%m-%d %H:%M:%S %z"), loadavg_start=load0, loadavg_end=load1,
               model=model, new_tokens=a.new_tokens, depth_for_tg=depth, weights=rt.weights_label,
               command="python bench/cpu_vs_llamacpp.py " + " ".join(sys.argv[1:]), samples=samples, tg=tg)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(json.dumps({k: res[k] for k in ("rows", "ratios", "loadavg_start", "loadavg_end")}, indent=1))
    return 0


def summarize(samples: list[dict], tg: list[dict], rows: list[str]) -> dict:
    reps = sorted({s["repeat"] for s in samples})

    def med(row: str, rep: int) -> float:
        return statistics.median(s["decode_tok_s"] for s in samples if s["row"] == row and s["repeat"] == rep)

    per_rep = {row: [med(row, r) for r in reps] for row in rows}
    llama_spec = [r for r in rows if r.startswith("llamacpp-") and r != "llamacpp-plain"]
    best_type = max(llama_spec, key=lambda r: statistics.median(per_rep[r]))
    tg_rep = {t["repeat"]: t["tok_s"] for t in tg}

    def ratio(num: list[float], den: list[float]) -> dict:
        xs = [x / y for x, y in zip(num, den)]
        return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3)}

    tgs = [tg_rep[r] for r in reps]
    return {"rows": {r: {"median": round(statistics.median(v), 2), "per_repeat": [round(x, 2) for x in v]}
                     for r, v in per_rep.items()} | {"llama-bench-tg": {"median": round(statistics.median(tgs), 2),
                                                                         "per_repeat": tgs}},
            "best_llamacpp_type": best_type,
            "ratios": {"ours-lookup / llamacpp best type": ratio(per_rep["ours-lookup"], per_rep[best_type]),
                       "ours-lookup / llamacpp best of all rows": ratio(
                           per_rep["ours-lookup"], [max(per_rep[r][i] for r in llama_spec + ["llamacpp-plain"])
                                                    for i in range(len(reps))]),
                       "ours-ar / llama-bench tg": ratio(per_rep["ours-ar"], tgs),
                       "ours-ar / llamacpp-plain (speculative-simple)": ratio(per_rep["ours-ar"], per_rep["llamacpp-plain"])}}


if __name__ == "__main__":
    raise SystemExit(main())
