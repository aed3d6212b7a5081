"""The house limits (../shared/STYLE.md: small files, one concept each) on the whole engine, the
workbench and the command line: no function over 60 lines, no class over 250, counted by the
parser (docstrings and comments included). Triton kernels count like any function: the
@triton.jit helpers they call are inlined by the compiler."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("engine", "workbench", "specscope")
MAX_FUNCTION, MAX_CLASS = 60, 250

# Allowed past the limit, each with its reason; the figure is a ceiling it may not grow past.
OVER = {
    # a line-for-line port of llama.cpp's common_ngram_map_draft (common/ngram-map.cpp): kept in
    # the original's shape, one block per block, so it can be read against the C++ side by side
    "engine/speculation/llamacpp_ngram.py:NgramMap.draft": 88,
}


def sizes() -> dict[str, tuple[str, int]]:
    """'path:Qualified.name' -> (kind, lines) for every function and class."""
    out: dict[str, tuple[str, int]] = {}

    def visit(node: ast.AST, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                out[f"{path}:{name}"] = (kind, child.end_lineno - child.lineno + 1)
                visit(child, path, name + ".")
            else:
                visit(child, path, prefix)

    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            visit(ast.parse(f.read_text(encoding="utf-8")), rel, "")
    return out


def test_no_function_over_60_lines_and_no_class_over_250():
    found = sizes()
    too_long = {name: n for name, (kind, n) in found.items()
                if n > OVER.get(name, MAX_FUNCTION if kind == "function" else MAX_CLASS)}
    assert not too_long, too_long
    assert set(OVER) <= set(found), "an allowance names a function that is gone: drop it"
