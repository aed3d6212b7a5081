"""Workbench fixtures: offscreen Qt, the bundled model loaded once and handed to every worker."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

from engine.speculation.settings import DecodeSettings  # noqa: E402

# copy-heavy raw text: the n-gram drafter finds matches from the first window on
PROMPT = ("def area(width, height):\n    return width * height\n\n\n"
          "def area(width, height):\n    return width * height\n\n\n"
          "def area(width, height):\n    return")
SMALL = DecodeSettings(draft="tree", depth=3, width=2, max_new_tokens=12)


@pytest.fixture(scope="session")
def cpu_spec(cpu_runtime):
    from workbench.host import RuntimeSpec
    return RuntimeSpec(None, "cpu", "float32", "dequantized")


@pytest.fixture
def cpu_host(cpu_spec, cpu_runtime):
    """A model host holding the session's bundled model (loaded once for all tests)."""
    from workbench.host import ModelHost
    host = ModelHost()
    host.preload(cpu_spec, cpu_runtime)
    return host


@pytest.fixture
def make_window(qtbot, qapp, cpu_spec, cpu_runtime):
    from workbench import theme
    from workbench.host import ModelHost
    from workbench.window import MainWindow
    theme.apply_theme(qapp)
    made = []

    def make(settings: DecodeSettings = SMALL, prompt=PROMPT, spec=None):
        host = ModelHost()
        host.preload(cpu_spec, cpu_runtime)
        w = MainWindow(spec or cpu_spec, prompt=prompt, settings=settings, probe=False, host=host)
        qtbot.addWidget(w)
        w.show()
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


# ---- helpers the tests share ----------------------------------------------------------------

TIMEOUT_MS = 120_000


def wait_windows(qtbot, win, n: int) -> None:
    qtbot.waitUntil(lambda: len(win.store) >= n or win.last_error is not None, timeout=TIMEOUT_MS)
    assert win.last_error is None, win.last_error


def wait_idle(qtbot, win) -> None:
    qtbot.waitUntil(lambda: win.run.state == "idle" and (win.last_report is not None
                                                         or win.last_error is not None),
                    timeout=TIMEOUT_MS)


def show(win, idx: int) -> None:
    win.show_window(idx)
