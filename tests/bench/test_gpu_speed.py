"""bench/gpu_speed.py and its parts, run on the CPU: the code paths the GPU session runs.

A tiny random-weight Q4_K_M model (bench/make_model.py, 2 layers: layer 0 Q4_K, layer 1 Q6_K
for ffn_down) and the bundled model stand in for the 8B; every part runs for real (torch's
profiler, the roofline probe, the decoder, prefill), only smaller.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import gpu_speed  # noqa: E402
import speed_profile  # noqa: E402
from make_model import SHAPES, write_model  # noqa: E402

from engine.model.linear import Linear  # noqa: E402
from engine.model.runtime import chain  # noqa: E402


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("m") / "tiny.Q4_K_M.gguf", SHAPES["tiny"], "Q4_K_M",
                       progress=None)


@pytest.fixture(scope="module")
def bundled_rt(loaded_model):
    from engine.model.runtime import Runtime
    return Runtime(loaded_model, "cpu", "auto", weights="auto")


def test_kernel_profile_attributes_the_matmuls_to_their_layers(bundled_rt):
    """The bundled model (CPU-fast int4 kernels): the int4 matmul runs once a layer in each of
    qkv, o, gate_up and down, and its region carries that linear's bytes; the wrapping is undone."""
    rt = bundled_rt
    if not rt.model.cpu_fast:
        pytest.skip("the CPU-fast int4 kernels need AVX-512 (this CPU runs dense float32)")
    ses = rt.session(120)
    before = ses.scratch([5, 6], *chain(2), at=40).logits
    ses.close()
    p = speed_profile.profile_pass(rt, rows=1, context=40, passes=1, warmup=1)
    assert p["kind"] == "cpu" and p["n_layers"] == 30
    mm = {r["region"]: r for r in p["table"] if r["kernel"] == "aten::_weight_int4pack_mm_for_cpu"}
    assert set(mm) == {"qkv", "o", "gate_up", "down"}
    # SmolLM2-135M: hidden 576, 9 query and 3 key/value heads of 64, MLP 1536, 30 layers; a weight
    # of N x K in torch's CPU int4pack layout holds N*K/2 bytes of nibbles and a bfloat16 (scale,
    # zero) pair per 32 values: 5/8 of a byte a weight
    n_k = {"qkv": (576 + 2 * 3 * 64, 576), "o": (576, 576), "gate_up": (2 * 1536, 576), "down": (576, 1536)}
    for region, r in mm.items():
        assert r["launches"] == pytest.approx(30) and r["per_layer"] == pytest.approx(1.0), region
        n, k = n_k[region]
        want = 30 * n * k * 5 // 8
        assert r["bytes"] == want, region
        # (its GB/s is these bytes over its profiled µs; the profiler's µs are not checked against
        # an outside clock: under the profiler a short CPU pass runs several times slower)
        assert r["us"] > 0 and r["gbs"] > 0, region
    # every linear's matmul is inside its own region: the region's time holds the kernel's
    by_region = {g["region"]: g for g in p["regions"]}
    for region, r in mm.items():
        assert r["us"] <= by_region[region]["us"] and by_region[region]["bytes"] == r["bytes"]
    regions = set(by_region)
    assert {"attention", "rmsnorm", "rope", "kv_write", "lm_head"} <= regions
    # nothing stays wrapped: methods are the class's again, layers hold Linear, same logits
    ses = rt.session(120)       # the idle session the profile used, handed back
    assert "_rms" not in vars(rt.model) and "_rotate" not in vars(rt.model) and "write" not in vars(ses.cache)
    assert all(isinstance(L[k], Linear) for L in rt.model.layers for k in speed_profile.LINEARS)
    assert isinstance(rt.model.lm_head, Linear)
    assert torch.equal(ses.scratch([5, 6], *chain(2), at=40).logits, before)
    ses.close()
    text = speed_profile.format_profile(p, top=5)
    assert "launches a pass" in text and "gate_up" in text


