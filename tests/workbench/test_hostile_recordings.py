"""Hostile recordings (issue 12): lines of the wrong kind, fields of the wrong type, trees
with cycles, absurd sizes: each is one RecordingError, found before any view sees the data;
`specscope --replay` prints it on stderr and exits 2, with or without --screenshot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
from hostile import write_gguf  # noqa: E402

from workbench.recording import RecordingError, load_recording, save_recording  # noqa: E402


@pytest.fixture(scope="module")
def good_lines(tmp_path_factory) -> list[str]:
    """A real recording: a short tree-drafting run of the tiny model, every row's detail."""
    from engine.io.load import load_model
    from engine.model.runtime import Runtime
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    from workbench.store import EventStore

    d = tmp_path_factory.mktemp("rec")
    rt = Runtime(load_model(write_gguf(d / "m.gguf")), "cpu", "float32")
    store = EventStore(header={"settings": DecodeSettings().to_dict(), "model": "m.gguf", "device": "CPU"})
    prompt = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 8]
    for ev in Decoder(rt, prompt, DecodeSettings(draft="tree", max_new_tokens=12), detail=True).windows():
        store.append(ev)
    path = save_recording(d / "good.jsonl", store)
    lines = path.read_text().splitlines()
    assert any(json.loads(line).get("tokens") for line in lines[1:]), "no window drafted"
    return lines


def with_event(lines: list[str], change) -> str:
    """The recording with its first drafted window changed by `change(event dict)`."""
    out = list(lines)
    i = next(i for i, line in enumerate(lines) if i and json.loads(line).get("tokens"))
    ev = json.loads(lines[i])
    change(ev)
    out[i] = json.dumps(ev)
    return "\n".join(out)


def cycle(ev):
    ev["parents"][0] = len(ev["parents"]) - 1 if len(ev["parents"]) > 1 else 0


CASES = {
    "a_number_line": lambda lines: "\n".join([lines[0], "5"]),
    "a_null_line": lambda lines: "\n".join([lines[0], "null"]),
    "a_list_line": lambda lines: "\n".join([lines[0], "[1, 2]"]),
    "tokens_a_string": lambda lines: with_event(lines, lambda e: e.update(tokens="abc")),
    "index_a_string": lambda lines: with_event(lines, lambda e: e.update(index="7")),
    "stats_a_list": lambda lines: with_event(lines, lambda e: e.update(stats=[])),
    "row_top_not_triples": lambda lines: with_event(lines, lambda e: e["rows"][0].update(top=[[1, 2]])),
    "parents_form_a_cycle": lambda lines: with_event(lines, cycle),
    "depth_ten_million": lambda lines: with_event(lines, lambda e: e["depths"].__setitem__(0, 10 ** 7)),
    "accepted_path_off_the_tree": lambda lines: with_event(lines, lambda e: e.update(accepted_path=[99])),
    "missing_field": lambda lines: with_event(lines, lambda e: e.pop("emitted")),
    "deep_json": lambda lines: "\n".join([lines[0], "[" * 200_000 + "]" * 200_000]),
    "no_header": lambda lines: "\n".join(lines[1:]),
    "settings_a_list": lambda lines: "\n".join([json.dumps({"specscope_recording": 1, "settings": [1]}), *lines[1:]]),
    "empty": lambda lines: "",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_recording_is_one_line(tmp_path, good_lines, case) -> None:
    path = tmp_path / f"{case}.jsonl"
    path.write_text(CASES[case](good_lines))
    with pytest.raises(RecordingError) as e:
        load_recording(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_the_good_recording_loads(tmp_path, good_lines) -> None:
    path = tmp_path / "good.jsonl"
    path.write_text("\n".join(good_lines))
    assert len(load_recording(path)) == len(good_lines) - 1


def test_non_text_and_folder_recordings(tmp_path) -> None:
    png = tmp_path / "shot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    with pytest.raises(RecordingError, match="not a text file"):
        load_recording(png)
    with pytest.raises(RecordingError, match="is a folder"):
        load_recording(tmp_path)


@pytest.mark.parametrize("shot", [False, True])
def test_replay_prints_its_reason_on_stderr_and_exits_2(tmp_path, shot) -> None:
    extra = ["--screenshot", str(tmp_path / "shot.png")] if shot else []
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"no": "header"}\n')
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    r = subprocess.run([sys.executable, "-m", "specscope.cli", "--replay", str(bad), *extra],
                       cwd=Path(__file__).resolve().parents[2],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("specscope: error:")]
    assert len(lines) == 1 and "no specscope header" in lines[0] and "Traceback" not in r.stderr
