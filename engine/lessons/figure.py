"""What a lesson returns: its figure as plain data, the write-up's numbers beside this device's,
and the CSV and Markdown writers. Standard library only: the workbench's views read it.

A figure is one or more panels; a panel holds series (lines, points or bars, with optional
per-point labels) and marks (labelled lines across the plot at x or y). Colors are roles
("card" (this device), "reference", "good", "bad", ...) that each renderer maps onto its theme
(engine.lessons.svg for the handout, the workbench for the window).

The CSV holds every number drawn, one per line:

    kind,panel,series,x,y,label
    point,<panel title>,<series name>,<x>,<y>,<the point's label, if any>
    mark,<panel title>,<mark label>,<x or empty>,<y or empty>,
    compare,write-up vs this device,<quantity>,<the write-up's value>,<this device's value>,<unit>
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

ROLES = ("card", "reference", "reference2", "good", "bad", "neutral", "warn", "info", "text")


@dataclass(frozen=True)
class Series:
    name: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    style: str = "line"             # line | points | bars | linepoints
    color: str = "card"             # a role (ROLES)
    labels: tuple[str, ...] = ()    # per point (shown beside points / under bars), may be empty
    dashed: bool = False

    def __post_init__(self) -> None:
        if len(self.x) != len(self.y):
            raise ValueError(f"series {self.name!r}: {len(self.x)} x values but {len(self.y)} y values")
        if self.labels and len(self.labels) != len(self.x):
            raise ValueError(f"series {self.name!r}: {len(self.labels)} labels for {len(self.x)} points")
        if self.style not in ("line", "points", "bars", "linepoints"):
            raise ValueError(f"series {self.name!r}: unknown style {self.style!r}")


@dataclass(frozen=True)
class Mark:
    """A labelled line across the panel: vertical at x = `at` (axis "x") or horizontal."""
    axis: str
    at: float
    label: str
    color: str = "neutral"


@dataclass(frozen=True)
class Panel:
    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    marks: tuple[Mark, ...] = ()
    log_x: bool = False             # base-2 ticks (row counts)
    log_y: bool = False
    x_ticks: tuple[tuple[float, str], ...] = ()   # categorical axes: (x, text)
    y_range: tuple[float, float] | None = None


@dataclass(frozen=True)
class Comparison:
    """One line of the box: a quantity, the write-up's value and this device's (None: none)."""
    quantity: str
    write_up: float | None
    here: float | None
    unit: str = ""
    write_up_text: str = ""         # how the write-up says it, when a number alone is not enough
    here_text: str = ""

    def shown(self, which: str) -> str:
        text = self.write_up_text if which == "write_up" else self.here_text
        value = self.write_up if which == "write_up" else self.here
        if text:
            return text
        if value is None:
            return "–"
        return f"{fmt(value)}{' ' + self.unit if self.unit else ''}"


@dataclass(frozen=True)
class LessonResult:
    name: str
    title: str
    claim: str                      # the write-up's claim, in its words or close to them
    source: str                     # which seed, and where in it
    caption: str                    # what the figure shows, two or three sentences
    panels: tuple[Panel, ...]
    comparisons: tuple[Comparison, ...]
    why: str                        # one sentence: why this device's numbers differ
    device: str
    model: str
    budget: str                     # "quick (test budget)" or "full"
    here: str = "this device"       # what the lesson ran on, short: "this CPU", "this GPU"
    settings: dict[str, Any] = field(default_factory=dict)
    # what the lesson measured, as the engine returned it (events, profiles, reports): for the
    # tests and the curious; never written out
    data: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def here_long(self) -> str:
        """The column head of this device's numbers: "this CPU (Intel Xeon ..., 2 threads of 2)"."""
        return f"{self.here} ({self.device})"

    def csv_rows(self) -> list[list[str]]:
        rows = [["kind", "panel", "series", "x", "y", "label"]]
        for p in self.panels:
            for s in p.series:
                for i, (x, y) in enumerate(zip(s.x, s.y)):
                    rows.append(["point", p.title, s.name, num(x), num(y), s.labels[i] if s.labels else ""])
            for m in p.marks:
                rows.append(["mark", p.title, m.label, num(m.at) if m.axis == "x" else "",
                             num(m.at) if m.axis == "y" else "", ""])
        for c in self.comparisons:
            rows.append(["compare", "write-up vs this device", c.quantity, num(c.write_up), num(c.here), c.unit])
        return rows

    def csv_text(self) -> str:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(self.csv_rows())
        return out.getvalue()

    def markdown(self) -> str:
        lines = [f"# Lesson `{self.name}`: {self.title}", "",
                 f"**The write-up's claim** ({self.source}): {self.claim}", "",
                 f"**Measured here** on {self.device} with {self.model} ({self.budget}).", "",
                 f"| quantity | the write-up | {self.here_long} |", "| --- | --- | --- |"]
        for c in self.comparisons:
            lines.append(f"| {c.quantity} | {c.shown('write_up')} | {c.shown('here')} |")
        lines += ["", f"**Why they differ:** {self.why}", "", f"**The figure** (`{self.name}.png`): {self.caption}",
                  "", f"Every number in the figure is in `{self.name}.csv` (kind point / mark / compare; "
                  "a compare line holds the write-up's value in x and this device's in y).", ""]
        if self.settings:
            lines += ["Settings: " + ", ".join(f"{k} = {v}" for k, v in self.settings.items()), ""]
        return "\n".join(lines)

    def save_text(self, out_dir: str | Path) -> tuple[Path, Path]:
        """Write NAME.csv and NAME.md into `out_dir` (made if missing)."""
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        c, m = d / f"{self.name}.csv", d / f"{self.name}.md"
        c.write_text(self.csv_text(), encoding="utf-8")
        m.write_text(self.markdown(), encoding="utf-8")
        return c, m


def num(v: float | None) -> str:
    """A value as the CSV writes it: repr-exact for floats (the tests compare exactly)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    return repr(float(v)) if math.isfinite(v) else ""


def fmt(v: float) -> str:
    """A value for people: 3 significant digits, integers as integers."""
    if isinstance(v, int) or (abs(v) >= 1 and float(v).is_integer()):
        return f"{int(v):,}"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 0.01:
        return f"{v:.3g}" if a < 1 else f"{v:.2f}"
    return f"{v:.2g}"


def series(name: str, xs: Sequence[float], ys: Sequence[float], **kw: Any) -> Series:
    return Series(name, tuple(float(x) for x in xs), tuple(float(y) for y in ys), **kw)
