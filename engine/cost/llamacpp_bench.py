"""llama.cpp's own verify cost, measured by the user's llama-bench, as a cost profile.

A llama.cpp verify pass of k rows (the last token plus k-1 drafts, `llama-speculative-simple` /
`llama-server`) is one `llama_decode` of a k-token batch: what llama-bench times as a prompt of
k tokens. So

    llama-bench -m MODEL -p 1,2,4,8,16,32,64 -n 32 -d CTX -o json --progress

gives the pass cost by rows at context depth CTX (the pp tests), and one plain decode step (the
tg test: its time over its tokens). Row 1 of the profile is the tg step when the JSON has one
(plain decoding is what the user compares against, and on a GPU llama.cpp's 1-token pp pass is
dearer than its tg step: BENCHMARKS.md, "Speculation and tuning timings (moved from code
comments)"), the 1-token pp pass
otherwise; both are kept in the profile's extra fields. The curve is fitted as ours is
(engine.cost.fit) and saved as a profile of its own: engine "llama.cpp", its build and commit as
llama-bench reports them, the backend, the model file.

`profile_from_llama_bench` reads any llama-bench JSON (a list of test records: n_prompt, n_gen,
n_depth, samples_ns, build_commit, ...), from this module's run or captured elsewhere.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
from pathlib import Path
from typing import Any, Callable, Sequence

from engine.childproc import run_bounded
from engine.cost.profile import CostProfile, profile_from_points
from engine.errors import ParameterError, SpecscopeError
from engine.io.jsonfile import MiB, parse_json, read_json

LLAMA_BENCH_ROWS = (1, 2, 4, 8, 16, 32, 64)
TG_TOKENS = 32
ENGINE = "llama.cpp"
LLAMA_BENCH_TIMEOUT_S = 3600.0   # seven pp tests and a tg on a slow CPU take minutes, never an hour
MAX_BENCH_OUTPUT = 16 * MiB      # its JSON: a few KB a test


class LlamaBenchError(SpecscopeError):
    """llama-bench is missing, failed, or could not load the model (one line says which)."""


def find_llama_bench(path: str | os.PathLike | None = None) -> Path:
    """The llama-bench to run: `path`, else $LLAMA_BENCH, else `llama-bench` on PATH."""
    given = str(path) if path else os.environ.get("LLAMA_BENCH") or ""
    if not given:
        found = shutil.which("llama-bench")
        if not found:
            raise LlamaBenchError("no llama-bench: pass --llama-bench PATH (or set $LLAMA_BENCH) to "
                                  "the llama-bench of the llama.cpp you deploy (build/bin/llama-bench)")
        return Path(found)
    p = Path(given).expanduser()
    if p.is_dir() and (p / "llama-bench").is_file():
        p = p / "llama-bench"
    if not p.is_file():
        raise LlamaBenchError(f"no llama-bench at {p}: build it (cmake --build build --target "
                              "llama-bench) and pass build/bin/llama-bench")
    if not os.access(p, os.X_OK):
        raise LlamaBenchError(f"{p} is not executable (chmod +x it, or pass the built binary)")
    return p


def bench_command(binary: str | os.PathLike, model: str | os.PathLike, depth: int,
                  rows: Sequence[int] = LLAMA_BENCH_ROWS, tg_tokens: int = TG_TOKENS,
                  threads: int | None = None, extra: Sequence[str] = ()) -> list[str]:
    rows = sorted({int(r) for r in rows})
    if not rows or rows[0] < 1:
        raise ParameterError(f"llama-bench rows must be >= 1, got {list(rows)}")
    if depth < 0:
        raise ParameterError(f"the context depth must be >= 0, got {depth}")
    cmd = [str(binary), "-m", str(model), "-p", ",".join(map(str, rows)), "-n", str(tg_tokens),
           "-d", str(depth), "-o", "json", "--progress"]
    if threads is not None:
        cmd += ["-t", str(threads)]
    return cmd + list(extra)


_PROGRESS = re.compile(r"benchmark (\d+)/(\d+): (.*)")


def run_llama_bench(cmd: Sequence[str], progress: Callable[[str, float | None], None] | None = None,
                    timeout_s: float | None = None) -> list[dict[str, Any]]:
    """Run a llama-bench command line; its JSON records. Progress lines ("benchmark 3/8:
    starting") are passed on as (message, fraction). Bounded (engine.childproc): at most
    `timeout_s` (default LLAMA_BENCH_TIMEOUT_S), MAX_BENCH_OUTPUT bytes of JSON, both streams
    read together."""
    say = progress or (lambda msg, frac: None)

    def on_line(line: str) -> None:
        m = _PROGRESS.search(line)
        if m:
            i, n = int(m.group(1)), int(m.group(2))
            frac = min(max((i - 1) / n, 0.0), 1.0) if n else None       # a hostile "9/3" stays a fraction
            say(f"llama-bench test {i}/{n}: {m.group(3)[:200]}", frac)

    limit = LLAMA_BENCH_TIMEOUT_S if timeout_s is None else timeout_s
    done = run_bounded(cmd, timeout_s=limit, error=LlamaBenchError, max_stdout=MAX_BENCH_OUTPUT,
                       on_line=on_line)
    if done.returncode != 0:
        raise LlamaBenchError(_failure_line(cmd, done.returncode, list(done.tail)))
    records = parse_json(done.stdout, f"{Path(cmd[0]).name}'s output", what="llama-bench JSON",
                         shape=list, error=LlamaBenchError,
                         fix="is it llama-bench? it must print JSON with -o json")
    say("llama-bench done", 1.0)
    return records


def _failure_line(cmd: Sequence[str], code: int, tail: list[str]) -> str:
    text = "\n".join(tail)
    name = Path(cmd[0]).name
    model = cmd[cmd.index("-m") + 1] if "-m" in cmd else "?"
    if re.search(r"failed to load model|error loading model|unable to load model", text):
        return f"{name} could not load the model {model} (exit {code}); its last words: " \
               + _last_error(tail)
    if "invalid parameter" in text or "unknown argument" in text or "error: invalid" in text:
        return f"{name} rejected its arguments (is it llama-bench?) (exit {code}): {_last_error(tail)}"
    return f"{name} failed (exit {code}): {_last_error(tail)}"


def _last_error(tail: list[str]) -> str:
    errs = [t for t in tail if "error" in t.lower() or "failed" in t.lower()]
    return (errs[-1] if errs else (tail[-1] if tail else "no output")).strip()[:300]


def _median_ms(rec: dict[str, Any]) -> float:
    samples = rec.get("samples_ns") or [rec["avg_ns"]]
    return statistics.median(float(s) for s in samples) / 1e6


def profile_from_llama_bench(records: Any, depth: int | None = None, source: str = "",
                             command: Sequence[str] | None = None) -> CostProfile:
    """A "measured" CostProfile from llama-bench JSON records (module docstring)."""
    if isinstance(records, dict):
        records = [records]
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise LlamaBenchError("not llama-bench JSON: expected a list of test records (llama-bench -o json)")
    try:
        depths = sorted({int(r.get("n_depth", 0)) for r in records})
        if depth is None:
            depth = depths[-1]          # several depths: the deepest (verify runs deep in a context)
        at = [r for r in records if int(r.get("n_depth", 0)) == depth]
        pp = {int(r["n_prompt"]): _median_ms(r) for r in at
              if int(r.get("n_gen", 0)) == 0 and int(r.get("n_prompt", 0)) > 0}
        tg = [(_median_ms(r) / int(r["n_gen"])) for r in at
              if int(r.get("n_prompt", 0)) == 0 and int(r.get("n_gen", 0)) > 0]
    except (KeyError, TypeError, ValueError) as e:
        raise LlamaBenchError(f"malformed llama-bench JSON ({type(e).__name__}: {e})") from None
    if len([k for k in pp if k >= 2]) < 2:
        raise LlamaBenchError(f"the llama-bench JSON has too few prompt tests at depth {depth} "
                              f"(rows {sorted(pp)}): run it with -p 1,2,4,8,16,32,64 -n 0 -d {depth}")
    first = at[0]
    points = dict(pp)
    one_row = "pp1"
    if tg:
        points[1] = statistics.median(tg)
        one_row = "tg"
    elif 1 not in pp:
        raise LlamaBenchError("the llama-bench JSON has neither a 1-token prompt test nor a tg test: "
                              "add 1 to -p or a -n")
    model_file = Path(str(first.get("model_filename", "model"))).name
    backend = str(first.get("backends", "?"))
    commit = str(first.get("build_commit", "?"))
    build = first.get("build_number")
    gpu = str(first.get("gpu_info") or "").strip()
    device = gpu or str(first.get("cpu_info") or "CPU").strip()
    if not gpu:
        device += f", {first.get('n_threads', '?')} threads"
    extra = {"engine": ENGINE, "build_commit": commit, "build_number": build, "backends": backend,
             "model_file": model_file, "model_type": first.get("model_type"),
             "n_threads": first.get("n_threads"), "n_gpu_layers": first.get("n_gpu_layers"),
             "flash_attn": first.get("flash_attn"), "n_ubatch": first.get("n_ubatch"),
             "one_row": one_row, "pp1_ms": pp.get(1), "tg_ms": points[1] if tg else None,
             "test_time": first.get("test_time"),
             "command": list(command) if command else None}
    # llama-bench's model_type is "llama 135M Q4_1 - ..."-like: the weights' form is the dtype here
    mtype = str(first.get("model_type") or "")
    quant = next((w for w in mtype.split() if re.match(r"^(I?Q\d|F16|BF16|F32)", w)), "gguf")
    label = (f"llama.cpp {commit}" if commit not in ("unknown", "?") else "llama.cpp, commit unknown") \
        + (f" (build {build})" if build else "")
    pid = re.sub(r"[^A-Za-z0-9._-]+", "-", f"llamacpp-{commit}-{backend}-{device}-{model_file}-d{depth}").strip("-")
    return profile_from_points(sorted(points.items()), id=pid[:160], device=f"{device} · {label} · {backend}",
                               model=model_file, dtype=quant,
                               context=depth, source=source or "llama-bench -o json", extra=extra)


def is_llamacpp(profile: CostProfile) -> bool:
    return profile.extra.get("engine") == ENGINE


def llamacpp_label(profile: CostProfile) -> str:
    """"llama.cpp 0c1e570 (CUDA)": what the window and the export call this curve."""
    e = profile.extra
    commit = str(e.get("build_commit") or "unknown")
    return (f"llama.cpp {commit} ({e.get('backends', '?')})" if commit not in ("unknown", "?")
            else f"llama.cpp, commit unknown ({e.get('backends', '?')})")


def load_llama_bench_json(path: str | os.PathLike, depth: int | None = None) -> CostProfile:
    """A profile from a saved llama-bench JSON file (or a saved llama.cpp profile)."""
    p = Path(path)
    data = read_json(p, "llama-bench JSON", shape=(list, dict), max_bytes=MAX_BENCH_OUTPUT, error=LlamaBenchError,
                     fix="give the output of llama-bench -o json, or a saved llama.cpp profile")
    if isinstance(data, dict) and "ms_by_rows" in data:
        return CostProfile.from_dict(data)
    if isinstance(data, dict) and "records" in data:     # a fixture: {provenance..., records}
        return profile_from_llama_bench(data["records"], depth, source=str(data.get("source", p)),
                                        command=data.get("command"))
    return profile_from_llama_bench(data, depth, source=str(p))
