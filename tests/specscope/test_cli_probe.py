"""Long work is announced (issue 35.2): the first adaptive `generate` on a model and device
measures the device's verify cost; it says so on stderr with progress (with --json too), and the
report keeps that time apart (probe_s) from the decoding's wall_s. The command line uses the
window's torch threads unless --threads says otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from argparse import Namespace

import pytest
import torch


def _generate(cache, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPECSCOPE_CACHE=str(cache))
    return subprocess.run([sys.executable, "-m", "specscope.cli", "generate", "--device", "cpu",
                           "--max-new-tokens", "4", "--prompt", "def f(x):\n    return x\n", "--json",
                           *extra], capture_output=True, text=True, timeout=600, env=env)


def test_the_first_generate_says_it_measures_the_device_and_reports_the_time_apart(tmp_path):
    # --adaptive prices windows on the device's cost profile: the first run measures it
    first = _generate(tmp_path, "--adaptive")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert "measuring this device's verify cost" in first.stderr
    assert "round 2 of up to" in first.stderr and "s left" in first.stderr
    assert "verify cost measured in" in first.stderr
    assert report["probe_s"] > 0 and report["config"]["adaptive"]
    assert list((tmp_path / "profiles").glob("*.json"))       # saved for the next start
    # control: the next run finds the saved profile; nothing measured, nothing said
    again = _generate(tmp_path, "--adaptive")
    assert again.returncode == 0, again.stderr
    assert "measuring" not in again.stderr
    assert json.loads(again.stdout)["probe_s"] < report["probe_s"]
    # a fixed window prices nothing: no profile looked for
    fixed = _generate(tmp_path, "--no-adaptive", "--no-ar-floor")
    assert json.loads(fixed.stdout)["probe_s"] == 0.0


@pytest.mark.skipif((os.cpu_count() or 1) < 2 or "OMP_NUM_THREADS" in os.environ,
                    reason="one core, or threads set from outside")
def test_generate_uses_the_windows_threads_unless_told():
    from specscope.cli import _use_threads, build_parser
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(os.cpu_count())
        _use_threads(Namespace(command="generate", threads=None))
        assert torch.get_num_threads() == os.cpu_count() - 1          # as the window
        _use_threads(build_parser().parse_args(["generate", "--threads", "1"]))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
