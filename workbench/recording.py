"""Recordings: a session's events as JSON Lines, replayable without a model.

Line 1 is a header `{"specscope_recording": 1, "settings": {...}, "model": ..., "device": ...}`;
every following line is one `WindowEvent.to_dict()`; an optional last line
`{"specscope_report": {...}}` holds the run's JSON report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.errors import SpecscopeError
from engine.speculation.events import WindowEvent

from workbench.store import EventStore

FORMAT_VERSION = 1


class RecordingError(SpecscopeError):
    """A recording file is missing, not JSON Lines, or not a specscope recording."""


def save_recording(path: str | Path, store: EventStore) -> Path:
    path = Path(path)
    header = {"specscope_recording": FORMAT_VERSION, **store.header}
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps(header, ensure_ascii=False) + "\n")
        for ev in store.events:
            f.write(json.dumps(ev.to_dict(), ensure_ascii=False) + "\n")
        if store.report is not None:
            f.write(json.dumps({"specscope_report": store.report}, ensure_ascii=False) + "\n")
    return path


def load_recording(path: str | Path) -> EventStore:
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise RecordingError(f"cannot read recording {path}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise RecordingError(f"{path} is not a text file; open a .jsonl recording saved by specscope") from e
    store = EventStore()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError as e:
            raise RecordingError(f"{path}, line {n}: not valid JSON ({e.msg}); "
                                 "is this a recording saved by specscope?") from e
        if n == 1:
            if not isinstance(obj, dict) or "specscope_recording" not in obj:
                raise RecordingError(f"{path} has no specscope header on line 1; "
                                     "open a .jsonl file saved with 'Save recording'")
            store.header = {k: v for k, v in obj.items() if k != "specscope_recording"}
        elif "specscope_report" in obj:
            store.report = obj["specscope_report"]
        else:
            try:
                store.append(WindowEvent.from_dict(obj))
            except (TypeError, KeyError, ValueError) as e:
                raise RecordingError(f"{path}, line {n}: not a window event ({e})") from e
    return store
