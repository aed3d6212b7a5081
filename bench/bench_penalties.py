"""Time of penalize_rows for 25 verify rows x 64-token windows over SmolLM2's vocabulary (49,152),
one torch thread (it was a timed test; speed belongs in benchmarks).

    python bench/bench_penalties.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from engine.speculation.sampling import SamplingConfig, penalize_rows  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(25, 49152, generator=g)
    hists = [torch.randint(0, 49152, (64,), generator=g).tolist() for _ in range(25)]
    cfg = SamplingConfig(repeat_penalty=1.1, presence_penalty=0.5, frequency_penalty=0.1)
    for _ in range(3):
        penalize_rows(logits, hists, cfg)
    times = []
    for _ in range(25):
        t = time.perf_counter()
        penalize_rows(logits, hists, cfg)
        times.append(time.perf_counter() - t)
    print(f"penalize_rows, 25 rows x 64-token windows, vocab 49,152, 1 thread: "
          f"median {statistics.median(times) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
