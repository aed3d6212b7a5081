"""Compiling the kernel catalog (engine.kernels.kernel_catalog) for GPU targets, no GPU needed:
every launch of a scope, a process per compile (`specscope doctor --compile-for`, make test's
catalog check)."""

from __future__ import annotations

import functools
from typing import Callable

from engine.kernels.kernel_aot import TARGETS, Compiled, Launch, Target, compile_launch
from engine.kernels.kernel_catalog import launches


@functools.lru_cache(maxsize=None)
def _launches_cached(target_name: str, scope: str) -> tuple[Launch, ...]:
    return tuple(launches(TARGETS[target_name], scope))


def _compile_one(target_name: str, scope: str, index: int) -> Compiled:
    """One job of ``compile_targets`` (a worker process re-derives the same launch list)."""
    launch = _launches_cached(target_name, scope)[index]
    res = compile_launch(launch, TARGETS[target_name])
    res.asm = {}
    return res


def compile_targets(targets: list[Target], scope: str = "quick", workers: int = 1,
                    progress: Callable[[int, int, Compiled], None] | None = None) -> list[Compiled]:
    """Compile every launch of ``scope`` for each target, ``workers`` processes at a time
    (each compile is single-threaded). ``progress(done, total, result)`` after each."""
    jobs = [(t.name, scope, i) for t in targets for i in range(len(_launches_cached(t.name, scope)))]
    # interleave the targets, so an early stop still covers each
    jobs.sort(key=lambda j: (j[2], j[0]))
    out: list[Compiled] = []
    if workers <= 1:
        for j in jobs:
            out.append(_compile_one(*j))
            if progress:
                progress(len(out), len(jobs), out[-1])
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_compile_one, *j) for j in jobs]
        for f in as_completed(futures):
            out.append(f.result())
            if progress:
                progress(len(out), len(jobs), out[-1])
    return out
