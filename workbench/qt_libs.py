"""Before Qt loads its X11 platform plugin: are the system libraries it links there?

Qt's xcb plugin (PySide6's Qt/plugins/platforms/libqxcb.so and the libQt6XcbQpa it loads) links
the X11/xcb libraries below, which a pip install cannot bring. When one is missing Qt aborts
(exit 134) naming only the first; here every missing one is named, with the Debian package that
holds it, in one line before Qt is imported. The list is `ldd libqxcb.so` of PySide6 6.x,
less what every desktop has (libc, libstdc++, zlib, ...).

No PySide6 import here: this runs before Qt, and only when the platform is xcb (not offscreen,
minimal or wayland).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import sysconfig
from pathlib import Path
from typing import Callable, Mapping

# soname -> the Debian / Ubuntu package that ships it
XCB_LIBS: dict[str, str] = {
    "libxcb.so.1": "libxcb1",
    "libX11.so.6": "libx11-6",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libGL.so.1": "libgl1",
    "libEGL.so.1": "libegl1",
    "libfontconfig.so.1": "libfontconfig1",
    "libdbus-1.so.3": "libdbus-1-3",
}

# a search path that replaces the system's (tests fake a machine that lacks a library with it)
PATH_ENV = "SPECSCOPE_LIBRARY_PATH"


def platform_plugin(env: Mapping[str, str]) -> str:
    """The platform plugin Qt will pick: QT_QPA_PLATFORM's, else wayland in a Wayland session,
    else xcb (on Linux and the BSDs)."""
    chosen = env.get("QT_QPA_PLATFORM", "").split(":")[0].split(";")[0].strip()
    if chosen:
        return chosen
    if env.get("WAYLAND_DISPLAY") and env.get("XDG_SESSION_TYPE") == "wayland":
        return "wayland"
    return "xcb"


def library_dirs(env: Mapping[str, str]) -> list[Path]:
    """Where the dynamic loader looks: LD_LIBRARY_PATH, the ld.so.conf folders, the usual ones."""
    dirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    for conf in ["/etc/ld.so.conf", *sorted(glob.glob("/etc/ld.so.conf.d/*.conf"))]:
        try:
            lines = Path(conf).read_text(errors="replace").splitlines()
        except OSError:
            continue
        dirs += [ln.strip() for ln in lines if ln.strip().startswith("/")]
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    for base in ("/lib", "/usr/lib", "/usr/local/lib"):
        dirs += [f"{base}/{arch}"] if arch else []
        dirs += [base, f"{base}64"]
    return [Path(d) for d in dict.fromkeys(dirs)]


def loader_finds(soname: str) -> bool:
    """The dynamic loader itself (for layouts the folder search does not know)."""
    try:
        ctypes.CDLL(soname)
        return True
    except OSError:
        return False


def missing_libraries(env: Mapping[str, str] | None = None,
                      finds: Callable[[str], bool] | None = None) -> list[str]:
    """The sonames of XCB_LIBS that cannot be found. `finds(soname)`: the lookup (default: the
    folders of SPECSCOPE_LIBRARY_PATH when set, else the loader's folders, then the loader)."""
    env = os.environ if env is None else env
    if finds is None:
        override = env.get(PATH_ENV)
        dirs = [Path(d) for d in override.split(":") if d] if override is not None else library_dirs(env)

        def finds(soname: str) -> bool:
            return (any((d / soname).exists() for d in dirs)
                    or (override is None and loader_finds(soname)))
    return [so for so in XCB_LIBS if not finds(so)]


def missing_message(missing: list[str]) -> str:
    """One line: every missing library, the packages and the command that installs them."""
    packages = " ".join(dict.fromkeys(XCB_LIBS[so] for so in missing))
    return (f"specscope: error: Qt's X11 (xcb) platform plugin needs {', '.join(missing)}, not found "
            f"on this system: install them with `sudo apt-get install {packages}` (Debian/Ubuntu), "
            "or run without a display: QT_QPA_PLATFORM=offscreen specscope ...")


def check_platform_libraries(env: Mapping[str, str] | None = None,
                             finds: Callable[[str], bool] | None = None) -> str | None:
    """The one-line message when Qt's xcb plugin would fail to load, else None (another platform,
    not Linux, or nothing missing)."""
    env = os.environ if env is None else env
    if not sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        return None
    if platform_plugin(env) != "xcb":
        return None
    missing = missing_libraries(env, finds)
    return missing_message(missing) if missing else None
