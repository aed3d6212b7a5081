"""Property-based fuzz of the files specscope writes and reads back (issue 34): a real recording
(a tree-drafting run of the tiny model, saved by workbench.recording), a real sweep (the CPU
sweep under tests/fixtures, written by engine.tuning.sweep) and a real cost profile (fitted and
saved by engine.cost.profile), each mutated by hypothesis (a value anywhere in the document
replaced by a hostile one, a key dropped, the text cut or a byte changed) and read through the
real loaders: `load_recording` (what `specscope --replay` and the window's Open call first),
`specscope export --from DIR/sweep.json` in-process, `CostProfile.load`.

The contract: the file loads, or it is refused with exactly one error of the loader's type (the
command line: one `specscope: error:` line, exit 2); never another exception. What loads is
also saved again and read back (we never write what we refuse), and a loaded sweep's best cell
has a finite ratio. Control: the same mutations read by plain json.loads and used the way the
callers use the values break the contract.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cli_helpers import in_process  # noqa: E402
from hostile import write_gguf  # noqa: E402

from engine.cost.profile import CostProfile, profile_from_points  # noqa: E402
from engine.errors import SpecscopeError  # noqa: E402
from engine.tuning.sweep_file import best_cell, load_sweep, save_sweep  # noqa: E402
from workbench.recording import RecordingError, load_recording, save_recording  # noqa: E402

SWEEP = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "sweep_cpu_code-edit.json"
FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


class Broken(AssertionError):
    """The contract broken: another exception, or an error that is not one line."""


# ---- mutations ---------------------------------------------------------------------------------
HOSTILE = st.one_of(
    st.sampled_from([None, True, False, 0, -1, 1, 10 ** 9, 10 ** 12, 2 ** 63, -(10 ** 12), 0.0, -0.0,
                     1e308, -1e308, 5e-324, math.nan, math.inf, -math.inf, "", "8", "nan", "\x00",
                     "ü" * 3, [], {}, [[]], {"": None}, [1, "a", None]]),
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(-3, 3), max_size=4),
)


def paths(doc: Any, at: tuple = (), cap: int = 3) -> list[tuple]:
    """Every place in `doc` (a long list: its first `cap` items only, so prompt token lists do not
    crowd out the settings and figures)."""
    out = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, (*at, k), cap)
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:cap]):
            out += paths(v, (*at, i), cap)
    return out


def changed(doc: Any, at: tuple, value: Any, drop: bool) -> Any:
    """A copy of `doc` with the value at `at` replaced (or the key dropped)."""
    doc = json.loads(json.dumps(doc))
    if not at:
        return value
    parent = doc
    for k in at[:-1]:
        parent = parent[k]
    if drop and isinstance(parent, dict):
        del parent[at[-1]]
    else:
        parent[at[-1]] = value
    return doc


def mutations(docs: list[Any]) -> st.SearchStrategy[bytes]:
    """The text of one of `docs` (JSON Lines when several) with one mutation."""
    places = [(i, p) for i, d in enumerate(docs) for p in paths(d)]

    def text(ds: list[Any]) -> bytes:
        return "\n".join(json.dumps(d, ensure_ascii=False) for d in ds).encode()

    @st.composite
    def one(draw) -> bytes:
        kind = draw(st.sampled_from(["value", "value", "value", "drop", "cut", "byte"]))
        if kind in ("value", "drop"):
            i, at = draw(st.sampled_from(places))
            ds = list(docs)
            ds[i] = changed(ds[i], at, draw(HOSTILE), kind == "drop")
            return text(ds)
        data = text(docs)
        where = draw(st.integers(0, len(data) - 1))
        if kind == "cut":
            return data[:where]
        return data[:where] + bytes([draw(st.integers(0, 255))]) + data[where + 1:]
    return one()


# ---- the contract ------------------------------------------------------------------------------
def holds(load: Callable[[Path], Any], data: bytes, name: str, error: type[Exception]) -> Any:
    """load(file holding data): its value, or None when refused by one one-line `error`."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.write_bytes(data)
        try:
            return load(path)
        except error as e:
            if "\n" in str(e) or not str(e):
                raise Broken(f"a refusal that is not one line: {str(e)[:300]!r}") from e
            return None
        except Exception as e:  # noqa: BLE001 - the property: nothing else
            raise Broken(f"{type(e).__name__}: {str(e)[:300]}") from e


