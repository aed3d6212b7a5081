"""`specscope lesson NAME [--out DIR] [--theme light|dark]`: measure one lesson on this device
and model, save DIR/NAME.svg (the figure, engine.lessons.svg: no Qt needed), DIR/NAME.png (the
same figure drawn by Qt, when the GUI extra is installed), DIR/NAME.csv and DIR/NAME.md.

    specscope lesson knee --out lessons/            # the roofline probe on this device
    specscope lesson rejection --device cuda --quick --theme dark

DIR defaults to ./lessons. The parser lives here (`add_lesson_args`), apart from specscope.cli's,
which only registers it.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

from engine.lessons import NAMES
from engine.lessons.svg_canvas import THEMES
from specscope.progress import Progress

NO_GUI = ("specscope: no PNG: PySide6 (the GUI extra, pip install 'specscope[gui]') is not installed; "
          "writing {name}.svg, .csv and .md")


def add_lesson_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", choices=NAMES, metavar="NAME", help=f"one of: {', '.join(NAMES)}")
    p.add_argument("--out", default="lessons", metavar="DIR",
                   help="folder for NAME.svg, NAME.png, NAME.csv and NAME.md (default: ./lessons)")
    p.add_argument("--theme", default="light", choices=THEMES,
                   help="the figure's colours: light (default: handouts, projectors) or dark (the window's look)")
    p.add_argument("--quick", action="store_true",
                   help="the test budget: one short prompt per workload, a few tokens, a short probe")


def png_renderer():
    """Qt's SVG renderer and an offscreen application, or None where PySide6 is missing."""
    try:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        from PySide6.QtSvg import QSvgRenderer  # noqa: F401  (the PNG is the SVG drawn by it)
        from PySide6.QtWidgets import QApplication
    except ImportError:
        return None
    # a QApplication, not a bare QGuiApplication: a process that later opens widgets (the window,
    # a test session) cannot replace the one application Qt allows
    return QApplication.instance() or QApplication(["specscope"])


def run_lesson_cmd(a: argparse.Namespace) -> int:
    from engine.lessons.runner import run_lesson, save_lesson
    from engine.lessons.runs import Budget
    from engine.lessons.svg import save_svg
    from engine.session import open_runtime

    out = Path(a.out)
    if out.exists() and not out.is_dir():
        from engine.errors import ParameterError
        raise ParameterError(f"--out {out} is a file; give a folder")
    app = png_renderer()                       # before the work: say now if there will be no PNG
    if app is None:
        print(NO_GUI.format(name=a.name), file=sys.stderr)
    say = Progress()
    rt = open_runtime(a.model, a.device, a.dtype, progress=say, weights=a.weights)
    budget = Budget.quick_budget() if a.quick else Budget()
    result = run_lesson(a.name, rt, budget, threading.Event(),
                        progress=lambda msg, frac: say(f"{a.name}: {msg}", frac))
    csv_path, md_path = save_lesson(result, out)
    svg_path = save_svg(result, out / f"{a.name}.svg", a.theme)
    print(result.markdown())
    saved = [("svg", svg_path), ("csv", csv_path), ("md", md_path)]
    if app is not None:
        from workbench.views.lesson_figure import svg_to_png
        saved.insert(0, ("png", svg_to_png(svg_path.read_text(encoding="utf-8"), out / f"{a.name}.png")))
    print("\n".join(f"{kind}: {path}" for kind, path in saved), file=sys.stderr)
    return 0
