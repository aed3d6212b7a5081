"""Lessons: each reproduces one write-up's figure (../shared/seeds) on the attached card.

    from engine.lessons.runner import LESSONS, run_lesson, save_lesson
    result = run_lesson("knee", runtime, Budget.quick())      # measures; a LessonResult
    save_lesson(result, out_dir)                               # NAME.csv and NAME.md

The figure itself is drawn by the workbench (workbench.views.lesson_figure), which also writes
NAME.png. This package never imports Qt; `engine.lessons.figure` (what a lesson returns) imports
nothing heavier than the standard library, so views may read it.
"""

NAMES = ("knee", "budget", "acceptance", "row-cost", "penalties", "rejection", "ar-floor")
