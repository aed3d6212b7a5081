"""What the window's per-row detail costs a decoding step (issue 33 (d)).

The workbench decodes with `detail=True`: every window's event carries one VerifyRow per verify
row (texts, the top-5 of the row's distribution, p / q, verdicts). This decodes the same prompt
with detail off and on, plain and with a fixed tree, interleaved (the CPU here is shared and
noisy: medians over repeats), and prints the median milliseconds per window (the time between
two events as the consumer sees them: the event's building included) and the on/off ratio.
The parts of a window: the pass (Session.verify, its device -> host transfers included), the
verdict (the Verifier) and the rows (verify_rows), median ms per window, timed by wrapping them
(a GPU's device time lands in the pass, where the pass's first transfer waits for it).
`--profile` adds cProfile's top functions of one detail-on run of each setting.

    .venv/bin/python bench/detail_cost.py [--device cpu|cuda] [--new-tokens 48] [--repeats 3]
                                           [--settings "plain,tree d8 w3"] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.io.prompts import encode_prompt  # noqa: E402
from engine.io.workloads import code_edit_rows  # noqa: E402
from engine.model.device import synchronize  # noqa: E402
from engine.session import open_runtime  # noqa: E402
import engine.speculation.decoder as decoder_module  # noqa: E402
from engine.model.runtime import Session  # noqa: E402
from engine.speculation.decoder import Decoder  # noqa: E402
from engine.speculation.factory import Verifier  # noqa: E402
from engine.speculation.settings import USER_DEFAULTS, DecodeSettings  # noqa: E402

SETTINGS = {
    "plain": dict(draft="none", adaptive=False, ar_floor=False),
    "tree d8 w3": dict(draft="tree", depth=8, width=3, adaptive=False, ar_floor=False),
    "tree d4 w3": dict(draft="tree", depth=4, width=3, adaptive=False, ar_floor=False),
    "lookup d8": dict(draft="lookup", depth=8, width=1, adaptive=False, ar_floor=False),
}


def settings(name: str, n: int) -> DecodeSettings:
    return replace(USER_DEFAULTS, max_new_tokens=n, **SETTINGS[name])


PARTS = ("pass", "verdict", "rows")


class Timed:
    """Wraps Session.verify, Verifier.__call__ and the decoder's verify_rows: ms per call."""

    def __init__(self) -> None:
        self.ms: dict[str, list[float]] = {k: [] for k in PARTS}
        self.saved = (Session.verify, Verifier.__call__, decoder_module.verify_rows)

    def wrap(self, name, fn):
        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.ms[name].append((time.perf_counter() - t0) * 1e3)
        return timed

    def __enter__(self) -> "Timed":
        verify, call, rows = self.saved
        Session.verify = self.wrap("pass", verify)
        Verifier.__call__ = self.wrap("verdict", call)
        decoder_module.verify_rows = self.wrap("rows", rows)
        return self

    def __exit__(self, *exc) -> None:
        Session.verify, Verifier.__call__, decoder_module.verify_rows = self.saved


def one_run(rt, ids, s: DecodeSettings, detail: bool) -> dict:
    """One decode: per-window wall times between events (the first window left out: it carries
    the prefill), the parts' times, tokens and windows."""
    with Timed() as parts:
        dec = Decoder(rt, ids, s, detail=detail)
        gaps: list[float] = []
        last = None
        for ev in dec.windows():
            synchronize(rt.device)
            now = time.perf_counter()
            if last is not None:
                gaps.append((now - last) * 1e3)
            last = now
    rep = dec.report()
    return dict(gaps=gaps, tokens=rep["tokens"], windows=rep["windows"], new=rep["new_tokens"],
                parts={k: v[1:] for k, v in parts.ms.items()})


def profile_top(rt, ids, s: DecodeSettings, n: int = 18) -> str:
    pr = cProfile.Profile()
    pr.enable()
    Decoder(rt, ids, s, detail=True).run()
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(n)
    lines = out.getvalue().splitlines()
    start = next((i for i, l in enumerate(lines) if "ncalls" in l), 0)
    return "\n".join(lines[start:start + n + 1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--weights", default="auto")
    ap.add_argument("--model", default=None)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--settings", default="plain,tree d8 w3")
    ap.add_argument("--prompt", type=int, default=0, help="which code-edit prompt")
    ap.add_argument("--profile", action="store_true", help="cProfile's top functions, detail on")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: as set up)")
    a = ap.parse_args()
    rt = open_runtime(a.model, a.device, a.dtype, weights=a.weights)
    if a.threads:
        import torch
        torch.set_num_threads(a.threads)
    names = [x.strip() for x in a.settings.split(",") if x.strip()]
    ids = encode_prompt(rt.tokenizer, code_edit_rows()[a.prompt]["messages"])
    warm = encode_prompt(rt.tokenizer, [{"role": "user", "content": "Say hello."}])
    for nm in names:                      # kernels, graphs, caches
        for detail in (False, True):
            Decoder(rt, warm, settings(nm, 8), detail=detail).run()
    print(f"# {rt.device_name}, {rt.dtype_name}, weights {rt.weights_label}, prompt "
          f"{len(ids)} tokens, {a.new_tokens} new, {a.repeats} repeats (interleaved)", flush=True)
    gaps = {(nm, d): [] for nm in names for d in (False, True)}
    part_ms = {(nm, d): {k: [] for k in PARTS} for nm in names for d in (False, True)}
    meds = {(nm, d): [] for nm in names for d in (False, True)}
    toks = {}
    wins = {}
    for rep in range(a.repeats):
        for nm in names:
            order = (False, True) if rep % 2 == 0 else (True, False)
            for detail in order:
                r = one_run(rt, ids, settings(nm, a.new_tokens), detail)
                gaps[nm, detail] += r["gaps"]
                for k in PARTS:
                    part_ms[nm, detail][k] += r["parts"][k]
                meds[nm, detail].append(statistics.median(r["gaps"]) if r["gaps"] else float("nan"))
                wins[nm, detail] = r["windows"]
                if toks.setdefault((nm, detail), r["tokens"]) != r["tokens"]:
                    print(f"!! {nm} detail={detail}: tokens differ between repeats")
    print(f"{'setting':12s} {'windows':>7s} {'off ms/win':>10s} {'on ms/win':>10s} {'on/off':>7s} "
          f"{'same tokens':>11s}")
    for nm in names:
        off, on = statistics.median(gaps[nm, False]), statistics.median(gaps[nm, True])
        same = toks[nm, False] == toks[nm, True]
        print(f"{nm:12s} {wins[nm, True]:7d} {off:10.2f} {on:10.2f} {on / off:7.3f} {str(same):>11s}"
              f"   (per-run medians off {', '.join(f'{x:.2f}' for x in meds[nm, False])};"
              f" on {', '.join(f'{x:.2f}' for x in meds[nm, True])})", flush=True)
    print("\nmedian ms per window of each part (off -> on):")
    for nm in names:
        cells = []
        for k in PARTS:
            off, on = (statistics.median(part_ms[nm, d][k]) if part_ms[nm, d][k] else 0.0
                       for d in (False, True))
            cells.append(f"{k} {off:.3f} -> {on:.3f}")
        print(f"  {nm:12s} " + " | ".join(cells), flush=True)
    if a.profile:
        for nm in names:
            print(f"\n## cProfile, {nm}, detail on (tottime)")
            print(profile_top(rt, ids, settings(nm, a.new_tokens)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
