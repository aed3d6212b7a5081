"""A lesson's figure as an SVG handout, written without Qt: the title and the write-up's claim,
the panels side by side, the write-up's numbers beside this device's, why they differ, and the
caption. `specscope lesson` saves it as NAME.svg and, where the GUI extra is installed, turns
it into NAME.png (workbench.views.lesson_figure.svg_to_png) so both show the same figure.

    from engine.lessons.svg import render_svg
    Path("knee.svg").write_text(render_svg(result, theme="light"), encoding="utf-8")

Light by default (a handout, a projector); "dark" is the window's look. 1600 px wide; no text
under 14 px at that size.
"""

from __future__ import annotations

from pathlib import Path

from engine.errors import ParameterError
from engine.lessons.figure import LessonResult
from engine.lessons.svg_canvas import PALETTES, THEMES, Canvas, wrap
from engine.lessons.svg_plot import draw_panel

WIDTH, MARGIN, GAP = 1600, 40, 64
TITLE_PX, CLAIM_PX, TABLE_PX, BODY_PX, FOOT_PX = 28, 17, 16, 17, 15
COLUMNS = (0.36, 0.30, 0.34)        # quantity, the write-up, this device


def palette(theme: str):
    if theme not in PALETTES:
        raise ParameterError(f"no theme {theme!r}; the themes are {', '.join(THEMES)}")
    return PALETTES[theme]


def render_svg(result: LessonResult, theme: str = "light", width: int = WIDTH) -> str:
    """The whole figure as an SVG document (text)."""
    c = Canvas(width, palette(theme))
    inner = width - 2 * MARGIN
    y = c.lines(MARGIN, MARGIN + TITLE_PX, wrap(f"Lesson {result.name}: {result.title}", TITLE_PX, inner, True),
                TITLE_PX, bold=True)
    y = c.lines(MARGIN, y + 4, wrap(f"The write-up ({result.source}): {result.claim}", CLAIM_PX, inner),
                CLAIM_PX, c.pal.muted) + 10
    y = _panels(c, result, y, inner)
    y = _table(c, result, y + 34, inner)
    y = _notes(c, result, y + 16, inner)
    return c.svg(y + MARGIN - 10)


def _panels(c: Canvas, result: LessonResult, y: float, inner: float) -> float:
    n = max(1, len(result.panels))
    w = (inner - GAP * (n - 1)) / n
    plot_h = 440 if n == 1 else 400
    bottom = y
    for i, panel in enumerate(result.panels):
        bottom = max(bottom, draw_panel(c, panel, MARGIN + i * (w + GAP), y, w, plot_h))
    return bottom


def _table(c: Canvas, result: LessonResult, y: float, inner: float) -> float:
    """The comparison: one row a quantity, cells wrapped to their column."""
    widths = [f * inner for f in COLUMNS]
    xs = [MARGIN, MARGIN + widths[0], MARGIN + widths[0] + widths[1]]
    head = ("quantity", "the write-up", result.here_long)
    colors = (c.pal.muted, c.pal.color("reference"), c.pal.color("card"))
    rows = [(c_.quantity, c_.shown("write_up"), c_.shown("here")) for c_ in result.comparisons]
    cells = [wrap(t, TABLE_PX, w - 14, bold=True) for t, w in zip(head, widths)]
    y = _row(c, xs, y, cells, colors, bold=True)
    c.line(MARGIN, y - TABLE_PX * 0.9, MARGIN + inner, y - TABLE_PX * 0.9, c.pal.axis, 1)
    for k, row in enumerate(rows):
        cells = [wrap(t, TABLE_PX, w - 14, bold=(i == 2)) for i, (t, w) in enumerate(zip(row, widths))]
        height = max(len(x) for x in cells) * TABLE_PX * 1.3
        if k % 2 == 0:
            c.rect(MARGIN, y - TABLE_PX * 1.05, inner, height + 4, c.pal.stripe)
        y = _row(c, xs, y, cells, (c.pal.muted, c.pal.text, c.pal.text), bold=False)
    return y


def _row(c: Canvas, xs, y: float, cells: list[list[str]], colors, bold: bool) -> float:
    bottom = y
    for i, (x, lines) in enumerate(zip(xs, cells)):
        bottom = max(bottom, c.lines(x + 6, y, lines, TABLE_PX, colors[i], bold=bold or i == 2))
    return bottom + 4


def _notes(c: Canvas, result: LessonResult, y: float, inner: float) -> float:
    c.text(MARGIN, y + BODY_PX, "Why they differ", BODY_PX + 1, bold=True)
    y = c.lines(MARGIN, y + BODY_PX * 2.4, wrap(result.why, BODY_PX, inner), BODY_PX) + 6
    y = c.lines(MARGIN, y + BODY_PX, wrap(result.caption, BODY_PX - 1, inner), BODY_PX - 1, c.pal.muted) + 4
    foot = f"{result.device} · {result.model} · {result.budget}"
    return c.lines(MARGIN, y + FOOT_PX, wrap(foot, FOOT_PX, inner), FOOT_PX, c.pal.muted)


def save_svg(result: LessonResult, path: str | Path, theme: str = "light") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_svg(result, theme), encoding="utf-8")
    return path
