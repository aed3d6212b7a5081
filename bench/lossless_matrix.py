"""The lossless greedy matrix: speculative output equals plain autoregressive output, token for
token, for every drafter, depth, width and penalty setting.

Prompts: the five code-edit prompts (chat messages) and 20 Spec-Bench questions (the first 10
summarization + the first 10 rag; turns[0] as one user message). For each prompt and penalty
setting (off; repeat 1.3 + presence 1.5 + frequency 0.5 at once) one plain decode (--draft none)
is the reference, then every speculative configuration must reproduce it:

    lookup (match rule recent; --match adds first / frequent)   depth 1, 4, 8
    tree                                                         depth 1, 4, 8  x  width 1, 3

A case passes when the tokens are equal. When they differ, the first differing token k is
looked up in both runs: the verify row that emitted token k (speculative run) and the AR step
that emitted it. If either row is a flagged near-tie (top-2 logit margin < 1e-4, the WindowEvent
row's near_tie flag; or < --tie-margin when given, measured from the row's top-2 probabilities)
the case is reported as NEAR-TIE: batching a row with 24 others changes the float summation
order, which may flip an exact tie. Any other difference is a FAILURE (exit status 1).

    .venv/bin/python bench/lossless_matrix.py --prompts 2 --new-tokens 32          # a quick slice
    python bench/lossless_matrix.py --device cuda --dtype bfloat16 --tie-margin 0.05 \
        --model /tmp/SmolLM2-135M-Instruct.Q4_1.gguf --out bench/results/lossless_cuda_bf16.json

The full matrix is 25 prompts x 2 penalty settings x 9 configurations (+ 50 references); on a GPU
split it with --shard K/N (prompts i with i % N == K) when one command must stay under a limit.
--fast-path runs the no-penalty speculative cases with detail off, i.e. the GPU path the CLI uses
(only each row's top-k leaves the device); near-ties are then judged from the AR rows alone.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.speculation.decoder import Decoder
from engine.speculation.events import WindowEvent
from engine.io.prompts import encode_prompt
from engine.io.workloads import load_workload
from engine.session import open_runtime
from engine.speculation.sampling import SamplingConfig
from engine.speculation.settings import DecodeSettings

PENALTIES: dict[str, dict[str, float]] = {
    "off": {},
    "on": {"repeat_penalty": 1.3, "presence_penalty": 1.5, "frequency_penalty": 0.5},
}


# ---------------------------------------------------------------------------------------------
# one decode, with what each emitted token's row looked like


@dataclass
class Decode:
    tokens: list[int]
    near_tie: list[bool | None]     # per emitted token: its row's flag (None: detail off)
    gap: list[float | None]         # per emitted token: its row's top-2 logit margin
    windows: int
    finish_reason: str
    wall_s: float


def emitting_rows(ev: WindowEvent) -> list[int]:
    """The verify row each emitted token of a window came from: token j < len(accepted) is node
    accepted[j], judged at its parent's row; the last token is drawn at the last accepted row."""
    path = [-1] + list(ev.accepted_path)
    return [path[j] + 1 for j in range(len(ev.emitted))]


def top2_gap(top: list) -> float:
    """Top-2 logit margin from a row's top probabilities: log p1 - log p2 (= the logit gap)."""
    if len(top) < 2 or top[1][2] <= 0:
        return math.inf
    if top[0][2] <= 0:
        return 0.0
    return math.log(top[0][2]) - math.log(top[1][2])


def decode(rt, ids: list[int], settings: DecodeSettings, detail: bool = True) -> Decode:
    dec = Decoder(rt, ids, settings, detail=detail)
    ties: list[bool | None] = []
    gaps: list[float | None] = []
    t0 = time.perf_counter()
    for ev in dec.windows():
        for r in emitting_rows(ev):
            if ev.rows:
                ties.append(bool(ev.rows[r].near_tie))
                gaps.append(top2_gap(ev.rows[r].top))
            else:
                ties.append(None)
                gaps.append(None)
    return Decode(list(dec.new_tokens), ties, gaps, dec.windows_done, dec.finish_reason,
                  time.perf_counter() - t0)


