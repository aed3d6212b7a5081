"""Record llama-speculative-simple's real output on the loop calibration's prompts and settings
(engine.tuning.llamacpp_loop), as the test fixture tests/fixtures/llamacpp/speculative-simple_*.json.

    python bench/llamacpp_loop_record.py --bin BUILD/bin/llama-speculative-simple --model F.gguf \
        [--tokens 64] [--threads 1] [--extra "-ngl 99 -fa on"] --out FIXTURE.json

Each run's stderr is kept from its "encoded N tokens" line to the end (the statistics the
calibration reads; the model-loading preamble before it is left out).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.tuning.llamacpp_loop import LOOP_CONFIGS, LOOP_PROMPTS, NEVER_DRAFTS, loop_command  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--extra", default="")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    settings = [("plain", list(NEVER_DRAFTS))] + [(c.id, c.flags()) for c in LOOP_CONFIGS]
    runs = []
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in LOOP_PROMPTS.items():
            f = Path(tmp) / f"{name}.txt"
            f.write_text(text)
            for setting, flags in settings:
                cmd = loop_command(a.bin, a.model, f, flags, a.tokens, a.threads, shlex.split(a.extra))
                r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=600)
                if r.returncode != 0:
                    raise SystemExit(f"exit {r.returncode}: {shlex.join(cmd)}\n{r.stderr[-2000:]}")
                lines = r.stderr.splitlines()
                start = next(i for i, x in enumerate(lines) if "encoded" in x and "tokens in" in x)
                runs.append({"prompt": name, "setting": setting, "command": shlex.join(cmd),
                             "stderr": "\n".join(lines[start:]) + "\n"})
                print(f"{name} {setting}: {lines[start + 1].strip()}", file=sys.stderr, flush=True)
    out = {"source": "llama-speculative-simple of the pinned llama.cpp tree (../shared/peers/"
                     "llama.cpp-0.3.36-src.tgz), built for the CPU, run by bench/llamacpp_loop_record.py",
           "captured": time.strftime("%Y-%m-%d %H:%M:%S %z"), "load_average": [load0, os.getloadavg()[0]],
           "model": Path(a.model).name, "tokens": a.tokens, "threads": a.threads, "runs": runs}
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"written {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
