"""Same prompt, same tokens, on the device (issue 31): does ONE runtime that has decoded other
prompts first give, for every prompt and setting, the greedy tokens a fresh runtime gives?

For each dtype (default bfloat16 and float32):
  1. references: each prompt plain-decoded (--draft none) on a runtime opened for it alone,
     from the file (nothing shared with any other runtime);
  2. ONE used runtime decodes every (prompt, setting) pair in a seeded shuffled order (prompt
     lengths rise and fall at random, drafting and plain runs interleave), with the settings
        plain | lookup d8 | tree d8 w3 | tree d16 w3 | default (the 8 x 3 tree behind the AR
        floor) | default d16 | adaptive + floor (depth 16) | takeover (early-exit drafts + n-gram takeover) |
        early exit (the target's first 8 layers draft)
     and each output is compared, token for token, with the fresh reference (no near-tie
     tolerance: the runtime claims bitwise-exact verify rows on every device).

Prompts: short Spec-Bench questions (40-93 tokens), code-edit and Spec-Bench prompts (482-769),
and long ones (1,900-2,100 tokens, built from the code-edit prompts joined and from the
Spec-Bench questions joined; at 128 new tokens the 1,900-token one fits a fresh 2048-slot
cache plain while a drafting request grows it to 4096, the others need 4096 even plain).
--prompts N takes the first N of a list that mixes the three sizes.

stdout: one line per difference (dtype, prompt, setting, first differing new-token index, the
tokens from there on both sides), then LAST a line exactly `identical k/n`. Exit status 0 iff
k == n. Progress goes to stderr. --json OUT writes every case and every reference.

    python3 bench/gpu_exact_all.py --device cuda --model /tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --json /tmp/exact_all.json                        # ~12 prompts x 8 settings x 2 dtypes
    .venv/bin/python bench/gpu_exact_all.py --device cpu --quick      # a dry run on the CPU
    bash bench/gpu_exact_all.sh                            # the device call (see that file)
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from engine.io.load import load_model  # noqa: E402
from engine.io.prompts import encode_prompt  # noqa: E402
from engine.io.workloads import load_workload  # noqa: E402
from engine.model.runtime import Runtime  # noqa: E402
from engine.speculation.settings import USER_DEFAULTS, DecodeSettings  # noqa: E402
from lossless_matrix import Decode, compare, decode  # noqa: E402

SETTINGS: dict[str, dict[str, Any]] = {
    "plain": dict(draft="none"),
    "lookup d8": dict(draft="lookup", match="recent", depth=8, width=1),
    "tree d8 w3": dict(draft="tree", depth=8, width=3),
    "tree d16 w3": dict(draft="tree", depth=16, width=3),
    "default": dict(ar_floor=True),                  # the user default: 8 x 3 tree + AR floor
    "default d16": dict(ar_floor=True, depth=16),
    "adaptive + floor": dict(adaptive=True, ar_floor=True, depth=16),
    "takeover": dict(draft="early-exit", takeover=True),
    "early exit": dict(draft="early-exit", exit_layer=8),
}


def settings_for(name: str, new_tokens: int) -> DecodeSettings:
    """The named setting over the user defaults' drafter, depth and width (USER_DEFAULTS with
    adaptive and the AR floor off unless the setting turns them on)."""
    base = replace(USER_DEFAULTS, adaptive=False, ar_floor=False, max_new_tokens=new_tokens)
    return replace(base, **SETTINGS[name])


# ---------------------------------------------------------------------------------------------
# prompts


def code_edit_text() -> str:
    return "\n\n".join(p.messages[0]["content"] for p in load_workload("code-edit"))


def specbench_text() -> str:
    return "\n\n".join(p.messages[0]["content"] for p in load_workload("specbench", per_category=99))


def chat_near(tok, text: str, n: int) -> list[int]:
    """A one-message chat prompt of about n tokens (the template and answer header kept): the
    text cut to n minus the template's own tokens."""
    overhead = len(encode_prompt(tok, [{"role": "user", "content": "x"}])) - 1
    body = tok.encode(text, add_special_tokens=False)
    return encode_prompt(tok, [{"role": "user", "content": tok.decode(body[:n - overhead])}])


