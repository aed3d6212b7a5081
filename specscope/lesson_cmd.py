"""`specscope lesson NAME [--out DIR]`: measure one lesson on this device and model, save
DIR/NAME.png (the figure, drawn offscreen by the workbench), DIR/NAME.csv and DIR/NAME.md.

    specscope lesson knee --out lessons/            # the roofline probe on this card
    specscope lesson rejection --device cuda --quick

The parser lives here (`add_lesson_args`), apart from specscope.cli's, which only registers it.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

from engine.lessons import NAMES
from specscope.progress import Progress


def add_lesson_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", choices=NAMES, metavar="NAME", help=f"one of: {', '.join(NAMES)}")
    p.add_argument("--out", default="lessons", metavar="DIR",
                   help="folder for NAME.png, NAME.csv and NAME.md (default: ./lessons)")
    p.add_argument("--quick", action="store_true",
                   help="the test budget: one short prompt per workload, a few tokens, a short probe")


def run_lesson_cmd(a: argparse.Namespace) -> int:
    from engine.lessons.runner import run_lesson, save_lesson
    from engine.lessons.runs import Budget
    from engine.session import open_runtime

    out = Path(a.out)
    if out.exists() and not out.is_dir():
        from engine.errors import ParameterError
        raise ParameterError(f"--out {out} is a file; give a folder")
    say = Progress()
    rt = open_runtime(a.model, a.device, a.dtype, progress=say, weights=a.weights)
    budget = Budget.quick_budget() if a.quick else Budget()
    result = run_lesson(a.name, rt, budget, threading.Event(),
                        progress=lambda msg, frac: say(f"{a.name}: {msg}", frac))
    csv_path, md_path = save_lesson(result, out)
    png_path = _render(result, out / f"{a.name}.png")
    print(result.markdown())
    print(f"png: {png_path}\ncsv: {csv_path}\nmd: {md_path}", file=sys.stderr)
    return 0


def _render(result, path: Path) -> Path:
    """The figure as a PNG, drawn offscreen (no display needed)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from workbench import theme
    from workbench.views.lesson_figure import render_png
    app = QApplication.instance() or QApplication(["specscope"])
    theme.apply_theme(app)
    return render_png(result, path)
