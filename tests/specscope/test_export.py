"""`specscope export`: our command line (it parses back to the cell's settings), llama.cpp flags
(all in its documented set), a vLLM speculative_config (exactly the documented keys); bad
choices give one line and exit 2."""

from __future__ import annotations

import json
import shlex

import pytest

from sweep_helpers import cpu_like_profile, workload_file


@pytest.fixture(scope="module")
def sweep_dir(cpu_runtime, tmp_path_factory):
    from engine.io.workloads import load_workload
    from engine.tuning.grid import SweepConfig
    from engine.tuning.sweep import Sweep
    from engine.tuning.sweep_file import save_sweep

    folder = tmp_path_factory.mktemp("export")
    cfg = SweepConfig(workload=str(workload_file(folder)), drafts=("lookup", "tree"), depths=(3,),
                      widths=(2,), prompts=1, new_tokens=4, adaptive=False, skip_margin=0.0,
                      warmup_tokens=0)
    sweep = Sweep(cpu_runtime, cfg, load_workload(cfg.workload, limit=1), profile=cpu_like_profile(cpu_runtime))
    for step in sweep.steps():
        save_sweep(step.result, folder)
    return folder


def _export(capsys, *args: str) -> tuple[int, str, str]:
    from specscope.cli import main
    code = main(["export", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_vllm_config_has_exactly_the_documented_keys(sweep_dir, capsys) -> None:
    from engine.tuning.export import VLLM_NGRAM_KEYS
    code, out, err = _export(capsys, "--from", str(sweep_dir / "sweep.json"), "--cell", "tree:3:2",
                             "--format", "vllm")
    assert code == 0, err
    words = shlex.split(out)            # vllm serve MODEL --speculative-config JSON; notes on stderr
    assert words[:2] == ["vllm", "serve"] and words[3] == "--speculative-config"
    cfg = json.loads(words[4])
    assert tuple(cfg) == VLLM_NGRAM_KEYS == ("method", "num_speculative_tokens", "prompt_lookup_min",
                                             "prompt_lookup_max")
    assert cfg == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1,
                   "prompt_lookup_max": 4}
    assert "earliest match" in err and "alternative branch" in err


def test_llamacpp_flags_are_in_its_documented_set(sweep_dir, capsys) -> None:
    from engine.tuning.export import LLAMACPP_FLAGS, LLAMACPP_SPEC_TYPES
    code, out, err = _export(capsys, "--from", str(sweep_dir), "--format", "llamacpp")
    assert code == 0, err
    assert len(out.strip().splitlines()) == 1
    words = shlex.split(out)
    assert words[0] == "llama-server"
    flags = [w for w in words if w.startswith("-")]
    assert flags and set(flags) <= LLAMACPP_FLAGS
    values = dict(zip(words[1::2], words[2::2]))
    assert values["--spec-type"] in LLAMACPP_SPEC_TYPES
    best = json.loads((sweep_dir / "sweep.json").read_text())["best"]
    t = values["--spec-type"]
    assert values[f"--spec-{t}-size-m"] == best.split(":")[1]
    assert int(values[f"--spec-{t}-size-n"]) <= int(values[f"--spec-{t}-size-m"])
    assert "no token trees" in err or best.startswith("lookup")


def test_our_command_line_parses_back_to_the_cells_settings(sweep_dir, capsys) -> None:
    from engine.speculation.settings import DecodeSettings
    from specscope.cli import build_parser, settings_from_args
    res = json.loads((sweep_dir / "sweep.json").read_text())
    for cell in res["cells"]:
        code, out, err = _export(capsys, "--from", str(sweep_dir), "--cell", cell["id"], "--format", "cli")
        assert code == 0, err
        words = shlex.split(out)
        assert words[:2] == ["specscope", "generate"]
        a = build_parser().parse_args(words[1:] + ["--max-new-tokens", str(res["config"]["new_tokens"])])
        assert settings_from_args(a) == DecodeSettings.from_dict(cell["settings"])


@pytest.mark.parametrize("args, message", [
    (["--cell", "tree:9:9"], "no cell tree:9:9"),
    (["--cell", "beam:3:2"], "DRAFT:DEPTH:WIDTH"),
])
def test_bad_choices_give_one_line(sweep_dir, capsys, args, message) -> None:
    code, out, err = _export(capsys, "--from", str(sweep_dir), "--format", "vllm", *args)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_file_that_is_not_a_sweep_gives_one_line(tmp_path, capsys) -> None:
    bad = tmp_path / "sweep.json"
    bad.write_text("{\"rows\": []}")
    code, _, err = _export(capsys, "--from", str(bad), "--format", "cli")
    assert code == 2 and "not a specscope sweep" in err and len(err.strip().splitlines()) == 1
    code, _, err = _export(capsys, "--from", str(tmp_path / "none"), "--format", "cli")
    assert code == 2 and "no sweep file" in err
