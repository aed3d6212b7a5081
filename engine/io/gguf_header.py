"""GGUF headers: metadata and tensor infos read with `struct`; the tensor data stays mapped.

gguf.GGUFReader builds a numpy memmap view for every element of every metadata array, so the
49,152 tokens and 48,900 merges of the bundled SmolLM2 file take seconds to parse. The format is
small (ggml docs/gguf.md: magic, version, counts, key/value pairs, tensor infos, aligned data),
so it is read here with `struct`, about 20x faster (BENCHMARKS.md, "Speculation and tuning
timings (moved from code comments)"), taking only gguf's type tables. The file is
untrusted: every count, length and offset is checked against the file before use.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from engine.errors import ModelLoadError

_SCALAR_FORMATS = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}
_NUMPY_DTYPES = {
    GGUFValueType.UINT8: np.uint8, GGUFValueType.INT8: np.int8, GGUFValueType.UINT16: np.uint16,
    GGUFValueType.INT16: np.int16, GGUFValueType.UINT32: np.uint32, GGUFValueType.INT32: np.int32,
    GGUFValueType.FLOAT32: np.float32, GGUFValueType.BOOL: np.bool_, GGUFValueType.UINT64: np.uint64,
    GGUFValueType.INT64: np.int64, GGUFValueType.FLOAT64: np.float64,
}


MAX_ARRAY_DEPTH = 8          # arrays of arrays: real files nest at most 2 deep
MAX_ARRAY_ITEMS = 1 << 22    # a 262k vocabulary and its ~500k merges fit; as Python objects an
                             # array takes up to ~40x its bytes, so a hostile count is refused


class _Corrupt(Exception):
    """Raised inside the header parser; turned into one ModelLoadError at the boundary."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # torch order, outermost first (GGUF lists dims innermost first)
    qtype: int              # a GGMLQuantizationType value (may be one gguf does not know)
    offset: int             # absolute byte offset in the file
    n_bytes: int            # -1 when the type is unknown or a row is not whole blocks


@dataclass
class GGUFFile:
    path: Path
    metadata: dict[str, Any]          # arrays as lists, strings as str
    tensors: dict[str, TensorInfo]
    data: np.ndarray                  # uint8 [file_size], the whole file (copy-on-write mmap)


def read_gguf(path: Path) -> GGUFFile:
    """Parse a GGUF file's header; tensor data stays mapped, not read."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size < 4:
                raise ModelLoadError(f"{path} is not a GGUF file: it is only {size} bytes long. "
                                     "Pass a .gguf model file or an HF model folder with --model.")
            # ACCESS_COPY gives numpy a writable view, so torch.from_numpy needs no copy or warning.
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    except OSError as e:
        raise ModelLoadError(f"cannot read {path}: {e.strerror or e}. Check the path and its permissions.") from e
    if buf[:4] != b"GGUF":
        raise ModelLoadError(
            f"{path} is not a GGUF file ({_describe_start(bytes(buf[:64]))}, not with GGUF). "
            "Pass a .gguf model file or an HF model folder with --model."
        )
    try:
        metadata, tensors = _parse_header(buf, size)
    except (_Corrupt, struct.error, UnicodeDecodeError, ValueError, OverflowError, MemoryError) as e:
        # in words: never a Python message ("unpack_from requires a buffer of ...")
        why = str(e) if isinstance(e, _Corrupt) else (
            f"its header runs past the end of the file at {size:,} bytes" if isinstance(e, struct.error)
            else "its header holds values no GGUF writer produces")
        raise ModelLoadError(
            f"{path} is a corrupt or truncated GGUF file ({why}). "
            "Download it again or re-convert it with llama.cpp's convert_hf_to_gguf.py."
        ) from e
    return GGUFFile(path, metadata, tensors, np.frombuffer(buf, dtype=np.uint8))


def _describe_start(head: bytes) -> str:
    """How a file that is not GGUF begins, in words: 'it begins with the text "hello, wor"'
    or 'it begins with the bytes 89 50 4e 47'."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if text and all(c.isprintable() or c in "\t\r\n" for c in text):
        first = " ".join(text.split())[:20]
        return f'it begins with the text "{first}": a text file'
    return "it begins with the bytes " + " ".join(f"{b:02x}" for b in head[:4])