@dataclass
class Verdict:
    status: str                         # "ok" | "near_tie" | "failure"
    first_diff: int | None = None       # index of the first differing new token
    spec_token: int | None = None
    ar_token: int | None = None
    spec_near_tie: bool | None = None   # the flags / margins at the first differing token
    ar_near_tie: bool | None = None
    spec_gap: float | None = None
    ar_gap: float | None = None
    lengths: dict[str, Any] = field(default_factory=dict)   # when one run stopped early


def compare(ar: Decode, spec: Decode, tie_margin: float | None = None) -> Verdict:
    """Equal tokens: ok. Else classify the first difference by the near-tie rule (module doc)."""
    if spec.tokens == ar.tokens:
        return Verdict("ok")
    k = next((i for i, (a, b) in enumerate(zip(ar.tokens, spec.tokens)) if a != b),
             min(len(ar.tokens), len(spec.tokens)))

    def at(xs, i):
        return xs[i] if i < len(xs) else None

    v = Verdict("failure", k, at(spec.tokens, k), at(ar.tokens, k),
                at(spec.near_tie, k), at(ar.near_tie, k), at(spec.gap, k), at(ar.gap, k))
    tie = bool(v.spec_near_tie) or bool(v.ar_near_tie)
    if tie_margin is not None:
        tie = tie or any(g is not None and g < tie_margin for g in (v.spec_gap, v.ar_gap))
    if k >= min(len(ar.tokens), len(spec.tokens)):
        tie = False     # one run stopped early with the same prefix: never a tie
        v.lengths = {"ar_len": len(ar.tokens), "spec_len": len(spec.tokens),
                    "ar_finish": ar.finish_reason, "spec_finish": spec.finish_reason}
    if tie:
        v.status = "near_tie"
    return v


# ---------------------------------------------------------------------------------------------
# the matrix


def workload(n_prompts: int | None) -> list[tuple[str, list[dict[str, str]]]]:
    """(name, chat messages): the five code-edit prompts, then 10 summarization + 10 rag."""
    prompts = load_workload("code-edit") + load_workload("specbench:summarization,rag", per_category=10)
    # Spec-Bench names as in bench/results/lossless_cpu_full.json: specbench_<category>_<question_id>
    out = [(p.id if p.category == "code-edit" else "specbench_" + p.id.replace("-", "_"), list(p.messages))
           for p in prompts]
    return out if n_prompts is None else out[:n_prompts]


def configurations(depths: list[int], widths: list[int],
                   matches: list[str]) -> list[dict[str, Any]]:
    out = []
    for m in matches:
        out += [{"draft": "lookup", "match": m, "depth": d, "width": 1} for d in depths]
    out += [{"draft": "tree", "match": "recent", "depth": d, "width": w}
            for d in depths for w in widths]
    return out


def label(c: dict[str, Any]) -> str:
    if c["draft"] == "lookup":
        return f"lookup-{c['match']} d{c['depth']}"
    return f"tree d{c['depth']} w{c['width']}"


