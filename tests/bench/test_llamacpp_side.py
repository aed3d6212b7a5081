"""bench/llamacpp_side.py: llama-bench's JSON read into issue 22's figures.

The fixtures are llama-bench's own output, byte for byte, from a CPU build of the llama.cpp tree
in ../shared/peers (0c1e570) on this machine, run through llamacpp_side.py on a tiny random
Q4_K_M model (bench/make_model.py --shape tiny): `rows_tg` (-p 1,2,4,16 -n 8 -d 32 -r 2) and `pp`
(-p 64 -n 0 -r 2). The live test runs llama-bench itself where SPECSCOPE_LLAMA_BENCH names one.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import llamacpp_side as lcs  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _fixture(part: str) -> list[dict]:
    return json.loads((FIXTURES / f"llamabench_cpu_tiny_{part}.json").read_text())


def test_summary_of_real_llama_bench_output():
    rows_tg, pp = _fixture("rows_tg"), _fixture("pp")
    s = lcs.summarize(rows_tg + pp)
    # what each figure must be, straight from the samples
    by = {(t["n_prompt"], t["n_gen"], t["n_depth"]): t["samples_ns"] for t in rows_tg + pp}
    assert s["rows_depth"] == 32
    assert list(s["rows_ms"]) == [1, 2, 4, 16]
    for k, ms in s["rows_ms"].items():
        assert ms == pytest.approx(statistics.median(by[(k, 0, 32)]) / 1e6)
    tg = s["tg"]
    assert (tg["n_gen"], tg["depth"], tg["samples"]) == (8, 32, 2)
    med = statistics.median(by[(0, 8, 32)])
    assert tg["tok_s"] == pytest.approx(8 / (med / 1e9)) and tg["ms_per_token"] == pytest.approx(med / 8e6)
    assert s["pp"]["n_prompt"] == 64 and s["pp"]["depth"] == 0
    assert s["pp"]["tok_s"] == pytest.approx(64 / (statistics.median(by[(64, 0, 0)]) / 1e9))
    assert s["info"]["model_type"] and s["info"]["backends"] == "CPU"
    text = lcs.format_summary("tiny", s)
    assert "tg8 at depth 32" in text and "pp64 at depth 0" in text


def test_rounds_pool_their_samples():
    """Two rounds of the same tests: the figures are medians of all samples together."""
    a = _fixture("rows_tg")
    b = json.loads(json.dumps(a))
    for t in b:
        t["samples_ns"] = [x * 3 for x in t["samples_ns"]]
    s = lcs.summarize(a + b)
    one = [t for t in a + b if t["n_prompt"] == 1 and t["n_gen"] == 0]
    assert s["rows_ms"][1] == pytest.approx(statistics.median([x for t in one for x in t["samples_ns"]]) / 1e6)
    assert s["tg"]["samples"] == 4


def test_bad_input_is_one_clear_message(tmp_path, capsys):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    assert lcs.main(["--bin", str(tmp_path / "nowhere"), "--model", str(model), "--out", str(tmp_path)]) == 2
    assert "no llama-bench executable" in capsys.readouterr().err
    assert lcs.main(["--bin", str(tmp_path), "--model", str(tmp_path / "none.gguf"), "--out", str(tmp_path)]) == 2
    assert "no model file" in capsys.readouterr().err
    assert lcs.main(["--bin", str(tmp_path), "--model", str(model), "--parts", "tg,xx", "--out", str(tmp_path)]) == 2
    assert "--parts takes" in capsys.readouterr().err


def test_a_failing_llama_bench_says_why(tmp_path):
    """A llama-bench that exits non-zero (here: it cannot read the file) is reported with its
    own words under "errors"; the other part still runs."""
    exe = os.environ.get("SPECSCOPE_LLAMA_BENCH")
    if not exe:
        pytest.skip("set SPECSCOPE_LLAMA_BENCH to a llama-bench executable")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf")
    rd = lcs.measure(lcs.find_llama_bench(exe), bad, parts=("tg", "pp"), reps=1, tg=2, pp=8, threads=1,
                     timeout=60)
    assert set(rd["errors"]) == {"rows_tg", "pp"} and "exited with" in rd["errors"]["pp"]


def test_live_llama_bench_on_a_tiny_model(tmp_path, capsys):
    exe = os.environ.get("SPECSCOPE_LLAMA_BENCH")
    if not exe:
        pytest.skip("set SPECSCOPE_LLAMA_BENCH to a llama-bench executable")
    from make_model import SHAPES, write_model
    model = write_model(tmp_path / "tiny.gguf", SHAPES["tiny"], "Q4_K_M", progress=None)
    out = tmp_path / "res"
    rc = lcs.main(["--bin", exe, "--model", str(model), "--out", str(out), "--rows", "1,2", "--depth", "16",
                   "--tg", "4", "--pp", "32", "--reps", "2", "--threads", "1"])
    assert rc == 0
    res = json.loads((out / "llamacpp_tiny.json").read_text())
    raw = json.loads((out / "llamabench_tiny_rows_tg.json").read_text())
    assert [t["n_prompt"] for t in raw] == [1, 2, 0] and all(t["n_depth"] == 16 for t in raw)
    assert res["rounds"][0]["runs"]["rows_tg"]["raw"] == (out / "llamabench_tiny_rows_tg.json").read_text()
    assert list(res["summary"]["rows_ms"]) == ["1", "2"] and res["summary"]["tg"]["n_gen"] == 4
    assert res["summary"]["pp"]["n_prompt"] == 32
    assert "tg4 at depth 16" in capsys.readouterr().out
