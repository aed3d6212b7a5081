"""`specscope doctor` on this CPU-only machine: honest about what it cannot check, the CPU decode
still runs, bad --compile-for targets get one line and a non-zero exit."""

from __future__ import annotations

import pytest
import torch

from specscope.cli import main


def test_doctor_without_a_gpu_fails_the_gpu_check_with_its_fix(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code = main(["doctor"])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    status = {line.split()[1]: line.split()[0] for line in out if line[:4] in ("ok  ", "FAIL", "skip")}
    assert status["torch"] == "ok" and status["gpu"] == "FAIL" and status["triton"] == "skip"
    fix = out[[i for i, line in enumerate(out) if line.startswith("FAIL")][0] + 1]
    assert "fix:" in fix and "ROCm" in fix
    assert any(line.startswith("ok") and "model on the CPU" in line and "tokens" in line for line in out)
    assert out[-1] == "1 check(s) failed"


def test_doctor_on_the_cpu_passes_and_names_the_activation_dtype(capsys):
    code = main(["doctor", "--device", "cpu", "--dtype", "float32"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and out[-1] == "all checks passed"
    model = [line for line in out if "model on the CPU" in line]
    assert model and model[0].startswith("ok") and "(float32," in model[0]
    assert sum(line.startswith("skip") for line in out) == 4      # gpu, triton, kernels, graphs


@pytest.mark.parametrize("targets", ["gfx9999", "gfx1201,sm90", ","])
def test_bad_compile_targets_get_one_line(targets, capsys):
    code = main(["doctor", "--compile-for", targets])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("specscope: error: --compile-for:") and "known targets: gfx1100" in err[0]
