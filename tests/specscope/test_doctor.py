"""`specscope doctor`: each check passes when what it checks works and FAILs when it is broken.

On a machine without a GPU (this one) the GPU checks are skipped, each saying what it would
check and how to get a GPU build, and the doctor exits 0 when the CPU model check works; the
gpu check FAILs only when `--device cuda` asked for the GPU.

The kernel checks (engine.kernels.kernel_catalog's smoke functions and the doctor's comparison)
run here in Triton's CPU interpreter: like tests/engine/weights/test_triton_interpret.py, the
interpreter must be chosen before triton is first imported, so the parent starts a child
pytest on this file with TRITON_INTERPRET=1, and the child runs the `child_only` tests. The
interpreter's tl.dot multiplies bfloat16 as raw integers and cannot run the dense kernel (its
loop is bounded by a runtime argument), so the child checks float32 and float16, without the
dense site; a GPU runs them all (the `cuda_only` tests, also the graphs check).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

from specscope.cli import main

_CHILD = os.environ.get("SPECSCOPE_DOCTOR_CHILD") == "1"
child_only = pytest.mark.skipif(not _CHILD, reason="runs in the interpreter child process")
parent_only = pytest.mark.skipif(_CHILD, reason="runs in the parent process")
cuda_only = pytest.mark.skipif(_CHILD or not torch.cuda.is_available(),
                               reason="needs a GPU: the kernels and CUDA/HIP graphs on the card")
no_gpu_only = pytest.mark.skipif(_CHILD or torch.cuda.is_available(),
                                 reason="checks the doctor on a machine without a GPU")
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="triton is not installed")
ROOT = Path(__file__).resolve().parents[2]
INTERPRETED = (torch.float32, torch.float16)


def _status(out: list[str]) -> dict[str, str]:
    """check name -> ok / FAIL / skip, from the report lines."""
    from specscope.doctor import NAME
    return {line[6:6 + NAME].strip(): line.split()[0] for line in out
            if line[:5].strip() in ("ok", "FAIL", "skip")}


def _report():
    from specscope.doctor import _Report
    return _Report()


# ---------------------------------------------------------------------------------------------
# the whole doctor on this machine


@no_gpu_only
def test_doctor_without_a_gpu_skips_the_gpu_checks_passes_and_names_the_activation_dtype(capsys, monkeypatch):
    """No flags: the doctor finds no GPU, checks the CPU in its default dtype and names it (one
    run of the doctor for both: each costs ~20 s of this suite); --dtype reaches its checks."""
    code = main(["doctor"])
    out = capsys.readouterr().out.splitlines()
    status = _status(out)
    assert code == 0 and out[-1] == "all checks passed", out
    assert status["torch"] == "ok" and status["model on the CPU"] == "ok"
    model = [line for line in out if "model on the CPU" in line]
    assert model[0].startswith("ok") and re.search(r"\((float32|bfloat16), ", model[0]), model[0]
    import specscope.doctor as doctor
    asked = []
    monkeypatch.setattr(doctor, "checks", lambda *a: asked.append(a) or 0)
    assert main(["doctor", "--dtype", "float32"]) == 0 and asked[0][:2] == ("auto", "float32")
    assert sum(line.startswith("skip") for line in out) == 4      # gpu, triton, kernels, graphs
    # the history check passes on the CPU (its failing control: below, a prefill dropping a chunk)
    assert status["same prompt, same keys"] == "ok"
    assert [status[n] for n in ("gpu", "triton", "kernels", "graphs")] == ["skip"] * 4
    gpu = next(line for line in out if line.startswith("skip  gpu"))
    assert "ROCm" in gpu and "CUDA" in gpu and "make run TORCH=" in gpu   # how to get one
    assert "would run each Triton kernel" in next(line for line in out if line.startswith("skip  kernels"))
    assert not any(line.startswith("FAIL") for line in out)


@parent_only
def test_asking_for_the_gpu_without_one_fails_the_gpu_check_with_its_fix():
    """--device cuda where torch sees no GPU (hidden from it here, on any machine)."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="", ROCR_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, "-c", "import sys; from specscope.cli import main; "
                        "sys.exit(main(['doctor', '--device', 'cuda']))"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout.splitlines()
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    status = _status(out)
    assert status["gpu"] == "FAIL" and status["model on the GPU"] == "skip"
    fix = out[next(i for i, line in enumerate(out) if line.startswith("FAIL")) + 1]
    assert "fix:" in fix and ("ROCm" in fix or "rocminfo" in fix)
    assert out[-1] == "1 check(s) failed" and "Traceback" not in r.stderr