def copying(tok, text: str, n: int) -> list[int]:
    """n tokens of raw text whose last 48 repeat the start of its first function: the
    continuation copies it (drafts are accepted, long windows run)."""
    body = tok.encode(text)
    start = len(tok.encode(text[:text.index("\ndef ") + 1]))
    return body[:n - 48] + body[start:start + 48]


def prompt_pool(tok) -> list[tuple[str, list[int]]]:
    """(name, ids), sizes mixed so that any first N has short, medium and long prompts."""
    code = {p.id: list(p.messages) for p in load_workload("code-edit")}
    bench = {p.id: list(p.messages) for p in load_workload("specbench")}

    def chat(messages):
        return encode_prompt(tok, messages)

    return [
        ("qa-321", chat(bench["qa-321"])),
        ("long-copy-2000", copying(tok, code_edit_text(), 2000)),
        ("code-p1-heapq", chat(code["p1_heapq_nsmallest"])),
        ("coding-121", chat(bench["coding-121"])),
        ("long-chat-1900", chat_near(tok, code_edit_text(), 1900)),
        ("summarization-242", chat(bench["summarization-242"])),
        ("translation-162", chat(bench["translation-162"])),
        ("long-specbench-2100", tok.encode(specbench_text())[:2100]),
        ("code-p4-a85", chat(code["p4_base64_a85decode"])),
        ("writing-81", chat(bench["writing-81"])),
        ("rag-481", chat(bench["rag-481"])),
        ("code-p0-textwrap", chat(code["p0_textwrap_dedent"])),
    ]


# ---------------------------------------------------------------------------------------------
# the check


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def open_runtime(a, dtype: str) -> Runtime:
    graphs = {"auto": None, "on": True, "off": False}[a.graphs]
    return Runtime(load_model(a.model), a.device, dtype, weights=a.weights, graphs=graphs)


