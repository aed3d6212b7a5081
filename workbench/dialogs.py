"""File dialogs that open where the user last saved or opened something, else in the home folder
(never the folder the program was started from, which is often the source tree).

The folder is remembered per application (a property of the QApplication), so every dialog of
the window, the docks and the export menus shares it.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QCoreApplication
from PySide6.QtWidgets import QFileDialog, QWidget

_KEY = "specscope_last_folder"


def start_folder() -> Path:
    """Where the next dialog opens: the last folder used, else home."""
    app = QCoreApplication.instance()
    last = app.property(_KEY) if app is not None else None
    if last and Path(last).is_dir():
        return Path(last)
    return Path.home()


def remember(path: str | Path) -> None:
    """The folder of `path` (a file chosen in a dialog) is where the next dialog opens."""
    app = QCoreApplication.instance()
    if app is not None and path:
        p = Path(path)
        app.setProperty(_KEY, str(p if p.is_dir() else p.parent))


def save_file(parent: QWidget, title: str, name: str, filters: str) -> str:
    """A save dialog with `name` proposed in the start folder; '' when cancelled."""
    path, _ = QFileDialog.getSaveFileName(parent, title, str(start_folder() / name), filters)
    if path:
        remember(path)
    return path


def open_file(parent: QWidget, title: str, filters: str, folder: str | Path | None = None) -> str:
    """An open dialog in `folder` (default: the start folder); '' when cancelled."""
    path, _ = QFileDialog.getOpenFileName(parent, title, str(folder or start_folder()), filters)
    if path:
        remember(path)
    return path
