"""Programmatic dependent launch (engine.kernels.pdl), checked with no GPU: which launches take it
on which target, and the order of the compiled code (the weight prefetch before the wait, every
read and store after it). The launch order on a card is the doctor's "launch order" smoke and
the GPU exactness check (BENCHMARKS.md)."""

from __future__ import annotations

import re

import pytest
import torch

triton = pytest.importorskip("triton")

from engine.kernels import kernel_catalog as kc  # noqa: E402
from engine.kernels import pdl  # noqa: E402
from engine.kernels.kernel_aot import TARGETS, compile_launch, record  # noqa: E402


@pytest.fixture(scope="module")
def cpu_packed_runtime(loaded_model):
    from engine.model.runtime import Runtime
    return Runtime(loaded_model, "cpu", "float32", weights="packed")


def test_no_pdl_off_the_card_or_on_rocm(pdl_mode):
    x = torch.zeros(4)
    assert pdl.pdl_kwargs(x) == {} and pdl.matmul_pdl_kwargs(x, 4096) == {}
    meta = torch.empty(4, device="meta")
    assert pdl.pdl_kwargs(meta) == {}
    from engine.kernels.dot_precision import compiling_for
    with compiling_for("hip"), pdl.compiling_pdl(True):
        assert pdl.pdl_kwargs(meta) == {}          # ROCm has no such launch
    with compiling_for("cuda"), pdl.compiling_pdl(True):
        assert pdl.pdl_kwargs(meta) == {"PDL": True, "launch_pdl": True}
        kw = pdl.matmul_pdl_kwargs(meta, 300)      # 3 lines, rounded up to 4
        assert kw["PFL"] == 4
        assert pdl.matmul_pdl_kwargs(meta, 1 << 20)["PFL"] == 8
    with compiling_for("cuda"), pdl.compiling_pdl(False):
        assert pdl.pdl_kwargs(meta) == {}          # sm_80, sm_89


def test_only_a_model_of_small_layer_matrices_launches_its_pass_with_pdl(pdl_mode, cpu_packed_runtime):
    """PDL made the bundled model's pass 1.24x and the 8B-like model's 0.93-0.96x (H100): inside
    the pass of a model whose layer matrices exceed pass_launch's limit nothing takes PDL, inside
    the bundled model's pass (its largest matrix 1.1 MB) everything does, and a kernel check
    outside any pass follows the mode."""
    from engine.kernels.dot_precision import compiling_for
    from engine.kernels.pass_launch import MAX_LAYER_BYTES, pass_launches, wants_pdl
    from engine.kernels.triton_kernels import packed_partials
    model = cpu_packed_runtime.model
    largest = max(v.nbytes for L in model.layers for v in L.linears())
    assert largest < 2 << 20 and model.pdl                            # 1.1 MB
    assert wants_pdl(MAX_LAYER_BYTES) and not wants_pdl(9437184)     # the 8B-like o, 4096x4096 Q4_K
    x = torch.empty(1, 4096, dtype=torch.bfloat16, device="meta")
    w = kc._meta_packed("Q4_K", 4096, 4096)

    def launch_kwargs():
        (L,) = [L for L in record(lambda: packed_partials(x, w), "cuda") if L.name.endswith("_packed_mm_kernel")]
        return L.kwargs

    with compiling_for("cuda"), pdl.compiling_pdl(True):
        assert launch_kwargs()["PDL"]
        with pass_launches(True):
            assert launch_kwargs()["PDL"] and launch_kwargs()["PFL"] == 8
        with pass_launches(False):
            kw = launch_kwargs()
            assert "PDL" not in kw and "launch_pdl" not in kw and "PFL" not in kw


def test_the_switch_reads_0_1_2_and_warns_on_anything_else():
    assert [pdl._mode(t) for t in ("", "0", "1", "2", " 2 ")] == [0, 0, 1, 2, 2]
    with pytest.warns(RuntimeWarning, match="is not 0, 1 or 2"):
        assert pdl._mode("yes") == 0


def _targets_launches(target_name: str) -> list:
    return kc.launches(TARGETS[target_name], "kernels")


@pytest.fixture
def pdl_mode(monkeypatch):
    """The default mode (2: PDL and the matmul's prefetch) whatever SPECSCOPE_PDL says."""
    monkeypatch.setattr(pdl, "MODE", 2)


def test_every_kernel_of_a_pass_launches_with_pdl_on_sm90_and_none_on_rdna(pdl_mode):
    """On sm_90 every launch of ours in a pass takes PDL (the dense matmul and the prefill unpack
    run outside the one-row pass and keep ordinary launches); on gfx1201, none."""
    pass_kernels = ("_packed_mm_kernel", "_sum_splits_kernel", "_split_kernel", "_residual_norm_kernel",
                    "_reduce_swiglu_kernel", "_qkv_rope_kernel", "_topk_part_kernel", "_topk_merge_kernel")
    cuda = [L for L in _targets_launches("sm_90") if L.name.rsplit(".", 1)[-1] in pass_kernels]
    assert {L.name.rsplit(".", 1)[-1] for L in cuda} >= set(pass_kernels) - {"_sum_splits_kernel"}
    for L in cuda:
        if "int8 path" in L.label:
            continue
        assert L.kwargs.get("PDL") is True and L.kwargs.get("launch_pdl") is True, L.label
    for L in _targets_launches("gfx1201"):
        assert "PDL" not in L.kwargs and "launch_pdl" not in L.kwargs, L.label