# ---- recordings --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> list[Any]:
    """A real recording's lines (header, windows, report), from the real recorder."""
    from engine.io.load import load_model
    from engine.model.runtime import Runtime
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    from workbench.store import EventStore

    d = tmp_path_factory.mktemp("rec")
    rt = Runtime(load_model(write_gguf(d / "m.gguf")), "cpu", "float32")
    s = DecodeSettings(draft="tree", max_new_tokens=8)
    store = EventStore(header={"settings": s.to_dict(), "model": "m.gguf", "device": "CPU"})
    for ev in Decoder(rt, [5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7], s, detail=True).windows():
        store.append(ev)
    store.report = {"new_tokens": 8}
    path = save_recording(d / "r.jsonl", store)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    drafted = [x for x in lines[1:] if x.get("tokens")]
    assert drafted, "no window drafted"
    return [lines[0], drafted[0], lines[-1]]      # the header, a drafted window, the report


def replay(path: Path) -> Any:
    store = load_recording(path)
    again = save_recording(path.with_name("again.jsonl"), store)
    try:
        load_recording(again)
    except RecordingError as e:
        raise Broken(f"our own save of a loaded recording is refused: {e}") from e
    return store


def test_fuzz_recordings(recording) -> None:
    assert holds(replay, "\n".join(json.dumps(x) for x in recording).encode(), "r.jsonl", RecordingError)

    seen = []

    @FUZZ
    @given(mutations(recording))
    def prop(data: bytes) -> None:
        seen.append(holds(replay, data, "r.jsonl", RecordingError) is not None)
    prop()
    assert any(seen) and not all(seen), "the mutations should both load and be refused"


def test_recording_versions_and_spin_box_ranges(recording, tmp_path) -> None:
    """Named cases of the contract: a future or malformed version, numbers that pass the settings'
    validation but not the window's inputs, NaN in typed fields; each refused with its reason.
    Control: the recording as written, and version 1 spelled out, load."""
    header, window, report = recording
    refused = {
        "version_2": ({**header, "specscope_recording": 2}, "version 2 recording"),
        "version_text": ({**header, "specscope_recording": "1"}, "format version"),
        "version_true": ({**header, "specscope_recording": True}, "format version"),
        "version_zero": ({**header, "specscope_recording": 0}, "format version"),
        "window_1e12": (changed(header, ("settings", "sampling", "penalty_window"), 10 ** 12, False),
                        "penalty_window (--penalty-window) is 1000000000000, not an integer from 1 to 100,000"),
        "tokens_1e12": (changed(header, ("settings", "max_new_tokens"), 10 ** 12, False),
                        "max_new_tokens"),
        "seed_2_40": (changed(header, ("settings", "seed"), 2 ** 40, False), "seed (--seed)"),
        "depth_1e9": (changed(header, ("settings", "depth"), 10 ** 9, False), "depth (--depth)"),
        "top_p_nan": (changed(header, ("settings", "sampling", "top_p"), math.nan, False), "top_p"),
    }
    for name, (head, reason) in refused.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join(json.dumps(x) for x in (head, window, report)))
        with pytest.raises(RecordingError, match=reason.replace("(", r"\(").replace(")", r"\)")):
            load_recording(path)
    nan_window = json.loads(json.dumps(window))
    for key in ("window_ms",):
        nan_window[key] = math.nan
    nan_window["stats"] = {k: (math.nan if isinstance(v, float) else v) for k, v in window["stats"].items()}
    nan_window["settings"] = changed(window["settings"], ("depth",), 10 ** 9, False)
    for bad in ({**window, "window_ms": math.nan}, {**window, "stats": nan_window["stats"]}, nan_window,
                {**window, "settings": nan_window["settings"]}):
        path = tmp_path / "nan.jsonl"
        path.write_text("\n".join(json.dumps(x) for x in (header, bad, report)))
        with pytest.raises(RecordingError, match="not a window event"):
            load_recording(path)
    for head in (header, {**header, "specscope_recording": 1}):      # the control
        path = tmp_path / "ok.jsonl"
        path.write_text("\n".join(json.dumps(x) for x in (head, window, report)))
        assert len(load_recording(path)) == 1


