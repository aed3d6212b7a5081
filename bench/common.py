"""Shared helpers for the benchmark scripts: workloads, medians, recording."""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ROOT.parent / "shared" / "workloads"
RESULTS = ROOT / "bench" / "results"


def workload_file(name: str) -> Path:
    """The shared workloads live beside the checkout; a copy under assets/workloads wins."""
    local = ROOT / "assets" / "workloads" / name
    return local if local.exists() else WORKLOADS / name


def code_edit_prompts() -> list[dict[str, Any]]:
    return [json.loads(l) for l in workload_file("code_edit_prompts.jsonl").read_text().splitlines() if l.strip()]


def specbench(categories: list[str], per_category: int) -> list[dict[str, Any]]:
    rows = [json.loads(l) for l in workload_file("specbench_questions.jsonl").read_text().splitlines() if l.strip()]
    out = []
    for c in categories:
        out += [r for r in rows if r["category"] == c][:per_category]
    return out


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
