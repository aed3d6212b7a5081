"""The drawing surface of a lesson's SVG: elements as text, two palettes, and text measured and
wrapped without a font engine. Standard library only (the lessons render without Qt).

Sizes are pixels at the figure's export size (1600 px wide): the smallest text on a figure is
MIN_FONT_PX, readable at 100% on a projector. Widths are estimated from DejaVu Sans's advance
widths by character class, a little generously, so wrapped text never runs past its box.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from xml.sax.saxutils import escape

FONT_FAMILY = "DejaVu Sans, Verdana, Helvetica, Arial, sans-serif"
MIN_FONT_PX = 14


@dataclass(frozen=True)
class Palette:
    """A theme: the page, its text, the plot furniture, and each data role's colour."""
    name: str
    bg: str
    text: str
    muted: str
    grid: str
    axis: str
    stripe: str
    roles: dict[str, str] = field(default_factory=dict)

    def color(self, role: str) -> str:
        return self.roles.get(role, self.text)


# light: for handouts and projectors; dark: the window's look (workbench.theme's colours)
PALETTES = {
    "light": Palette("light", bg="#ffffff", text="#1b1f24", muted="#4f5863", grid="#e4e7eb",
                     axis="#59606a", stripe="#f3f5f7",
                     roles={"card": "#0b72a8", "reference": "#d1521f", "reference2": "#8a4fb8",
                            "good": "#23863f", "bad": "#c8302c", "neutral": "#7a828c", "warn": "#a87400",
                            "info": "#3f66c9", "text": "#1b1f24"}),
    "dark": Palette("dark", bg="#22272e", text="#d5dae1", muted="#8b949e", grid="#39414b",
                    axis="#8b949e", stripe="#2a3038",
                    roles={"card": "#58a6c9", "reference": "#f78c6c", "reference2": "#c792ea",
                           "good": "#5bbf7a", "bad": "#e06c6c", "neutral": "#8b949e", "warn": "#e3b341",
                           "info": "#6aa7f0", "text": "#d5dae1"}),
}
THEMES = tuple(PALETTES)


def char_em(ch: str) -> float:
    """Advance width of one character in em (DejaVu Sans, rounded up)."""
    if ch in " ":
        return 0.33
    if ch in "il.,:;'|!()[]jtf·":
        return 0.36
    if ch in "mwMW":
        return 0.98
    if ch.isdigit():
        return 0.64
    if ch.isupper():
        return 0.74
    return 0.62


def text_width(text: str, size: float, bold: bool = False) -> float:
    return sum(char_em(c) for c in text) * size * (1.08 if bold else 1.0)


def wrap(text: str, size: float, width: float, bold: bool = False) -> list[str]:
    """`text` broken at spaces into lines no wider than `width` px (a word wider than the line
    is cut)."""
    lines: list[str] = []
    for para in text.split("\n"):
        line = ""
        for word in para.split(" "):
            cand = f"{line} {word}" if line else word
            if text_width(cand, size, bold) <= width:
                line = cand
                continue
            if line:
                lines.append(line)
            while text_width(word, size, bold) > width and len(word) > 1:
                cut = max(1, int(len(word) * width / text_width(word, size, bold)))
                lines.append(word[:cut])
                word = word[cut:]
            line = word
        lines.append(line)
    return lines


def box_overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    """Whether two (x0, y0, x1, y1) boxes overlap."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


class Canvas:
    """SVG elements in drawing order; `svg(height)` wraps them in the document."""

    def __init__(self, width: int, palette: Palette):
        self.width = width
        self.pal = palette
        self.parts: list[str] = []

    def text(self, x: float, y: float, s: str, size: float, color: str | None = None, *,
             anchor: str = "start", bold: bool = False, rotate: bool = False) -> None:
        if not s:
            return
        size = max(size, MIN_FONT_PX)
        extra = ' font-weight="bold"' if bold else ""
        if rotate:
            extra += f' transform="rotate(-90 {x:.1f} {y:.1f})"'
        self.parts.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size:g}" fill="{color or self.pal.text}" '
                          f'text-anchor="{anchor}"{extra}>{escape(s)}</text>')

    def lines(self, x: float, y: float, lines: list[str], size: float, color: str | None = None, *,
              bold: bool = False, leading: float = 1.3) -> float:
        """Lines of text from baseline y down; returns the y below the last."""
        for ln in lines:
            self.text(x, y, ln, size, color, bold=bold)
            y += size * leading
        return y

    def line(self, x1: float, y1: float, x2: float, y2: float, color: str, width: float = 1.0,
             dash: str | None = None) -> None:
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" '
                          f'stroke-width="{width:g}"{d}/>')

    def rect(self, x: float, y: float, w: float, h: float, fill: str, stroke: str | None = None,
             opacity: float = 1.0) -> None:
        s = f' stroke="{stroke}" stroke-width="1"' if stroke else ""
        o = f' fill-opacity="{opacity:g}"' if opacity < 1 else ""
        self.parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" '
                          f'fill="{fill}"{o}{s}/>')

    def circle(self, cx: float, cy: float, r: float, fill: str, stroke: str | None = None) -> None:
        s = f' stroke="{stroke}" stroke-width="1.5"' if stroke else ""
        self.parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{r:g}" fill="{fill}"{s}/>')

    def polyline(self, pts: list[tuple[float, float]], color: str, width: float = 2.5,
                 dash: str | None = None) -> None:
        if len(pts) < 2:
            return
        d = f' stroke-dasharray="{dash}"' if dash else ""
        xy = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        self.parts.append(f'<polyline points="{xy}" fill="none" stroke="{color}" stroke-width="{width:g}" '
                          f'stroke-linejoin="round"{d}/>')

    def svg(self, height: float) -> str:
        h = int(height + 0.5)
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{self.width}" height="{h}" '
                f'viewBox="0 0 {self.width} {h}" font-family="{FONT_FAMILY}">')
        bg = f'<rect x="0" y="0" width="{self.width}" height="{h}" fill="{self.pal.bg}"/>'
        return "\n".join([head, bg, *self.parts, "</svg>", ""])
