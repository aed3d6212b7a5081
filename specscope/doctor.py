"""`specscope doctor`: what a ROCm or CUDA user runs first.

One line per check, `ok` / `FAIL` / `skip`, each failure with its fix; exit 0 only when every
check that ran passed. A check is skipped only when it cannot apply: the GPU checks on a
machine where torch sees no GPU (a CPU-only torch build, or no card) or with `--device cpu`;
each skip line says what it would check and how to get there. The gpu check FAILs only when
the user asked for the GPU (`--device cuda`).

    torch    the build (ROCm / CUDA / CPU only) and its HIP or CUDA version
    gpu      the GPU torch sees: name, gfx arch or compute capability, memory
    triton   installed, and the target it compiles for on that GPU
    kernel   each Triton launcher of the engine (engine.kernels.kernel_catalog), run on tiny
             inputs on the GPU and checked against float64 references computed on the CPU
             (every packed type and dtype), and row invariance bit for bit
    graphs   a packed matmul captured in a CUDA/HIP graph replays to the eager result
    model    the bundled model (or --model) loads on the device and decodes a few tokens
             (on the CPU when there is no GPU)
    same prompt, same keys   a ~2,000-token prefill run back to back on a used stream (the GPU
             busy, its graphs replayed) writes the keys that one waited on chunk by chunk
             writes, bit for bit (the race issue 31 found in the graphs' uploads)

`specscope doctor --compile-for gfx1100,gfx1151,gfx1201` compiles every kernel of the catalog
for the named targets with no GPU (Triton's AMD and NVIDIA backends compile ahead of time on
the CPU); exit 0 only if all compile; the last line counts what compiled.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

from engine.errors import ParameterError

CPU_TOKENS = 8
NAME = 34           # the check-name column ("kernel: packed matmul, int8 path" fits)


def add_doctor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compile-for", metavar="TARGETS",
                   help="compile every Triton kernel for these GPU targets, no GPU needed: "
                        "comma-separated, e.g. gfx1100,gfx1151,gfx1201,sm_90")
    p.add_argument("--full", action="store_true",
                   help="with --compile-for: every configuration (type x dtype x row class x "
                        "shape class); default: the cross-section that reaches each of them")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="with --compile-for: compiles at a time (default: the CPU count)")


class _Report:
    def __init__(self) -> None:
        self.failed = 0

    def line(self, status: str, name: str, detail: str, fix: str = "") -> None:
        print(f"{status:<5} {name:<{NAME}} {detail}", flush=True)
        if status == "FAIL":
            self.failed += 1
            if fix:
                print(f"{'':<5} {'':<{NAME}} fix: {fix}", flush=True)

    def finish(self) -> int:
        """The last line, and the exit status: 0 when no check failed."""
        print("all checks passed" if not self.failed else f"{self.failed} check(s) failed")
        return 0 if not self.failed else 1


def run_doctor(a: argparse.Namespace) -> int:
    if a.compile_for is not None:
        return compile_for(a.compile_for, full=a.full, jobs=a.jobs)
    if a.full or a.jobs is not None:
        raise ParameterError("--full and --jobs go with --compile-for")
    return checks(getattr(a, "device", "auto"), getattr(a, "dtype", "auto"),
                  getattr(a, "weights", "auto"), getattr(a, "model", None))


# ---------------------------------------------------------------------------------------------
# on this machine

GPU_BUILDS = ('a ROCm build of torch for an AMD card: make run TORCH="torch --index-url '
              'https://download.pytorch.org/whl/rocm6.4"; a CUDA build for an NVIDIA card: '
              'make run TORCH="torch --index-url https://download.pytorch.org/whl/cu128" '
              '(README, set-up)')
WOULD_CHECK = {
    "triton": "would check that Triton compiles for the card",
    "kernels": "would run each Triton kernel (packed and dense matmul, attention, the fused "
               "layer) on the card against float64 references",
    "graphs": "would capture a packed matmul in a CUDA/HIP graph and replay it",
}


def checks(device: str, dtype: str, weights: str, model: str | None) -> int:
    import torch
    r = _Report()
    hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
    build = f"ROCm {hip}" if hip else f"CUDA {cuda}" if cuda else "CPU only"
    r.line("ok", "torch", f"{torch.__version__}, {build} build")
    gpu, why = _gpu_line(r, device, hip, cuda)
    if gpu:
        dev = torch.device("cuda")
        if _triton_line(r):
            _kernel_lines(r, dev)
            _graph_line(r, dev)
        else:
            for name in ("kernels", "graphs"):
                r.line("skip", name, f"needs Triton (above); {WOULD_CHECK[name]}")
        _model_line(r, "cuda", dtype, weights, model)
    else:
        hint = ("leave --device out to check the GPU" if device == "cpu" else
                "`specscope doctor --compile-for gfx1201` (your card's target) compiles the "
                "kernels for it on this machine")
        for name in ("triton", "kernels", "graphs"):
            r.line("skip", name, f"{why}: {WOULD_CHECK[name]}" + (f"; {hint}" if name == "triton" else ""))
        if device == "cuda":
            r.line("skip", "model on the GPU", "no GPU (above); `--device cpu` checks the CPU path")
        else:
            _model_line(r, "cpu", dtype, weights, model)
    return r.finish()


def _gpu_line(r: _Report, device: str, hip, cuda) -> tuple[bool, str]:
    """(a GPU to check, why not). No GPU is a failure only when the user asked for one."""
    import torch
    if device == "cpu":
        r.line("skip", "gpu", "--device cpu: would check the GPU torch sees")
        return False, "--device cpu"
    if not torch.cuda.is_available():
        if not (hip or cuda):
            why = "this torch is a CPU-only build"
            fix = f"install {GPU_BUILDS}"
        else:
            why = f"this {'ROCm' if hip else 'CUDA'} build of torch sees no GPU"
            fix = ("check that rocminfo (ROCm) or nvidia-smi (CUDA) lists the card, that your "
                   "user is in the render and video groups, and HIP_VISIBLE_DEVICES / "
                   "CUDA_VISIBLE_DEVICES")
        if device == "cuda":
            r.line("FAIL", "gpu", f"--device cuda, but {why}", fix)
        else:
            r.line("skip", "gpu", f"{why}: would check the GPU (name, arch, memory); to get one: {fix}")
        return False, "no GPU"
    p = torch.cuda.get_device_properties(0)
    arch = getattr(p, "gcnArchName", "") if hip else f"sm_{p.major}{p.minor}"
    r.line("ok", "gpu", f"{p.name}, {arch}, {p.total_memory / 2**30:.0f} GiB, "
                        f"{p.multi_processor_count} {'CUs' if hip else 'SMs'}")
    return True, ""


def _triton_line(r: _Report) -> bool:
    try:
        import triton
        from triton.runtime import driver
        t = driver.active.get_current_target()
    except Exception as e:  # noqa: BLE001 - missing, or no backend for this GPU
        r.line("FAIL", "triton", f"not usable: {_short(e)}",
               "pip install triton==3.6.0 (CUDA) or the pytorch-triton-rocm wheel that matches "
               "your ROCm torch (installed with it from the ROCm index)")
        return False
    r.line("ok", "triton", f"{triton.__version__}, compiles for {t.backend} {t.arch} "
                           f"(wave{t.warp_size})")
    return True


def _kernel_lines(r: _Report, dev, sites=None) -> None:
    """One line per site of the kernel catalog (`sites`: SITES)."""
    if sites is None:
        from engine.kernels.dot_precision import gpu_backend
        from engine.kernels.kernel_catalog import SITES
        sites = [s for s in SITES if gpu_backend() in s.backends]     # paths this card can take
    for site in sites:
        t0 = time.perf_counter()
        try:
            cases = site.smoke(dev)
        except Exception as e:  # noqa: BLE001 - a compile or launch failure is the finding
            r.line("FAIL", f"kernel: {site.name}", f"does not run: {_short(e)}",
                   "run `specscope doctor --compile-for <your gfx arch>` and report both "
                   "outputs; meanwhile --weights dequantized avoids the packed kernels")
            continue
        judge_kernel(r, site.name, cases, time.perf_counter() - t0)


def judge_kernel(r: _Report, name: str, cases, seconds: float) -> None:
    """The report line of one site's smoke cases [(label, got, want, tolerance)]: FAIL when
    any error (relative to want's largest magnitude) is over its tolerance, or not finite."""
    if not cases:
        r.line("skip", f"kernel: {name}", "no check of its own: its kernel runs in another "
                                          "kernel check above")
        return
    worst, bad = 0.0, []
    for label, got, want, tol in cases:
        err = _rel_err(got, want)
        worst = max(worst, err if tol else 0.0)
        if not err <= tol:                    # NaN fails too
            bad.append(f"{label}: error {err:.1e} > {tol:.0e}" if tol else
                       f"{label}: not bit-identical (error {err:.1e})")
    if bad:
        r.line("FAIL", f"kernel: {name}", f"{len(bad)} of {len(cases)} wrong: {bad[0]}",
               "report this line with `specscope doctor` output; --weights dequantized "
               "avoids the packed kernels meanwhile")
    else:
        r.line("ok", f"kernel: {name}", f"{len(cases)} checks vs float64, worst error "
               f"{worst:.1e}, rows bit-identical ({seconds:.1f} s)")


def _graph_line(r: _Report, dev, matmul=None) -> None:
    """`matmul(x, w)`: packed_linear (a test passes one whose replay cannot match)."""
    import torch
    from engine.kernels.kernel_catalog import random_packed
    if matmul is None:
        from engine.weights import packed_linear as matmul
    try:
        w, _ = random_packed("Q4_K", 256, 512)
        w = w.to(dev)
        x = torch.randn(4, 512, device=dev, dtype=torch.bfloat16)
        matmul(x, w)
        s = torch.cuda.Stream(dev)
        s.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(s):
            matmul(x, w)
        torch.cuda.current_stream(dev).wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = matmul(x, w)
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize(dev)
        ok = torch.equal(out, matmul(x, w))
    except Exception as e:  # noqa: BLE001
        r.line("FAIL", "graphs", f"capture or replay failed: {_short(e)}",
               "update the GPU driver / ROCm; decoding still works without graphs, slower")
        return
    if ok:
        r.line("ok", "graphs", "a packed matmul captured, replayed on new inputs: same bits as eager")
    else:
        r.line("FAIL", "graphs", "the replay differs from the eager result",
               "report it with this output; decoding without graphs is unaffected")


def _model_line(r: _Report, device: str, dtype: str, weights: str, model: str | None) -> None:
    from engine.io.prompts import encode_prompt
    from engine.session import open_runtime
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    name = f"model on the {'GPU' if device == 'cuda' else 'CPU'}"
    try:
        t0 = time.perf_counter()
        rt = open_runtime(model, device, dtype, weights=weights)
        ids = encode_prompt(rt.tokenizer, "def fibonacci(n):")
        rep = Decoder(rt, ids, DecodeSettings(draft="lookup", max_new_tokens=CPU_TOKENS)).run()
    except Exception as e:  # noqa: BLE001
        r.line("FAIL", name, f"{_short(e)}",
               "--model PATH for another file; `--device cpu` to check the CPU path")
        return
    text = rep["text"][:40]
    if rep["new_tokens"] < 1:
        r.line("FAIL", name, "decoded no token", "report it with this output")
        return
    r.line("ok", name, f"{rep['new_tokens']} tokens ({rep['activation_dtype']}, {rt.weights_label}) "
           f"{rep['tok_s']:.0f} tok/s incl. prefill, {time.perf_counter() - t0:.1f} s: {text!r}")
    _history_line(r, rt)


HISTORY_TOKENS = 2000     # four 512-row chunks: the last two share a bucket, back to back


def _history_line(r: _Report, rt) -> None:
    """A prefill of HISTORY_TOKENS arbitrary tokens, chunk by chunk with a wait after each (the
    reference), then back to back on the same stream (its graphs captured: a busy GPU, chunks
    replayed from buckets; twice there, once on a CPU, which has no race to catch), each time
    over a zeroed cache: the committed keys must be the reference's, bit for bit. A racy upload
    leaves a chunk's slots unwritten."""
    import torch
    from engine.model.device import synchronize
    from engine.model.runtime import PREFILL_CHUNK
    name = "same prompt, same keys"
    n = min(HISTORY_TOKENS, rt.config.max_context - 1)
    if n < 3 * PREFILL_CHUNK:
        r.line("skip", name, f"the model's context ({rt.config.max_context}) is too short for "
               f"{3 * PREFILL_CHUNK}-token prefill chunks")
        return
    V = rt.config.vocab_size
    ids = [(7919 * i) % (V - 2) + 1 for i in range(n)]
    try:
        s = rt.session(n + 1)
        try:
            def keys(chunked: bool) -> "torch.Tensor":
                s.reserve(n + 1)
                s.cache.kv.zero_()
                for start in range(0, n, PREFILL_CHUNK if chunked else n):
                    s.prefill(ids[start:start + (PREFILL_CHUNK if chunked else n)])
                    if chunked:
                        synchronize(rt.device)
                return s.cache.kv[:, :, :, :n].clone()
            want = keys(chunked=True)
            runs = 1 if rt.device.type == "cpu" else 2
            bad = next((i for i in range(runs) if not torch.equal(keys(chunked=False), want)), None)
        finally:
            s.close()
    except Exception as e:  # noqa: BLE001
        r.line("FAIL", name, f"{_short(e)}", "report it with this output")
        return
    if bad is None:
        r.line("ok", name, f"a {n:,}-token prefill back to back{' (twice)' if runs == 2 else ''} "
               "wrote the keys of one waited on chunk by chunk, bit for bit")
    else:
        r.line("FAIL", name, f"a {n:,}-token prefill run back to back wrote other keys than the "
               "same prefill waited on chunk by chunk: outputs may depend on what ran before",
               "report it with this output (`--device cpu` decodes without captured passes)")


def _rel_err(got, want) -> float:
    d = (got.double() - want.double()).abs().max().item()
    scale = want.double().abs().max().item()
    return d / scale if scale else d


def _short(e: BaseException) -> str:
    while e.__cause__ is not None:
        e = e.__cause__
    lines = [s for s in str(e).strip().splitlines() if s.strip()]
    return f"{type(e).__name__}: {lines[-1][:200]}" if lines else type(e).__name__


# ---------------------------------------------------------------------------------------------
# for other machines


def compile_for(text: str, full: bool = False, jobs: int | None = None) -> int:
    try:
        from engine.kernels.kernel_aot import parse_targets
        from engine.kernels.catalog_compile import compile_targets
        import triton  # noqa: F401
    except ImportError as e:
        raise ParameterError(f"--compile-for needs Triton ({e}): pip install triton==3.6.0") from None
    try:
        targets = parse_targets(text)
    except ValueError as e:
        raise ParameterError(f"--compile-for: {e}") from None
    if jobs is not None and jobs < 1:
        raise ParameterError(f"--jobs must be at least 1, got {jobs}")
    workers = jobs or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                       else os.cpu_count() or 1)
    scope = "full" if full else "quick"
    t0 = time.perf_counter()
    print(f"compiling the kernel catalog ({scope}) for {', '.join(t.name for t in targets)}, "
          f"{workers} at a time", flush=True)

    def progress(done: int, total: int, res) -> None:
        status = "ok" if res.ok else "FAIL"
        print(f"[{done}/{total}] {time.perf_counter() - t0:5.0f} s  {status:<4} {res.target:<8} "
              f"{res.label} [{res.kernel.rsplit('.', 1)[-1]}] {res.seconds:.1f} s", flush=True)

    try:
        results = compile_targets(targets, scope, workers=workers, progress=progress)
    except Exception:  # noqa: BLE001 - a crash of the compile machinery itself
        traceback.print_exc()
        print("compiled 0 kernel launches: the compile check itself failed (above)")
        return 1
    bad = [r for r in results if not r.ok]
    for res in bad:
        print(f"FAIL {res.target} {res.label} [{res.kernel.rsplit('.', 1)[-1]}]: {res.error}")
    per = ", ".join(f"{t.name} {sum(r.ok for r in results if r.target == t.name)}/"
                    f"{sum(r.target == t.name for r in results)}" for t in targets)
    print(f"compiled {len(results) - len(bad)} of {len(results)} kernel launches ({per}) in "
          f"{time.perf_counter() - t0:.0f} s" + (f"; {len(bad)} failed" if bad else ""))
    return 0 if not bad else 1


if __name__ == "__main__":   # python -m specscope.doctor --compile-for ...
    ap = argparse.ArgumentParser(prog="specscope doctor")
    add_doctor_args(ap)
    sys.exit(run_doctor(ap.parse_args()))
