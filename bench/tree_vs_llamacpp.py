"""Our speculation against llama.cpp's best n-gram speculation, same prompts, same card (issue 22's
"bundled: tree speculation ÷ llama.cpp's best n-gram speculation").

    python3 bench/tree_vs_llamacpp.py --model F.gguf --llama LLAMACPP_SPEC.json --out OUT.json \
        [--device cuda] [--dtype bfloat16] [--configs none,tree:8:3,lookup:8:1,default] [--repeats 2]
    python3 bench/tree_vs_llamacpp.py --model F.gguf --llama-build BUILD --llama-extra "-ngl 99 -fa on" \
        --out OUT.json [--per-category 3] [--llama-out LLAMACPP_SPEC.json]

The second form interleaves: for each prompt and repeat, llama.cpp's plain and n-gram variants
run (bench/llamacpp_spec.py's runner, a process each) right before our configurations of the
same prompt, so both sides of a prompt's ratio are timed within a minute of each other. On a
shared machine the host's speed comes and goes in spells of tens of seconds, and a window's host
work sits on its critical path (BENCHMARKS.md, "Rows packed, measured"): a llama.cpp run made
minutes before ours meets another machine.

LLAMACPP_SPEC.json is bench/llamacpp_spec.py's output for the same model (its prompts: the
workload and per-category count it records are reused, rendered with the model's chat template
as there). For every prompt our decoder (`generate`'s loop: greedy, detail off, 128 tokens or
the count llama.cpp decoded) runs each configuration; decode tok/s counts the tokens after the
first window over the time after it (llama.cpp's "decoded N tokens in S seconds" leaves the
prompt out too). Per prompt: llama.cpp's best n-gram variant (the fastest of spec-default,
ngram-simple and the exported one, picked per prompt: a bound no single flag set reaches) and
ours ÷ it; the medians over prompts are printed and written to --out. `default` is what
`specscope generate` runs on that device without flags (engine.speculation.settings.user_defaults:
on a GPU the d8 w3 tree behind the AR floor).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import run_after_first_window  # noqa: E402
from llamacpp_spec import NEVER_DRAFTS, NGRAM_SIMPLE, SPEC_DEFAULT, prompt_texts, run_one  # noqa: E402

NGRAM_VARIANTS = ("spec-default", "ngram-simple", "exported")


def parse_config(text: str, device_type: str, tokens: int):
    """"none" | "tree:DEPTH:WIDTH" | "lookup:DEPTH:1" | "default" -> DecodeSettings of `tokens`
    new tokens ("default": the user's defaults on a device of this type)."""
    from dataclasses import replace

    from engine.speculation.settings import DecodeSettings, user_defaults
    parts = text.split(":")
    if parts[0] == "default" and len(parts) == 1:
        return replace(user_defaults(device_type), max_new_tokens=tokens)
    if parts[0] == "none":
        return DecodeSettings(draft="none", max_new_tokens=tokens)
    if len(parts) != 3 or parts[0] not in ("tree", "lookup"):
        raise SystemExit(f"--configs: {text!r} is not none, tree:D:W, lookup:D:W or default")
    return DecodeSettings(draft=parts[0], depth=int(parts[1]), width=int(parts[2]),
                          max_new_tokens=tokens)


def llama_best(spec: dict) -> dict[str, dict]:
    """prompt id -> {"variant", "tok_s"} of llama.cpp's fastest n-gram variant (medians of repeats)."""
    by: dict[tuple[str, str], list[float]] = {}
    for r in spec["runs"]:
        if r["variant"] in NGRAM_VARIANTS and r.get("tok_s"):
            by.setdefault((r["prompt"], r["variant"]), []).append(r["tok_s"])
    best: dict[str, dict] = {}
    for (pid, var), v in by.items():
        t = statistics.median(v)
        if pid not in best or t > best[pid]["tok_s"]:
            best[pid] = {"variant": var, "tok_s": t}
    plain = {}
    for r in spec["runs"]:
        if r["variant"] == "plain" and r.get("tok_s"):
            plain.setdefault(r["prompt"], []).append(r["tok_s"])
    for pid in best:
        if pid in plain:
            best[pid]["plain_tok_s"] = statistics.median(plain[pid])
    return best


class Interleaved:
    """llama.cpp's runs of one prompt at a time (llamacpp_spec.run_one), between ours."""

    VARIANTS = {"plain": NEVER_DRAFTS, "spec-default": SPEC_DEFAULT, "ngram-simple": NGRAM_SIMPLE}

    def __init__(self, build: str, model: str, tokens: int, extra: str) -> None:
        b = Path(build)
        self.binary = next((x for x in (b / "bin" / "llama-speculative-simple",
                                        b / "llama-speculative-simple") if x.is_file()), None)
        if self.binary is None:
            raise SystemExit(f"no llama-speculative-simple under {build} (cmake --build build "
                             "--target llama-speculative-simple)")
        self.model, self.tokens, self.extra = model, tokens, shlex.split(extra)
        self._tmp = tempfile.TemporaryDirectory(prefix="tvl_")   # the prompt files, removed at exit
        self.dir = self._tmp.name
        self.runs: list[dict] = []

    def run(self, prompt: dict, rep: int) -> None:
        f = Path(self.dir) / f"{prompt['id']}.txt"
        f.write_text(prompt["text"])
        for name, flags in self.VARIANTS.items():
            r = run_one(self.binary, self.model, f, self.tokens, flags, None, self.extra, 300.0)
            self.runs.append({"prompt": prompt["id"], "category": prompt["category"],
                              "variant": name, "repeat": rep - 1, "flags": flags, **r})

    def record(self, workload: str, per_category: int) -> dict:
        """llamacpp_spec.py's JSON shape (its runs; what this script and its readers use)."""
        return {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "binary": str(self.binary),
                "build": next((r["build"] for r in self.runs if r["build"]), None),
                "model": self.model, "tokens": self.tokens, "extra": " ".join(self.extra),
                "variants": self.VARIANTS, "workload": workload, "per_category": per_category,
                "prompt_limit": None, "interleaved": True, "runs": self.runs}


# what each of our runs records beside its speed (Decoder.report's keys)
RUN_KEYS = ("decode_tok_s", "new_tokens", "windows", "tokens_per_pass", "accepted_draft_tokens",
            "ar_windows", "retired", "ar_floor")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--llama", help="bench/llamacpp_spec.py's --out JSON (llama.cpp run before)")
    src.add_argument("--llama-build", help="a llama.cpp build dir: its runs interleaved with ours, "
                                           "prompt by prompt")
    ap.add_argument("--llama-extra", default="", help='with --llama-build: flags for every llama.cpp '
                                                      'run, e.g. "-ngl 99 -fa on"')
    ap.add_argument("--workload", default="code-edit,specbench:summarization,qa,rag",
                    help="with --llama-build (else the JSON's)")
    ap.add_argument("--per-category", type=int, default=3, help="with --llama-build (else the JSON's)")
    ap.add_argument("--llama-out", default=None, help="with --llama-build: llama.cpp's runs, as "
                                                      "bench/llamacpp_spec.py writes them")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--configs", default="none,tree:8:3,lookup:8:1,default")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    a = ap.parse_args(argv)

    if a.llama:
        spec = json.loads(Path(a.llama).read_text())
        best = llama_best(spec)
        if not best:
            raise SystemExit(f"{a.llama}: no n-gram runs with a speed")
        prompts = prompt_texts(a.model, spec.get("workload", "code-edit,specbench:summarization,qa,rag"),
                               int(spec.get("per_category", 2)), spec.get("prompt_limit"))
        prompts = [p for p in prompts if p["id"] in best]
        llama = None
    else:
        if a.repeats < 1:
            raise SystemExit("--llama-build needs --repeats 1 or more (llama.cpp runs in every "
                             "repeat but the warm-up)")
        prompts = prompt_texts(a.model, a.workload, a.per_category, None)
        llama = Interleaved(a.llama_build, a.model, a.tokens, a.llama_extra)
        best = {}

    from engine.io.load import load_model
    from engine.model.runtime import Runtime
    from engine.speculation.decoder import Decoder
    lm = load_model(a.model)
    rt = Runtime(lm, device=a.device, dtype=a.dtype)
    configs = {c: parse_config(c, rt.device.type, a.tokens) for c in a.configs.split(",") if c}
    rows = []
    for p in prompts:
        ids = lm.tokenizer.encode(p["text"], add_special_tokens=False)
        row = {"prompt": p["id"], "category": p["category"], "ours": {}}
        for rep in range(a.repeats + 1):             # the first round warms every bucket up
            if llama is not None and rep:
                llama.run(p, rep)
            for name, settings in configs.items():
                dec = Decoder(rt, ids, settings, detail=False)
                r = run_after_first_window(dec)
                if rep:
                    row["ours"].setdefault(name, []).append(r["decode_tok_s"])
                    # where the speed came from: windows, plain steps the AR floor took, its verdict
                    row.setdefault("runs", {}).setdefault(name, []).append(
                        {k: r[k] for k in RUN_KEYS})
        if llama is not None:
            best = llama_best({"runs": llama.runs})
        row["llama"] = best[p["id"]]
        row["ours"] = {k: statistics.median(v) for k, v in row["ours"].items()}
        lb = row["llama"]["tok_s"]
        row["ratio"] = {k: v / lb for k, v in row["ours"].items()}
        rows.append(row)
        print(f"{p['id']:<28} llama best {row['llama']['variant']:<13} {lb:8.1f} | "
              + " ".join(f"{k} {v:8.1f} ({row['ratio'][k]:.2f}x)" for k, v in row["ours"].items()),
              flush=True)
        for k, runs in row["runs"].items():
            if runs[0]["ar_floor"] != "off":       # the floor's share: its plain steps, its verdict
                print(f"{'':<28} {k}: " + "; ".join(
                    f"{r['windows']} windows, {r['ar_windows']} plain steps of the floor, "
                    f"{r['tokens_per_pass']:.2f} tokens a pass, {r['ar_floor']}" for r in runs),
                      flush=True)
    summary = {k: {"median_tok_s": statistics.median(r["ours"][k] for r in rows),
                   "median_ratio_vs_llama_best": statistics.median(r["ratio"][k] for r in rows)}
               for k in configs}
    summary["llama_best_median_tok_s"] = statistics.median(r["llama"]["tok_s"] for r in rows)
    print(json.dumps(summary, indent=1))
    Path(a.out).write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), "model": a.model,
                                       "device": rt.device_name, "dtype": rt.dtype_name,
                                       "configs": a.configs, "interleaved": llama is not None,
                                       "summary": summary, "rows": rows}, indent=1))
    if llama is not None and a.llama_out:
        Path(a.llama_out).write_text(json.dumps(llama.record(a.workload, a.per_category), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