@parent_only
def test_a_broken_model_fails_the_model_check(tmp_path, capsys):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    code = main(["doctor", "--device", "cpu", "--model", str(bad)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1 and out[-1] == "1 check(s) failed"
    i = next(i for i, line in enumerate(out) if line.startswith("FAIL"))
    assert "model on the CPU" in out[i] and "fix:" in out[i + 1]


@parent_only
@pytest.mark.parametrize("targets", ["gfx9999", "gfx1201,sm90", ","])
def test_bad_compile_targets_get_one_line(targets, capsys):
    code = main(["doctor", "--compile-for", targets])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("specscope: error: --compile-for:") and "known targets: gfx1100" in err[0]


@parent_only
def test_full_without_compile_for_gets_one_line(capsys):
    code = main(["doctor", "--full"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["specscope: error: --full and --jobs go with --compile-for"]


# ---------------------------------------------------------------------------------------------
# the triton check


@parent_only
@needs_triton
@pytest.mark.skipif(torch.cuda.is_available(), reason="Triton has a backend on this GPU machine; "
                                                       "this checks the check without one")
def test_triton_check_fails_without_a_backend(capsys):
    from specscope.doctor import _triton_line
    r = _report()
    assert _triton_line(r) is False
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("FAIL  triton") and "not usable" in out[0] and "fix:" in out[1]
    assert r.finish() == 1


# ---------------------------------------------------------------------------------------------
# the kernel checks' comparison


@parent_only
def test_a_kernel_check_that_raises_fails_as_does_not_run(capsys):
    """The reported H200 line: a smoke check that cannot run is one FAIL line, not a crash."""
    from engine.kernels.kernel_catalog import Site
    from specscope.doctor import _kernel_lines

    def broken(device, dtypes=None):
        return [("view", torch.randn(1, 2, 128).view(2, 4, 2, 32), torch.zeros(1), 0.0)]
    r = _report()
    _kernel_lines(r, torch.device("cpu"), sites=[Site("fused layer", None, broken)])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("FAIL  kernel: fused layer") and "does not run: RuntimeError" in out[0]
    assert r.finish() == 1


@parent_only
@needs_triton
def test_kernel_checks_in_the_triton_interpreter():
    from interpreter_child import run_in_interpreter_child
    run_in_interpreter_child(__file__, "SPECSCOPE_DOCTOR_CHILD")


def _sites():
    from engine.kernels.kernel_catalog import SITES
    return {s.name: s for s in SITES}


@pytest.fixture(scope="module")
def packed_cases():
    assert os.environ.get("TRITON_INTERPRET") == "1"
    return _sites()["packed matmul"].smoke(torch.device("cpu"), dtypes=INTERPRETED)


@child_only
def test_kernel_checks_pass_on_the_real_kernels(packed_cases, capsys):
    """packed matmul, attention, the fused layer: every check on the kernels as shipped."""
    from engine.kernels.kernel_catalog import Site
    from specscope.doctor import _kernel_lines, judge_kernel
    sites = _sites()
    r = _report()
    judge_kernel(r, "packed matmul", packed_cases, 0.0)
    _kernel_lines(r, torch.device("cpu"), sites=[
        Site(n, None, partial(sites[n].smoke, dtypes=INTERPRETED)) for n in ("attention", "fused layer")])
    out = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[0] for line in out] == ["ok"] * 3, out
    from engine.kernels import triton_kernels as tk     # every type x 2 dtypes x (result, row) + int8
    assert len(packed_cases) == len(tk.SUPPORTED_QTYPES) * 2 * 2 + 1
    assert packed_cases[-1][0].startswith("Q4_K int8")
    assert r.finish() == 0


@child_only
@pytest.mark.parametrize("case", [0, 1, -1])     # Q8_0 float16 17 rows; its row 16 alone; int8
def test_a_wrong_kernel_result_fails(packed_cases, case, capsys):
    from specscope.doctor import judge_kernel
    label, got, want, tol = packed_cases[case]
    got = got.clone()
    got[0, 3] += (tol or 1e-6) * 4 * want.abs().max()      # off by 4x the tolerance (or 1 bit+)
    cases = list(packed_cases)
    cases[case] = (label, got, want, tol)
    r = _report()
    judge_kernel(r, "packed matmul", cases, 0.0)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("FAIL  kernel: packed matmul") and f"1 of {len(cases)} wrong: {label}" in out[0]
    assert r.finish() == 1


@child_only
def test_a_nan_kernel_result_fails(packed_cases, capsys):
    from specscope.doctor import judge_kernel
    label, got, want, tol = packed_cases[0]
    r = _report()
    judge_kernel(r, "packed matmul", [(label, torch.full_like(got, float("nan")), want, tol)], 0.0)
    assert capsys.readouterr().out.startswith("FAIL") and r.finish() == 1


@child_only
def test_the_attention_check_does_not_depend_on_the_cpu_float32_mode(capsys):
    """The H200 report: a float32 tree off by 5.8e-03 against a CPU reference computed in
    oneDNN's bfloat16 mode. The reference is float64 now: with that mode on, float32 still
    passes at 1e-5; and a reference with the wrong tree (siblings see each other) fails."""
    from engine.kernels.window_layout import WindowLayout, ancestor_table
    from engine.kernels.catalog_attention import attention_reference
    from engine.kernels.triton_attention import layout_attention_triton
    from specscope.doctor import judge_kernel
    mm = torch.backends.mkldnn.matmul
    prev, mm.fp32_precision = mm.fp32_precision, "bf16"
    try:
        cases = _sites()["attention"].smoke(torch.device("cpu"), dtypes=(torch.float32,))
    finally:
        mm.fp32_precision = prev
    r = _report()
    judge_kernel(r, "attention", cases, 0.0)
    assert capsys.readouterr().out.startswith("ok") and cases[0][3] == 1e-5

    g = torch.Generator().manual_seed(0)
    q, kv, n = torch.randn(3, 4, 64, generator=g), torch.randn(2, 2, 256, 64, generator=g), 100
    chain = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)   # rows 1, 2 siblings
    got = layout_attention_triton(q, kv[0], kv[1], WindowLayout(
        torch.tensor(n), torch.tensor([0, 1, 1]), ancestor_table([0, 1, 1], chain)))
    wrong = chain | torch.tensor([[0, 0, 0], [0, 0, 1], [0, 1, 0]], dtype=torch.bool)
    judge_kernel(r, "attention", [("right tree", got, attention_reference(q, kv[0], kv[1], n, chain), 1e-5),
                                  ("wrong tree", got, attention_reference(q, kv[0], kv[1], n, wrong), 1e-5)], 0.0)
    out = capsys.readouterr().out
    assert out.startswith("FAIL  kernel: attention") and "1 of 2 wrong: wrong tree" in out
    assert r.finish() == 1


@child_only
def test_attention_over_many_splits_keeps_its_rows_and_sums(capsys):
    """Rows whose keys span more splits than the combine loads at once (CH): a tree's rows
    against the float64 reference, and its last row equal, bit for bit, to the same row alone
    (its ancestors committed), whichever combine chunk its splits fall in."""
    from engine.kernels.window_layout import WindowLayout, ancestor_table
    from engine.kernels.catalog_attention import attention_reference
    from engine.kernels.triton_attention import CH, SPLIT_BLOCKS, layout_attention_triton
    g = torch.Generator().manual_seed(5)
    cap = 2048
    for n in (64 * SPLIT_BLOCKS * CH.value - 1, 1500):   # the last split: chunk 1's first; 12 splits
        q, kv = torch.randn(3, 4, 32, generator=g), torch.randn(2, 2, cap, 32, generator=g)
        tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
        got = layout_attention_triton(q, kv[0], kv[1], WindowLayout(
            torch.tensor(n), torch.tensor([0, 1, 2]), ancestor_table([0, 1, 2], tree)))
        assert (got.double() - attention_reference(q, kv[0], kv[1], n, tree)).abs().max() < 1e-5
        alone = layout_attention_triton(q[2:], kv[0], kv[1], WindowLayout(
            torch.tensor(n + 2), torch.zeros(1, dtype=torch.long), torch.zeros(1, 1, dtype=torch.long)))
        assert torch.equal(alone, got[2:])


class _Poisoned:
    """torch, but `empty` gives NaN-filled tensors."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def empty(*size, dtype=None, device=None):
        return torch.full(size, float("nan"), dtype=dtype, device=device)


@child_only
def test_attention_rows_packed_give_each_row_its_own_bits(monkeypatch):
    """A window's splits of committed keys run GP // G rows to a program (triton_attention's
    rows packed, P): every row, head and the combine's result equal one row a program
    (SPECSCOPE_ATTN_PACK=0) bit for bit, for 3, 4 and 2 query heads a kv head (5, 4 and 8
    rows a program), windows of 2-17 rows (rows left over in the last program), a tree, and
    contexts whose splits are all committed but the last, or reach past n in two, or none
    (n = 100), and rows of one program whose split counts differ (n = 254: 2 or 3 splits; a
    group's one combine adds each row's own). The interpreter runs programs one at a time, in
    grid order and then reversed: the group's last partial comes from a one-row split in one
    order and from the packed program in the other, so both combine."""
    import triton.runtime.interpreter as interp
    import engine.kernels.triton_attention as ta
    from engine.kernels.window_layout import WindowLayout, ancestor_table
    from engine.speculation.tree import TokenTree
    g = torch.Generator().manual_seed(7)
    kernel = ta._split_kernel
    set_grid_idx = interp.InterpreterBuilder.set_grid_idx
    order = {"reversed": False}

    def program(self, x, y, z):         # the program the interpreter runs next
        if order["reversed"]:
            x, z = self.grid_dim[0] - 1 - x, self.grid_dim[2] - 1 - z
        return set_grid_idx(self, x, y, z)
    monkeypatch.setattr(interp.InterpreterBuilder, "set_grid_idx", program)
    for hq, hkv, d, rows, n in ((9, 3, 32, 7, 300), (8, 2, 32, 17, 254), (4, 2, 16, 5, 640),
                                (9, 3, 32, 2, 129), (8, 2, 32, 6, 100)):
        q = torch.randn(rows, hq, d, generator=g)
        kv = torch.randn(2, hkv, 1024, d, generator=g)
        parent = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, rows)]
        tree = TokenTree.from_rows(list(range(rows)), parent)
        depths, mask = list(tree.row_depths), tree.ancestor_mask()
        lay = WindowLayout(torch.tensor(n), torch.tensor(depths), ancestor_table(depths, mask))
        seen = []

        class Spy:      # the P each launch was given: packing must have reached the kernel
            def __getitem__(self, grid):
                def launch(*args, **kw):
                    seen.append(kw.get("P", 1))
                    return kernel[grid](*args, **kw)
                return launch
        monkeypatch.setattr(ta, "_split_kernel", Spy())
        # the workspace and output poisoned with NaN: a combine that reads a partial no
        # program wrote (or an output row left unwritten) shows, whatever the allocator hands out
        monkeypatch.setattr(ta, "torch", _Poisoned())
        order["reversed"] = False
        alone = ta.layout_attention_triton(q, kv[0], kv[1], lay, pack=False)
        for rev in (False, True):
            order["reversed"] = rev
            packed = ta.layout_attention_triton(q, kv[0], kv[1], lay, pack=True)
            assert torch.equal(packed, alone), (hq, hkv, rows, n, "reversed" if rev else "in order")
        assert seen == [1] + [16 // (hq // hkv)] * 2


@child_only
def test_the_attention_with_its_loads_first_gives_the_same_bits(monkeypatch):
    """The combine's chunk of partials loaded before any is added (triton_attention's L3,
    SPECSCOPE_ATTN_L3=1) and a split's two blocks of keys and values loaded before the first
    block's arithmetic (KV2), L3 alone and both, add the same values in the same order: every
    output equals the default kernel's bit for bit, the workspace poisoned with NaN, for one to 12 splits (a
    partial chunk, a full one, a second), a window's rows whose split counts differ, float32 and
    float16; the last committed split's keys scaled up, so its max is the row's (a max that
    left a split out would show). The control swaps two splits' order in a chunk (1 and 2: with 0 first, a sum of
    two terms is the same either way), and the output changes."""
    import engine.kernels.triton_attention as ta
    from engine.kernels.window_layout import WindowLayout, ancestor_table
    from engine.speculation.tree import TokenTree
    g = torch.Generator().manual_seed(11)
    kernel = ta._split_kernel
    seen = []

    class Spy:          # the variant each launch was given: it must have reached the kernel
        def __getitem__(self, grid):
            def launch(*args, **kw):
                seen.append((kw.get("L3", False), kw.get("KV2", False)))
                return kernel[grid](*args, **kw)
            return launch
    monkeypatch.setattr(ta, "_split_kernel", Spy())
    monkeypatch.setattr(ta, "torch", _Poisoned())
    span = 64 * ta.SPLIT_BLOCKS

    def run(dt, hq, hkv, d, rows, n, l3, kv2=False):
        q = torch.randn(rows, hq, d, generator=g.manual_seed(rows + n)).to(dt)
        kv = torch.randn(2, hkv, 2048, d, generator=g)
        kv[0, :, n - n % span:n] *= 4      # the last committed split's keys: its max the row's
        kv = kv.to(dt)
        parent = [-1] + [i - 1 for i in range(1, rows)]           # a chain: lengths n .. n + rows - 1
        tree = TokenTree.from_rows(list(range(rows)), parent)
        depths, mask = list(tree.row_depths), tree.ancestor_mask()
        lay = WindowLayout(torch.tensor(n), torch.tensor(depths), ancestor_table(depths, mask))
        return ta.layout_attention_triton(q, kv[0], kv[1], lay, l3=l3, kv2=kv2)
    cases = [(torch.float32, 3, 1, 32, 1, 100), (torch.float16, 4, 2, 16, 2, span + 10),
             (torch.float16, 4, 2, 16, 3, 3 * span - 2), (torch.float32, 4, 1, 16, 2, 8 * span - 1),
             (torch.float16, 3, 1, 16, 2, 1500)]
    variants = ((True, False), (True, True))
    for case in cases:
        want = run(*case, l3=False)
        for l3, kv2 in variants:
            assert torch.equal(run(*case, l3=l3, kv2=kv2), want), (case, l3, kv2)
    assert seen == [(False, False), *variants] * len(cases)

    add, calls = ta._add, []                   # the control: splits 1 and 2 added 2, 1

    def swap(tot, out, m, l, a, mx):
        calls.append((m, l, a))
        if len(calls) == 2:                    # split 1 of the first combine: kept back
            return tot, out
        if len(calls) == 3:                    # split 2, then split 1
            return add(*add(tot, out, m, l, a, mx), *calls[1], mx)
        return add(tot, out, m, l, a, mx)
    monkeypatch.setattr(ta, "_add", swap)
    case = (torch.float32, 3, 1, 16, 1, 1000)  # 8 splits, one chunk
    assert not torch.equal(run(*case, l3=True), run(*case, l3=False))


@child_only
def test_the_swiglu_check_knows_the_interleaved_layout(capsys):
    """The kernel matches the reference's blocks of 32; a reference with another block size
    (or gate and up not interleaved) does not."""
    from engine.kernels import triton_fused as tf
    from engine.kernels.kernel_catalog import swiglu_reference
    from specscope.doctor import judge_kernel
    gu = torch.randn(2, 3, 256, generator=torch.Generator().manual_seed(1))
    got = tf.reduce_swiglu(gu, 32, torch.empty(3, 128))
    halves = gu.sum(0).double()
    r = _report()
    judge_kernel(r, "fused layer", [
        ("blocks of 32", got, swiglu_reference(gu, 32), 1e-5),
        ("blocks of 64", got, swiglu_reference(gu, 64), 1e-5),
        ("gate | up halves", got, torch.nn.functional.silu(halves[:, :128]) * halves[:, 128:], 1e-5)], 0.0)
    out = capsys.readouterr().out
    assert "2 of 3 wrong: blocks of 64" in out and r.finish() == 1


# ---------------------------------------------------------------------------------------------
# on a GPU


@cuda_only
def test_every_kernel_check_passes_on_this_gpu(capsys):
    from specscope.doctor import _kernel_lines
    r = _report()
    _kernel_lines(r, torch.device("cuda"))
    out = capsys.readouterr().out
    assert r.finish() == 0, out


@cuda_only
def test_graphs_check_passes_on_this_gpu(capsys):
    from specscope.doctor import _graph_line
    r = _report()
    _graph_line(r, torch.device("cuda"))
    assert capsys.readouterr().out.startswith("ok    graphs") and r.finish() == 0


@cuda_only
def test_graphs_check_fails_when_the_replay_differs(capsys):
    """A matmul whose added constant changes per call: the graph replays the one it captured."""
    from engine.weights import packed_linear
    from specscope.doctor import _graph_line
    calls = itertools.count()

    def drifting(x, w):
        return packed_linear(x, w) + next(calls)
    r = _report()
    _graph_line(r, torch.device("cuda"), matmul=drifting)
    out = capsys.readouterr().out
    assert out.startswith("FAIL  graphs") and "differs" in out and r.finish() == 1


# ---------------------------------------------------------------------------------------------
# same prompt, same keys (issue 31's prefill race)


def _racy_staging():
    """The upload before the fix: ONE host buffer per bucket, refilled for the next chunk while
    the previous chunk's asynchronous copy may still be waiting for the GPU."""
    import engine.model.graphs as graphs
    buffers: dict = {}

    def staging(n, pinned):
        h = buffers.setdefault((n, pinned), torch.zeros(n, dtype=torch.long, pin_memory=pinned))
        return h.zero_()
    return graphs, staging


