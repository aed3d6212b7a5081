"""Every Triton kernel the engine launches compiles for the users' AMD cards and the H200, with
no GPU (engine.kernels.kernel_catalog, engine.kernels.kernel_aot).

In ``make test``: the ``kernels`` scope for gfx1100 (RDNA3), gfx1151 (Strix Halo), gfx1201
(RDNA4) and sm_90 (H100/H200): every launched kernel, float32 and a 16-bit dtype, compiled
the way its JIT would compile it there and checked against the target's shared memory. The
``quick`` cross-section and the ``full`` matrix run with ``-m slow`` (and ``specscope doctor
--compile-for``). A scan of the engine's source fails the run when a ``kernel[grid](...)``
launch is missing from the catalog.
"""

from __future__ import annotations

import ast
import importlib
import os
import time
from pathlib import Path

import pytest
import torch

triton = pytest.importorskip("triton")

from engine.kernels import kernel_catalog as kc  # noqa: E402
from engine.kernels.catalog_compile import compile_targets  # noqa: E402
from engine.kernels.kernel_aot import (CHECK_TARGETS, TARGETS, compile_launch, kernel_name,  # noqa: E402
                                     parse_targets, record)
from engine.kernels.dot_precision import F32_CODES, compiling_for, ieee_code  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def launched_kernels() -> set[str]:
    """Every @triton.jit function some module of engine/ launches as ``name[grid](...)``."""
    from triton.runtime.jit import JITFunction
    found = set()
    for path in sorted((ROOT / "engine").rglob("*.py")):
        src = path.read_text()
        if "triton" not in src:
            continue
        names = {n.func.value.id for n in ast.walk(ast.parse(src))
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
                 and isinstance(n.func.value, ast.Name)}
        if not names:
            continue
        mod = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        found |= {kernel_name(getattr(mod, n)) for n in names
                  if isinstance(getattr(mod, n, None), JITFunction)}
    return found


def only_elsewhere(target, scope: str) -> set[str]:
    """The kernels the engine launches on the other backend alone (SF: CUDA): those of catalog
    sites for the other backend that no site launches on ``target``."""
    other = TARGETS["sm_90" if target.backend == "hip" else "gfx1201"]
    sites = tuple(s for s in kc.SITES if target.backend not in s.backends)
    here = {launch.name for launch in kc.launches(target, scope)}
    return {launch.name for launch in kc.launches(other, scope, sites)} - here


def test_every_launched_kernel_is_in_the_catalog():
    launched = launched_kernels()
    assert {"engine.kernels.triton_tiles._packed_mm_kernel", "engine.kernels.triton_attention._split_kernel",
            "engine.kernels.triton_dense._dense_kernel"} <= launched       # the scan sees launches
    sf = "engine.kernels.triton_sf._sf_x_kernel"
    assert only_elsewhere(TARGETS["gfx1201"], "kernels") == {sf}
    assert not only_elsewhere(TARGETS["sm_90"], "kernels")
    for target in (TARGETS["gfx1201"], TARGETS["sm_90"]):
        for scope in kc.SCOPES:
            covered = {launch.name for launch in kc.launches(target, scope)}
            assert (sf in covered) == (target.backend == "cuda"), (target.name, scope)
            missing = launched - covered - only_elsewhere(target, scope)
            assert not missing, (f"launched but not in the catalog's {scope} scope for "
                                 f"{target.name} (add a Site, see kernel_catalog's docstring): "
                                 f"{sorted(missing)}")


def test_float32_dots_take_a_precision_the_backend_has():
    assert ieee_code(torch.bfloat16) == 0
    with compiling_for("hip"):
        assert ieee_code(torch.float32) == F32_CODES["bf16x6"]
    with compiling_for("cuda"):
        assert ieee_code(torch.float32) == F32_CODES["tf32x3"]
    # the launches record it: float32 packed launches on ROCm also run one pipeline stage
    t = TARGETS["gfx1201"]
    for launch in kc.launches(t, "kernels"):
        if launch.name.endswith("_packed_mm_kernel") and launch.kwargs["IEEE"]:
            assert launch.kwargs["IEEE"] == F32_CODES["bf16x6"] and launch.kwargs["num_stages"] == 1
    cuda = [launch for launch in kc.launches(TARGETS["sm_90"], "kernels")
            if launch.name.endswith("_packed_mm_kernel") and launch.kwargs["IEEE"]]
    assert cuda and all(launch.kwargs["IEEE"] == F32_CODES["tf32x3"] for launch in cuda)


def test_the_check_fails_on_what_stops_a_card():
    """tf32x3, what CUDA float32 dots use, does not compile for RDNA: the check says so."""
    from engine.kernels.triton_dense import dense_matmul
    x, w = torch.empty(17, 576, device="meta"), torch.empty(64, 576, device="meta")
    (launch,) = record(lambda: dense_matmul(x, w), "cuda")
    assert launch.kwargs["IEEE"] == F32_CODES["tf32x3"]
    res = compile_launch(launch, TARGETS["gfx1201"])
    assert not res.ok and "input_precision must be one of" in res.error and "tf32x3" in res.error
    assert compile_launch(launch, TARGETS["sm_90"]).ok


def test_gfx1151_float32_tiles_leave_the_kernels_scope_alone():
    """make test compiles gfx1151's packed and attention tiles in 16-bit alone (gfx1100 compiles
    the same gfx11 float32 tiles); its quick scope has them in float32."""
    def f32(name, scope):
        return {launch.name.rsplit(".", 1)[-1] for launch in kc.launches(TARGETS[name], scope)
                if launch.kwargs.get("IEEE")}
    tiles = {"_packed_mm_kernel", "_split_kernel"}
    assert tiles <= f32("gfx1100", "kernels") and tiles <= f32("gfx1151", "quick")
    assert not tiles & f32("gfx1151", "kernels")


def test_target_names_are_checked():
    assert [t.name for t in parse_targets("gfx1100, gfx1201,gfx1100")] == ["gfx1100", "gfx1201"]
    for bad in ("gfx9999", "", "sm90"):
        with pytest.raises(ValueError, match="known targets: gfx1100"):
            parse_targets(bad)


def _compile(scope: str, workers: int) -> None:
    t0 = time.perf_counter()
    res = compile_targets([TARGETS[n] for n in CHECK_TARGETS], scope, workers=workers)
    bad = [f"{r.target} {r.label} [{r.kernel.rsplit('.', 1)[-1]}]: {r.error}" for r in res if not r.ok]
    assert not bad, "\n".join(bad)
    launched = launched_kernels()
    for name in CHECK_TARGETS:
        want = launched - only_elsewhere(TARGETS[name], scope)
        assert {r.kernel for r in res if r.target == name} == want, name
    print(f"{len(res)} compiles for {', '.join(CHECK_TARGETS)} ({scope}) in "
          f"{time.perf_counter() - t0:.0f} s, {workers} workers")


def test_every_kernel_compiles_for_the_users_cards_and_the_h200():
    _compile("kernels", workers=min(2, len(os.sched_getaffinity(0))))


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["quick", "full"])
def test_catalog_compiles(scope):
    _compile(scope, workers=len(os.sched_getaffinity(0)))
