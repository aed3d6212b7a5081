"""Small shared widgets: the timeline scrubber, the error banner, a label that elides, and the
views' box layouts."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt, Signal
from PySide6.QtWidgets import (QAbstractSpinBox, QBoxLayout, QFrame, QHBoxLayout, QLabel, QLayout,
                               QPushButton, QSizePolicy, QSlider, QStyle, QStyleOptionSlider,
                               QVBoxLayout, QWidget)

# a part of a box: a widget, a layout, an int (a stretch), or (widget or layout, its stretch)
BoxItem = QWidget | QLayout | int | tuple


def _fill(box: QBoxLayout, parts: tuple) -> QBoxLayout:
    for part in parts:
        part, stretch = part if isinstance(part, tuple) else (part, 0)
        if isinstance(part, int):
            box.addStretch(part)
        elif isinstance(part, QLayout):
            box.addLayout(part, stretch)
        else:
            box.addWidget(part, stretch)
    return box


def column(owner: QWidget, *parts: BoxItem, margins: tuple[int, int, int, int] = (8, 6, 8, 6),
           spacing: int = 4) -> QVBoxLayout:
    """`parts` top to bottom in `owner`, with the padding every view uses."""
    box = QVBoxLayout(owner)
    box.setContentsMargins(*margins)
    box.setSpacing(spacing)
    return _fill(box, parts)


def row(*parts: BoxItem) -> QHBoxLayout:
    """`parts` left to right (a header or legend line inside a view)."""
    return _fill(QHBoxLayout(), parts)


class ElidedLabel(QLabel):
    """One line of plain text that never widens its dock: cut with "…" where it does not fit,
    the whole text then in the tooltip."""

    def __init__(self, text: str = "", parent=None):
        super().__init__(parent)
        self._full = ""
        self._tip = ""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        self._full = text
        self._elide()

    def full_text(self) -> str:
        return self._full

    def setToolTip(self, tip: str) -> None:  # noqa: N802 - Qt's name
        self._tip = tip
        self._elide()

    def is_elided(self) -> bool:
        return super().text() != self._full

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return QSize(24, super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        m = self.contentsMargins()
        return QSize(self.fontMetrics().horizontalAdvance(self._full) + m.left() + m.right() + 4,
                     super().sizeHint().height())

    def resizeEvent(self, e) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(e)
        self._elide()

    def _elide(self) -> None:
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight,
                                             max(0, self.contentsRect().width()))
        QLabel.setText(self, shown)
        tip = self._tip
        if shown != self._full:
            tip = f"{self._full}\n\n{tip}" if tip else self._full
        QLabel.setToolTip(self, tip)


class _WindowKeys(QObject):
    """Lets the window's one-key shortcuts (Space, N) through a focused spin box, which would
    otherwise take them as typing: a number field has no use for them."""

    KEYS = (Qt.Key.Key_Space, Qt.Key.Key_N)

    def eventFilter(self, obj, e) -> bool:  # noqa: N802 - Qt's name
        if (e.type() == QEvent.Type.ShortcutOverride and e.key() in self.KEYS
                and not e.modifiers() & ~Qt.KeyboardModifier.KeypadModifier):
            e.ignore()
            return True              # not offered to the spin box: the shortcut fires
        return False


def pass_window_keys(root: QWidget) -> None:
    """Space and N reach the window's shortcuts while a spin box under `root` has focus."""
    keys = _WindowKeys(root)
    for box in root.findChildren(QAbstractSpinBox):
        for target in (box, *box.findChildren(QWidget)):     # the spin box and its line edit
            target.installEventFilter(keys)


