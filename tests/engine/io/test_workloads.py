"""Workloads: the bundled code-edit and Spec-Bench files, a user's .jsonl, and the errors.

The loader is checked against the raw files, found and parsed here (json, line by line), not
against rows the module itself reads; the repo's copies are checked against ../shared/workloads
where that folder exists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import ParameterError
from engine.io.workloads import code_edit_rows, load_workload, read_jsonl, specbench_rows

ROOT = Path(__file__).resolve().parents[3]
BUNDLED = ROOT / "assets" / "workloads"
SHARED = ROOT.parent / "shared" / "workloads"
FILES = ("code_edit_prompts.jsonl", "specbench_questions.jsonl")


def raw_rows(name: str) -> list[dict]:
    lines = (BUNDLED / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@pytest.mark.parametrize("name", FILES)
def test_the_bundled_workloads_are_the_shared_files(name):
    if not (SHARED / name).exists():
        pytest.skip("no ../shared/workloads beside this checkout")
    assert (BUNDLED / name).read_bytes() == (SHARED / name).read_bytes()


def test_code_edit_is_the_five_bundled_prompts():
    code = load_workload("code-edit")
    raw = raw_rows("code_edit_prompts.jsonl")
    assert len(raw) == 5 and code_edit_rows() == raw
    assert [(p.id, p.category, list(p.messages)) for p in code] == [
        (r["id"], "code-edit", r["messages"]) for r in raw]
    assert code[0].id == "p0_textwrap_dedent"
    assert code[0].messages[0]["role"] == "user" and "dedent" in code[0].messages[0]["content"]
    assert [p.id for p in load_workload("code-edit", limit=2)] == [r["id"] for r in raw[:2]]


def test_specbench_takes_the_first_questions_of_each_category_in_order():
    rows = raw_rows("specbench_questions.jsonl")
    assert len(rows) == 480
    qa = [r for r in rows if r["category"] == "qa"]
    coding = [r for r in rows if r["category"] == "coding"]
    spec = load_workload("specbench:qa, coding", per_category=2)
    assert [p.id for p in spec] == [f"qa-{qa[0]['question_id']}", f"qa-{qa[1]['question_id']}",
                                    f"coding-{coding[0]['question_id']}", f"coding-{coding[1]['question_id']}"]
    assert spec[0].messages == ({"role": "user", "content": qa[0]["turns"][0]},)
    # no categories: one of each default category; the raw rows keep every field
    assert [p.category for p in load_workload("specbench", per_category=1)] == \
        ["summarization", "rag", "qa", "translation", "coding", "writing"]
    assert specbench_rows(["writing"], 3) == [r for r in rows if r["category"] == "writing"][:3]


def test_a_users_jsonl_file(tmp_path):
    f = tmp_path / "mine.jsonl"
    f.write_text("\n".join([
        json.dumps({"id": "a", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}),
        "",
        json.dumps({"question_id": 7, "category": "qa", "turns": ["first", "second"]}),
        json.dumps({"prompt": "plain text"}),
    ]))
    a, b, c = load_workload(str(f))
    assert (a.id, a.category, [m["role"] for m in a.messages]) == ("a", "file", ["system", "user"])
    assert (b.id, b.category, b.messages) == ("7", "qa", ({"role": "user", "content": "first"},))
    assert (c.id, c.messages) == ("2", ({"role": "user", "content": "plain text"},))


def test_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(ParameterError, match="no category 'poetry'; the categories are .*summarization"):
        load_workload("specbench:poetry")
    with pytest.raises(ParameterError, match="code-edit, specbench.*got 'mt-bench'"):
        load_workload("mt-bench")
    with pytest.raises(ParameterError, match="missing"):
        load_workload(str(tmp_path / "absent.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": \n')
    with pytest.raises(ParameterError, match="line 2: not valid JSON"):
        read_jsonl(bad)
    bad.write_text('{"text": "no prompt key"}\n')
    with pytest.raises(ParameterError, match="prompt 1: expected \"messages\""):
        load_workload(str(bad))
    bad.write_text('{"messages": [{"content": "no role"}]}\n')
    with pytest.raises(ParameterError, match="\"role\" and a \"content\""):
        load_workload(str(bad))
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ParameterError, match="no prompts"):
        load_workload(str(tmp_path / "empty.jsonl"))
