"""One dark, calm theme shared by every view: palette, outcome colors, fonts, drawn icons.

Colors carry meaning and mean the same thing in every view: accepted green, rejected red,
not reached grey, bonus amber, correction blue, plain target steps in the text color.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import (QColor, QFont, QFontDatabase, QIcon, QPainter, QPainterPath, QPalette,
                           QPen, QPixmap, QPolygonF)
from PySide6.QtWidgets import QApplication

from engine.speculation.events import (ACCEPTED, BONUS, CORRECTION, FROM_DRAFT, NOT_REACHED, REJECTED, ROOT,
                           TARGET)

# surfaces
BG = "#1b1f24"          # window background
PANEL = "#22272e"       # dock and plot background
PANEL_ALT = "#2a3038"   # alternate rows, inputs
BORDER = "#3a424d"
GRID = "#39414b"
TEXT = "#d5dae1"
MUTED = "#8b949e"
ACCENT = "#58a6c9"      # selection, live markers, the attached card

# outcomes (tree nodes, table cells, output tokens, chart series)
GREEN = "#5bbf7a"       # accepted
RED = "#e06c6c"         # rejected
GREY = "#6e7781"        # not reached
AMBER = "#e3b341"       # bonus token (after a fully accepted path)
BLUE = "#6aa7f0"        # correction token (replaces a rejected draft)
VIOLET = "#b48ead"      # draft-path tokens in a penalty history
SELECT = "#f4f1e8"      # the selected verify row's ring in the tree: no outcome's colour
NODE_FILL = 0.42        # how much of its outcome colour a tree node's fill takes (legend swatches too)

OUTCOME_COLOR = {ROOT: TEXT, ACCEPTED: GREEN, REJECTED: RED, NOT_REACHED: GREY,
                 BONUS: AMBER, CORRECTION: BLUE}
KIND_COLOR = {FROM_DRAFT: GREEN, BONUS: AMBER, CORRECTION: BLUE, TARGET: TEXT}
KIND_LABEL = {FROM_DRAFT: "accepted draft", BONUS: "bonus", CORRECTION: "correction",
              TARGET: "target (no draft)"}
OUTCOME_LABEL = {ROOT: "root", ACCEPTED: "accepted", REJECTED: "rejected",
                 NOT_REACHED: "not reached"}

# a few distinct, muted colors for reference-card overlays in the roofline view
OVERLAY_COLORS = ["#c792ea", "#f78c6c", "#89ddff", "#c3e88d", "#ffcb6b", "#ff5370", "#82aaff"]


def qcolor(hex_color: str, alpha: int = 255) -> QColor:
    c = QColor(hex_color)
    c.setAlpha(alpha)
    return c


def tint(hex_color: str, amount: float = 0.22) -> QColor:
    """The color mixed into the panel background: a calm fill behind a colored border."""
    a, b = QColor(hex_color), QColor(PANEL)
    return QColor(int(b.red() + (a.red() - b.red()) * amount),
                  int(b.green() + (a.green() - b.green()) * amount),
                  int(b.blue() + (a.blue() - b.blue()) * amount))


def mono_font(point_size: float = 10.0) -> QFont:
    f = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    if "DejaVu Sans Mono" in QFontDatabase.families():
        f = QFont("DejaVu Sans Mono")
    f.setPointSizeF(point_size)
    f.setStyleHint(QFont.StyleHint.Monospace)
    return f


def ui_font(point_size: float = 10.0) -> QFont:
    f = QFont("DejaVu Sans") if "DejaVu Sans" in QFontDatabase.families() else QFont()
    f.setPointSizeF(point_size)
    return f


STYLESHEET = f"""
QMainWindow, QDialog {{ background: {BG}; }}
QWidget {{ color: {TEXT}; }}
QMainWindow::separator {{ background: {BG}; width: 5px; height: 5px; }}
QMainWindow::separator:hover {{ background: {BORDER}; }}
QDockWidget {{ color: {MUTED}; font-weight: bold; }}
QDockWidget::title {{ background: {BG}; padding: 5px 8px; text-align: left; }}
QDockWidget > QWidget {{ background: {PANEL}; border: 1px solid {BORDER}; border-radius: 4px; }}
QToolBar {{ background: {BG}; border: none; spacing: 4px; padding: 3px 6px; }}
QToolBar QToolButton {{ padding: 4px 8px; border-radius: 4px; }}
QToolButton {{ color: {TEXT}; background: transparent; border: 1px solid transparent; border-radius: 4px; }}
QToolButton:hover {{ background: {PANEL_ALT}; border-color: {BORDER}; }}
QToolButton:checked {{ background: {PANEL_ALT}; border-color: {ACCENT}; }}
QToolButton:disabled {{ color: #59616b; }}
QToolButton[popupMode="2"]::menu-indicator {{ image: none; width: 0; }}
QStatusBar {{ background: {BG}; color: {MUTED}; }}
QStatusBar::item {{ border: none; }}
QLabel {{ background: transparent; }}
QLabel#muted {{ color: {MUTED}; }}
QLabel#section {{ color: {MUTED}; font-weight: bold; padding-top: 6px; }}
QLabel#error {{ color: {RED}; }}
QLabel#chip {{ border: 1px solid {BORDER}; border-radius: 9px; padding: 1px 8px; color: {TEXT}; }}
QFrame#banner {{ background: #4a2327; border: 1px solid {RED}; border-radius: 4px; }}
QFrame#banner QLabel {{ color: #ffd9d9; }}
QGroupBox {{ border: 1px solid {BORDER}; border-radius: 4px; margin-top: 14px; padding-top: 6px; }}
QGroupBox::title {{ subcontrol-origin: margin; left: 8px; padding: 0 4px; color: {MUTED}; }}
QComboBox, QSpinBox, QDoubleSpinBox, QLineEdit {{
    background: {PANEL_ALT}; border: 1px solid {BORDER}; border-radius: 3px; padding: 2px 4px;
    selection-background-color: {ACCENT}; min-height: 20px; }}
QComboBox:focus, QSpinBox:focus, QDoubleSpinBox:focus, QLineEdit:focus {{ border-color: {ACCENT}; }}
QComboBox:disabled, QSpinBox:disabled, QDoubleSpinBox:disabled, QLineEdit:disabled {{ color: #59616b; }}
QComboBox QAbstractItemView {{ background: {PANEL_ALT}; selection-background-color: {ACCENT}; }}
QPlainTextEdit, QTextEdit, QTextBrowser {{ background: {PANEL}; border: none;
    selection-background-color: #33556b; }}
QTableView {{ background: {PANEL}; alternate-background-color: {PANEL_ALT}; gridline-color: {BORDER};
    border: none; selection-background-color: #2f4a5c; selection-color: {TEXT}; }}
QHeaderView::section {{ background: {BG}; color: {MUTED}; border: none;
    border-right: 1px solid {BORDER}; border-bottom: 1px solid {BORDER}; padding: 3px 6px; }}
QTableCornerButton::section {{ background: {BG}; border: none; }}
QTabWidget::pane {{ border: none; }}
QTabBar::tab {{ background: {BG}; color: {MUTED}; padding: 5px 12px; border: 1px solid {BORDER};
    border-bottom: none; border-top-left-radius: 4px; border-top-right-radius: 4px; }}
QTabBar::tab:selected {{ background: {PANEL}; color: {TEXT}; }}
QPushButton {{ background: {PANEL_ALT}; border: 1px solid {BORDER}; border-radius: 4px; padding: 4px 10px; }}
QPushButton:hover {{ border-color: {ACCENT}; }}
QPushButton:checked {{ border-color: {ACCENT}; color: {ACCENT}; }}
QProgressBar {{ background: {PANEL_ALT}; border: 1px solid {BORDER}; border-radius: 3px;
    text-align: center; color: {TEXT}; max-height: 14px; }}
QProgressBar::chunk {{ background: {ACCENT}; border-radius: 2px; }}
QSlider::groove:horizontal {{ height: 4px; background: {BORDER}; border-radius: 2px; }}
QSlider::sub-page:horizontal {{ background: {ACCENT}; border-radius: 2px; }}
QSlider::handle:horizontal {{ background: {TEXT}; width: 12px; margin: -5px 0; border-radius: 6px; }}
QCheckBox::indicator, QRadioButton::indicator {{ width: 12px; height: 12px; border: 1px solid #5a6470;
    background: {PANEL_ALT}; }}
QCheckBox::indicator {{ border-radius: 3px; }}
QRadioButton::indicator {{ border-radius: 7px; }}
QCheckBox::indicator:hover, QRadioButton::indicator:hover {{ border-color: {ACCENT}; }}
QCheckBox::indicator:checked, QRadioButton::indicator:checked {{ background: {ACCENT}; border-color: {ACCENT}; }}
QCheckBox::indicator:disabled, QRadioButton::indicator:disabled {{ background: {BG}; border-color: {BORDER}; }}
QCheckBox:disabled, QRadioButton:disabled, QLabel:disabled {{ color: #59616b; }}
QScrollBar:vertical {{ background: {PANEL}; width: 10px; }}
QScrollBar::handle:vertical {{ background: {BORDER}; border-radius: 4px; min-height: 24px; }}
QScrollBar:horizontal {{ background: {PANEL}; height: 10px; }}
QScrollBar::handle:horizontal {{ background: {BORDER}; border-radius: 4px; min-width: 24px; }}
QScrollBar::add-line, QScrollBar::sub-line {{ width: 0; height: 0; }}
QToolTip {{ background: {PANEL_ALT}; color: {TEXT}; border: 1px solid {BORDER}; padding: 4px; }}
QMenu {{ background: {PANEL_ALT}; border: 1px solid {BORDER}; }}
QMenu::item:selected {{ background: #2f4a5c; }}
QMenuBar {{ background: {BG}; }}
QMenuBar::item:selected {{ background: {PANEL_ALT}; }}
"""


def apply_theme(app: QApplication) -> None:
    """Fusion style, a dark palette (for what the stylesheet does not reach) and pyqtgraph colors."""
    import pyqtgraph as pg

    app.setStyle("Fusion")
    pal = QPalette()
    for role, color in ((QPalette.ColorRole.Window, BG), (QPalette.ColorRole.WindowText, TEXT),
                        (QPalette.ColorRole.Base, PANEL), (QPalette.ColorRole.AlternateBase, PANEL_ALT),
                        (QPalette.ColorRole.Text, TEXT), (QPalette.ColorRole.Button, PANEL_ALT),
                        (QPalette.ColorRole.ButtonText, TEXT), (QPalette.ColorRole.Highlight, ACCENT),
                        (QPalette.ColorRole.HighlightedText, BG), (QPalette.ColorRole.ToolTipBase, PANEL_ALT),
                        (QPalette.ColorRole.ToolTipText, TEXT), (QPalette.ColorRole.PlaceholderText, MUTED)):
        pal.setColor(role, QColor(color))
    pal.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor("#59616b"))
    pal.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor("#59616b"))
    pal.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText, QColor("#59616b"))
    app.setPalette(pal)
    app.setFont(ui_font(9.5))
    app.setStyleSheet(STYLESHEET)
    pg.setConfigOptions(background=PANEL, foreground=MUTED, antialias=True)


def style_plot(plot, title: str = "", left: str = "", bottom: str = "") -> None:
    """Shared look of a pyqtgraph PlotItem: muted axes, a faint grid, a small bold title."""
    if title:
        plot.setTitle(f"<span style='color:{TEXT};font-size:10pt;font-weight:bold'>{title}</span>")
    for side, label in (("left", left), ("bottom", bottom)):
        ax = plot.getAxis(side)
        ax.setPen(qcolor(BORDER))
        ax.setTextPen(qcolor(MUTED))
        ax.setTickFont(ui_font(8.5))
        ax.enableAutoSIPrefix(False)       # no "(x0.001)" after a label: the units are the label's
        if label:
            plot.setLabel(side, f"<span style='color:{MUTED}'>{label}</span>")
    # no grid: a grid makes each axis span the whole plot, so every data change repaints the axes
    # (their tick text is the costliest thing pyqtgraph draws)


# ---- icons drawn with QPainter: no image files to ship, crisp at any size ------------------------

def _icon(draw) -> QIcon:
    icon = QIcon()
    for size in (16, 24, 32):
        pm = QPixmap(size, size)
        pm.fill(Qt.GlobalColor.transparent)
        p = QPainter(pm)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.scale(size / 16.0, size / 16.0)
        draw(p)
        p.end()
        icon.addPixmap(pm)
    return icon


def _fill(p: QPainter, color: str) -> None:
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor(color))


def _stroke(p: QPainter, color: str, width: float) -> None:
    pen = QPen(QColor(color), width)
    pen.setCapStyle(Qt.PenCapStyle.RoundCap)
    p.setPen(pen)
    p.setBrush(Qt.BrushStyle.NoBrush)


def icon_run() -> QIcon:
    def d(p):
        _fill(p, GREEN)
        p.drawPolygon(QPolygonF([QPointF(4, 2.5), QPointF(13.5, 8), QPointF(4, 13.5)]))
    return _icon(d)


def icon_pause() -> QIcon:
    def d(p):
        _fill(p, TEXT)
        p.drawRoundedRect(QRectF(3.5, 3, 3, 10), 1, 1)
        p.drawRoundedRect(QRectF(9.5, 3, 3, 10), 1, 1)
    return _icon(d)


def icon_step() -> QIcon:
    def d(p):
        _fill(p, TEXT)
        p.drawPolygon(QPolygonF([QPointF(3, 3), QPointF(10, 8), QPointF(3, 13)]))
        p.drawRoundedRect(QRectF(10.5, 3, 2.5, 10), 1, 1)
    return _icon(d)


def icon_stop() -> QIcon:
    def d(p):
        _fill(p, RED)
        p.drawRoundedRect(QRectF(3.5, 3.5, 9, 9), 1.5, 1.5)
    return _icon(d)


def icon_reset() -> QIcon:
    def d(p):
        _stroke(p, TEXT, 1.8)
        p.drawArc(QRectF(3, 3, 10, 10), 100 * 16, 280 * 16)
        _fill(p, TEXT)
        p.drawPolygon(QPolygonF([QPointF(6.5, 0.8), QPointF(10, 3.2), QPointF(6.3, 5.6)]))
    return _icon(d)


def icon_open() -> QIcon:
    def d(p):
        p.setPen(QPen(QColor(MUTED), 1.3))
        p.setBrush(QColor(PANEL_ALT))
        path = QPainterPath()
        path.moveTo(2, 4); path.lineTo(6, 4); path.lineTo(7.5, 5.5); path.lineTo(14, 5.5)
        path.lineTo(14, 13); path.lineTo(2, 13); path.closeSubpath()
        p.drawPath(path)
    return _icon(d)


def icon_save() -> QIcon:
    def d(p):
        p.setPen(QPen(QColor(MUTED), 1.3))
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawRoundedRect(QRectF(2.5, 2.5, 11, 11), 1.5, 1.5)
        _fill(p, ACCENT)
        p.drawEllipse(QPointF(8, 8), 2.5, 2.5)
    return _icon(d)


def icon_export() -> QIcon:
    def d(p):
        _stroke(p, TEXT, 1.5)
        p.drawPolyline(QPolygonF([QPointF(5, 5.5), QPointF(8, 2.5), QPointF(11, 5.5)]))   # arrow head
        p.drawLine(QPointF(8, 2.5), QPointF(8, 10))
        p.drawPolyline(QPolygonF([QPointF(3, 11), QPointF(3, 13.5), QPointF(13, 13.5), QPointF(13, 11)]))
    return _icon(d)