class _Slider(QSlider):
    """A slider that jumps to the clicked position (a stock slider moves one page toward it)."""

    def mousePressEvent(self, e) -> None:  # noqa: N802 - Qt's name
        if e.button() == Qt.MouseButton.LeftButton and self.maximum() > self.minimum():
            opt = QStyleOptionSlider()
            self.initStyleOption(opt)
            handle = self.style().subControlRect(QStyle.ComplexControl.CC_Slider, opt,
                                                 QStyle.SubControl.SC_SliderHandle, self)
            if not handle.contains(e.position().toPoint()):
                self.setValue(self.value_at(int(e.position().x())))
                e.accept()
                return
        super().mousePressEvent(e)

    def value_at(self, x: int) -> int:
        """The value under x (widget coordinates), as the style draws the groove."""
        opt = QStyleOptionSlider()
        self.initStyleOption(opt)
        style = self.style()
        groove = style.subControlRect(QStyle.ComplexControl.CC_Slider, opt,
                                      QStyle.SubControl.SC_SliderGroove, self)
        handle = style.subControlRect(QStyle.ComplexControl.CC_Slider, opt,
                                      QStyle.SubControl.SC_SliderHandle, self)
        span = groove.width() - handle.width()
        pos = x - groove.x() - handle.width() // 2
        return QStyle.sliderValueFromPosition(self.minimum(), self.maximum(), pos, max(1, span))


class Timeline(QWidget):
    """A slider over the window index. While `live` is on it follows the newest window; moving
    the slider back turns live off, pressing Live (or moving to the end) turns it on again. A
    click on the groove jumps to the window under the pointer."""

    index_changed = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.slider = _Slider(Qt.Orientation.Horizontal)
        self.slider.setRange(0, 0)
        self.slider.setEnabled(False)
        self.slider.setFocusPolicy(Qt.FocusPolicy.NoFocus)   # arrows belong to the window shortcuts
        self.label = QLabel("no windows")
        self.label.setObjectName("muted")
        self.label.setMinimumWidth(120)
        self.label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.live = QPushButton("● Live")
        self.live.setCheckable(True)
        self.live.setChecked(True)
        self.live.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.live.setToolTip("follow the newest window (End)")
        title = QLabel("window")
        title.setObjectName("muted")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 2, 10, 2)
        lay.addWidget(title)
        lay.addWidget(self.slider, 1)
        lay.addWidget(self.label)
        lay.addWidget(self.live)
        self._count = 0
        self.slider.valueChanged.connect(self._moved)
        self.live.toggled.connect(self._live_toggled)

    @property
    def count(self) -> int:
        return self._count

    def value(self) -> int:
        return self.slider.value() if self._count else -1

    def set_count(self, n: int) -> None:
        """The number of windows recorded; follows the newest when live."""
        self._count = n
        self.slider.blockSignals(True)
        self.slider.setRange(0, max(0, n - 1))
        if self.live.isChecked() and n:
            self.slider.setValue(n - 1)
        self.slider.blockSignals(False)
        self.slider.setEnabled(n > 1)
        self._label()

    def set_value(self, i: int) -> None:
        if not self._count:
            return
        i = max(0, min(i, self._count - 1))
        self.slider.setValue(i)          # emits through _moved
        self._label()

    def _moved(self, v: int) -> None:
        live = v >= self._count - 1
        if self.live.isChecked() != live:
            self.live.blockSignals(True)
            self.live.setChecked(live)
            self.live.blockSignals(False)
        self._label()
        self.index_changed.emit(v)

    def _live_toggled(self, on: bool) -> None:
        if on and self._count:
            self.slider.setValue(self._count - 1)
            self.index_changed.emit(self._count - 1)

    def _label(self) -> None:
        self.label.setText(f"{self.value()} / {self._count - 1}" if self._count else "no windows")


class Banner(QFrame):
    """A red strip over the views: what went wrong and what to do. Dismissed by its button."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("banner")
        self.text = QLabel("")
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        close = QPushButton("Dismiss")
        close.clicked.connect(self.hide)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(12, 6, 8, 6)
        lay.addWidget(self.text, 1)
        lay.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.hide()

    def show_message(self, message: str, title: str = "Error") -> None:
        self.text.setText(f"<b>{title}:</b> {message}")
        self.show()

    def message(self) -> str:
        return self.text.text() if not self.isHidden() else ""
