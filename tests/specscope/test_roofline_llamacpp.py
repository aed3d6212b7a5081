"""`specscope roofline --engine llamacpp`: llama.cpp's curve from the user's llama-bench (here a
stand-in script that prints a real captured llama-bench JSON and its progress lines, or fails as
llama-bench does), saved as a profile of its own; one clear line for a missing binary, a failing
one, a model it cannot load."""

from __future__ import annotations

import json
import stat
import sys
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


def _fake_speculative_simple(bindir: Path) -> Path:
    """A stand-in llama-speculative-simple beside the stand-in llama-bench: prints the recorded
    stderr of the real one (fixture speculative-simple_cpu_smollm2.json) for the run's prompt
    (the -f file's name) and setting (its flags)."""
    from engine.tuning.llamacpp_loop import LOOP_CONFIGS, NEVER_DRAFTS
    flags = {" ".join(NEVER_DRAFTS): "plain", **{" ".join(c.flags()): c.id for c in LOOP_CONFIGS}}
    b = bindir / "llama-speculative-simple"
    b.write_text(f"""#!{sys.executable}
import json, sys
from pathlib import Path
args = sys.argv[1:]
prompt = Path(args[args.index("-f") + 1]).stem
words = " ".join(args[args.index("--spec-type"):])
setting = {flags!r}[words]
rec = json.loads(Path({str(FIX / "speculative-simple_cpu_smollm2.json")!r}).read_text())
run = next(r for r in rec["runs"] if r["prompt"] == prompt and r["setting"] == setting)
sys.stderr.write(run["stderr"])
""")
    b.chmod(b.stat().st_mode | stat.S_IEXEC)
    return b


def _bench_beside(tmp_path: Path) -> tuple[Path, int]:
    fx = json.loads((FIX / "llama-bench_cpu-t1_smollm2-q4_1_d1024.json").read_text())
    (tmp_path / "records.json").write_text(json.dumps(fx["records"]))
    return _script(tmp_path, f"cat '{tmp_path / 'records.json'}'\n"), fx["records"][0]["n_depth"]


def test_llamacpps_loop_is_calibrated_and_kept_in_the_profile(tmp_path, capsys) -> None:
    from engine.cost.profile import CostProfile
    from engine.tuning.llamacpp_loop import LOOP_CONFIGS, LOOP_PROMPTS, profile_calibration
    b, depth = _bench_beside(tmp_path)
    _fake_speculative_simple(tmp_path)
    code, out, err = _roofline(capsys, "--llama-bench", str(b), "--context", str(depth), "--threads", "1",
                               "--out", str(tmp_path / "lcpp.json"))
    assert code == 0, err
    n = len(LOOP_PROMPTS) * (1 + len(LOOP_CONFIGS))
    assert f"llama.cpp's loop [1/{n}] code plain" in err and f"[{n}/{n}]" in err     # progress
    cal = profile_calibration(CostProfile.load(tmp_path / "lcpp.json"))
    assert cal is not None and cal.row_overhead >= 0 and cal.window_overhead >= 0
    rec = json.loads((FIX / "speculative-simple_cpu_smollm2.json").read_text())
    assert len(cal.runs) == len([r for r in rec["runs"] if r["setting"] != "plain"
                                 and "n_drafted = 0\n" not in r["stderr"]])
    assert cal.command[0] == str(tmp_path / "llama-speculative-simple") and "-t" in cal.command
    assert f"each drafted row {cal.row_overhead:.2f} plain steps" in out
    assert {s["setting"] for s in cal.settings} == {c.id for c in LOOP_CONFIGS}


def test_without_llama_speculative_simple_the_profile_is_kept_uncalibrated(tmp_path, capsys) -> None:
    from engine.cost.profile import CostProfile
    from engine.tuning.llamacpp_loop import profile_calibration
    b, depth = _bench_beside(tmp_path)
    code, out, err = _roofline(capsys, "--llama-bench", str(b), "--context", str(depth),
                               "--out", str(tmp_path / "lcpp.json"))
    assert code == 0 and "no llama-speculative-simple beside" in err
    assert profile_calibration(CostProfile.load(tmp_path / "lcpp.json")) is None
    _fake_speculative_simple(tmp_path)
    code, out, err = _roofline(capsys, "--llama-bench", str(b), "--context", str(depth), "--no-loop-calibration",
                               "--out", str(tmp_path / "lcpp2.json"))
    assert code == 0 and "llama.cpp's loop" not in err and "--no-loop-calibration" in out
    assert profile_calibration(CostProfile.load(tmp_path / "lcpp2.json")) is None
