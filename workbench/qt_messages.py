"""Qt's own messages on stderr, less the one every offscreen window prints.

The offscreen platform plugin says "This plugin does not support propagateSizeHints()" each time
a window lays out; it says nothing a user can act on, and every lesson and screenshot printed it.
Every other message still reaches stderr as Qt would print it.
"""

from __future__ import annotations

import sys

DROPPED = ("This plugin does not support propagateSizeHints()",)

_installed = False


def qt_message(mode, context, message: str) -> None:
    if any(d in message for d in DROPPED):
        return
    category = getattr(context, "category", None)
    prefix = f"{category}: " if category and category != "default" else ""
    print(f"{prefix}{message}", file=sys.stderr)


def install_message_filter() -> None:
    """Install the filter once per process (before or after the QApplication is made)."""
    global _installed
    if _installed:
        return
    from PySide6.QtCore import qInstallMessageHandler
    qInstallMessageHandler(qt_message)
    _installed = True
