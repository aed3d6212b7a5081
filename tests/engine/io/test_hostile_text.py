"""Hostile chat templates and prompt files (issue 12): every failure is one ParameterError
naming the template or the file, within the render's time and size limits."""

from __future__ import annotations

import json
import time

import pytest

from engine.errors import ParameterError
from engine.io.chat import MAX_RENDER_S, render_chat_template
from engine.io.prompts import read_prompt_file

USER = [{"role": "user", "content": "hi"}]
LOOP = "{% for m in messages %}{{ m.content + '!' }}{% endfor %}"


@pytest.mark.parametrize("template, needle", [
    ("{{ 1/0 }}", "ZeroDivisionError"),
    ("{% for i in range(10**9) %}{% endfor %}", "1,000,000,000"),
    (5, "is a int, not text"),
    ("{{ 'a' * 2 * 10**9 }}", "repeats a value"),
    ("{{ 'a'.ljust(10**9) }}", "passed 1,000,000,000"),
    ("{{ 'x'|center(10**9) }}", "passed 1,000,000,000"),
    ("{{ '%999999999d' % 1 }}", "width"),
    ("{{ '{:>999999999}'.format(1) }}", "width"),
    ("{{ 10**(10**10) }}", "power"),
    ("{{ (range(100000)|list) * 1000 }}", "repeats a value"),
    ("{% set ns = namespace(x='ab') %}{% for i in range(40) %}{% set ns.x = ns.x + ns.x %}{% endfor %}",
     "concatenates"),
    ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "RecursionError"),
    ("{{ x.y.z }}", "'x' is undefined"),
    ("{{ raise_exception('no system role') }}", "no system role"),
    ("{{ messages[0].content.__class__.__mro__[1].__subclasses__() }}", "unsafe"),
    ("{% for x in %}", "does not parse"),
    ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "chat template"),
])
def test_bad_template_is_one_line(template, needle) -> None:
    with pytest.raises(ParameterError) as e:
        render_chat_template(template, USER)
    assert "chat template" in str(e.value) and needle in str(e.value), str(e.value)


@pytest.mark.parametrize("template", [
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{{ ('a' * 4000000)|wordwrap(1) }}",      # within the size bound: stopped by time
])
def test_a_template_that_runs_forever_is_stopped(template) -> None:
    t0 = time.monotonic()
    with pytest.raises(ParameterError, match="ran for more than"):
        render_chat_template(template, USER)
    assert time.monotonic() - t0 < MAX_RENDER_S + 3


@pytest.mark.parametrize("content, ok", [
    ([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "ab!"),
    (5, None), (None, None), ([1, 2], None), ({"text": "a"}, None),
])
def test_message_content_of_any_type(content, ok) -> None:
    messages = [{"role": "user", "content": content}]
    if ok is not None:
        assert render_chat_template(LOOP, messages) == ok
        return
    with pytest.raises(ParameterError, match="message 1 has content"):
        render_chat_template(LOOP, messages)


def test_a_normal_template_still_renders_as_transformers_does(tokenizer) -> None:
    text = tokenizer.render_chat(USER)
    assert text.startswith("<|im_start|>") and text.endswith("<|im_start|>assistant\n") and "hi" in text


@pytest.mark.parametrize("name, data, needle", [
    ("latin1.txt", "caf\xe9".encode("latin-1"), "not UTF-8 text"),
    ("deep.json", b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    ("null.json", b'[{"role": "user", "content": null}]', "message 1 has content null"),
    ("number.json", b'[{"role": "user", "content": 5}]', "message 1 has content 5"),
    ("role.json", b'[{"role": 5, "content": "x"}]', "message 1 is not an object"),
    ("five.json", b"5", "expected a list of chat messages"),
    ("empty.txt", b"", "is empty"),
])
def test_bad_prompt_file_is_one_line(tmp_path, name, data, needle) -> None:
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(ParameterError) as e:
        read_prompt_file(p)
    assert needle in str(e.value) and str(p) in str(e.value), str(e.value)


def test_a_folder_as_prompt_file_says_so(tmp_path) -> None:
    with pytest.raises(ParameterError, match="is a folder"):
        read_prompt_file(tmp_path)


def test_text_parts_in_a_prompt_file_are_joined(tmp_path) -> None:
    p = tmp_path / "parts.json"
    p.write_text(json.dumps({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]}))
    assert read_prompt_file(p) == [{"role": "user", "content": "a"}]