def test_the_matmul_sends_for_weights_before_it_waits_and_reads_nothing_before(pdl_mode):
    """The sm_90 PTX of a one-row Q4_K matmul: L2 prefetches, then griddepcontrol.wait, then
    launch_dependents, and every global load or store after the wait."""
    from engine.kernels.dot_precision import compiling_for
    from engine.kernels.triton_kernels import packed_partials
    x = torch.empty(1, 4096, dtype=torch.bfloat16, device="meta")
    w = kc._meta_packed("Q4_K", 4096, 4096)
    with compiling_for("cuda"), pdl.compiling_pdl(True):
        (launch,) = [L for L in record(lambda: packed_partials(x, w), "cuda")
                     if L.name.endswith("_packed_mm_kernel")]
    assert launch.kwargs["PFL"] == 8 and launch.kwargs["PDL"]
    res = compile_launch(launch, TARGETS["sm_90"], keep_asm=True)
    assert res.ok, res.error
    ptx = res.asm["ptx"]
    wait = ptx.index("griddepcontrol.wait")
    assert ptx.index("griddepcontrol.launch_dependents") > wait
    prefetches = [m.start() for m in re.finditer(r"prefetch\.global\.L2", ptx)]
    assert prefetches and max(prefetches) < wait
    first_mem = min(m.start() for m in re.finditer(r"\b(ld|st|cp\.async)\.(global|shared)", ptx))
    assert first_mem > wait
    # the same launch for RDNA: no PDL, no prefetch
    with compiling_for("hip"), pdl.compiling_pdl(False):
        (launch,) = [L for L in record(lambda: packed_partials(x, w), "hip")
                     if L.name.endswith("_packed_mm_kernel")]
    hip = compile_launch(launch, TARGETS["gfx1201"], keep_asm=True)
    assert hip.ok and "PFL" not in launch.kwargs


def test_the_kernels_ordinary_launch_is_unchanged_by_the_pdl_code():
    """PDL a constexpr False (the CPU, ROCm, SPECSCOPE_PDL=0): the compiled kernel has no
    grid-dependency instruction at all."""
    launch = next(L for L in _targets_launches("gfx1201") if L.name.endswith("_residual_norm_kernel"))
    res = compile_launch(launch, TARGETS["sm_90"], keep_asm=True)
    assert res.ok and "griddepcontrol" not in res.asm["ptx"] and "prefetch" not in res.asm["ptx"]


def _first(ptx: str, pattern: str) -> int:
    m = re.search(pattern, ptx)
    return m.start() if m else len(ptx)


def test_every_pdl_kernel_waits_before_its_first_global_read_or_store(pdl_mode):
    """The order the launches rely on (engine.kernels.pdl): a kernel launched with PDL runs
    griddepcontrol.wait in every program, before any branch and before any global load, store
    or atomic (L2 prefetches alone may come first). Without it, the kernel after could pass its
    own wait while a kernel two launches back still runs. One sm_90 launch of each kernel."""
    seen = {}
    for L in _targets_launches("sm_90"):
        if L.kwargs.get("PDL") and L.name not in seen:
            seen[L.name] = L
    assert len(seen) >= 7, sorted(seen)
    for name, L in seen.items():
        res = compile_launch(L, TARGETS["sm_90"], keep_asm=True)
        assert res.ok, (name, res.error)
        ptx = res.asm["ptx"]
        body = ptx[ptx.index(".entry"):]
        wait = _first(body, r"griddepcontrol\.wait")
        assert wait < len(body), name
        assert _first(body, r"\b(ld|st|atom|red)\.global|cp\.async") > wait, name
        assert _first(body, r"\bbra\b|@%p\d+ bra") > wait, name
        assert _first(body, r"griddepcontrol\.launch_dependents") > wait, name



def test_the_late_trigger_lets_the_next_kernel_start_after_the_weights_are_read(pdl_mode, monkeypatch):
    """SPECSCOPE_PDL_LATE=1 (a bench key): the matmul waits first as before, and lets the
    kernel after it be scheduled only after its K loop: in the sm_90 PTX, launch_dependents
    after every global load and before the stores; without it, right after the wait."""
    from engine.kernels.dot_precision import compiling_for
    from engine.kernels.triton_kernels import packed_partials
    x = torch.empty(1, 4096, dtype=torch.bfloat16, device="meta")
    w = kc._meta_packed("Q4_K", 4096, 4096)
    order = {}
    for late in (True, False):
        monkeypatch.setattr(pdl, "_LATE", late)
        with compiling_for("cuda"), pdl.compiling_pdl(True):
            (launch,) = [L for L in record(lambda: packed_partials(x, w), "cuda")
                         if L.name.endswith("_packed_mm_kernel")]
        assert launch.kwargs["PDL"] == (2 if late else True)
        res = compile_launch(launch, TARGETS["sm_90"], keep_asm=True)
        assert res.ok, res.error
        ptx = res.asm["ptx"]
        loads = [m.start() for m in re.finditer(r"\b(ld\.global|cp\.async)", ptx)]
        stores = [m.start() for m in re.finditer(r"\bst\.global", ptx)]
        trigger = ptx.index("griddepcontrol.launch_dependents")
        assert ptx.count("griddepcontrol.launch_dependents") == 1
        assert ptx.index("griddepcontrol.wait") < min(loads)
        order[late] = (max(loads) < trigger < min(stores), trigger < min(loads))
    assert order[True] == (True, False) and order[False] == (False, True)
