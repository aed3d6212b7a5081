"""The llama.cpp export against the pinned llama.cpp itself: its flags checked against the real
`--help` of a build of ../shared/peers (fixture, provenance inside), the configuration priced on a
real llama-bench JSON (fixture) with acceptance replayed from a real sweep (fixture: the bundled
model's plain runs on the code-edit prompts)."""

from __future__ import annotations

import json
import shlex
import stat
from pathlib import Path

import pytest

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp"
CPU_BENCH = FIX / "llama-bench_cpu-t1_smollm2-q4_1_d1024.json"
H200_BENCH = FIX / "llama-bench_h200_smollm2-q4_1_d1000.json"
OLD_EXPORT = ("-m m.gguf --spec-type ngram-simple --spec-ngram-size-n 4 --spec-ngram-size-m 16 "
              "--draft-max 16 --draft-min 0")      # what specscope exported before (issue 23)


def llama_bench_fixtures() -> list[Path]:
    """Every captured llama-bench JSON (this CPU's; others, e.g. a GPU's, are added beside it:
    a raw `llama-bench -o json` list or {provenance..., "records": [...]} both load)."""
    return sorted(FIX.glob("llama-bench_*.json"))


@pytest.fixture(scope="module")
def help_text() -> str:
    d = json.loads((FIX / "help_llama-speculative-simple.json").read_text())
    assert d["commit"].startswith("0c1e570")          # the pinned tree
    return d["text"]


@pytest.fixture(scope="module")
def sweep() -> dict:
    return json.loads((FIX / "sweep_cpu_code-edit.json").read_text())


