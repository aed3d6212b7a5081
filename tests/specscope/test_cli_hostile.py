"""The command line with hostile or edge input (issue 12): one `specscope: error:` line and
exit 2, the reason named, checked before the model loads where it can be; and a prompt that
fits the context with --draft none runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
from hostile import CONTEXT, write_gguf  # noqa: E402
from cli_helpers import Result  # noqa: E402


def one_error(r: Result) -> str:
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("specscope")
             and "error:" in line]
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_prompt_file_that_is_a_folder_or_not_utf8(tmp_path, specscope) -> None:
    assert "is a folder" in one_error(specscope("generate", "--prompt-file", str(tmp_path)))
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9".encode("latin-1"))
    assert "not UTF-8" in one_error(specscope("generate", "--prompt-file", str(bad)))
    # the window's own --prompt-file, in a process of its own (it starts Qt)
    r = subprocess.run([sys.executable, "-m", "specscope.cli", "--prompt-file", str(bad), "--screenshot",
                        str(tmp_path / "s.png")], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))
    assert "not UTF-8" in one_error(Result(r.returncode, r.stdout, r.stderr))


def test_seed_is_checked_before_the_model_loads(specscope) -> None:
    # the model path does not exist: the seed's error comes first, so nothing was loaded
    line = one_error(specscope("generate", "--seed", "-1", "--model", "/nonexistent/m.gguf"))
    assert "--seed" in line and "nonexistent" not in line


def test_a_prompt_that_fits_with_draft_none_runs(tmp_path, specscope) -> None:
    """8,180 prompt tokens + 4 new on an 8,192-token model, here scaled to the tiny model's 256:
    no window rows are reserved for drafts a run cannot make (and drafts shrink to fit)."""
    model = write_gguf(tmp_path / "m.gguf")
    prompt = "a" * (CONTEXT - 12)            # one token per character in the tiny vocabulary
    for draft in ("none", "lookup"):
        r = specscope("generate", "--model", str(model), "--device", "cpu", "--prompt", prompt,
                      "--max-new-tokens", "4", "--draft", draft, "--json")
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        assert report["prompt_tokens"] == CONTEXT - 12
        assert report["new_tokens"] == 4 or report["finish_reason"] == "eos"
    too_long = "a" * (CONTEXT - 2)
    line = one_error(specscope("generate", "--model", str(model), "--device", "cpu", "--prompt", too_long,
                               "--max-new-tokens", "4", "--draft", "none"))
    assert "context of 256" in line


def test_dtype_before_the_subcommand_is_honoured(tmp_path, specscope) -> None:
    model = write_gguf(tmp_path / "m.gguf")
    r = specscope("--dtype", "bfloat16", "--model", str(model), "generate", "--device", "cpu",
                  "--prompt", "abc", "--max-new-tokens", "2", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["dtype"] == "bfloat16" and report["model"] == str(model)


@pytest.mark.parametrize("context", ["1000000000", "1e9"])
def test_roofline_context_beyond_the_model_names_context(tmp_path, specscope, context) -> None:
    model = write_gguf(tmp_path / "m.gguf")
    line = one_error(specscope("roofline", "--model", str(model), "--device", "cpu", "--rows", "1",
                               "--context", context, "--out", str(tmp_path / "p.json")))
    assert "--context" in line and "--max-new-tokens" not in line
