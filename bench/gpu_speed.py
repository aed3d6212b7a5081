"""Issue 22's figures for our side, on the GPU machine: each part prints a table and writes JSON.

    python3 bench/gpu_speed.py kernels  --model M --out DIR   # per-kernel table of one pass
    python3 bench/gpu_speed.py roofline --model M --out DIR   # pass ms by rows, context 1000
    python3 bench/gpu_speed.py matmul   --out DIR             # the packed matmul alone, big matrices
    python3 bench/gpu_speed.py decode   --model M --out DIR   # generate --draft none; prefill 512
    python3 bench/gpu_speed.py exact    --model M --out DIR   # bench/gpu_exact.py model: max |diff|
    python3 bench/gpu_speed.py all      --model M --out DIR [--llama-bin B]   # all of it, one load
    python3 bench/gpu_speed.py summary  --out DIR             # the issue's goal table from DIR

`all` loads the model once and runs kernels, then `--rounds` rounds of {our roofline, llama.cpp's
rows + tg128 + pp512 (bench/llamacpp_side.py), our decode at depth 1000 and our prefill}, the
order alternating each round (ours first, then theirs first) so that clock and thermal drift
fall on both sides; then `generate` 256 tokens on a short prompt (the figure the issue quotes).
Medians of the rounds. `--quick` (the kernel iteration loop): kernels, the 1- and 16-row pass,
and (with --matmul) the matmul table; no llama.cpp, no decode.

Files (DIR/): kernels_<tag>.json, roofline_<tag>.json, matmul.json, decode_<tag>.json,
exact_<tag>.json + exact_summary_<tag>.json, all_<tag>.json, profile_<tag>.json (the roofline as a
cost profile, `specscope roofline`'s format), llamacpp_<tag>.json (+ llama-bench's raw JSON),
summary.json and summary.md. <tag> defaults to the model file's stem. `--device cpu` runs every
part on this machine's CPU (a dry run of the script: the same code paths, CPU ops for kernels).
`kernels` profiles the body of the captured graph run eagerly (bench/speed_profile.py);
`matmul` times `packed_linear` in CUDA graphs (bench/speed_matmul.py); the goal table is
bench/speed_goals.py. The device session that runs all of it: bench/gpu_speed_session.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

HBM_GBS = 4800.0          # H200, the weight floor
ROWS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
CONTEXT = 1000
SHORT_PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def write(out: Path, name: str, payload: dict) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    p = out / name
    p.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), **payload}, indent=1, default=str))
    return p


# -- the runtime ---------------------------------------------------------------------------


def open_rt(a: argparse.Namespace):
    import torch
    from engine.session import open_runtime
    if a.device == "cpu":
        torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    rt = open_runtime(a.model, a.device, a.dtype, weights=a.weights)
    cap = max(a.context + max(ROWS) + 64, a.prompt_depth + a.tokens + 8, a.prefill + 8, 600)
    log(f"loaded {rt.model_id} on {rt.device_name}: {rt.weights_label}, {rt.dtype_name} "
        f"({time.perf_counter() - t0:.1f} s)")
    t0 = time.perf_counter()
    ses = rt.session(min(cap, rt.config.max_context))
    ses.warm_up()                   # graphs captured on a session the later passes reuse
    ses.close()
    log(f"warm-up (graphs, kernels) {time.perf_counter() - t0:.1f} s")
    return rt


def model_facts(rt) -> dict:
    """Bytes: all weights on the device (the issue's floor: weight_bytes / 4.8 TB/s) and those a
    pass streams (every linear layer; the embedding table is only gathered)."""
    from engine.model.linear import Linear
    m = rt.model
    linears = [v for L in m.layers for v in L.values() if isinstance(v, Linear)] + [m.lm_head]
    streamed = sum(v.nbytes for v in linears)
    return {"model": rt.model_id, "device": rt.device_name, "dtype": rt.dtype_name,
            "weights": rt.weights_label, "weight_bytes": rt.weight_bytes, "streamed_bytes": streamed,
            "n_layers": rt.config.n_layers, "weight_floor_ms": rt.weight_bytes / HBM_GBS / 1e6,
            "streamed_floor_ms": streamed / HBM_GBS / 1e6}


def prompt_ids(tokenizer, n: int) -> list[int]:
    """n token ids of real text (the Spec-Bench questions, concatenated; no chat template)."""
    from engine.io.workloads import SPECBENCH_FILE, read_jsonl
    ids: list[int] = []
    for row in read_jsonl(SPECBENCH_FILE):
        ids += tokenizer.encode(" ".join(row["turns"]) + "\n\n", add_special_tokens=False)
        if len(ids) >= n:
            return ids[:n]
    raise ValueError(f"the workload text gives {len(ids)} tokens, fewer than {n}")


# -- parts ---------------------------------------------------------------------------------


def part_kernels(rt, a) -> dict:
    from speed_profile import format_profile, profile_graph_pass, profile_pass
    res = {"facts": model_facts(rt), "passes": {}}
    for rows in a.kernel_rows:
        p = profile_pass(rt, rows=rows, context=a.context, passes=a.passes)
        p["graph"] = profile_graph_pass(rt, rows=rows, context=a.context)
        res["passes"][rows] = p
        print(format_profile(p, top=a.top), flush=True)
        if p["graph"]:
            g = p["graph"]
            print(f"graph-replayed pass: {g['wall_ms']:.3f} ms wall; kernels seen {g['kernels_seen']:.0f}, "
                  f"busy {g['kernel_us_per_pass'] / 1e3:.3f} ms {g['note']}", flush=True)
            for r in g["by_kernel"][:8]:
                print(f"  {' '.join(r['kernel'].split())[:70]:<70} {r['launches']:>6.1f} {r['us']:>9.1f} µs", flush=True)
        print(flush=True)
    return res


def roofline_round(rt, rows, context: int, repeats: int, warmup: int) -> dict[int, float]:
    from engine.cost.probe import run_probe
    prof = run_probe(rt, context=context, rows=rows, repeats=repeats, warmup=warmup,
                     budget_s=1e9, exit_layers=[])
    return {int(r): float(ms) for r, ms in prof.points}


def roofline_result(rounds: list[dict[int, float]], facts: dict) -> dict:
    rows = sorted(rounds[0])
    ms = {r: statistics.median(rd[r] for rd in rounds) for r in rows}
    res = {"facts": facts, "rounds": rounds, "ms_by_rows": ms,
           "spread": {r: (min(rd[r] for rd in rounds), max(rd[r] for rd in rounds)) for r in rows}}
    if 1 in ms:
        res["one_row_over_floor"] = ms[1] / facts["weight_floor_ms"]
        res["one_row_over_streamed_floor"] = ms[1] / facts["streamed_floor_ms"]
        res["rows_over_one"] = {r: ms[r] / ms[1] for r in rows}
    return res


def format_roofline(tag: str, r: dict) -> str:
    ms = r["ms_by_rows"]
    lines = [f"ours, {tag}: pass ms by rows, context {r.get('context', CONTEXT)}, median of "
             f"{len(r['rounds'])} round(s)", f"  {'rows':>8} " + " ".join(f"{k:>7}" for k in ms),
             f"  {'ms':>8} " + " ".join(f"{v:>7.3f}" for v in ms.values())]
    if "rows_over_one" in r:
        lines.append(f"  {'x 1 row':>8} " + " ".join(f"{v:>7.2f}" for v in r["rows_over_one"].values()))
        f = r["facts"]
        lines.append(f"  one row / weight floor ({f['weight_bytes'] / 1e9:.2f} GB / {HBM_GBS / 1e3:.1f} TB/s = "
                     f"{f['weight_floor_ms']:.3f} ms): {r['one_row_over_floor']:.2f}  "
                     f"(streamed bytes only, {f['streamed_bytes'] / 1e9:.2f} GB: {r['one_row_over_streamed_floor']:.2f})")
    return "\n".join(lines)


def save_profile(rt, roofline: dict, path: Path) -> None:
    """The combined medians as a cost profile (`specscope roofline`'s format): the workbench's
    roofline view and the cost model read it."""
    from engine.cost.probe import profile_id
    from engine.cost.profile import profile_from_points
    prof = profile_from_points(sorted(roofline["ms_by_rows"].items()),
                               id=profile_id(rt.device_name, rt.model_id, rt.dtype_name),
                               device=rt.device_name, model=rt.model_id, dtype=rt.dtype_name,
                               context=roofline.get("context"),
                               source=f"bench/gpu_speed.py all {time.strftime('%Y-%m-%d %H:%M')}",
                               extra={"rounds": len(roofline["rounds"])})
    prof.save(path)


def decode_round(rt, ids: list[int], tokens: int) -> dict:
    """Plain greedy decoding (`generate --draft none`) of `tokens` tokens after `ids`: the report
    `generate --json` prints (tok_s counts prefill) and the decode steps alone (the time between
    consecutive windows: one token each), llama-bench tg's measure."""
    from engine.model.device import synchronize
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    # detail=False as `generate` runs it (detail=True is the workbench's: every row's top tokens
    # as text, and greedy verdicts on the full logits instead of the device's top-k)
    dec = Decoder(rt, ids, DecodeSettings(draft="none", max_new_tokens=tokens), detail=False)
    marks = []
    # all `tokens` steps, as llama-bench's tg does: the end of text does not stop the round
    # (the bundled model answers the depth prompt in ~20 tokens: too few steps to time)
    eos, rt.tokenizer.eos_ids = rt.tokenizer.eos_ids, ()
    try:
        for _ in dec.windows():
            marks.append(time.perf_counter())
    finally:
        rt.tokenizer.eos_ids = eos
    synchronize(rt.device)
    rep = dec.report()
    steps = [b - a for a, b in zip(marks, marks[1:])]
    out = {k: rep[k] for k in ("new_tokens", "prompt_tokens", "tok_s", "wall_s", "finish_reason")}
    if steps:
        out["step_ms_median"] = statistics.median(steps) * 1e3
        out["step_ms_mean"] = sum(steps) / len(steps) * 1e3
        out["decode_tok_s"] = len(steps) / sum(steps)
    return out


def prefill_round(rt, ids: list[int], repeats: int = 5) -> dict:
    from engine.model.device import synchronize
    times = []
    ses = rt.session(len(ids) + 1)
    for i in range(repeats + 2):
        ses.truncate(0)
        synchronize(rt.device)
        t0 = time.perf_counter()
        ses.prefill(ids)
        synchronize(rt.device)
        if i >= 2:        # warm-ups: the first runs eagerly, the second captures its graph
            times.append(time.perf_counter() - t0)
    ses.close()
    med = statistics.median(times)
    return {"tokens": len(ids), "s_median": med, "tok_s": len(ids) / med, "samples": times}


def part_exact(a) -> dict:
    """bench/gpu_exact.py model (cpu on a CPU) in a child process; its max |diff| per form."""
    out = Path(a.out) / f"exact_{a.tag}.json"
    what = "model" if a.device != "cpu" else "cpu"
    cmd = [sys.executable, str(ROOT / "bench" / "gpu_exact.py"), what, "--model", a.model, "--out", str(out)]
    if not a.exact_cost:
        cmd.append("--rows-only")
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.exact_timeout, cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"))
    except subprocess.TimeoutExpired as e:
        print(f"exact: gpu_exact.py ran past {a.exact_timeout:.0f} s", flush=True)
        return {"cmd": cmd, "rc": None, "seconds": a.exact_timeout, "forms": {},
                "error": f"timed out; output: {(e.stdout or b'')[-2000:]!r}"}
    res: dict = {"cmd": cmd, "rc": r.returncode, "seconds": round(time.perf_counter() - t0, 1), "forms": {}}
    if r.returncode or not out.is_file():
        res["error"] = (r.stderr or r.stdout)[-3000:]
        print(f"exact: gpu_exact.py failed (rc {r.returncode}):\n{res['error']}", flush=True)
        return res
    raw = json.loads(out.read_text())
    print(f"exact ({what}, {res['seconds']} s): max |diff| of verify rows against the one-row pass", flush=True)
    print(f"  {'form':<24} {'chains':>10} {'trees':>10}  verdict", flush=True)
    for form, v in raw.items():
        rows = v["rows"]
        chains = max(rows["chains"].values())
        trees = max(max(t["first_branch"], t["side_branch"]) for t in rows["trees"].values())
        res["forms"][form] = {"max_abs_chains": chains, "max_abs_trees": trees, "all_equal": rows["all_equal"]}
        print(f"  {form:<24} {chains:>10.3g} {trees:>10.3g}  {'0.0: exact' if rows['all_equal'] else 'DIFFERS'}",
              flush=True)
    res["all_equal"] = all(f["all_equal"] for f in res["forms"].values())
    return res


def part_matmul(a) -> dict:
    import torch

    import speed_matmul as sm
    shapes = sm.TINY if a.device == "cpu" else sm.SHAPES
    if a.shapes:
        shapes = sm.parse_shapes(a.shapes)
    override = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in a.override.split(":")} if a.override else None
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[
        a.dtype if a.dtype != "auto" else ("bfloat16" if a.device != "cpu" else "float32")]
    log(f"matmul: {', '.join(shapes)} at rows {a.matmul_rows}")
    return sm.run(shapes, tuple(a.matmul_rows), "cuda" if a.device != "cpu" else "cpu", dtype,
                  peak_gbs=a.peak_gbs, override=override, linear=a.linear and not a.quick,
                  log=lambda s: print(s, flush=True))


# -- commands ------------------------------------------------------------------------------


def guarded(errors: dict, name: str, fn):
    """fn(), or None with the error logged and kept: one failing part must not lose the others."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - reported in the output and the JSON
        import traceback
        errors[name] = traceback.format_exc()[-3000:]
        log(f"!! {name} failed: {e!r}"[:400])
        return None


def cmd_all(a) -> int:
    """kernels, then rounds of ours and llama.cpp's, alternating who goes first; one load. The
    JSON is rewritten after every step, so a run cut short keeps what it measured."""
    out = Path(a.out)
    lc = None
    if a.llama_bin and not a.quick:
        import llamacpp_side as lcs
        try:
            lc = lcs.find_llama_bench(a.llama_bin)
        except lcs.LlamaBenchError as e:
            log(f"llama.cpp skipped: {e}")
    errors: dict = {}
    mm = None
    if a.matmul:
        mm = guarded(errors, "matmul", lambda: part_matmul(a))
        if mm:
            write(out, "matmul.json", mm)
    rt = open_rt(a)
    facts = model_facts(rt)
    res: dict = {"tag": a.tag, "facts": facts, "args": vars(a), "errors": errors}
    if a.kernels:
        k = guarded(errors, "kernels", lambda: part_kernels(rt, a))
        if k:
            res["kernels"] = k
            write(out, f"kernels_{a.tag}.json", k)
    if a.quick:
        rd = guarded(errors, "roofline", lambda: roofline_round(rt, [1, 16], a.context, a.repeats, 3))
        if rd:
            res["roofline"] = roofline_result([rd], facts)
            print(format_roofline(a.tag, res["roofline"]), flush=True)
        write(out, f"all_{a.tag}.json", res)
        if rd:
            print(quick_line(res, mm), flush=True)
        return 1 if errors else 0
    long_ids = prompt_ids(rt.tokenizer, a.prompt_depth)
    pre_ids = prompt_ids(rt.tokenizer, a.prefill)
    ours_rl, ours_dec, ours_pre, theirs = [], [], [], []

    def ours():
        t0 = time.perf_counter()
        n = len(ours_rl) + 1
        for name, fn, into in (("roofline", lambda: roofline_round(rt, a.rows, a.context, a.repeats, 3), ours_rl),
                               ("decode", lambda: decode_round(rt, long_ids, a.tokens), ours_dec),
                               ("prefill", lambda: prefill_round(rt, pre_ids), ours_pre)):
            r = guarded(errors, f"{name} round {n}", fn)
            if r is not None:
                into.append(r)
        log(f"ours round {n}: 1 row {ours_rl[-1][min(a.rows)] if ours_rl else float('nan'):.3f} ms, decode "
            f"{ours_dec[-1].get('decode_tok_s', 0) if ours_dec else 0:.1f} tok/s at depth {a.prompt_depth}, "
            f"prefill {ours_pre[-1]['tok_s'] if ours_pre else 0:.0f} tok/s ({time.perf_counter() - t0:.1f} s)")

    def llama():
        import llamacpp_side as lcs
        t0 = time.perf_counter()
        rd = lcs.measure(lc, Path(a.model), reps=a.llama_reps, rows=a.rows, depth=a.context,
                         tg=a.tokens, pp=a.prefill, threads=a.threads if a.device == "cpu" else None)
        theirs.append(rd)
        s = rd["summary"]
        log(f"llama.cpp round {len(theirs)}: tg {((s.get('tg') or {}).get('tok_s') or 0):.1f} tok/s, 1 row "
            f"{s['rows_ms'].get(min(a.rows), float('nan')):.3f} ms, pp {((s.get('pp') or {}).get('tok_s') or 0):.0f} "
            f"tok/s ({time.perf_counter() - t0:.1f} s){' ERRORS ' + str(rd['errors']) if rd['errors'] else ''}")

    def snapshot() -> None:
        if ours_rl:
            res["roofline"] = roofline_result(ours_rl, facts)
            res["roofline"]["context"] = a.context
        if ours_dec:
            res["decode"] = {"rounds": ours_dec, "depth": a.prompt_depth, "tokens": a.tokens,
                             "decode_tok_s": statistics.median(d.get("decode_tok_s", 0) for d in ours_dec),
                             "step_ms_median": statistics.median(d.get("step_ms_median", 0) for d in ours_dec)}
        if ours_pre:
            res["prefill"] = {"rounds": ours_pre, "tokens": a.prefill,
                              "tok_s": statistics.median(p["tok_s"] for p in ours_pre)}
        if theirs:
            import llamacpp_side as lcs
            res["llamacpp"] = lcs.write_side(out, a.tag, theirs)["summary"]
        write(out, f"all_{a.tag}.json", res)

    for i in range(a.rounds):
        for side in ((ours, llama) if i % 2 == 0 else (llama, ours)):
            if side is llama and lc is None:
                continue
            guarded(errors, f"{side.__name__} round {i + 1}", side)
            snapshot()
    t0 = time.perf_counter()
    from engine.io.prompts import encode_prompt
    g = guarded(errors, "generate", lambda: decode_round(rt, encode_prompt(rt.tokenizer, SHORT_PROMPT),
                                                         a.gen_tokens))
    if g:
        res["generate"] = g
        log(f"generate --draft none {a.gen_tokens} tokens, short prompt: {g['tok_s']:.1f} tok/s "
            f"(decode steps alone {g.get('decode_tok_s', 0):.1f}) ({time.perf_counter() - t0:.1f} s)")
    snapshot()
    if "roofline" in res:
        print(format_roofline(a.tag, res["roofline"]), flush=True)
        guarded(errors, "profile", lambda: save_profile(rt, res["roofline"], out / f"profile_{a.tag}.json"))
    if "llamacpp" in res:
        import llamacpp_side as lcs
        print(lcs.format_summary(a.tag, res["llamacpp"]), flush=True)
    if a.exact:
        res["exact"] = part_exact(a)
        write(out, f"exact_summary_{a.tag}.json", res["exact"])
        write(out, f"all_{a.tag}.json", res)
    if errors:
        log(f"!! {len(errors)} part(s) failed: {', '.join(errors)} (tracebacks in all_{a.tag}.json)")
    return 1 if errors else 0


def quick_line(res: dict, mm: dict | None) -> str:
    """One line for the kernel loop: the figures the issue's goals are about."""
    r = res["roofline"]
    ms = r["ms_by_rows"]
    parts = [f"1 row {ms[1]:.3f} ms = {r['one_row_over_floor']:.2f}x floor"]
    if 16 in ms:
        parts.append(f"16 rows {ms[16]:.3f} ms = {ms[16] / ms[1]:.2f}x")
    k = (res.get("kernels") or {}).get("passes", {}).get(1)
    if k:
        parts.append(f"launches {k['launches_per_layer']:.1f}/layer")
    for name, s in ((mm or {}).get("shapes") or {}).items():
        if "pct_peak" in s:
            inv = "" if s.get("row_invariant", True) else " NOT ROW-INVARIANT"
            parts.append(f"{name} {s['pct_peak'][min(s['pct_peak'])]:.0f}%{inv}")
    return "QUICK " + res["tag"] + ": " + "; ".join(parts)


def cmd_part(a) -> int:
    out = Path(a.out)
    if a.cmd == "matmul":
        write(out, "matmul.json", part_matmul(a))
        return 0
    if a.cmd == "exact":
        res = part_exact(a)
        write(out, f"exact_summary_{a.tag}.json", res)
        return 0 if res.get("all_equal") else 1
    rt = open_rt(a)
    if a.cmd == "kernels":
        write(out, f"kernels_{a.tag}.json", part_kernels(rt, a))
    elif a.cmd == "roofline":
        rounds = [roofline_round(rt, a.rows, a.context, a.repeats, 3) for _ in range(a.rounds)]
        res = roofline_result(rounds, model_facts(rt))
        res["context"] = a.context
        print(format_roofline(a.tag, res), flush=True)
        write(out, f"roofline_{a.tag}.json", res)
    elif a.cmd == "decode":
        from engine.io.prompts import encode_prompt
        res = {"facts": model_facts(rt),
               "generate": decode_round(rt, encode_prompt(rt.tokenizer, SHORT_PROMPT), a.gen_tokens),
               "depth": decode_round(rt, prompt_ids(rt.tokenizer, a.prompt_depth), a.tokens),
               "prefill": prefill_round(rt, prompt_ids(rt.tokenizer, a.prefill))}
        g, d, p = res["generate"], res["depth"], res["prefill"]
        print(f"decode, {a.tag}: generate --draft none {g['new_tokens']} tokens {g['tok_s']:.1f} tok/s "
              f"(steps alone {g.get('decode_tok_s', 0):.1f}); at depth {a.prompt_depth}, {d['new_tokens']} tokens: "
              f"{d.get('decode_tok_s', 0):.1f} tok/s ({d.get('step_ms_median', 0):.3f} ms a step); "
              f"prefill {p['tokens']} tokens {p['tok_s']:.0f} tok/s", flush=True)
        write(out, f"decode_{a.tag}.json", res)
    return 0


def _ints(text: str) -> list[int]:
    try:
        v = sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not v or v[0] < 1:
        raise argparse.ArgumentTypeError(f"expected counts >= 1, got {text!r}")
    return v


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("cmd", choices=["kernels", "roofline", "matmul", "decode", "exact", "all", "summary"])
    ap.add_argument("--out", required=True, help="results folder")
    ap.add_argument("--model", default=None, help="a GGUF file (default: the bundled SmolLM2)")
    ap.add_argument("--tag", default=None, help="name in file names (default: the model's stem)")
    ap.add_argument("--device", default="cuda", help="cuda (ROCm too) or cpu (a dry run)")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--weights", default="packed", help="packed | dequantized | auto")
    ap.add_argument("--threads", type=int, default=1, help="torch threads on a CPU")
    ap.add_argument("--context", type=int, default=CONTEXT, help="committed tokens a probe pass attends to")
    ap.add_argument("--rows", type=_ints, default=list(ROWS), help="roofline row counts")
    ap.add_argument("--repeats", type=int, default=15, help="roofline: timed passes a row count, a round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (roofline / all)")
    ap.add_argument("--kernel-rows", type=_ints, default=[1], help="kernels: rows of the profiled passes")
    ap.add_argument("--passes", type=int, default=5, help="kernels: profiled passes (averaged)")
    ap.add_argument("--top", type=int, default=30, help="kernels: rows of the printed table")
    ap.add_argument("--tokens", type=int, default=128, help="decode: tokens after the depth prompt (tg)")
    ap.add_argument("--prompt-depth", type=int, default=CONTEXT, help="decode: prompt tokens before them")
    ap.add_argument("--gen-tokens", type=int, default=256, help="generate: tokens after the short prompt")
    ap.add_argument("--prefill", type=int, default=512, help="prefill: prompt tokens (llama.cpp's pp512)")
    ap.add_argument("--matmul-rows", type=_ints, default=[1, 2, 4, 8, 16, 64])
    ap.add_argument("--shapes", default=None,
                    help="matmul: comma-separated names (speed_matmul.SHAPES / TINY) or QTYPE:NxK, e.g. Q4_K:5120x4096")
    ap.add_argument("--override", default=None, help="matmul: kernel config k=v:k=v (triton_kernels)")
    ap.add_argument("--linear", action=argparse.BooleanOptionalAction, default=True,
                    help="matmul: also time bf16 F.linear on the dequantized weight")
    ap.add_argument("--peak-gbs", type=float, default=HBM_GBS)
    ap.add_argument("--exact-cost", action="store_true", help="exact: also gpu_exact.py's pass cost")
    ap.add_argument("--exact-timeout", type=float, default=300)
    ap.add_argument("--llama-bin", default=None, help="all: llama-bench or its build dir")
    ap.add_argument("--llama-reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="all: kernels, 1/16-row pass (and --matmul)")
    ap.add_argument("--matmul", action="store_true", help="all: the matmul table too")
    ap.add_argument("--no-kernels", dest="kernels", action="store_false", help="all: skip the profile")
    ap.add_argument("--exact", action="store_true", help="all: run the exact check at the end")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.cmd == "summary":
        from speed_goals import summarize_dir
        return summarize_dir(Path(a.out))
    if a.device not in ("cuda", "cpu"):
        print(f"gpu_speed: --device is cuda or cpu, got {a.device!r}", file=sys.stderr)
        return 2
    if a.model is None and a.cmd != "matmul":
        from engine.io.load import default_model_path
        a.model = str(default_model_path())
    if a.model is not None and not Path(a.model).is_file():
        print(f"gpu_speed: no model file {a.model}", file=sys.stderr)
        return 2
    a.tag = a.tag or (Path(a.model).stem if a.model else "matmul")
    if a.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            print("gpu_speed: no GPU here (torch.cuda.is_available() is False): use --device cpu "
                  "for a dry run", file=sys.stderr)
            return 2
    return cmd_all(a) if a.cmd == "all" else cmd_part(a)


if __name__ == "__main__":
    sys.exit(main())
