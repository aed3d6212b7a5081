"""Run a test file's tests again in a child pytest with Triton's CPU interpreter on.

The interpreter must be chosen before triton is first imported (triton.language builds its
jitted helpers at import), which another test may already have done in this process: the parent
test starts a child pytest on the same file with TRITON_INTERPRET=1 and a marker variable set,
and the file's real tests run only in that child.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_in_interpreter_child(test_file: str, marker: str, timeout: int = 600,
                             args: tuple[str, ...] = ()) -> None:
    """`args` go to the child's pytest (`-m slow`: the file's slow tests, which the default
    `-m 'not slow'` leaves out)."""
    env = dict(os.environ, TRITON_INTERPRET="1", **{marker: "1"})
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args,
                        str(Path(test_file).resolve())],
                       cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and "failed" not in r.stdout, r.stdout[-3000:]
