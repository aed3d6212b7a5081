import pytest

from cli_helpers import in_process


@pytest.fixture
def specscope(capsys):
    """The command line in this process: `specscope(*args)` gives a cli_helpers.Result."""
    return in_process(capsys)
