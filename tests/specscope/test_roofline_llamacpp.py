"""`specscope roofline --engine llamacpp`: llama.cpp's curve from the user's llama-bench (here a
stand-in script that prints a real captured llama-bench JSON and its progress lines, or fails as
llama-bench does), saved as a profile of its own; one clear line for a missing binary, a failing
one, a model it cannot load."""

from __future__ import annotations

import json
import stat
from pathlib import Path

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp"


def _script(tmp_path: Path, body: str) -> Path:
    b = tmp_path / "llama-bench"
    b.write_text("#!/bin/sh\n" + body)
    b.chmod(b.stat().st_mode | stat.S_IEXEC)
    return b


def _roofline(capsys, *args: str) -> tuple[int, str, str]:
    from specscope.cli import main
    code = main(["roofline", "--engine", "llamacpp", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_curve_is_fitted_and_saved_as_llamacpps_own_profile(tmp_path, capsys) -> None:
    from engine.cost.profile import CostProfile
    fx = json.loads((FIX / "llama-bench_cpu-t1_smollm2-q4_1_d1024.json").read_text())
    (tmp_path / "records.json").write_text(json.dumps(fx["records"]))
    b = _script(tmp_path, "echo 'llama-bench: benchmark 1/8: starting' >&2\n"
                          f"cat '{tmp_path / 'records.json'}'\n")
    depth = fx["records"][0]["n_depth"]
    code, out, err = _roofline(capsys, "--llama-bench", str(b), "--context", str(depth),
                               "--out", str(tmp_path / "lcpp.json"))
    assert code == 0, err
    assert "llama-bench test 1/8: starting" in err              # progress while it runs
    assert "break-even on llama.cpp" in out and "16 rows / one row" in out
    prof = CostProfile.load(tmp_path / "lcpp.json")
    assert prof.extra["engine"] == "llama.cpp" and prof.extra["backends"] == fx["records"][0]["backends"]
    assert prof.extra["build_commit"] == fx["records"][0]["build_commit"]
    assert prof.extra["command"][:2] == [str(b), "-m"] and "-d" in prof.extra["command"]
    pp = {r["n_prompt"]: r for r in fx["records"] if r["n_gen"] == 0}
    assert [r for r, _ in prof.points] == sorted(pp)           # one point per prompt size
    assert (tmp_path / "lcpp.llama-bench.json").is_file()     # llama-bench's own JSON kept


def test_one_line_for_each_failure(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("LLAMA_BENCH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    code, out, err = _roofline(capsys)
    assert code == 2 and "no llama-bench: pass --llama-bench PATH" in err
    code, out, err = _roofline(capsys, "--llama-bench", str(tmp_path / "nope"))
    assert code == 2 and "no llama-bench at" in err
    bad_model = _script(tmp_path, "echo \"llama_bench: error: failed to load model 'x'\" >&2\nexit 1\n")
    code, out, err = _roofline(capsys, "--llama-bench", str(bad_model))
    assert code == 2 and "could not load the model" in err
    assert len([x for x in err.splitlines() if x.startswith("specscope: error")]) == 1
    crash = _script(tmp_path, "echo 'Segmentation fault' >&2\nexit 139\n")
    code, out, err = _roofline(capsys, "--llama-bench", str(crash))
    assert code == 2 and "failed (exit 139): Segmentation fault" in err and "Traceback" not in err
