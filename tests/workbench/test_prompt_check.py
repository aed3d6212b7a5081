"""The prompt editor checks chat JSON exactly as a .json prompt file is checked (one function,
engine.io.prompts.parse_chat_json): what one refuses the other refuses, for the same reason."""

from __future__ import annotations

import pytest

from engine.errors import ParameterError
from engine.io.prompts import read_prompt_file

CASES = [
    '[{"role": "user", "content": 5}]',                       # the editor used to take these
    '[{"role": 3, "content": "hi"}]',
    '[{"role": "user", "content": [{"type": "image", "url": "x"}]}]',
    '{"messages": []}',
    '[{"role": "user", "content": "hi"}',                     # not JSON
    '"just a string"',
]


@pytest.mark.parametrize("text", CASES)
def test_editor_and_file_loader_refuse_the_same_chat_json(qtbot, tmp_path, text):
    from workbench.views.output import CHAT, PromptEditor
    ed = PromptEditor()
    qtbot.addWidget(ed)
    ed.mode.setCurrentText(CHAT)
    ed.edit.setPlainText(text)
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(ParameterError) as from_file:
        read_prompt_file(path)
    with pytest.raises(ParameterError) as from_editor:
        ed.prompt()
    # the same reason after the "where" prefix
    reason = str(from_file.value).split(f"prompt file {path}", 1)[1]
    assert str(from_editor.value).endswith(reason), (str(from_editor.value), reason)


def test_editor_takes_what_the_file_loader_takes(qtbot, tmp_path):
    from workbench.views.output import CHAT, PromptEditor
    text = '{"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}'
    ed = PromptEditor()
    qtbot.addWidget(ed)
    ed.mode.setCurrentText(CHAT)
    ed.edit.setPlainText(text)
    path = tmp_path / "p.json"
    path.write_text(text)
    assert ed.prompt() == read_prompt_file(path) == [{"role": "user", "content": "hi"}]
