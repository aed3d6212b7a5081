"""The generated text, each token colored by where it came from, and the prompt editor.

Output: accepted draft tokens green, bonus tokens amber, corrections blue, plain target steps in
the text color; the selected window's tokens are underlaid. Text is appended incrementally while
the run follows live and rebuilt only when the timeline moves backwards.

Prompt: raw text or chat messages (JSON); a dropped or opened `.txt` is raw text, a `.json` is a
list of messages or an object with a `messages` list (the CLI's --prompt-file rules).
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor, QTextFormat
from PySide6.QtWidgets import (QComboBox, QLabel, QPlainTextEdit, QPushButton, QSizePolicy,
                               QTabWidget, QTextEdit, QToolTip, QWidget)

from engine.errors import ParameterError, SpecscopeError
from engine.io.prompts import default_prompt, parse_chat_json, read_prompt_file
from engine.speculation.events import FROM_DRAFT

from workbench import dialogs, theme
from workbench.store import EventStore
from workbench.views.base import Shown
from workbench.widgets import ElidedLabel, column, row

RAW, CHAT = "raw text", "chat messages (JSON)"


class _OutputText(QTextEdit):
    def __init__(self, owner: OutputView):
        super().__init__()
        self.owner = owner
        self.setReadOnly(True)
        self.setMouseTracking(True)
        self.setFont(theme.mono_font(10))
        self.setLineWrapMode(QTextEdit.LineWrapMode.WidgetWidth)

    def mouseMoveEvent(self, e) -> None:
        pos = self.cursorForPosition(e.position().toPoint()).position()
        tip = self.owner.token_tip(pos)
        if tip:
            QToolTip.showText(e.globalPosition().toPoint(), tip, self)
        else:
            QToolTip.hideText()
        super().mouseMoveEvent(e)


class OutputView(QWidget):
    is_plot = False
    follows_row = False

    def __init__(self, parent=None):
        super().__init__(parent)
        self.text = _OutputText(self)
        self.info = QLabel("")
        self.info.setObjectName("muted")
        self.info.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Preferred)
        keys = QLabel(" &nbsp; ".join(f"<span style='color:{theme.KIND_COLOR[k]}'>■</span> {label}" for k, label in (
            (FROM_DRAFT, "draft"), ("bonus", "bonus"), ("correction", "correction"), ("target", "target"))))
        keys.setObjectName("muted")
        keys.setWordWrap(True)            # two lines in a narrow dock rather than a wider dock
        keys.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.info.setFixedWidth(self.info.fontMetrics().horizontalAdvance("99,999 tokens") + 4)
        keys.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        column(self, row((self.info, 0), (keys, 1)), (self.text, 1))
        self._formats = {}
        for kind, color in theme.KIND_COLOR.items():
            f = QTextCharFormat()
            f.setForeground(QColor(color))
            self._formats[kind] = f
        self._store: EventStore | None = None
        self._shown = -1
        self._win_pos: list[tuple[int, int]] = []     # character span of each shown window
        self._tok_start: list[int] = []                # start of each shown token
        self._tok_info: list[tuple[int, str]] = []     # (window, kind) of each shown token

    def plain_text(self) -> str:
        return self.text.toPlainText()

    def clear(self) -> None:
        self.text.clear()
        self._store, self._shown = None, -1
        self._win_pos, self._tok_start, self._tok_info = [], [], []
        self.info.setText("")

    def update_from(self, shown: Shown) -> None:
        self.show_upto(shown.store, shown.index, follow=shown.follow)

    def show_upto(self, store: EventStore, upto: int, follow: bool = True) -> None:
        if store is not self._store or upto < self._shown:
            self.clear()
            self._store = store
        if upto > self._shown:
            cur = QTextCursor(self.text.document())
            cur.movePosition(QTextCursor.MoveOperation.End)
            for i in range(self._shown + 1, upto + 1):
                ev = store[i]
                start = cur.position()
                for t, kind in zip(ev.emitted_texts, ev.emitted_kinds):
                    self._tok_start.append(cur.position())
                    self._tok_info.append((ev.index, kind))
                    cur.insertText(t, self._formats.get(kind, self._formats["target"]))
                self._win_pos.append((start, cur.position()))
            self._shown = upto
        self._highlight(upto)
        if follow and upto >= 0:
            self.text.moveCursor(QTextCursor.MoveOperation.End)
            self.text.ensureCursorVisible()
        n = len(self._tok_info)
        self.info.setText(f"{n} token{'s' if n != 1 else ''}" if upto >= 0 else "")

    def _highlight(self, upto: int) -> None:
        sels = []
        if 0 <= upto < len(self._win_pos):
            a, b = self._win_pos[upto]
            sel = QTextEdit.ExtraSelection()
            sel.format.setBackground(theme.tint(theme.ACCENT, 0.28))
            sel.format.setProperty(QTextFormat.Property.FullWidthSelection, False)
            c = QTextCursor(self.text.document())
            c.setPosition(a)
            c.setPosition(b, QTextCursor.MoveMode.KeepAnchor)
            sel.cursor = c
            sels.append(sel)
        self.text.setExtraSelections(sels)

    def token_tip(self, pos: int) -> str:
        k = bisect.bisect_right(self._tok_start, pos) - 1
        if k < 0 or k >= len(self._tok_info):
            return ""
        win, kind = self._tok_info[k]
        return f"window {win} · <span style='color:{theme.KIND_COLOR.get(kind, theme.TEXT)}'>" \
               f"{theme.KIND_LABEL.get(kind, kind)}</span>"

    def kinds_shown(self) -> list[str]:
        return [k for _, k in self._tok_info]


class _PromptText(QPlainTextEdit):
    file_dropped = Signal(str)

    def dragEnterEvent(self, e) -> None:
        if e.mimeData().hasUrls():
            e.acceptProposedAction()
        else:
            super().dragEnterEvent(e)

    def dragMoveEvent(self, e) -> None:
        if e.mimeData().hasUrls():
            e.acceptProposedAction()
        else:
            super().dragMoveEvent(e)

    def dropEvent(self, e) -> None:
        urls = [u for u in e.mimeData().urls() if u.isLocalFile()]
        if urls:
            self.file_dropped.emit(urls[0].toLocalFile())
            e.acceptProposedAction()
        else:
            super().dropEvent(e)


class PromptEditor(QWidget):
    """Edits the prompt the next run uses. `prompt()` -> str | list[dict] (raises ParameterError)."""

    error = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.mode = QComboBox()
        self.mode.addItems([RAW, CHAT])
        self.mode.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.mode.setMinimumContentsLength(9)
        self.mode.currentTextChanged.connect(lambda _: self._update_info())
        open_btn = QPushButton("Open…")
        open_btn.setToolTip(".txt: raw text · .json: chat messages (or drop a file here)")
        open_btn.clicked.connect(self.open_dialog)
        default_btn = QPushButton("Default")
        default_btn.setToolTip("the bundled copy-heavy code-edit prompt")
        default_btn.clicked.connect(self.load_default)
        self.edit = _PromptText()
        self.edit.setFont(theme.mono_font(9.5))
        self.edit.setPlaceholderText("Type a prompt, or drop a .txt (raw text) or .json (chat messages) file")
        self.edit.file_dropped.connect(self.load_file)
        self.edit.textChanged.connect(self._on_edit)
        self.info = ElidedLabel("")
        self.info.setObjectName("muted")
        column(self, row(QLabel("format"), self.mode, 1, default_btn, open_btn), (self.edit, 1), self.info)
        self.source = ""
        self.edited = False             # typed into since set_prompt (the source no longer holds)
        self._setting = False

    def set_prompt(self, prompt, source: str = "") -> None:
        self._setting = True
        try:
            self._fill(prompt)
        finally:
            self._setting = False
        self.source = source
        self.edited = False
        self._update_info()

    def _fill(self, prompt) -> None:
        if isinstance(prompt, list):
            self.mode.setCurrentText(CHAT)
            self.edit.setPlainText(json.dumps(prompt, indent=1, ensure_ascii=False))
        else:
            self.mode.setCurrentText(RAW)
            self.edit.setPlainText(str(prompt))

    def _on_edit(self) -> None:
        if not self._setting:
            self.edited = True
        self._update_info()

    def source_text(self) -> str:
        """Where the prompt in the editor came from: "edited prompt" once typed into."""
        if self.edited:
            return f"edited prompt (was: {self.source})" if self.source else "edited prompt"
        return f"from {self.source}" if self.source else ""

    def load_default(self) -> None:
        try:
            self.set_prompt(default_prompt(), "default prompt")
        except SpecscopeError as e:
            self.error.emit(str(e))

    def load_file(self, path: str) -> bool:
        try:
            self.set_prompt(read_prompt_file(path), Path(path).name)
            return True
        except SpecscopeError as e:
            self.error.emit(str(e))
            return False

    def open_dialog(self) -> None:
        path = dialogs.open_file(self, "Open prompt", "Prompts (*.txt *.json);;All files (*)")
        if path:
            self.load_file(path)

    def prompt(self):
        text = self.edit.toPlainText()
        if self.mode.currentText() == RAW:
            if not text:
                raise ParameterError("the prompt is empty: type some text or open a prompt file")
            return text
        # the prompt file loader's own check (engine.io.prompts), not a weaker copy of it
        return parse_chat_json(text, "the chat prompt (switch the format to raw text, or fix it)")

    def _update_info(self) -> None:
        try:
            p = self.prompt()
            what = (f"{len(p)} chat message{'s' if len(p) != 1 else ''}" if isinstance(p, list)
                    else "raw text, no chat template")
            self.info.setText(f"{what} · {len(self.edit.toPlainText()):,} characters"
                              + (f" · {self.source_text()}" if self.source_text() else ""))
            self.info.setObjectName("muted")
        except ParameterError as e:
            self.info.setText(str(e))
            self.info.setObjectName("error")
        self.info.style().unpolish(self.info)
        self.info.style().polish(self.info)


class OutputDock(QTabWidget):
    """Output and Prompt as two tabs of one dock."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.output = OutputView()
        self.prompt = PromptEditor()
        self.addTab(self.output, "Output")
        self.addTab(self.prompt, "Prompt")
        self.setDocumentMode(True)
