"""safetensors files read as memory maps: a checked header, and a TensorSource per tensor.

The format (huggingface/safetensors, docs "Format"): an 8-byte little-endian header length N,
N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
then the data, offsets relative to its start. Reading it ourselves keeps every tensor a view of
the mapping until the model builds it on its device, so loading never holds a second copy of
the model in host memory. The file is untrusted: every field is checked before use.
"""

from __future__ import annotations

import json
import math
import mmap
from pathlib import Path

import numpy as np
import torch

from engine.errors import ModelLoadError
from engine.model.source import TensorSource

MAX_HEADER = 100 << 20       # the format's own limit on the JSON header
DTYPES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}


class SafetensorsFile:
    def __init__(self, path: Path):
        self.path = path
        try:
            with open(path, "rb") as f:
                size = f.seek(0, 2)
                if size < 8:
                    raise self._bad(f"it is only {size} bytes long")
                buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        except OSError as e:
            raise ModelLoadError(f"cannot read {path}: {e.strerror or e}. Check the path and its permissions.") from e
        n = int.from_bytes(buf[:8], "little")
        if n > min(MAX_HEADER, size - 8):
            raise self._bad(f"its header claims {n:,} bytes")
        try:
            header = json.loads(bytes(buf[8:8 + n]), object_pairs_hook=_unique_keys)
        except _DuplicateKey as e:      # json keeps the last: a second entry would silently win
            raise self._bad(f"its header names {_short(str(e))} twice") from None
        except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, a 5,000-digit number
            raise self._bad(f"its header is not JSON ({str(e)[:200]})") from None
        if not isinstance(header, dict):
            raise self._bad("its header is not a JSON object")
        self.data = np.frombuffer(buf, dtype=np.uint8, offset=8 + n)
        self.tensors: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, entry in header.items():
            if name != "__metadata__":
                self.tensors[name] = self._entry(name, entry)
        self._check_layout()

    def _check_layout(self) -> None:
        """The data section as the safetensors library itself requires it: the tensors' byte
        ranges, in order, follow one another from 0 to the end of the file, so no two share
        bytes and none leaves a gap. (No alignment is required: the format has none, and an
        unaligned tensor is read correctly, as a copy.)"""
        ranges = sorted((begin, end, name) for name, (_, _, begin, end) in self.tensors.items())
        for (_, end_a, a), (begin_b, _, b) in zip(ranges, ranges[1:]):    # sharing first: the worse
            if begin_b < end_a:
                raise ModelLoadError(f"{self.path} is corrupt: tensors {_short(a)} and {_short(b)} share bytes "
                                     f"(from byte {begin_b:,} of the data). Download it again.")
        at, previous = 0, None
        for begin, end, name in ranges:
            if begin != at:
                after = f"after tensor {_short(previous)}" if previous else "at the start of the data"
                raise ModelLoadError(f"{self.path} is corrupt: bytes {at:,}-{begin:,} of the data ({after}) belong "
                                     "to no tensor. Download it again.")
            at, previous = end, name
        if at != self.data.shape[0]:
            raise self._bad(f"its data section holds {self.data.shape[0]:,} bytes but its tensors end at "
                            f"byte {at:,}")

    def _bad(self, why: str) -> ModelLoadError:
        return ModelLoadError(f"{self.path} is not a readable safetensors file: {why}. Download it again.")

    def _entry(self, name: str, e: object) -> tuple[str, tuple[int, ...], int, int]:
        if not isinstance(e, dict):
            raise self._bad(f"tensor {name!r} has no description")
        dtype, shape, offsets = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if not (isinstance(shape, list) and len(shape) <= 8
                and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
            raise self._bad(f"tensor {name!r} has shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
            raise self._bad(f"tensor {name!r} has data_offsets {offsets!r}")
        begin, end = offsets
        if not 0 <= begin <= end <= self.data.shape[0]:
            raise ModelLoadError(f"{self.path} is truncated or corrupt: tensor {name} needs bytes "
                                 f"{begin:,}-{end:,} of a {self.data.shape[0]:,}-byte data section. Download it again.")
        if dtype not in DTYPES:
            return (str(dtype), tuple(shape), begin, end)   # refused only if the model needs it
        if (end - begin) != math.prod(shape) * DTYPES[dtype]:
            raise self._bad(f"tensor {name!r} holds {end - begin} bytes, not {math.prod(shape)} x {dtype}")
        return (dtype, tuple(shape), begin, end)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.tensors[name][1]

    def source(self, name: str) -> TensorSource:
        dtype, shape, begin, end = self.tensors[name]
        if dtype not in DTYPES:
            raise ModelLoadError(f"{self.path}: tensor {name} is stored as {dtype}; specscope reads "
                                 f"{', '.join(DTYPES)} safetensors. Convert the model to bfloat16 or float16.")
        rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
        data = self.data

        def read() -> torch.Tensor:
            return torch.from_numpy(data[begin:end].reshape(rows, -1))

        if dtype == "F64":
            def read_f64() -> torch.Tensor:
                return torch.from_numpy(read().numpy().view(np.float64).astype(np.float32)).view(torch.uint8)
            return TensorSource(name, shape, "F32", (end - begin) // 2, read_f64)
        return TensorSource(name, shape, dtype, end - begin, read)


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def _short(name: str | None) -> str:
    """A name from the file, quoted and cut for a one-line message."""
    text = repr(name)
    return text if len(text) <= 80 else text[:77] + "...'"
