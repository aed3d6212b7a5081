"""The command line run in the test's own process (no torch import per call): its exit code and
output, for the tests of bad input (tests/specscope/conftest.py's `specscope` fixture)."""

from __future__ import annotations


class Result:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def in_process(capsys):
    """`run(*args) -> Result`: specscope.cli.main on the arguments (str()-ed), argparse's own
    exits caught, the output captured by pytest's capsys."""
    from specscope.cli import main

    def run(*args) -> Result:
        capsys.readouterr()
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:           # argparse's own errors
            code = e.code
        out = capsys.readouterr()
        return Result(code, out.out, out.err)
    return run
