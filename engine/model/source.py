"""A weight as it lies in the model file, turned into its device form one tensor at a time.

Loaders (engine.io) describe every tensor with a `TensorSource`: its shape, its storage type
and a `read()` that returns the tensor's bytes as a uint8 [rows, bytes per row] view of the
memory-mapped file (no copy). The model (engine.model.transformer) then builds each weight in
its final form on its device, one at a time, so no whole-model float32 copy ever exists:

    dense(device, dtype)  the values in the compute dtype (dequantized on the device)
    packed(device)        a quantized linear weight kept as it is in the file (engine.weights)

llama.cpp's converter permutes the rows of Llama q/k weights for ggml's RoPE; `unpermute_heads`
records it, and since the permutation moves whole rows it is undone on quantized rows exactly
as on float rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from engine.errors import ModelLoadError
from engine.weights import PACKED_TYPES, PackedWeight, dequantize, pack


def unpermute_rows(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k permutation (convert_hf_to_gguf.py LlamaModel.permute).

    The converter reorders each head's rows from HF's [first half | second half] ("rotate_half")
    to interleaved pairs for ggml's RoPE: permute = reshape(h, 2, d/2, ...).swapaxes(1, 2).
    The inverse is reshape(h, d/2, 2, ...).swapaxes(1, 2). w: [h*d, ...] (rows of any kind).
    """
    half = w.shape[0] // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape).contiguous()


def _all_finite(t: torch.Tensor) -> bool:
    """No NaN or infinity in t: min and max propagate both, and cost ~1/25 of
    isfinite().all() on the CPU (0.02 s for 28M float32 values against 0.5 s)."""
    lo, hi = torch.aminmax(t.reshape(-1))
    return bool(lo.isfinite() & hi.isfinite())


# float types whose file bytes already are the compute dtype's bits
_STORED_AS = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}


@dataclass(frozen=True)
class TensorSource:
    name: str                            # the file's own name, for messages
    shape: tuple[int, ...]               # torch order: [out, in] or [n]
    qtype: str                           # "F32" | "F16" | "BF16" | a GGML quantization name
    nbytes: int                          # bytes in the file
    read: Callable[[], torch.Tensor]     # uint8 [rows, bytes per row], a view of the file
    unpermute_heads: int = 0             # > 0: undo llama.cpp's q/k row permutation

    @property
    def packable(self) -> bool:
        return self.qtype in PACKED_TYPES and len(self.shape) == 2

    def _raw(self, device: torch.device) -> torch.Tensor:
        raw = self.read()
        if raw.dim() == 1:
            raw = raw.view(1, -1)
        if self.unpermute_heads:
            raw = unpermute_rows(raw, self.unpermute_heads)
        return raw.to(device) if device.type != "cpu" else raw

    def dense(self, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The values in `dtype` on `device`, dequantized there (bit-identical to gguf's
        dequantization in float32, then rounded once to `dtype`)."""
        device = torch.device(device)
        if _STORED_AS.get(self.qtype) == dtype:   # the file's bits already are the values
            t = self._raw(device).view(dtype).reshape(self.shape)
            # on the CPU that is a view of the mapped file: never keep one
            t = t.clone() if t.device.type == "cpu" else t.contiguous()
            return self._finite(t)
        t = self._finite(dequantize(self._raw(device), self.qtype).reshape(self.shape))   # float32
        t = t.to(dtype).contiguous()
        if dtype == torch.float16 and not _all_finite(t):
            raise ModelLoadError(f"tensor {self.name} has values beyond float16's range (65,504): "
                                 "use --dtype bfloat16 or float32 for this model.")
        return t

    def packed(self, device: torch.device | str = "cpu") -> PackedWeight:
        """A linear weight in its file quantization, repacked into engine.weights' planes."""
        device = torch.device(device)
        w = pack(self._raw(device), self.qtype, device=device)
        for plane in w.planes.values():      # the block scales: the only float fields
            if plane.is_floating_point():
                self._finite(plane)
        return w

    def _finite(self, t: torch.Tensor) -> torch.Tensor:
        """t, or a ModelLoadError naming this tensor if it holds NaN or infinity: such a
        model would print garbage (or one token repeated) as if it were an answer."""
        if t.numel() and not _all_finite(t):
            bad = int((~torch.isfinite(t)).sum())
            raise ModelLoadError(f"tensor {self.name} holds {bad:,} NaN or infinite values "
                                 f"(of {t.numel():,}): the model file is corrupt. Download it again.")
        return t
