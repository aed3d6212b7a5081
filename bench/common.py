"""Shared helpers for the benchmark scripts: workloads (engine.io.workloads), medians, recording."""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from engine.io.workloads import code_edit_rows as code_edit_prompts
from engine.io.workloads import specbench_rows as specbench

__all__ = ["code_edit_prompts", "specbench", "specbench_ids", "median", "machine", "record", "RESULTS"]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def specbench_ids(tokenizer, n: int, start: int = 200) -> list[list[int]]:
    """n Spec-Bench prompts from row `start` (the host benchmarks' held-out rows), each row's
    turns joined and encoded without special tokens."""
    from engine.io.workloads import SPECBENCH_FILE, read_jsonl
    rows = read_jsonl(SPECBENCH_FILE)[start:start + n]
    return [tokenizer.encode(" ".join(r["turns"]), add_special_tokens=False) for r in rows]


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def machine() -> str:
    return f"{platform.node()} {platform.machine()} {platform.processor() or ''}".strip()


def record(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), **payload}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=1))
    return path


def run_after_first_window(dec) -> dict:
    """Run a Decoder; its report plus decode_tok_s, the tokens after the first window over the
    time after it (the prefill, the same for every configuration, left out: noise in a short
    run). A run that ends in its first window keeps tok_s."""
    first = None
    for ev in dec.windows():
        if first is None:
            first = (ev.stats.elapsed_s, ev.stats.new_tokens)
    r = dec.report()
    after = r["wall_s"] - first[0]
    r["decode_tok_s"] = ((r["new_tokens"] - first[1]) / after
                         if after > 0 and r["new_tokens"] > first[1] else r["tok_s"])
    return r
