"""The lessons by name: run one on a runtime, save its CSV and Markdown."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable

from engine.errors import ParameterError
from engine.lessons import NAMES
from engine.lessons.drafting import acceptance, budget
from engine.lessons.figure import LessonResult
from engine.lessons.floor import ar_floor
from engine.lessons.roofline import knee, row_cost
from engine.lessons.runs import Budget, LessonContext
from engine.lessons.verification import penalties, rejection

LESSONS: dict[str, Callable[[LessonContext], LessonResult]] = {
    "knee": knee, "budget": budget, "acceptance": acceptance, "row-cost": row_cost,
    "penalties": penalties, "rejection": rejection, "ar-floor": ar_floor}
assert tuple(LESSONS) == NAMES


def check_name(name: str) -> str:
    if name not in LESSONS:
        raise ParameterError(f"no lesson {name!r}; the lessons are {', '.join(NAMES)}")
    return name


def run_lesson(name: str, rt: Any, budget: Budget | None = None, stop: threading.Event | None = None,
               progress: Callable[[str, float], None] | None = None) -> LessonResult:
    """Measure lesson `name` on `rt` (a Runtime). Raises LessonCancelled when `stop` is set."""
    import torch
    ctx = LessonContext(rt, budget or Budget(), stop or threading.Event(), progress)
    with torch.inference_mode():
        result = LESSONS[check_name(name)](ctx)
    ctx.say("done", 1.0)
    return result


def save_lesson(result: LessonResult, out_dir: str | Path) -> tuple[Path, Path]:
    """NAME.csv and NAME.md in out_dir (the PNG is the workbench's: workbench.views.lesson_figure)."""
    return result.save_text(out_dir)
