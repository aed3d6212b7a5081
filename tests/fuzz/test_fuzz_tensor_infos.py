"""Property-based fuzz of a GGUF's tensor infos (issue 34): any change to one tensor's type,
data offset or a dimension is refused with one ModelLoadError, never loaded as another model
(the silent wrong results of the hostile corpus: overlapping tensors, relabelled types). The
file is the tiny model of hostile.py (milliseconds a case). Controls: a change to the same
value loads; with the whole-file check switched off, the property fails on an overlap."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as Q
from hypothesis import HealthCheck, given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile import _tensor_fields, write_gguf  # noqa: E402

from engine.errors import ModelLoadError  # noqa: E402
from engine.io.load import load_model  # noqa: E402

NAMES = ["token_embd.weight", "output_norm.weight", "output.weight", "blk.0.attn_q.weight",
         "blk.0.ffn_down.weight", "blk.1.attn_norm.weight", "blk.1.ffn_up.weight"]
TYPES = [int(t) for t in Q]


class Original(bytes):
    """The tiny model's bytes, shown short in a failing example."""

    def __repr__(self) -> str:
        return f"<the tiny GGUF, {len(self):,} bytes>"


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> bytes:
    return Original(write_gguf(tmp_path_factory.mktemp("fuzz") / "base.gguf").read_bytes())


def mutate(data: bytes, name: str, field: str, value: int) -> bytes:
    """data with one field of tensor `name`'s info set: "type" (to value), "offset" (moved by
    value bytes) or "dim0" / "dim1" (a dimension, GGUF order, to value)."""
    out = bytearray(data)
    type_at, offset_at = _tensor_fields(out, name)
    if field == "type":
        out[type_at:type_at + 4] = value.to_bytes(4, "little")
    elif field == "offset":
        old = int.from_bytes(out[offset_at:offset_at + 8], "little")
        out[offset_at:offset_at + 8] = ((old + value) % 2 ** 64).to_bytes(8, "little")
    else:
        raw = name.encode()
        n_dims_at = bytes(out).index(len(raw).to_bytes(8, "little") + raw) + 8 + len(raw)
        k = int(field[-1])
        if k < int.from_bytes(out[n_dims_at:n_dims_at + 4], "little"):
            at = n_dims_at + 4 + 8 * k
            out[at:at + 8] = value.to_bytes(8, "little")
    return bytes(out)


def check(tmp_path: Path, original: bytes, changed: bytes) -> None:
    """The property: a changed file is refused in one line; an unchanged one loads."""
    path = tmp_path / "m.gguf"
    path.write_bytes(changed)
    if changed == original:
        load_model(path)
        return
    with pytest.raises(ModelLoadError) as e:
        load_model(path)
    assert "\n" not in str(e.value) and len(str(e.value)) < 600, str(e.value)


fields = st.one_of(
    st.tuples(st.just("type"), st.sampled_from(TYPES + [99, 2 ** 31])),
    st.tuples(st.just("offset"), st.one_of(st.sampled_from([-64, -32, 32, 64, 4096]),
                                            st.integers(-(2 ** 20), 2 ** 20).map(lambda v: v * 32))),
    st.tuples(st.sampled_from(["dim0", "dim1"]), st.one_of(st.sampled_from([0, 1, 32, 63, 65, 128, 2 ** 40]),
                                                           st.integers(0, 4096))),
)


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(NAMES), change=fields)
def test_a_changed_tensor_info_is_never_loaded(tmp_path, original, name, change) -> None:
    field, value = change
    check(tmp_path, original, mutate(original, name, field, value))


def test_control_an_unchanged_field_loads(tmp_path, original) -> None:
    type_at, _ = _tensor_fields(bytearray(original), "blk.0.ffn_down.weight")
    same_type = int.from_bytes(original[type_at:type_at + 4], "little")
    assert mutate(original, "blk.0.ffn_down.weight", "type", same_type) == original
    assert mutate(original, "blk.0.ffn_down.weight", "offset", 0) == original
    check(tmp_path, original, original)


def test_control_without_the_whole_file_check_the_property_fails(tmp_path, original, monkeypatch) -> None:
    """The fuzz can fail: with the layout check switched off, a tensor moved onto its
    neighbour's bytes loads as another model."""
    import engine.io.gguf_header as header
    changed = mutate(original, "blk.0.attn_q.weight", "offset", -4096)     # onto the bytes before it
    check(tmp_path, original, changed)                                       # refused with the check
    monkeypatch.setattr(header, "_check_layout", lambda *a: None)
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        check(tmp_path, original, changed)
