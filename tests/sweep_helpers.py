"""What the sweep tests share: a two-prompt copy-heavy workload file and a real cost profile
(fitted from points shaped like this CPU's: flat to ~8 rows, then ~2.4 ms a row)."""

from __future__ import annotations

import json
from pathlib import Path

CODE = ("def area(width, height):\n    return width * height\n\n\n"
        "def perimeter(width, height):\n    return 2 * (width + height)\n")


def workload_file(folder: Path) -> Path:
    rows = [{"id": f"copy-{i}", "messages": [
        {"role": "user", "content": f"Repeat this code exactly, then stop:\n\n{CODE}" * (i + 1)}]}
        for i in range(2)]
    path = folder / "copy.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def cpu_like_profile(rt):
    from engine.cost.profile import profile_from_points
    pts = [(1, 50.0), (2, 52.0), (4, 55.0), (8, 60.0), (16, 80.0), (32, 118.0), (64, 195.0)]
    return profile_from_points(pts, id="test-cpu-like", device=rt.device_name, model=rt.model_id,
                               dtype=rt.dtype_name, context=512, source="tests")
