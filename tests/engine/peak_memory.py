"""Run as a script: build a runtime for a model and print, as JSON, how much anonymous memory the
process gained at its peak while loading (RssAnon from /proc: mapped file pages do not count).

    python tests/engine/peak_memory.py MODEL --device cpu --dtype bfloat16 --weights packed
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path


def rss_anon() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--weights", default="auto")
    ap.add_argument("--context", type=int, default=0, help="also allocate a KV cache this long")
    a = ap.parse_args()

    import torch
    torch.set_num_threads(1)
    from engine.model.runtime import Runtime
    from engine.io.load import load_model

    base = rss_anon()
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_anon())
            time.sleep(0.002)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    t0 = time.perf_counter()
    loaded = load_model(a.model)
    largest = max(s.nbytes for s in loaded.weights.values())
    largest_values = max(int(torch.tensor(s.shape).prod()) for s in loaded.weights.values())
    rt = Runtime(loaded, a.device, a.dtype, weights=a.weights)
    load_s = time.perf_counter() - t0
    stop.set()
    t.join()
    peak[0] = max(peak[0], rss_anon())
    on_host = rt.weight_bytes if rt.device.type == "cpu" else 0
    gpu = {}
    if rt.device.type == "cuda":
        gpu["gpu_after_load"] = torch.cuda.memory_allocated(rt.device)
        gpu["gpu_peak_load"] = torch.cuda.max_memory_allocated(rt.device)
        if a.context:
            ses = rt.session(a.context)
            ses.warm_up()
            torch.cuda.synchronize()
            gpu["context"] = a.context
            gpu["gpu_with_cache"] = torch.cuda.memory_allocated(rt.device)
            gpu["gpu_reserved_with_graphs"] = torch.cuda.memory_reserved(rt.device)
    json.dump({"peak_gain": peak[0] - base, "weight_bytes": rt.weight_bytes, "on_host": on_host,
               "largest_tensor_bytes": largest, "largest_tensor_values": largest_values,
               "load_s": load_s, "weights": rt.weights_label, **gpu}, sys.stdout)


if __name__ == "__main__":
    main()
