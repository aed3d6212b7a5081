"""Start or say what is missing (issue 35.1): before Qt loads its xcb platform plugin, every
library it links that this machine lacks is named in one line, with the packages and the
`apt-get install` that fixes it, and the exit status is 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from workbench.qt_libs import XCB_LIBS, check_platform_libraries, missing_libraries, platform_plugin

LACKING = ("libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1")


def _fake_system(tmp_path, lacking=LACKING):
    """A library folder holding every xcb library but `lacking`."""
    lib = tmp_path / "lib"
    lib.mkdir()
    for so in XCB_LIBS:
        if so not in lacking:
            (lib / so).write_bytes(b"")
    return lib


@pytest.mark.parametrize("env, plugin", [
    ({"DISPLAY": ":0"}, "xcb"),
    ({"QT_QPA_PLATFORM": "offscreen"}, "offscreen"),
    ({"QT_QPA_PLATFORM": "minimal:enable_fonts"}, "minimal"),
    ({"WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland"}, "wayland"),
    ({"WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "x11", "DISPLAY": ":0"}, "xcb"),
])
def test_the_plugin_qt_will_pick(env, plugin):
    assert platform_plugin(env) == plugin


def test_every_missing_library_is_named_with_its_package(tmp_path):
    lib = _fake_system(tmp_path)
    env = {"DISPLAY": ":0", "SPECSCOPE_LIBRARY_PATH": str(lib)}
    assert missing_libraries(env) == list(LACKING)
    msg = check_platform_libraries(env)
    assert "\n" not in msg
    assert "sudo apt-get install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1`" in msg
    assert "QT_QPA_PLATFORM=offscreen" in msg
    # control: nothing missing, or a platform that needs no X11 library, says nothing
    assert check_platform_libraries(env, finds=lambda so: True) is None
    assert check_platform_libraries({**env, "QT_QPA_PLATFORM": "offscreen"}) is None
    assert check_platform_libraries({**env, "QT_QPA_PLATFORM": "minimal"}) is None
    # the lookup decides: one library missing, one named
    assert missing_libraries(env, finds=lambda so: so != "libxcb-xkb.so.1") == ["libxcb-xkb.so.1"]


def test_the_window_says_what_is_missing_and_exits_2(tmp_path):
    lib = _fake_system(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=":99", SPECSCOPE_LIBRARY_PATH=str(lib))
    out = subprocess.run([sys.executable, "-m", "specscope.cli"], capture_output=True, text=True,
                         timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "libxcb-cursor.so.0, libxcb-icccm.so.4, libxcb-keysyms.so.1" in lines[0]
    assert "apt-get install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1" in lines[0]
    assert "QT_QPA_PLATFORM=offscreen" in lines[0]
    # control: with every library there the same command gets past the check (on to Qt, which
    # fails its own way: there is no display :99, and this machine's real libraries may lack some)
    for so in LACKING:
        (lib / so).write_bytes(b"")
    out = subprocess.run([sys.executable, "-m", "specscope.cli", "--model", str(tmp_path / "none.gguf")],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode != 0 and "specscope: error: Qt's X11" not in out.stderr, out.stderr
