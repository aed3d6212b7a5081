"""The controls panel: every DecodeSettings field, sent to the running decoder on each change.

The inputs are made from engine.speculation.setting_fields, the table the command line's flags
are made from too: the same ranges, and the flags' help as tooltips. This module only places them.

A change builds a new DecodeSettings; if it validates it is emitted as `settings_changed` (the
main window forwards it to the worker's control queue, and the decoder applies it at the next
window boundary); if it does not, the ParameterError's message shows inline and nothing is sent.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QGridLayout, QGroupBox, QHBoxLayout,
                               QLabel, QLineEdit, QRadioButton, QScrollArea, QSizePolicy, QSpinBox, QVBoxLayout, QWidget)

from engine.errors import ParameterError
from engine.speculation.setting_fields import BY_NAME, FIELDS, SettingField
from engine.speculation.settings import LLAMACPP_DRAFTERS, MODEL_DRAFTERS, NGRAM_DRAFTERS, DecodeSettings

from workbench.widgets import pass_window_keys

SAMPLED_TEMPERATURE = 0.7       # what the temperature field shows while greedy is chosen


def _fit(w: QWidget) -> QWidget:
    """Let the grid size an input (a spin box's size hint grows with its range)."""
    w.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
    w.setMinimumWidth(52)
    return w


def make_input(f: SettingField) -> QWidget:
    """The input for one setting, from its row of the table."""
    if f.kind is bool:
        w = QCheckBox(f.label)
    elif f.choices:
        w = _fit(QComboBox())
        w.addItems(list(f.choices))
    elif f.kind is int:
        w = _fit(QSpinBox())
        w.setRange(int(f.lo), int(f.hi))
        w.setKeyboardTracking(False)        # send on Enter / arrows, not on every keystroke
    elif f.kind is float:
        w = _fit(QDoubleSpinBox())
        w.setRange(f.lo, f.hi)
        w.setSingleStep(f.step)
        w.setDecimals(f.decimals)
        w.setKeyboardTracking(False)
    else:
        w = _fit(QLineEdit())
        w.setPlaceholderText(f"{f.label}: {f.metavar or f.name}")
    w.setToolTip(f"{f.help} ({f.flag})")
    return w


def input_value(w: QWidget) -> Any:
    if isinstance(w, QCheckBox):
        return w.isChecked()
    if isinstance(w, QComboBox):
        return w.currentText()
    if isinstance(w, QLineEdit):
        return w.text().strip() or None
    return w.value()


def set_input(w: QWidget, value: Any) -> None:
    if isinstance(w, QCheckBox):
        w.setChecked(bool(value))
    elif isinstance(w, QComboBox):
        w.setCurrentText(str(value))
    elif isinstance(w, QLineEdit):
        w.setText(value or "")
    else:
        w.setValue(value)


def changed_signal(w: QWidget):
    if isinstance(w, QCheckBox):
        return w.toggled
    if isinstance(w, QComboBox):
        return w.currentTextChanged
    if isinstance(w, QLineEdit):
        return w.editingFinished
    return w.valueChanged


def _group(title: str, rows: list) -> QGroupBox:
    """A titled grid: a row is (label, widget), (None, layout-or-widget spanning the row), or a
    list of up to two (label, widget) pairs side by side."""
    g = QGroupBox(title)
    grid = QGridLayout(g)
    grid.setContentsMargins(8, 6, 8, 6)
    grid.setHorizontalSpacing(6)
    grid.setVerticalSpacing(5)
    grid.setColumnStretch(1, 1)
    grid.setColumnStretch(3, 1)
    for r, row in enumerate(rows):
        pairs = row if isinstance(row, list) else [row]
        if len(pairs) == 1:
            label, w = pairs[0]
            col = 0
            if label is not None:
                grid.addWidget(_label(label), r, 0)
                col = 1
            span = 4 - col
            (grid.addLayout if hasattr(w, "addWidget") and not isinstance(w, QWidget) else grid.addWidget)(
                w, r, col, 1, span)
            continue
        for k, (label, w) in enumerate(pairs):
            grid.addWidget(_label(label), r, 2 * k)
            grid.addWidget(w, r, 2 * k + 1)
    return g


def _label(text: str) -> QLabel:
    lab = QLabel(text)
    lab.setObjectName("muted")
    return lab


def _hbox(*widgets: QWidget, stretch: bool = False, spacing: int | None = None) -> QHBoxLayout:
    box = QHBoxLayout()
    if spacing is not None:
        box.setSpacing(spacing)
    for w in widgets:
        box.addWidget(w)
    if stretch:
        box.addStretch(1)
    return box


class ControlsPanel(QScrollArea):
    settings_changed = Signal(object)     # a valid DecodeSettings

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        body = QWidget()
        self.setWidget(body)
        lay = QVBoxLayout(body)
        lay.setContentsMargins(8, 4, 8, 8)
        lay.setSpacing(6)

        # one input per setting, named as the setting (self.depth, self.top_p, ...)
        self.inputs: dict[str, QWidget] = {f.name: make_input(f) for f in FIELDS}
        for name, w in self.inputs.items():
            setattr(self, name, w)
        self.draft_model.setPlaceholderText("draft model: .gguf file or HF folder")

        def at(name: str) -> tuple[str, QWidget]:
            return BY_NAME[name].label, self.inputs[name]

        ngram = _hbox(self.ngram_min, QLabel(BY_NAME["ngram_max"].label), self.ngram_max)
        flags = _hbox(self.adaptive, self.ar_floor, self.takeover, stretch=True)
        lay.addWidget(_group("Drafting", [
            at("draft"), [at("depth"), at("width")], at("exit_layer"), at("draft_model"),
            (BY_NAME["ngram_min"].label, ngram), at("match"), (None, flags)]))

        # sampling: greedy, or sampled at the temperature shown
        self.greedy = QRadioButton("greedy")
        self.sampled = QRadioButton("sampled")
        lay.addWidget(_group("Sampling", [
            (None, _hbox(self.greedy, self.sampled, stretch=True, spacing=16)),
            [at("temperature"), at("seed")], [at("top_k"), at("top_p")], [at("min_p")]]))
        lay.addWidget(_group("Penalties", [
            [at("repeat_penalty"), at("presence_penalty")], [at("frequency_penalty"), at("penalty_window")]]))
        lay.addWidget(_group("Length", [at("max_new_tokens")]))

        self.error = QLabel("")
        self.error.setObjectName("error")
        self.error.setWordWrap(True)
        self.error.hide()
        hint = QLabel("Changes apply at the next window.")
        hint.setObjectName("muted")
        hint.setWordWrap(True)
        lay.addWidget(self.error)
        lay.addWidget(hint)
        lay.addStretch(1)

        self._loading = False
        self._last_valid = DecodeSettings()
        self.set_settings(DecodeSettings())
        for name, w in self.inputs.items():
            changed_signal(w).connect(self._drafter_changed if name == "draft" else self._changed)
        self.greedy.toggled.connect(self._changed)
        self._last_valid = self.settings()
        pass_window_keys(self)            # Space pauses and N steps with a number field focused

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        """As wide as the inputs need (the horizontal scroll bar is off: narrower would clip
        them), as short as a few lines (the vertical one scrolls)."""
        body = self.widget().minimumSizeHint()
        return QSize(body.width() + self.verticalScrollBar().sizeHint().width() + 2 * self.frameWidth(),
                     120)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return QSize(self.minimumSizeHint().width() + 16, self.widget().sizeHint().height())

    # ---- settings in and out ----------------------------------------------------------------
    def set_settings(self, s: DecodeSettings) -> None:
        values = {**s.to_dict(), **s.to_dict()["sampling"]}
        self._loading = True
        try:
            for name, w in self.inputs.items():
                set_input(w, values[name])
            greedy = s.sampling.greedy
            (self.greedy if greedy else self.sampled).setChecked(True)
            if greedy:
                self.temperature.setValue(SAMPLED_TEMPERATURE)
        finally:
            self._loading = False
        self._last_valid = s
        self._enable()
        self._show_error("")

    def settings(self) -> DecodeSettings:
        """The panel's settings; raises ParameterError for an invalid combination."""
        values = {name: input_value(w) for name, w in self.inputs.items()}
        if self.sampled.isChecked():
            if values["temperature"] == 0:
                raise ParameterError("sampled mode needs a temperature above 0 (or choose greedy)")
        else:
            values["temperature"] = 0.0
        return DecodeSettings.from_dict(values)

    def valid_settings(self) -> DecodeSettings:
        """The last valid settings (what a new run starts with when the panel shows an error)."""
        return self._last_valid

    def error_text(self) -> str:
        return self.error.text() if self.error.isVisible() or self.error.text() else ""

    # ---- reactions --------------------------------------------------------------------------
    def _changed(self, *_):
        if self._loading:
            return
        self._enable()
        try:
            s = self.settings()
        except ParameterError as e:
            self._show_error(str(e))
            return
        self._show_error("")
        if s != self._last_valid:
            self._last_valid = s
            self.settings_changed.emit(s)

    def _drafter_changed(self, kind: str) -> None:
        """A model drafter starts as a chain (width 1, as the README describes it; wider makes a
        tree); back to the n-gram tree, the tree's own width."""
        if not self._loading:
            was = self._last_valid.draft
            width = (1 if kind in MODEL_DRAFTERS and was not in MODEL_DRAFTERS else
                     DecodeSettings().width if kind == "tree" and was in MODEL_DRAFTERS else None)
            if width is not None:
                self.width.blockSignals(True)
                self.width.setValue(width)
                self.width.blockSignals(False)
        self._changed()

    def _enable(self) -> None:
        kind = self.draft.currentText()
        self.depth.setEnabled(kind != "none")
        self.ar_floor.setEnabled(kind != "none")
        for w in (self.ngram_min, self.ngram_max, self.match):
            # llama.cpp's drafters: --ngram-max is their size_n; they have no match rule
            w.setEnabled(kind in NGRAM_DRAFTERS or (kind in LLAMACPP_DRAFTERS and w is not self.match))
        self.adaptive.setEnabled(kind != "none")          # model drafts are priced too
        self.width.setEnabled(kind in ("tree", "model", "early-exit"))   # model drafts: trees
        self.exit_layer.setEnabled(kind == "early-exit")
        self.draft_model.setEnabled(kind == "model")
        self.takeover.setEnabled(kind in ("model", "early-exit"))
        sampled = self.sampled.isChecked()
        for w in (self.temperature, self.top_k, self.top_p, self.min_p, self.seed):
            w.setEnabled(sampled)

    def _show_error(self, msg: str) -> None:
        self.error.setText(msg)
        self.error.setVisible(bool(msg))