def free() -> None:
    """Give back what a dropped runtime held (its graphs and their pools hold cycles)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def fmt(tokens: list[int], k: int, n: int = 6) -> str:
    return "[" + " ".join(map(str, tokens[k:k + n])) + (" ..." if len(tokens) > k + n else "") + "]"


def run_dtype(a, dtype: str, prompts: list[tuple[str, list[int]]], t0: float) -> dict[str, Any]:
    refs: dict[str, Decode] = {}
    for i, (name, ids) in enumerate(prompts):
        rt = open_runtime(a, dtype)
        refs[name] = decode(rt, ids, settings_for("plain", a.new_tokens), detail=a.detail)
        log(f"{time.perf_counter() - t0:7.1f}s {dtype} fresh [{i + 1}/{len(prompts)}] {name} "
            f"({len(ids)} tokens): {len(refs[name].tokens)} tokens ({refs[name].finish_reason})")
        rt = None
        free()

    pairs = [(p, s) for p in range(len(prompts)) for s in a.settings]
    random.Random(a.seed).shuffle(pairs)
    rt = open_runtime(a, dtype)
    info = {"device": rt.device_name, "weights": rt.weights_label, "exact_rows": rt.exact_rows,
            "graphs": rt.use_graphs}
    log(f"{time.perf_counter() - t0:7.1f}s {dtype} used runtime: {info}")
    cases = []
    for i, (p, s) in enumerate(pairs):
        name, ids = prompts[p]
        got = decode(rt, ids, settings_for(s, a.new_tokens), detail=a.detail)
        v = compare(refs[name], got)
        case = {"dtype": dtype, "order": i, "prompt": name, "prompt_tokens": len(ids), "setting": s,
                "identical": v.status == "ok", "first_diff": v.first_diff,
                "windows": got.windows, "tokens": got.tokens, "finish_reason": got.finish_reason,
                "wall_s": round(got.wall_s, 3)}
        cases.append(case)
        log(f"{time.perf_counter() - t0:7.1f}s {dtype} used [{i + 1}/{len(pairs)}] {name} "
            f"({len(ids)} tokens) {s}: " + ("identical" if case["identical"] else
                                          f"DIFFERS at new token {v.first_diff}") +
            f", {len(got.tokens)} tokens in {got.windows} windows")
        if not case["identical"]:
            k = v.first_diff
            print(f"{dtype} {name} ({len(ids)} tokens) {s}: first difference at new token {k}: "
                  f"used {fmt(got.tokens, k)} fresh {fmt(refs[name].tokens, k)}", flush=True)
    rt = None
    free()
    return {"runtime": info, "references": {n: r.tokens for n, r in refs.items()}, "cases": cases}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="GGUF or HF folder (default: the bundled GGUF)")
    ap.add_argument("--device", default="cuda", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--weights", default="auto", choices=["auto", "packed", "dequantized"])
    ap.add_argument("--graphs", default="auto", choices=["auto", "on", "off"],
                    help="verify/prefill graph buckets (auto: on a GPU; on: also on the CPU, "
                         "where they run eagerly with the padded shapes)")
    ap.add_argument("--new-tokens", type=int, default=None, help="default 128 (--quick: 8)")
    ap.add_argument("--prompts", type=int, default=None, help="first N of the 12 (--quick: 3)")
    ap.add_argument("--settings", default=",".join(SETTINGS),
                    help=f"comma-separated, of: {', '.join(SETTINGS)}")
    ap.add_argument("--seed", type=int, default=0, help="the shuffle of (prompt, setting) pairs")
    ap.add_argument("--detail", action="store_true",
                    help="decode with detail on (every row's logits to the host: the workbench's "
                         "path) instead of the CLI's fast path")
    ap.add_argument("--quick", action="store_true", help="a dry run: 8 new tokens, 3 prompts")
    ap.add_argument("--json", default=None, metavar="OUT", help="write every case here")
    a = ap.parse_args(argv)
    a.new_tokens = a.new_tokens or (8 if a.quick else 128)
    n_prompts = a.prompts or (3 if a.quick else None)
    a.settings = [s.strip() for s in a.settings.split(",") if s.strip()]
    bad = [s for s in a.settings if s not in SETTINGS]
    if bad:
        ap.error(f"unknown settings {bad}; known: {', '.join(SETTINGS)}")
    dtypes = [d.strip() for d in a.dtypes.split(",") if d.strip()]
    if a.device == "cpu" or (a.device == "auto" and not torch.cuda.is_available()):
        torch.set_num_threads(1)    # a shared CPU: one thread keeps a dry run's pace steady

    t0 = time.perf_counter()
    tok = load_model(a.model).tokenizer
    prompts = prompt_pool(tok)[:n_prompts]
    log(f"{len(prompts)} prompts ({', '.join(f'{n} {len(i)}' for n, i in prompts)}) x "
        f"{len(a.settings)} settings x {len(dtypes)} dtypes, {a.new_tokens} new tokens")
    results: dict[str, Any] = {}
    for dt in dtypes:
        results[dt] = run_dtype(a, dt, prompts, t0)
    cases = [c for r in results.values() for c in r["cases"]]
    k, n = sum(c["identical"] for c in cases), len(cases)
    elapsed = time.perf_counter() - t0
    log(f"{elapsed:.0f} s in all")
    if a.json:
        out = Path(a.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d %H:%M"), "args": vars(a), "elapsed_s": round(elapsed, 1),
            "prompts": {name: len(ids) for name, ids in prompts},
            "settings": {s: settings_for(s, a.new_tokens).to_dict() for s in a.settings},
            "identical": k, "cases_total": n, "dtypes": results}, indent=1))
        log(f"wrote {out}")
    print(f"identical {k}/{n}", flush=True)
    return 0 if k == n else 1


if __name__ == "__main__":
    sys.exit(main())
