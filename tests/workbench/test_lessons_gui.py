"""Lessons in the window: the Lessons menu opens a lesson's dock and runs it on the attached
model in one click (progress, then the figure with both columns of numbers, and NAME.png / .csv /
.md saved); Cancel stops one; every lesson's figure renders to a PNG that is not empty."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QImage

from engine.lessons import NAMES
from tests.workbench.conftest import TIMEOUT_MS
from workbench import theme


def image_stats(path) -> tuple[int, set[str]]:
    """(distinct colors on a 4-px grid, which data colors of the handout's light palette appear)
    of a PNG."""
    from engine.lessons.svg_canvas import PALETTES
    roles = PALETTES["light"].roles
    img = QImage(str(path))
    assert not img.isNull(), f"{path} is not an image"
    colors = set()
    for y in range(0, img.height(), 4):
        for x in range(0, img.width(), 4):
            colors.add(img.pixelColor(x, y).name())
    data = {name for name, c in (("card", roles["card"]), ("green", roles["good"]), ("red", roles["bad"]),
                                 ("amber", roles["warn"]), ("orange", roles["reference"]))
            if any(_near(QColor(c), QColor(p)) for p in colors)}
    return len(colors), data


def _near(a: QColor, b: QColor, tol: int = 24) -> bool:
    return abs(a.red() - b.red()) + abs(a.green() - b.green()) + abs(a.blue() - b.blue()) <= tol


@pytest.mark.parametrize("name", NAMES)
def test_every_lessons_figure_is_drawn(qapp, lesson_result, name, tmp_path):
    from workbench.views.lesson_figure import render_png
    theme.apply_theme(qapp)
    result, _ = lesson_result(name)
    path = render_png(result, tmp_path / f"{name}.png")
    n_colors, data = image_stats(path)
    assert n_colors > 40, f"{name}.png looks empty ({n_colors} colors)"
    assert data, f"{name}.png shows none of the data colors"
    img = QImage(str(path))
    assert img.width() == 1600 and QColor(img.pixel(2, 2)).name() == "#ffffff"     # light by default


def test_the_lessons_menu_runs_a_lesson_in_one_click(qtbot, make_window, tmp_path):
    win = make_window()
    titles = [a.text() for a in win.lessons.actions.values()]
    assert len(titles) == len(NAMES) == 7
    view = win.lessons.open("knee", quick=True)
    view.folder = tmp_path
    progress = []
    view.worker.progress.connect(lambda _id, stage, frac: progress.append(frac))
    with qtbot.waitSignal(view.finished, timeout=TIMEOUT_MS) as done:
        win.lessons.actions["knee"].trigger()          # the menu item: open and run
    result = done.args[0]
    assert result is not None and result.name == "knee"
    assert progress and max(progress) > 0.5
    assert win.lessons.docks["knee"].isVisible()
    assert view.figure.result is result and len(view.figure.panels) == 1
    assert "this CPU (" in view.figure.table.text() and "25.3 ms" in view.figure.table.text()
    for ext in ("png", "csv", "md"):
        assert (tmp_path / f"knee.{ext}").is_file()
    n_colors, data = image_stats(tmp_path / "knee.png")
    assert n_colors > 40 and "card" in data


def test_a_lesson_can_be_cancelled(qtbot, make_window, tmp_path):
    win = make_window()
    view = win.lessons.open("budget", quick=True)
    view.folder = tmp_path
    with qtbot.waitSignal(view.finished, timeout=TIMEOUT_MS) as done:
        assert view.start()
        view.cancel()
    assert done.args[0] is None and "cancelled" in view.bar.format()
    assert not (tmp_path / "budget.csv").exists()
    assert view.run_button.isEnabled() and not view.cancel_button.isEnabled()