def _parse_header(buf: mmap.mmap, size: int) -> tuple[dict[str, Any], dict[str, TensorInfo]]:
    (version,) = struct.unpack_from("<I", buf, 4)
    if version not in (2, 3):
        hint = " (a big-endian file?)" if struct.unpack_from(">I", buf, 4)[0] in (2, 3) else ""
        raise _Corrupt(f"GGUF version {version}{hint} is not supported; specscope reads versions 2 and 3")
    n_tensors, n_kv = struct.unpack_from("<QQ", buf, 8)
    # Every key/value pair and tensor info takes at least 9 bytes: garbage counts fail here, not in a loop.
    if (n_tensors + n_kv) * 9 > size:
        raise _Corrupt(f"header claims {n_tensors} tensors and {n_kv} metadata keys, more than the file holds")
    metadata, pos = _read_metadata(buf, size, n_kv, 24)
    infos, pos = _read_tensor_infos(buf, size, n_tensors, pos)
    alignment = metadata.get("general.alignment", 32)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise _Corrupt(f"general.alignment {alignment!r} is not a power of two")
    data_start = -(-pos // alignment) * alignment
    tensors: dict[str, TensorInfo] = {}
    for name, shape, qtype, offset in infos:
        if offset % alignment:      # llama.cpp refuses these too: the data would be read shifted
            raise _Corrupt(f"tensor {_short(name)} starts at data offset {offset}, not a multiple of the "
                           f"file's alignment ({alignment})")
        if name in tensors:
            raise _Corrupt(f"it names the tensor {_short(name)} twice")
        tensors[name] = TensorInfo(name, shape, qtype, data_start + offset, _n_bytes(shape, qtype))
    _check_layout(list(tensors.values()), data_start, size, alignment)
    return metadata, tensors


def _read_metadata(buf: mmap.mmap, size: int, n_kv: int, pos: int) -> tuple[dict[str, Any], int]:
    """The n_kv key/value pairs from byte pos on, and the byte after them."""
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key, pos = _string(buf, size, pos)
        if key in metadata:     # a reader keeping the first or the last would run another model
            raise _Corrupt(f"it holds the metadata key {_short(key)} twice")
        (vtype,) = struct.unpack_from("<I", buf, pos)
        metadata[key], pos = _value(buf, size, vtype, pos + 4)
    return metadata, pos


def _read_tensor_infos(buf: mmap.mmap, size: int, n_tensors: int,
                       pos: int) -> tuple[list[tuple[str, tuple[int, ...], int, int]], int]:
    """(name, shape in torch order, qtype, data offset) per tensor info, and the byte after them."""
    unpack = struct.unpack_from
    infos = []
    for _ in range(n_tensors):
        name, pos = _string(buf, size, pos)
        (n_dims,) = unpack("<I", buf, pos)
        if n_dims > 8:
            raise _Corrupt(f"tensor {_short(name)} claims {n_dims} dimensions")
        dims = unpack(f"<{n_dims}Q", buf, pos + 4)
        qtype, offset = unpack("<IQ", buf, pos + 4 + 8 * n_dims)
        pos += 4 + 8 * n_dims + 12
        infos.append((name, tuple(reversed(dims)), qtype, offset))
    return infos, pos


def _string(buf: mmap.mmap, size: int, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", buf, pos)
    end = pos + 8 + n
    if end > size:
        raise _Corrupt(f"a string at byte {pos} runs past the end of the file")
    return buf[pos + 8:end].decode("utf-8", errors="replace"), end


def _value(buf: mmap.mmap, size: int, vtype: int, pos: int, depth: int = 0) -> tuple[Any, int]:
    """One metadata value of type vtype at byte pos, and the byte after it."""
    if vtype == GGUFValueType.STRING:
        return _string(buf, size, pos)
    if vtype == GGUFValueType.ARRAY:
        return _array(buf, size, pos, depth)
    try:
        fmt = _SCALAR_FORMATS[GGUFValueType(vtype)]
    except (ValueError, KeyError):
        raise _Corrupt(f"unknown metadata value type {vtype} at byte {pos}") from None
    v = struct.unpack_from(fmt, buf, pos)[0]
    if vtype == GGUFValueType.FLOAT32:
        v = float(str(np.float32(v)))  # 1e-05 stays 1e-05, not 9.999999747378752e-06
    return v, pos + struct.calcsize(fmt)


def _array(buf: mmap.mmap, size: int, pos: int, depth: int) -> tuple[list[Any], int]:
    etype, count = struct.unpack_from("<IQ", buf, pos)
    pos += 12
    if count > MAX_ARRAY_ITEMS:
        raise _Corrupt(f"an array at byte {pos} claims {count:,} items (at most {MAX_ARRAY_ITEMS:,})")
    if etype == GGUFValueType.STRING:
        return _string_array(buf, size, pos, count)
    if etype in _NUMPY_DTYPES:
        dtype = np.dtype(_NUMPY_DTYPES[GGUFValueType(etype)])
        if count * dtype.itemsize > size - pos:
            raise _Corrupt(f"an array at byte {pos} claims {count} items")
        arr = np.frombuffer(buf, dtype=dtype.newbyteorder("<"), count=count, offset=pos)
        return arr.tolist(), pos + count * dtype.itemsize
    if depth >= MAX_ARRAY_DEPTH:
        raise _Corrupt(f"metadata arrays nested more than {MAX_ARRAY_DEPTH} deep at byte {pos}")
    if count * 12 > size - pos:     # an array item takes at least its own 12-byte header
        raise _Corrupt(f"an array at byte {pos} claims {count} items")
    items = []  # arrays of arrays: rare, parsed slowly
    for _ in range(count):
        item, pos = _value(buf, size, etype, pos, depth + 1)
        items.append(item)
    return items, pos


def _string_array(buf: mmap.mmap, size: int, pos: int, count: int) -> tuple[list[str], int]:
    if count * 8 > size - pos:
        raise _Corrupt(f"a string array at byte {pos} claims {count} items")
    unpack = struct.unpack_from
    items = []
    append = items.append
    for _ in range(count):  # the hot loop: ~100k vocabulary strings
        (n,) = unpack("<Q", buf, pos)
        end = pos + 8 + n
        append(buf[pos + 8:end].decode("utf-8", errors="replace"))
        pos = end
    if pos > size:
        raise _Corrupt("a string array runs past the end of the file")
    return items, pos


def _check_layout(infos: list[TensorInfo], data_start: int, size: int, alignment: int) -> None:
    """The data section as every GGUF writer lays it out and llama.cpp's gguf.cpp requires
    it: each tensor's bytes follow the previous one's, in the order of the infos, padded to
    the alignment, and inside the file. So no two tensors share bytes, and a tensor whose type
    or shape was changed (its byte size no longer what its data takes) is refused here, before
    anything is read. A tensor of a type gguf does not know has no size to check: the next
    one may then start anywhere after it (such a tensor is refused if the model needs it)."""
    expected: int | None = 0            # where the next tensor's data must start
    previous: TensorInfo | None = None
    for info in infos:
        offset = info.offset - data_start
        misplaced = offset != expected if expected is not None else info.offset < previous.offset
        if misplaced:
            if previous is None:
                raise _Corrupt(f"its first tensor, {_short(info.name)}, starts at data offset {offset:,}, "
                               "not 0")
            what = f"{_short(previous.name)} ({type_name(previous.qtype)}, shape {list(previous.shape)})"
            if expected is not None and offset > expected:
                raise _Corrupt(f"the data of tensor {what} ends at offset {expected:,} (padded) but the next "
                               f"tensor, {_short(info.name)}, starts at {offset:,}: a tensor's type or shape "
                               "does not match its data")
            raise _Corrupt(f"tensor {_short(info.name)} starts at data offset {offset:,}, inside the data of "
                           f"tensor {what} or before it: tensors overlap, or a tensor's type or shape does not "
                           "match its data")
        end = info.offset + max(info.n_bytes, 0)
        if end > size:
            raise _Corrupt(f"it is truncated: tensor {_short(info.name)} needs bytes up to {end:,} "
                           f"but the file has {size:,}")
        expected = None if info.n_bytes < 0 else -(-(offset + info.n_bytes) // alignment) * alignment
        previous = info


def _short(name: str) -> str:
    """A name from the file, quoted and cut for a one-line message."""
    text = repr(name)
    return text if len(text) <= 80 else text[:77] + "...'"


def _n_bytes(shape: tuple[int, ...], qtype: int) -> int:
    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
    except (ValueError, KeyError):
        return -1
    n = math.prod(shape)
    if shape and shape[-1] % block:
        return -1       # corrupt, or a type whose rows the model cannot have: said at use
    return n // block * type_size


def type_name(qtype: int) -> str:
    try:
        return GGMLQuantizationType(qtype).name
    except ValueError:
        return f"type {qtype}"
