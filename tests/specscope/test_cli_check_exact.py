"""`specscope generate --check-exact`, end to end in a subprocess with the bundled model: a greedy
tree run is checked against plain decoding (the JSON report's check_exact object, the text
output's line, exit 0); sampling is refused with one line and exit 2 before any load. Exit 3 on
a difference is the verdict's own mapping (tests/engine/speculation/test_exactness.py): there is
no honest way to make the shipped runtime differ from plain decoding on demand."""

from __future__ import annotations

import json
import subprocess
import sys

PROMPT = ("def area(width, height):\n    return width * height\n\n\n"
          "def area(width, height):\n    return width * height\n\n\n"
          "def area(width, height):\n    return")
RUN = ("generate", "--device", "cpu", "--weights", "dequantized", "--draft", "tree", "--depth", "4",
       "--width", "2", "--no-adaptive", "--no-ar-floor", "--max-new-tokens", "8", "--prompt", PROMPT)


def specscope(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specscope.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_check_exact_in_the_json_report(cpu_runtime) -> None:
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    r = specscope(*RUN, "--check-exact", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    c = report["check_exact"]
    assert c["identical"] is True and c["first_diff"] is None and c["compared"] == 8
    assert c["verdict"] == "identical to plain decoding (8 tokens)"
    assert set(c) >= {"spec_id", "plain_id", "spec_token", "plain_token", "spec_p", "plain_p",
                      "margin", "margin_of"}
    assert report["accepted_draft_tokens"] > 0
    # the check's reference is plain decoding: the same tokens an ar run gives here
    ar = Decoder(cpu_runtime, cpu_runtime.tokenizer.encode(PROMPT),
                 DecodeSettings(draft="none", max_new_tokens=8)).run()
    assert report["tokens"] == ar["tokens"]


def test_check_exact_in_the_text_output() -> None:
    r = specscope(*RUN, "--check-exact")
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().splitlines()[-1] == "check-exact: identical to plain decoding (8 tokens)"
    assert "check-exact: decoding the prompt plainly" in r.stderr


def test_check_exact_refuses_sampling_with_one_line() -> None:
    r = specscope(*RUN, "--check-exact", "--temperature", "0.7", "--json")
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specscope: error: --check-exact needs greedy")
    assert "Traceback" not in r.stderr
