"""A guard against a PySide6 6.12 reference-count bug on Python 3.11 and older.

pyproject.toml pins PySide6-Essentials below 6.12 (6.11.3 and 6.10.3 were checked: no stray
decrements), so this only acts where a user installed 6.12 by hand.

PySide6 6.12 (seen with the wheel this project installs, on CPython 3.11) drops one reference to
`None` each time C++ calls a Python override of a virtual method that returns None: every
`paint()` of every pyqtgraph item, `data()` of a table model, `paintEvent()`... Python 3.12 made
None, True and False immortal, so the stray decrements are harmless there; on 3.11 the count
reaches zero after a few thousand redraws and the interpreter aborts with
"Fatal Python error: none_dealloc". Reproduce: a QAbstractTableModel whose data() returns None,
call `index.data(role)` 100 times, and sys.getrefcount(None) falls by 100.

The guard gives these statically allocated singletons a large head-room of references, which is
what Python 3.12 does for them. They are never freed either way, so the extra count changes
nothing but the fatal check: at ~10^5 stray decrements a second, 2^40 lasts for months.
"""

from __future__ import annotations

import ctypes
import sys

HEADROOM = 1 << 40
_guarded = False


def guard_singletons() -> bool:
    """Apply once per process on CPython < 3.12; True when applied by this call."""
    global _guarded
    if _guarded or sys.implementation.name != "cpython" or sys.version_info >= (3, 12):
        return False
    import PySide6
    if not PySide6.__version__.startswith("6.12."):
        return False       # pyproject pins below 6.12; 6.11.3 and 6.10.3 checked clean
    for obj in (None, True, False):
        # ob_refcnt is the first field of every CPython object (Py_ssize_t)
        ctypes.c_ssize_t.from_address(id(obj)).value += HEADROOM
    _guarded = True
    return True