def test_all_then_summary_on_the_cpu(tiny_gguf, tmp_path, capsys):
    """`all` (no llama.cpp) writes its JSON; `summary` turns it into the goal table, the figures
    being the JSON's own numbers and the llama.cpp ones 'not measured'."""
    out = tmp_path / "res"
    rc = gpu_speed.main(["all", "--device", "cpu", "--model", str(tiny_gguf), "--tag", "8b",
                         "--context", "48", "--rows", "1,2,16", "--repeats", "2", "--rounds", "2",
                         "--tokens", "4", "--prompt-depth", "40", "--gen-tokens", "3", "--prefill", "24",
                         "--passes", "1", "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "all_8b.json").read_text())
    assert len(res["roofline"]["rounds"]) == 2 and len(res["decode"]["rounds"]) == 2
    ms = {int(k): v for k, v in res["roofline"]["ms_by_rows"].items()}
    assert set(ms) == {1, 2, 16} and all(v > 0 for v in ms.values())
    facts = res["facts"]
    assert facts["weight_floor_ms"] == pytest.approx(facts["weight_bytes"] / 4.8e12 * 1e3)
    assert res["decode"]["rounds"][0]["new_tokens"] >= 1 and res["prefill"]["tokens"] == 24
    k = res["kernels"]["passes"]["1"]
    assert k["n_layers"] == 2 and k["launches_per_pass"] > 0
    from engine.cost.profile import CostProfile
    prof = CostProfile.load(out / "profile_8b.json")
    assert dict(prof.points) == pytest.approx(ms) and prof.context == 48
    capsys.readouterr()
    assert gpu_speed.main(["summary", "--out", str(out)]) == 0
    f = json.loads((out / "summary.json").read_text())
    assert f["8b_one_row_over_floor"]["value"] == pytest.approx(ms[1] / facts["weight_floor_ms"])
    assert f["8b_16_over_1"]["value"] == pytest.approx(ms[16] / ms[1])
    assert f["8b_decode_over_tg"]["value"] is None and f["bundled_decode_over_tg"]["value"] is None
    md = (out / "summary.md").read_text()
    assert "| 8B-like: pass of 16 rows ÷ one row | 1.17 | <= 1.15 |" in md
    assert "not measured" in md and "8b: pass ms by rows" in md


def test_bad_input_is_one_clear_message(tmp_path, capsys):
    assert gpu_speed.main(["kernels", "--device", "cpu", "--model", str(tmp_path / "no.gguf"),
                           "--out", str(tmp_path)]) == 2
    assert "no model file" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert gpu_speed.main(["roofline", "--out", str(tmp_path)]) == 2
        assert "--device cpu" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gpu_speed.main(["roofline", "--device", "cpu", "--rows", "1,x", "--out", str(tmp_path)])
    assert "comma-separated integers" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_matmul_part_in_the_triton_interpreter(tmp_path):
    """The matmul table through the real Triton kernels (interpreter, float32 activations):
    times, bandwidth and the bitwise row-invariance check of each matrix."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_speed.py"), "matmul", "--device", "cpu",
                        "--shapes", "q4k_tiny_64x512", "--matmul-rows", "1,2", "--no-linear", "--out", str(tmp_path)],
                       env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "matmul.json").read_text())
    assert set(res["shapes"]) == {"q4k_tiny_64x512"}
    for s in res["shapes"].values():
        assert "interpreter" in s["call"]
        assert s["row_invariant"] is True and s["rel_err"] < 1e-5
        assert set(s["us"]) == {"1", "2"} and all(v > 0 for v in s["gbs"].values())
    assert "row-invariant yes" in r.stdout


def test_a_failing_part_keeps_the_others(tiny_gguf, tmp_path):
    """Decoding past the model's context (2,048 tokens) fails; the roofline and prefill of the
    same rounds are still measured and written, the failure is in the JSON, and the exit is 1."""
    out = tmp_path / "res"
    rc = gpu_speed.main(["all", "--device", "cpu", "--model", str(tiny_gguf), "--tag", "8b", "--no-kernels",
                         "--context", "48", "--rows", "1,2", "--repeats", "2", "--rounds", "1",
                         "--tokens", "20", "--prompt-depth", "2040", "--gen-tokens", "2", "--prefill", "16",
                         "--out", str(out)])
    assert rc == 1
    res = json.loads((out / "all_8b.json").read_text())
    assert "decode round 1" in res["errors"] and "context" in res["errors"]["decode round 1"]
    assert set(res["roofline"]["ms_by_rows"]) == {"1", "2"} and res["prefill"]["tokens"] == 16
    assert "decode" not in res and res["generate"]["new_tokens"] >= 1
