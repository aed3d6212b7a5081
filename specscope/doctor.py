"""`specscope doctor`: what a ROCm or CUDA user runs first.

One line per check, `ok` / `FAIL` / `skip`, each failure with its fix; exit 0 only when every
check that ran passed (a check is skipped only when it cannot apply: `--device cpu`, or the
GPU checks after "torch sees no GPU" has failed).

    torch    the build (ROCm / CUDA / CPU only) and its HIP or CUDA version
    gpu      the GPU torch sees: name, gfx arch or compute capability, memory
    triton   installed, and the target it compiles for on that GPU
    kernel   each Triton launcher of the engine (engine.model.kernel_catalog), run on tiny
             inputs on the GPU and checked against torch (every packed type and dtype, row
             invariance bit for bit)
    graphs   a packed matmul captured in a CUDA/HIP graph replays to the eager result
    model    the bundled model loads on the device and decodes a few tokens (on the CPU too)

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
        print(f"{status:<5} {name:<26} {detail}", flush=True)
        if status == "FAIL":
            self.failed += 1
            if fix:
                print(f"{'':<5} {'':<26} fix: {fix}", flush=True)


def run_doctor(a: argparse.Namespace) -> int:
    if a.compile_for is not None:
        return compile_for(a.compile_for, full=a.full, jobs=a.jobs)
    if a.full or a.jobs is not None:
        raise ParameterError("--full and --jobs go with --compile-for")
    return checks(getattr(a, "device", "auto"), getattr(a, "dtype", "auto"),
                  getattr(a, "weights", "auto"), getattr(a, "model", None))


# ---------------------------------------------------------------------------------------------
# on this machine


def checks(device: str, dtype: str, weights: str, model: str | None) -> int:
    import torch
    r = _Report()
    hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
    build = f"ROCm {hip}" if hip else f"CUDA {cuda}" if cuda else "CPU only"
    r.line("ok", "torch", f"{torch.__version__}, {build} build")
    gpu = _gpu_line(r, device, hip, cuda)
    dev = torch.device("cuda") if gpu else None
    if dev is not None and _triton_line(r):
        _kernel_lines(r, dev)
        _graph_line(r, dev)
    elif dev is None:
        why = "--device cpu" if device == "cpu" else "no GPU"
        for name in ("triton", "kernels on the GPU", "graphs"):
            r.line("skip", name, f"{why}; compile for your card without one: "
                                 "specscope doctor --compile-for gfx1201")
    _model_line(r, "cuda" if dev is not None else "cpu", dtype, weights, model)
    print(f"{'all checks passed' if not r.failed else f'{r.failed} check(s) failed'}")
    return 0 if not r.failed else 1


def _gpu_line(r: _Report, device: str, hip, cuda) -> bool:
    import torch
    if device == "cpu":
        r.line("skip", "gpu", "--device cpu")
        return False
    if not torch.cuda.is_available():
        fix = ("this torch is a CPU build: install a ROCm build, e.g. make run TORCH=\"torch "
               "--index-url https://download.pytorch.org/whl/rocm6.4\" (README, ROCm)"
               if not (hip or cuda) else
               "the driver does not expose a GPU to torch: check that rocminfo (ROCm) or "
               "nvidia-smi (CUDA) lists it, that your user is in the render/video groups, "
               "and HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES")
        r.line("FAIL", "gpu", "torch sees no GPU", fix)
        return False
    p = torch.cuda.get_device_properties(0)
    arch = getattr(p, "gcnArchName", "") if hip else f"sm_{p.major}{p.minor}"
    r.line("ok", "gpu", f"{p.name}, {arch}, {p.total_memory / 2**30:.0f} GiB, "
                        f"{p.multi_processor_count} {'CUs' if hip else 'SMs'}")
    return True


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


def _kernel_lines(r: _Report, dev) -> None:
    from engine.model.kernel_catalog import SITES
    for site in SITES:
        t0 = time.perf_counter()
        try:
            cases = site.smoke(dev)
        except Exception as e:  # noqa: BLE001 - a compile or launch failure is the finding
            r.line("FAIL", f"kernel: {site.name}", f"does not run: {_short(e)}",
                   "run `specscope doctor --compile-for <your gfx arch>` and report both "
                   "outputs; meanwhile --weights dequantized avoids the packed kernels")
            continue
        if not cases:
            r.line("skip", f"kernel: {site.name}", "opt-in path, checked with the packed matmul")
            continue
        worst, bad = 0.0, []
        for label, got, want, tol in cases:
            err = _rel_err(got, want)
            worst = max(worst, err if tol else 0.0)
            if not err <= tol:
                bad.append(f"{label}: error {err:.1e} > {tol:.0e}")
        if bad:
            r.line("FAIL", f"kernel: {site.name}", f"{len(bad)} of {len(cases)} wrong: {bad[0]}",
                   "report this line with `specscope doctor` output; --weights dequantized "
                   "avoids the packed kernels meanwhile")
        else:
            r.line("ok", f"kernel: {site.name}", f"{len(cases)} checks vs torch, worst error "
                   f"{worst:.1e}, rows bit-identical ({time.perf_counter() - t0:.1f} s)")


def _graph_line(r: _Report, dev) -> None:
    import torch
    from engine.model.kernel_catalog import random_packed
    from engine.weights import packed_linear
    try:
        w, _ = random_packed("Q4_K", 256, 512)
        w = w.to(dev)
        x = torch.randn(4, 512, device=dev, dtype=torch.bfloat16)
        eager = packed_linear(x, w)
        s = torch.cuda.Stream(dev)
        s.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(s):
            packed_linear(x, w)
        torch.cuda.current_stream(dev).wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = packed_linear(x, w)
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize(dev)
        ok = torch.equal(out, packed_linear(x, w))
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
           f"{rep['tok_s']:.0f} tok/s, {time.perf_counter() - t0:.1f} s: {text!r}")


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
        from engine.model.kernel_aot import parse_targets
        from engine.model.kernel_catalog import compile_targets
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