def _export(capsys, *args: str) -> tuple[int, str, str]:
    from specscope.cli import main
    code = main(["export", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_old_flags_fail_against_the_pinned_help(help_text) -> None:
    from engine.tuning.llamacpp_flags import rejected_flags
    bad = dict(rejected_flags(shlex.split(OLD_EXPORT), help_text))
    assert set(bad) == {"--spec-ngram-size-n", "--spec-ngram-size-m", "--draft-max", "--draft-min"}
    assert "removed" in bad["--draft-max"]          # listed by --help, as removed


def test_every_cell_exports_flags_the_pinned_llamacpp_takes(sweep, help_text, tmp_path, capsys) -> None:
    from engine.tuning.export import export_cell
    from engine.tuning.llamacpp_flags import LLAMACPP_FLAGS, rejected_flags
    from engine.tuning.llamacpp_export import cell_config
    cells = [c for c in sweep["cells"] if c["status"] == "done"]
    # depth 2 with n-grams up to 4: the old export never drafted there
    cells.append({**cells[0], "settings": {**cells[0]["settings"], "draft": "lookup", "depth": 2,
                                            "ngram_max": 4}})
    for c in cells:
        ex = export_cell(c, sweep, "llamacpp")
        words = shlex.split(ex.text)
        assert words[0] == "llama-server"
        assert rejected_flags(words, help_text) == [], ex.text
        assert {w for w in words if w.startswith("-")} <= LLAMACPP_FLAGS
        cfg, _ = cell_config(c["settings"])
        assert cfg.size_m >= cfg.size_n
        assert any("per server" in n for n in ex.notes)


@pytest.mark.parametrize("bench_json", llama_bench_fixtures(), ids=lambda p: p.stem)
def test_the_priced_export_is_the_best_on_llamacpps_curve(bench_json, sweep, help_text, tmp_path, capsys) -> None:
    from engine.cost.llamacpp_bench import load_llama_bench_json
    from engine.tuning.llamacpp_flags import rejected_flags
    from engine.tuning.llamacpp_price import MIN_GAIN, price_sweep
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    prof = load_llama_bench_json(bench_json)
    p = price_sweep(sweep, prof)
    assert all(x.config.size_m >= x.config.size_n for x in p.ranked)
    assert p.ranked[0].tok_s == max(x.tok_s for x in p.ranked)
    code, out, err = _export(capsys, "--from", str(tmp_path), "--format", "llamacpp",
                             "--price-with", str(bench_json))
    assert code == 0, err
    assert f"plain decoding {1000 / prof.points[0][1]:.1f} tok/s" in err
    if p.ranked[0].ratio >= MIN_GAIN:
        words = shlex.split(out)
        assert words[:3] == ["llama-server", "-m", sweep["model"]["source"]]
        assert words[3:] == p.ranked[0].config.flags()
        assert rejected_flags(words, help_text) == []
        assert f"predicted {p.ranked[0].tok_s:.1f} tok/s" in err
    else:
        assert out.strip() == "plain decoding: no speculative configuration pays on this card"


def test_nothing_pays_on_a_card_where_rows_are_dear(sweep, tmp_path, capsys) -> None:
    """The real CPU curve with every pass of 2+ rows made 2.5x dearer (the one-row step kept):
    speculation cannot pay for its rows there, and the export says so instead of recommending."""
    src = json.loads(CPU_BENCH.read_text())
    for r in src["records"]:
        if r["n_prompt"] >= 2:
            r["samples_ns"] = [int(x * 2.5) for x in r["samples_ns"]]
    dear = tmp_path / "dear.json"
    dear.write_text(json.dumps(src))
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    code, out, err = _export(capsys, "--from", str(tmp_path), "--format", "llamacpp", "--price-with", str(dear))
    assert code == 0, err
    assert out.strip() == "plain decoding: no speculative configuration pays on this card"
    assert "x plain" in err


def _fake_binary(tmp_path: Path, help_text: str) -> Path:
    """A stand-in for the user's llama.cpp: prints the pinned build's captured --help."""
    (tmp_path / "help.txt").write_text(help_text)
    b = tmp_path / "llama-server"
    b.write_text(f"#!/bin/sh\ncat '{tmp_path / 'help.txt'}'\n")
    b.chmod(b.stat().st_mode | stat.S_IEXEC)
    return b


def test_check_binary_names_the_flags_it_rejects(sweep, help_text, tmp_path, capsys) -> None:
    from engine.tuning.llamacpp_flags import check_binary
    b = _fake_binary(tmp_path, help_text)
    assert [f for f, _ in check_binary(b, shlex.split(OLD_EXPORT))] == [
        "--spec-ngram-size-n", "--spec-ngram-size-m", "--draft-max", "--draft-min"]
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    code, out, err = _export(capsys, "--from", str(tmp_path), "--format", "llamacpp", "--check-binary", str(b))
    assert code == 0 and "takes every flag" in err
    code, out, err = _export(capsys, "--from", str(tmp_path), "--format", "llamacpp",
                             "--check-binary", str(tmp_path / "missing"))
    assert code == 2 and "no llama.cpp binary at" in err and "Traceback" not in err


def test_vllm_is_the_whole_serve_line(sweep, tmp_path, capsys) -> None:
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    code, out, err = _export(capsys, "--from", str(tmp_path), "--format", "vllm")
    assert code == 0, err
    words = shlex.split(out)
    assert words[:3] == ["vllm", "serve", sweep["model"]["source"]] and words[3] == "--speculative-config"
    assert json.loads(words[4])["method"] == "ngram"
    assert "vllm-gguf-plugin" in err          # the bundled model is a GGUF


def test_the_exported_command_starts_the_pinned_llamacpp(sweep, tmp_path) -> None:
    """With $LLAMA_CPP_BIN (a build's bin/ folder), every cell's export and the priced one run
    llama-speculative-simple for 4 tokens (skipped where no build is at hand, e.g. CI)."""
    import os
    import subprocess
    from engine.tuning.export import export_cell
    bindir = os.environ.get("LLAMA_CPP_BIN")
    if not bindir or not (Path(bindir) / "llama-speculative-simple").is_file():
        pytest.skip("set LLAMA_CPP_BIN to a llama.cpp build's bin/ to start the exported commands")
    (tmp_path / "p.txt").write_text("def f(x):\n    return x\n\ndef f(x):\n    return x\n")
    from engine.cost.llamacpp_bench import load_llama_bench_json
    from engine.tuning.llamacpp_price import price_sweep
    commands = {export_cell(c, sweep, "llamacpp").text for c in sweep["cells"] if c["status"] == "done"}
    for p in price_sweep(sweep, load_llama_bench_json(CPU_BENCH)).ranked[:3]:
        commands.add(shlex.join(["llama-server", "-m", sweep["model"]["source"], *p.config.flags()]))
    for text in commands:
        words = shlex.split(text)
        r = subprocess.run([str(Path(bindir) / "llama-speculative-simple"), *words[1:], "-f",
                            str(tmp_path / "p.txt"), "-n", "4", "--temp", "0"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and "decoded" in r.stderr + r.stdout, (text, r.stderr[-500:])


def test_calibrated_on_llamacpps_real_loop_nothing_pays_on_this_cpu(sweep, tmp_path, capsys) -> None:
    """bench/llamacpp_spec.py's runs on this CPU (fixture: plain, --spec-default's settings,
    ngram-simple 12/48 and the configuration the uncalibrated export chose, all slower than
    plain there) calibrate the drafted row's extra cost; priced with it, the export keeps plain
    decoding, as llama.cpp's own runs did."""
    from engine.cost.llamacpp_bench import load_llama_bench_json
    from engine.tuning.llamacpp_price import (calibrate_row_overhead, price_sweep, sweep_prompt_ids,
                                              streams_from_sweep)
    bench = json.loads((FIX / "llamacpp_spec_cpu_code-edit.json").read_text())
    t = bench["table"]["all"]
    assert max(t["spec-default"], t["ngram-simple"], t["exported"]) < t["plain"]
    cal = calibrate_row_overhead(streams_from_sweep(sweep, sweep_prompt_ids(sweep)),
                                 load_llama_bench_json(CPU_BENCH), bench["runs"], bench["variants"])
    e = cal["row_overhead"]
    assert 0.2 < e < 2.0
    assert len(cal["runs"]) == 20          # 5 prompts x 2 repeats x the two replayable variants
    assert price_sweep(sweep, load_llama_bench_json(CPU_BENCH)).chosen is not None   # uncalibrated
    assert price_sweep(sweep, load_llama_bench_json(CPU_BENCH), row_overhead=e).chosen is None
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    code, out, err = _export(capsys, "--from", str(tmp_path), "--format", "llamacpp", "--price-with",
                             str(CPU_BENCH), "--row-overhead", str(e))
    assert code == 0 and out.strip() == "plain decoding: no speculative configuration pays on this card"


def _calibrated(src: Path, dest: Path, row: float, window: float = 0.0) -> Path:
    """The profile of `src` with a loop calibration of these overheads, saved at `dest`."""
    from engine.cost.llamacpp_bench import load_llama_bench_json
    from engine.tuning.llamacpp_loop import LoopCalibration, with_calibration
    cal = LoopCalibration(row, window, 0.0, 0.0, 128, date="test")
    with_calibration(load_llama_bench_json(src), cal).save(dest)
    return dest


def test_the_export_prices_with_the_profiles_loop_calibration_by_default(sweep, tmp_path, capsys) -> None:
    """The CPU row overhead calibrated from llama.cpp's real runs (fixture above), kept in the
    profile: the export applies it without being told (plain decoding, as llama.cpp's runs
    said); an explicit --row-overhead replaces it; a profile without one says so."""
    from engine.cost.llamacpp_bench import load_llama_bench_json
    from engine.tuning.llamacpp_price import calibrate_row_overhead, streams_from_sweep, sweep_prompt_ids
    bench = json.loads((FIX / "llamacpp_spec_cpu_code-edit.json").read_text())
    e = calibrate_row_overhead(streams_from_sweep(sweep, sweep_prompt_ids(sweep)),
                               load_llama_bench_json(CPU_BENCH), bench["runs"], bench["variants"])["row_overhead"]
    prof = _calibrated(CPU_BENCH, tmp_path / "cpu_calibrated.json", e)
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    args = ["--from", str(tmp_path), "--format", "llamacpp", "--price-with"]
    code, out, err = _export(capsys, *args, str(prof))
    assert code == 0 and out.strip() == "plain decoding: no speculative configuration pays on this card"
    assert f"each drafted row {e:.2f} plain steps" in err and "recommendation: plain decoding" in err
    code, out, err = _export(capsys, *args, str(prof), "--row-overhead", "0")
    assert code == 0 and shlex.split(out)[0] == "llama-server" and "--row-overhead" in err
    code, out, err = _export(capsys, *args, str(CPU_BENCH))
    assert code == 0 and shlex.split(out)[0] == "llama-server"
    assert "no calibration of llama.cpp's loop" in err


def _window_overhead_for(sweep: dict, src: Path, ratio: float) -> float:
    """The window overhead at which the best configuration is priced at `ratio` x plain. A
    prompt's ms is linear in the overhead, so two pricings give every other (1 / tok/s)."""
    import statistics
    from engine.cost.llamacpp_bench import load_llama_bench_json
    from engine.tuning.llamacpp_price import plain_tok_s, price, streams_from_sweep, sweep_prompt_ids
    prof, streams = load_llama_bench_json(src), streams_from_sweep(sweep, sweep_prompt_ids(sweep))
    at0 = {p.config: [1 / r["tok_s"] for r in p.per_prompt] for p in price(streams, prof, None, 0.0, 0.0)}
    at1 = {p.config: [1 / r["tok_s"] for r in p.per_prompt] for p in price(streams, prof, None, 0.0, 1.0)}

    def best(w: float) -> float:
        return max(statistics.median(1 / (a + w * (b - a)) for a, b in zip(at0[c], at1[c])) for c in at0) \
            / plain_tok_s(prof)
    lo, hi = 0.0, 20.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if best(mid) > ratio else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("ratio,pays", [(1.03, False), (1.10, True)])
def test_plain_decoding_below_1_05x_and_a_configuration_above(ratio, pays, sweep, tmp_path, capsys) -> None:
    """The H200 curve, its windows made dearer until the best configuration is priced at 1.03x
    plain (within the noise: plain decoding is recommended, exit 0) or 1.10x (it is exported)."""
    w = _window_overhead_for(sweep, H200_BENCH, ratio)
    prof = _calibrated(H200_BENCH, tmp_path / "h200.json", 0.0, w)
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    code, out, err = _export(capsys, "--from", str(tmp_path), "--format", "llamacpp", "--price-with", str(prof))
    assert code == 0, err
    if pays:
        assert shlex.split(out)[:2] == ["llama-server", "-m"] and f"({ratio:.2f}x plain" in err
        assert "recommendation" not in err
    else:
        assert out.strip() == "plain decoding: no speculative configuration pays on this card"
        assert "recommendation: plain decoding (no speculation): no configuration is predicted at 1.05x" in err
        assert f"is predicted at {ratio:.2f}x" in err