@parent_only
def test_history_check_fails_when_a_back_to_back_prefill_drops_a_chunk(cpu_runtime, monkeypatch,
                                                                       capsys):
    """What the race did on the GPU, done on purpose: a prefill given more than one chunk at
    once leaves its second chunk's slots as they were. Three chunks, the fewest the check runs
    on (the doctor's own 2,000 tokens pass in the whole-doctor runs above)."""
    import specscope.doctor
    from engine.model.runtime import PREFILL_CHUNK, Session
    from specscope.doctor import _history_line
    monkeypatch.setattr(specscope.doctor, "HISTORY_TOKENS", 3 * PREFILL_CHUNK)
    real = Session.prefill

    def dropping(self, ids):
        if len(ids) <= PREFILL_CHUNK:
            return real(self, ids)
        real(self, ids[:PREFILL_CHUNK])
        self.cache.advance(PREFILL_CHUNK)                      # slots left unwritten
        return real(self, ids[2 * PREFILL_CHUNK:])
    monkeypatch.setattr(Session, "prefill", dropping)
    r = _report()
    _history_line(r, cpu_runtime)
    out = capsys.readouterr().out
    assert out.startswith("FAIL  same prompt, same keys") and r.finish() == 1, out
    assert f"a {3 * PREFILL_CHUNK:,}-token prefill" in out


@cuda_only
def test_history_check_passes_on_this_gpu(capsys):
    from engine.session import open_runtime
    from specscope.doctor import _history_line
    r = _report()
    _history_line(r, open_runtime(None, "cuda", "bfloat16"))
    assert capsys.readouterr().out.startswith("ok    same prompt, same keys") and r.finish() == 0


@cuda_only
def test_history_check_sees_the_racy_upload_on_this_gpu(monkeypatch, capsys):
    from engine.session import open_runtime
    from specscope.doctor import _history_line
    graphs, racy = _racy_staging()
    monkeypatch.setattr(graphs, "staging", racy)
    r = _report()
    _history_line(r, open_runtime(None, "cuda", "bfloat16"))
    out = capsys.readouterr().out
    assert out.startswith("FAIL  same prompt, same keys") and r.finish() == 1, out
