"""The llama.cpp flags an export may use, and whether a given llama.cpp binary takes them.

Names as the pinned tree (../shared/peers, llama.cpp 0c1e570, 2026-10-01) has them in
common/arg.cpp: --spec-type (4249), --spec-ngram-simple-size-n/-m (4290-4307),
--spec-ngram-map-k-size-n/-m (4321-4338), --spec-ngram-map-k4v-size-n/-m/-min-hits (4352-4379),
--spec-draft-model / -md (4241), --spec-draft-n-max/-n-min (4140-4155). The flags of before April
2026 (--draft, --draft-max, --draft-min, --spec-ngram-size-n/-m, --spec-ngram-min-hits; llama.cpp
PR #22397) are still listed by --help there, as "the argument has been removed" (4383-4421), and
stop the program when given: `rejected_flags` treats a flag so described as rejected.

`check_binary(PATH, flags)` runs `PATH --help` and names every flag that binary would refuse.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

from engine.childproc import run_bounded
from engine.errors import SpecscopeError

# every flag an export may emit (the pinned tree's arg.cpp, lines above)
LLAMACPP_FLAGS = frozenset({
    "-m", "--spec-type",
    "--spec-ngram-simple-size-n", "--spec-ngram-simple-size-m", "--spec-ngram-simple-min-hits",
    "--spec-ngram-map-k-size-n", "--spec-ngram-map-k-size-m", "--spec-ngram-map-k-min-hits",
    "--spec-ngram-map-k4v-size-n", "--spec-ngram-map-k4v-size-m", "--spec-ngram-map-k4v-min-hits",
    "-md", "--spec-draft-n-max", "--spec-draft-n-min"})
# --spec-type's values (common_speculative_all_types_str; tools/server/README.md of the tree)
LLAMACPP_SPEC_TYPES = ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash",
                       "draft-dspark", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod",
                       "ngram-cache")
REMOVED = re.compile(r"has been removed", re.IGNORECASE)
_FLAG = re.compile(r"(?:^|[\s,])(--?[A-Za-z][\w-]*)")
DESC_COL = 40           # common/arg.cpp's usage layout
MAX_HELP_BYTES = 4 << 20  # a --help is ~50 KB; more is not a llama.cpp binary


class BinaryCheckError(SpecscopeError):
    """The binary to check is missing or would not print its help."""


def parse_help(text: str) -> dict[str, str]:
    """Flag -> its help text, from llama.cpp's `--help` (common_params_print_usage): an option's
    names and value hint fill the first DESC_COL columns, its text starts there (on the next line
    when the names are longer)."""
    flags: dict[str, str] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("-"):
            continue
        if len(line) > DESC_COL and line[DESC_COL - 2:DESC_COL] == "  ":
            head, desc = line[:DESC_COL], line[DESC_COL:]
        else:
            head = line
            desc = lines[i + 1] if i + 1 < len(lines) and not lines[i + 1].startswith("-") else ""
        for m in _FLAG.finditer(head):
            flags.setdefault(m.group(1), desc.strip())
    return flags


def rejected_flags(flags: Sequence[str], help_text: str) -> list[tuple[str, str]]:
    """(flag, why) for each flag of `flags` (words starting with '-') the binary would refuse."""
    known = parse_help(help_text)
    out = []
    for f in flags:
        if not f.startswith("-") or re.fullmatch(r"-\d+(\.\d+)?", f):
            continue
        if f not in known:
            out.append((f, "not a flag of this llama.cpp"))
        elif REMOVED.search(known[f]):
            out.append((f, known[f].strip()))
    return out


def run_help(binary: str | os.PathLike, timeout_s: float = 60.0) -> str:
    p = Path(binary).expanduser()
    if not p.is_file():
        raise BinaryCheckError(f"no llama.cpp binary at {p} (point --check-binary at llama-server, "
                               "llama-cli or llama-speculative-simple in build/bin)")
    lines: list[str] = []      # llama.cpp prints its help on stdout or stderr, by version
    r = run_bounded([str(p), "--help"], timeout_s=timeout_s, error=BinaryCheckError, max_stdout=MAX_HELP_BYTES,
                    max_stderr=MAX_HELP_BYTES, tail_lines=1, on_line=lines.append, name=f"{p} --help")
    text = r.stdout + "\n" + "\n".join(lines)
    if "--spec-type" not in text and "-m," not in text:
        raise BinaryCheckError(f"{p} --help printed no llama.cpp options (exit {r.returncode}): is "
                               "it llama-server, llama-cli or llama-speculative-simple?")
    return text


def check_binary(binary: str | os.PathLike, words: Sequence[str]) -> list[tuple[str, str]]:
    """The flags among `words` that `binary` rejects (empty: it takes them all)."""
    return rejected_flags(words, run_help(binary))