def finite(case: dict[str, Any]) -> dict[str, Any]:
    """Strict JSON: an infinite margin (a row with one candidate) is written as null."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in case.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="GGUF or HF folder (default: the bundled GGUF)")
    ap.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--dtype", default="float32", choices=["auto", "float32", "bfloat16", "float16"])
    ap.add_argument("--prompts", type=int, default=None, help="first N of the 25 prompts")
    ap.add_argument("--shard", default="0/1", help="K/N: only prompts i with i %% N == K")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--depths", default="1,4,8")
    ap.add_argument("--widths", default="1,3")
    ap.add_argument("--match", default="recent", help="lookup match rules, e.g. recent,first,frequent")
    ap.add_argument("--penalties", default="off,on", help="which penalty settings: off,on")
    ap.add_argument("--tie-margin", type=float, default=None,
                    help="also call a difference a near-tie when the top-2 logit margin at it is "
                         "below this (for bfloat16 runs); default: the 1e-4 near_tie flag only")
    ap.add_argument("--fast-path", action="store_true",
                    help="no-penalty speculative cases with detail off (the CLI's GPU fast path)")
    ap.add_argument("--out", default=None, help="write every case's result here (JSON)")
    a = ap.parse_args(argv)

    k, n = (int(x) for x in a.shard.split("/"))
    prompts = [p for i, p in enumerate(workload(a.prompts)) if i % n == k]
    depths = [int(x) for x in a.depths.split(",")]
    widths = [int(x) for x in a.widths.split(",")]
    pens = a.penalties.split(",")
    configs = configurations(depths, widths, a.match.split(","))
    rt = open_runtime(a.model, a.device, a.dtype)
    total = len(prompts) * len(pens) * (1 + len(configs))
    print(f"{len(prompts)} prompts x {len(pens)} penalty settings x {len(configs)} configurations "
          f"(+ references) = {total} decodes of {a.new_tokens} tokens on {rt.device_name} "
          f"{rt.dtype_name}", flush=True)

    cases: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    i = 0
    for name, messages in prompts:
        ids = encode_prompt(rt.tokenizer, messages)
        for pen in pens:
            base = DecodeSettings(draft="none", max_new_tokens=a.new_tokens,
                                  sampling=SamplingConfig(**PENALTIES[pen]))
            ar = decode(rt, ids, base)
            i += 1
            print(f"[{i}/{total}] {time.perf_counter() - t_start:7.1f}s {name} penalties {pen}: "
                  f"reference, {len(ar.tokens)} tokens ({ar.finish_reason})", flush=True)
            for c in configs:
                s = replace(base, **c)
                detail = not (a.fast_path and pen == "off")
                spec = decode(rt, ids, s, detail=detail)
                v = compare(ar, spec, a.tie_margin)
                i += 1
                tpp = len(spec.tokens) / spec.windows if spec.windows else 0.0
                msg = {"ok": "ok", "near_tie": f"NEAR-TIE at token {v.first_diff}",
                       "failure": f"FAILURE at token {v.first_diff}"}[v.status]
                if v.status != "ok":
                    msg += (f" (spec {v.spec_token} vs AR {v.ar_token}; flags spec "
                            f"{v.spec_near_tie} AR {v.ar_near_tie}; margins spec {v.spec_gap} "
                            f"AR {v.ar_gap})")
                print(f"[{i}/{total}] {time.perf_counter() - t_start:7.1f}s {name} penalties "
                      f"{pen} {label(c)}: {msg}, {tpp:.2f} tokens/pass", flush=True)
                cases.append({"prompt": name, "prompt_tokens": len(ids), "penalties": pen,
                              **c, "rows_detail": detail, "new_tokens": len(spec.tokens),
                              "windows": spec.windows, "tokens_per_pass": round(tpp, 4),
                              "wall_s": round(spec.wall_s, 3), "ar_wall_s": round(ar.wall_s, 3),
                              **asdict(v)})

    counts = {s: sum(c["status"] == s for c in cases) for s in ("ok", "near_tie", "failure")}
    elapsed = time.perf_counter() - t_start
    print(f"\n{len(cases)} cases in {elapsed:.0f} s: {counts['ok']} identical, "
          f"{counts['near_tie']} near-tie, {counts['failure']} failures")
    for c in cases:
        if c["status"] != "ok":
            print(f"  {c['status']:8s} {c['prompt']} penalties {c['penalties']} {label(c)} "
                  f"at token {c['first_diff']}")
    if a.out:
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d %H:%M"), "device": rt.device_name,
            "dtype": rt.dtype_name, "model": str(rt.loaded.source), "args": vars(a),
            "penalty_settings": PENALTIES, "counts": counts, "elapsed_s": round(elapsed, 1),
            "cases": [finite(c) for c in cases]}, indent=1))
        print("wrote", out)
    return 1 if counts["failure"] else 0


if __name__ == "__main__":
    sys.exit(main())
