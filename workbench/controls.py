"""The controls panel: every DecodeSettings field, sent to the running decoder on each change.

A change builds a new DecodeSettings; if it validates it is emitted as `settings_changed` (the
main window forwards it to the worker's control queue, and the decoder applies it at the next
window boundary); if it does not, the ParameterError's message shows inline and nothing is sent.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QGridLayout, QGroupBox, QHBoxLayout,
                               QLabel, QLineEdit, QRadioButton, QScrollArea, QSizePolicy, QSpinBox, QVBoxLayout, QWidget)

from engine.errors import ParameterError
from engine.speculation.sampling import SamplingConfig
from engine.speculation.settings import (DRAFTERS, LLAMACPP_DRAFTERS, MATCH_RULES, NGRAM_DRAFTERS,
                                        DecodeSettings)


def _fit(w: QWidget) -> QWidget:
    """Let the grid size an input (a spin box's size hint grows with its range)."""
    w.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
    w.setMinimumWidth(52)
    return w


def _spin(lo: int, hi: int, tip: str = "") -> QSpinBox:
    s = QSpinBox()
    _fit(s)
    s.setRange(lo, hi)
    s.setKeyboardTracking(False)        # send on Enter / arrows, not on every keystroke
    s.setToolTip(tip)
    return s


def _dspin(lo: float, hi: float, step: float, decimals: int, tip: str = "") -> QDoubleSpinBox:
    s = QDoubleSpinBox()
    _fit(s)
    s.setRange(lo, hi)
    s.setSingleStep(step)
    s.setDecimals(decimals)
    s.setKeyboardTracking(False)
    s.setToolTip(tip)
    return s


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

        # drafting
        self.draft = _fit(QComboBox())
        self.draft.addItems(list(DRAFTERS))
        self.draft.setToolTip("none: plain decoding · lookup: one prompt-lookup continuation · "
                              "tree: the top n-gram matches as a token tree · model: a draft "
                              "model's chain · early-exit: the target's first K layers draft")
        self.exit_layer = _spin(1, 256, "early-exit: how many of the target's layers draft "
                                        "(their keys are shared with the target)")
        self.draft_model = _fit(QLineEdit())
        self.draft_model.setPlaceholderText("draft model: .gguf file or HF folder")
        self.draft_model.setToolTip("model: a draft model with the target's vocabulary "
                                    "(loaded on the target's device at the next window)")
        self.depth = _spin(0, 128, "draft tokens per branch")
        self.width = _spin(0, 32, "branches of the tree drafter")
        self.ngram_min = _spin(0, 32, "shortest n-gram to look up")
        self.ngram_max = _spin(0, 32, "longest n-gram to look up (tried first)")
        ngram = QHBoxLayout()
        ngram.addWidget(self.ngram_min)
        ngram.addWidget(QLabel("to"))
        ngram.addWidget(self.ngram_max)
        self.match = _fit(QComboBox())
        self.match.addItems(list(MATCH_RULES))
        self.match.setToolTip("which earlier occurrence the lookup drafter copies")
        self.adaptive = QCheckBox("adaptive")
        self.adaptive.setToolTip("price every window on the card's cost profile and pick depth and width "
                                 "(model drafts: their draft passes priced on the same clock)")
        self.takeover = QCheckBox("takeover")
        self.takeover.setToolTip("model drafts: each window, the n-gram tree, the model or a plain "
                                 "step, whichever is expected to emit the most tokens per ms")
        self.ar_floor = QCheckBox("AR floor")
        self.ar_floor.setToolTip("measure plain decoding and retire speculation when it is not cheaper")
        flags = QHBoxLayout()
        flags.addWidget(self.adaptive)
        flags.addWidget(self.ar_floor)
        flags.addWidget(self.takeover)
        flags.addStretch(1)
        lay.addWidget(_group("Drafting", [
            ("drafter", self.draft), [("depth", self.depth), ("width", self.width)],
            ("exit layer", self.exit_layer), ("draft model", self.draft_model),
            ("n-gram", ngram), ("match", self.match), (None, flags)]))

        # sampling
        self.greedy = QRadioButton("greedy")
        self.sampled = QRadioButton("sampled")
        mode = QHBoxLayout()
        mode.setSpacing(16)
        mode.addWidget(self.greedy)
        mode.addWidget(self.sampled)
        mode.addStretch(1)
        self.temperature = _dspin(0.0, 10.0, 0.05, 2, "softmax temperature (sampled mode)")
        self.top_k = _spin(-1, 100000, "keep the k most likely tokens (0 = off)")
        self.top_p = _dspin(0.0, 1.0, 0.05, 2, "nucleus: keep the smallest set with this mass (1 = off)")
        self.min_p = _dspin(0.0, 1.0, 0.01, 2, "drop tokens below min-p × the top probability (0 = off)")
        self.seed = _spin(0, 2**31 - 1, "seed of the sampling RNG (same seed, same tokens)")
        lay.addWidget(_group("Sampling", [
            (None, mode), [("temp.", self.temperature), ("seed", self.seed)],
            [("top-k", self.top_k), ("top-p", self.top_p)], [("min-p", self.min_p)]]))

        # penalties
        self.repeat_penalty = _dspin(0.0, 5.0, 0.05, 2, "divide positive logits of seen tokens (1 = off)")
        self.presence_penalty = _dspin(-200.0, 200.0, 0.1, 2, "subtract once per seen token (0 = off)")
        self.frequency_penalty = _dspin(-200.0, 200.0, 0.1, 2, "subtract per occurrence (0 = off)")
        self.penalty_window = _spin(0, 100000, "how many recent tokens the penalties see (W)")
        lay.addWidget(_group("Penalties", [
            [("repeat", self.repeat_penalty), ("presence", self.presence_penalty)],
            [("freq.", self.frequency_penalty), ("window", self.penalty_window)]]))

        self.max_new_tokens = _spin(0, 1_000_000, "stop after this many new tokens")
        lay.addWidget(_group("Length", [("max tokens", self.max_new_tokens)]))

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
        self.set_settings(DecodeSettings())
        for w in (self.draft, self.match):
            w.currentTextChanged.connect(self._changed)
        for w in (self.adaptive, self.ar_floor, self.takeover, self.greedy):
            w.toggled.connect(self._changed)
        self.draft_model.editingFinished.connect(self._changed)
        for w in (self.depth, self.width, self.exit_layer, self.ngram_min, self.ngram_max, self.top_k, self.seed,
                  self.penalty_window, self.max_new_tokens, self.temperature, self.top_p, self.min_p,
                  self.repeat_penalty, self.presence_penalty, self.frequency_penalty):
            w.valueChanged.connect(self._changed)
        self._last_valid = self.settings()

    # ---- settings in and out ----------------------------------------------------------------
    def set_settings(self, s: DecodeSettings) -> None:
        self._loading = True
        try:
            self.draft.setCurrentText(s.draft)
            self.exit_layer.setValue(s.exit_layer)
            self.draft_model.setText(s.draft_model or "")
            self.depth.setValue(s.depth)
            self.width.setValue(s.width)
            self.ngram_min.setValue(s.ngram_min)
            self.ngram_max.setValue(s.ngram_max)
            self.match.setCurrentText(s.match)
            self.adaptive.setChecked(s.adaptive)
            self.ar_floor.setChecked(s.ar_floor)
            self.takeover.setChecked(s.takeover)
            c = s.sampling
            (self.greedy if c.greedy else self.sampled).setChecked(True)
            self.temperature.setValue(c.temperature if not c.greedy else 0.7)
            self.top_k.setValue(c.top_k)
            self.top_p.setValue(c.top_p)
            self.min_p.setValue(c.min_p)
            self.seed.setValue(s.seed)
            self.repeat_penalty.setValue(c.repeat_penalty)
            self.presence_penalty.setValue(c.presence_penalty)
            self.frequency_penalty.setValue(c.frequency_penalty)
            self.penalty_window.setValue(c.penalty_window)
            self.max_new_tokens.setValue(s.max_new_tokens)
        finally:
            self._loading = False
        self._last_valid = s
        self._enable()
        self._show_error("")

    def settings(self) -> DecodeSettings:
        """The panel's settings; raises ParameterError for an invalid combination."""
        sampled = self.sampled.isChecked()
        if sampled and self.temperature.value() == 0:
            raise ParameterError("sampled mode needs a temperature above 0 (or choose greedy)")
        return DecodeSettings(
            draft=self.draft.currentText(), depth=self.depth.value(), width=self.width.value(),
            ngram_min=self.ngram_min.value(), ngram_max=self.ngram_max.value(),
            match=self.match.currentText(), adaptive=self.adaptive.isChecked(),
            exit_layer=self.exit_layer.value(), draft_model=self.draft_model.text().strip() or None,
            ar_floor=self.ar_floor.isChecked(), takeover=self.takeover.isChecked(),
            sampling=SamplingConfig(
                temperature=self.temperature.value() if sampled else 0.0,
                top_k=self.top_k.value(), top_p=self.top_p.value(), min_p=self.min_p.value(),
                repeat_penalty=self.repeat_penalty.value(),
                presence_penalty=self.presence_penalty.value(),
                frequency_penalty=self.frequency_penalty.value(),
                penalty_window=self.penalty_window.value()),
            seed=self.seed.value(), max_new_tokens=self.max_new_tokens.value(),
        )

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
