"""Workloads: named sets of chat prompts for benchmarks and tests.

    code-edit                 assets/workloads/code_edit_prompts.jsonl: five stdlib functions,
                              each with a rename-and-edit instruction (rows carry `id`, `messages`)
    specbench[:CAT,...]       assets/workloads/specbench_questions.jsonl: Spec-Bench questions
                              (Xia et al. 2024, arXiv:2401.07851; rows carry `question_id`,
                              `category`, `turns`), turns[0] as one user message, the first
                              `per_category` of each category (default SPECBENCH_CATEGORIES)
    path/to/file.jsonl        one prompt a line: {"messages": [...]}, {"turns": [...]} or
                              {"prompt": "text"}, with an optional "id" and "category"
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from engine.assets import ASSETS
from engine.errors import ParameterError
from engine.io.jsonfile import MiB
from engine.io.jsonfile import read_jsonl as read_jsonl_lines

WORKLOADS = ASSETS / "workloads"
CODE_EDIT_FILE = WORKLOADS / "code_edit_prompts.jsonl"
SPECBENCH_FILE = WORKLOADS / "specbench_questions.jsonl"
MAX_WORKLOAD_BYTES = 256 * MiB   # Spec-Bench's 480 questions are ~0.5 MB
SPECBENCH_CATEGORIES = ("summarization", "rag", "qa", "translation", "coding", "writing")


@dataclass(frozen=True)
class WorkloadPrompt:
    id: str
    category: str
    messages: tuple[dict[str, str], ...]


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The JSON object on each non-blank line of `path` (engine.io.jsonfile checks each line)."""
    path = Path(path)
    if not path.exists():
        raise ParameterError(f"the workload file {path} is missing")
    return [row for _, row in read_jsonl_lines(path, "a workload", shape=dict, max_bytes=MAX_WORKLOAD_BYTES,
                                               error=ParameterError)]


def code_edit_rows() -> list[dict[str, Any]]:
    """The code-edit workload's rows as stored (id, messages, source_file, old_name, new_name, ...)."""
    return read_jsonl(CODE_EDIT_FILE)


def specbench_rows(categories: Sequence[str] = SPECBENCH_CATEGORIES, per_category: int = 2) -> list[dict[str, Any]]:
    """The first `per_category` Spec-Bench rows of each category, category by category."""
    if per_category < 1:
        raise ParameterError(f"per_category must be >= 1, got {per_category}")
    rows = read_jsonl(SPECBENCH_FILE)
    known = sorted({r["category"] for r in rows})
    out = []
    for c in categories:
        if c not in known:
            raise ParameterError(f"Spec-Bench has no category {c!r}; the categories are {', '.join(known)}")
        out += [r for r in rows if r["category"] == c][:per_category]
    return out


def load_workload(spec: str, per_category: int = 2, limit: int | None = None) -> list[WorkloadPrompt]:
    """The prompts of `code-edit`, `specbench[:CAT,...]` or a .jsonl file; the first `limit`."""
    if spec == "code-edit":
        out = [WorkloadPrompt(r["id"], "code-edit", tuple(r["messages"])) for r in code_edit_rows()]
    elif spec == "specbench" or spec.startswith("specbench:"):
        cats = [c.strip() for c in spec.partition(":")[2].split(",") if c.strip()] or SPECBENCH_CATEGORIES
        out = [WorkloadPrompt(f"{r['category']}-{r['question_id']}", r["category"], _user(r["turns"][0]))
               for r in specbench_rows(cats, per_category)]
    elif spec.endswith(".jsonl") or Path(spec).is_file():
        out = [_from_row(r, i, spec) for i, r in enumerate(read_jsonl(spec))]
    else:
        raise ParameterError(f"a workload is code-edit, specbench[:CATEGORY,...] or a .jsonl file; got {spec!r}")
    if not out:
        raise ParameterError(f"the workload {spec!r} has no prompts")
    return out[:limit] if limit else out


def _user(text: str) -> tuple[dict[str, str], ...]:
    return ({"role": "user", "content": text},)


def _from_row(row: dict[str, Any], i: int, path: str) -> WorkloadPrompt:
    if isinstance(row.get("messages"), list):
        messages = tuple(row["messages"])
    elif isinstance(row.get("turns"), list) and row["turns"]:
        messages = _user(row["turns"][0])
    elif isinstance(row.get("prompt"), str):
        messages = _user(row["prompt"])
    else:
        raise ParameterError(f"{path}, prompt {i + 1}: expected \"messages\" (chat messages), "
                             "\"turns\" or \"prompt\"")
    if not all(isinstance(m, dict) and "role" in m and "content" in m for m in messages):
        raise ParameterError(f"{path}, prompt {i + 1}: each message needs a \"role\" and a \"content\"")
    return WorkloadPrompt(str(row.get("id", row.get("question_id", i))), str(row.get("category", "file")),
                          messages)