# ---- sweeps ------------------------------------------------------------------------------------
def test_fuzz_sweeps(capsys) -> None:
    """`specscope export --from DIR/sweep.json` on mutated real sweeps."""
    sweep = json.loads(SWEEP.read_text())
    sweep["prompts"] = [{**p, "ids": p["ids"][:4]} for p in sweep["prompts"]]   # short examples
    run = in_process(capsys)

    def export(path: Path) -> Any:
        r = run("export", "--from", path, "--format", "cli")
        if r.returncode == 0:
            res = load_sweep(path)
            best = best_cell(res)
            if best is None or not math.isfinite(best["ratio_to_ar"]):
                raise Broken(f"exported a best cell without a finite ratio: {best and best['ratio_to_ar']}")
            with tempfile.TemporaryDirectory() as d:
                load_sweep(save_sweep(res, d)[0])          # what we write we read
            return r
        lines = r.stderr.strip().splitlines()
        if r.returncode != 2 or len(lines) != 1 or not lines[0].startswith("specscope: error: ") \
                or "Traceback" in r.stderr:
            raise Broken(f"exit {r.returncode}, stderr {r.stderr[-500:]!r}")
        return None

    assert holds(export, json.dumps(sweep).encode(), "sweep.json", SpecscopeError) is not None

    seen = []

    @FUZZ
    @given(mutations([sweep]))
    def prop(data: bytes) -> None:
        seen.append(holds(export, data, "sweep.json", SpecscopeError) is not None)
    prop()
    assert any(seen) and not all(seen), "the mutations should both load and be refused"


def test_a_non_finite_ratio_is_never_the_best_and_never_written(tmp_path) -> None:
    """In memory (a sweep running: 0 / 0 tok/s) a NaN or infinite ratio is no measurement: not
    the best cell, and written as null, so the file reloads. Control: the finite best wins."""
    res = json.loads(SWEEP.read_text())
    finite_best = best_cell(res)["id"]
    for bad in (math.nan, math.inf):
        cells = [dict(c) for c in res["cells"]]
        other = next(c for c in cells if c["id"] != finite_best)
        other["ratio_to_ar"] = bad
        r = {**res, "cells": cells}
        assert best_cell(r)["id"] == finite_best
        other["ratio_to_ar"], other["tok_s"] = 99.0, bad
        assert best_cell(r)["id"] == finite_best
        other["ratio_to_ar"] = bad
        again = load_sweep(save_sweep(r, tmp_path)[0])
        assert [c["ratio_to_ar"] for c in again["cells"] if c["id"] == other["id"]] == [None]
        assert best_cell(again)["id"] == finite_best
    cells = [dict(c) for c in res["cells"]]
    next(c for c in cells if c["id"] != finite_best)["ratio_to_ar"] = 99.0       # the control
    assert best_cell({**res, "cells": cells})["id"] != finite_best


# ---- cost profiles -----------------------------------------------------------------------------
def test_fuzz_profiles(tmp_path) -> None:
    fitted = profile_from_points([(1, 2.0), (2, 2.1), (4, 2.2), (8, 2.6), (16, 4.1), (32, 8.3)],
                                 id="fuzz", device="CPU", model="tiny", dtype="float32", context=512,
                                 source="tests")
    docs = [json.loads(fitted.to_json())]
    from engine.cost.profile import reference_profiles
    docs += [p.to_dict() for p in reference_profiles().values() if p.kind != "measured"][:2]

    def load(path: Path) -> Any:
        p = CostProfile.load(path)
        try:
            CostProfile.from_json(p.to_json())       # what we write we read
        except SpecscopeError as e:
            raise Broken(f"our own save of a loaded profile is refused: {e}") from e
        return p

    for doc in docs:
        assert holds(load, json.dumps(doc).encode(), "p.json", SpecscopeError) is not None

    seen = []

    @FUZZ
    @given(st.sampled_from(range(len(docs))).flatmap(lambda i: mutations([docs[i]])))
    def prop(data: bytes) -> None:
        seen.append(holds(load, data, "p.json", SpecscopeError) is not None)
    prop()
    assert any(seen) and not all(seen), "the mutations should both load and be refused"


# ---- the control -------------------------------------------------------------------------------
def test_control_plain_json_loads_breaks_the_contract() -> None:
    """The same mutations of the sweep, read by json.loads and used as export uses a sweep: the
    property fails (a bare JSONDecodeError, KeyError or TypeError escapes)."""
    from engine.tuning.export import export_cell
    sweep = json.loads(SWEEP.read_text())
    sweep["prompts"] = [{**p, "ids": p["ids"][:4]} for p in sweep["prompts"]]

    def naive(path: Path) -> Any:
        res = json.loads(path.read_text())
        best = max((c for c in res["cells"] if c["status"] == "done"), key=lambda c: c["ratio_to_ar"])
        return export_cell(best, res, "cli")

    @FUZZ
    @given(mutations([sweep]))
    def prop(data: bytes) -> None:
        holds(naive, data, "sweep.json", SpecscopeError)
    with pytest.raises((Broken, ExceptionGroup)) as e:    # several distinct failures: a group
        prop()
    if isinstance(e.value, ExceptionGroup):
        assert e.value.subgroup(Broken) is not None
