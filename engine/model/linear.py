"""A linear layer whose weight is dense, packed (quantized as in the file) or CPU-fast.

One `Linear` may hold several weights stacked along the output rows (q|k|v, gate|up): fusing
them saves a pass over the activations and a kernel launch per part. Dense parts are
concatenated into one matrix; packed parts of the same quantization are concatenated plane by
plane into one PackedWeight. Parts that cannot be merged (a Q4_K_M file stores v in Q6_K next
to q and k in Q4_K) stay separate and their outputs are concatenated.

CPU kernels for packed parts (`cpu_kernels`, chosen once at construction):

    exact  engine.weights.packed_linear: float32 dequantized tiles, float32 BLAS; the same
           numbers as the dequantized float32 model up to summation order. Slow on a CPU (every
           call dequantizes the whole weight again).
    fast   Q4_0 / Q4_1 / Q4_K parts are converted once, here, to torch's int4 CPU layout
           (engine.weights.cpu_fast: bfloat16 activations, ~3e-3 relative error, row-invariant);
           other types keep the exact path.

A dense part may be stored in another dtype than the activations (the CPU-fast model keeps a
bfloat16 LM head): x is cast to the weight's dtype and the result back to x's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.errors import ParameterError
from engine.weights import (CPU_FAST_TYPES, CpuFastWeight, CpuInt8Blocks, PackedWeight,
                            cpu_fast_linear, cpu_int8_blocks_linear, cpu_int8_blocks_top, invariant_dense,
                            packed_linear, prepare_cpu)

Weight = torch.Tensor | PackedWeight | CpuFastWeight | CpuInt8Blocks
CPU_KERNELS = ("fast", "exact")


def check_cpu_kernels(cpu_kernels: str) -> str:
    """cpu_kernels when it names one of CPU_KERNELS, else a ParameterError saying which."""
    if cpu_kernels not in CPU_KERNELS:
        raise ParameterError(f"cpu_kernels must be one of {', '.join(CPU_KERNELS)}, got {cpu_kernels!r}")
    return cpu_kernels


def _merge(parts: list[Weight]) -> list[Weight]:
    out: list[list[Weight]] = []
    for w in parts:
        prev = out[-1][-1] if out else None
        same = (isinstance(w, torch.Tensor) and isinstance(prev, torch.Tensor)
                and w.dtype == prev.dtype) or (
            isinstance(w, PackedWeight) and isinstance(prev, PackedWeight) and w.qtype == prev.qtype)
        if same:
            out[-1].append(w)
        else:
            out.append([w])
    merged: list[Weight] = []
    for group in out:
        if len(group) == 1:
            merged.append(group[0])
        elif isinstance(group[0], torch.Tensor):
            merged.append(torch.cat(group).contiguous())
        else:
            planes = {p: torch.cat([g.planes[p] for g in group]).contiguous() for p in group[0].planes}
            rows = sum(g.shape[0] for g in group)
            merged.append(PackedWeight(group[0].qtype, (rows, group[0].shape[1]), planes))
    return merged


def cpu_fast_available() -> bool:
    """torch has the int4 CPU matmul, and oneDNN for the row-invariant attention that the fast
    kernels' bfloat16 activations need (engine.model.attention)."""
    return (hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")
            and torch.backends.mkldnn.is_available())


def cpu_fast_eligible(w: Weight) -> bool:
    """A packed part the fast CPU kernels take (a 4-bit type, on the CPU)."""
    return isinstance(w, PackedWeight) and w.qtype in CPU_FAST_TYPES and w.device.type == "cpu"


def part_tensors(w: Weight) -> list[torch.Tensor]:
    """The tensors that hold a part (for byte counts)."""
    if isinstance(w, PackedWeight):
        return list(w.planes.values())
    if isinstance(w, CpuFastWeight):
        return [w.int4, w.scales_zeros]
    if isinstance(w, CpuInt8Blocks):
        return w.tensors
    return [w]


def _apply(x: torch.Tensor, w: Weight, invariant: bool = False) -> torch.Tensor:
    if isinstance(w, CpuFastWeight):
        return cpu_fast_linear(x, w)
    if isinstance(w, CpuInt8Blocks):
        return cpu_int8_blocks_linear(x, w)
    if isinstance(w, PackedWeight):
        return packed_linear(x, w)                 # row-invariant on every device
    xw = x if w.dtype == x.dtype else x.to(w.dtype)
    y = invariant_dense(xw, w) if invariant else None
    if y is None:
        y = F.linear(xw, w)
    return y.to(x.dtype)


class Linear:
    """y = x @ W.T (+ bias) (+ residual), W given as row blocks (see the module doc)."""

    def __init__(self, parts: list[Weight], bias: torch.Tensor | None = None,
                 cpu_kernels: str = "exact"):
        check_cpu_kernels(cpu_kernels)
        merged = _merge(parts)
        if cpu_kernels == "fast":
            merged = [prepare_cpu(p) if cpu_fast_eligible(p) else p for p in merged]
        self.parts = merged
        self.bias = bias
        self.out_features = sum(p.shape[0] for p in self.parts)

    @property
    def packed(self) -> bool:
        return any(isinstance(p, (PackedWeight, CpuFastWeight, CpuInt8Blocks)) for p in self.parts)

    @property
    def packed_types(self) -> set[str]:
        return {p.qtype for p in self.parts
                if isinstance(p, (PackedWeight, CpuFastWeight, CpuInt8Blocks))}

    @property
    def kernels(self) -> set[str]:
        """Which kernels the parts run on: dense, packed (exact), cpu_fast."""
        return {"cpu_fast" if isinstance(p, (CpuFastWeight, CpuInt8Blocks)) else
                "packed" if isinstance(p, PackedWeight) else "dense" for p in self.parts}

    def tensors(self) -> list[torch.Tensor]:
        out = [t for p in self.parts for t in part_tensors(p)]
        return out + ([self.bias] if self.bias is not None else [])

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors())

    @property
    def dense_weight(self) -> torch.Tensor | None:
        """The one dense matrix, when the layer is exactly that (the fast, unchanged path)."""
        if len(self.parts) == 1 and isinstance(self.parts[0], torch.Tensor):
            return self.parts[0]
        return None

    def top(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Each row's top k of ``self(x)`` (values float32 [R, k], ids [R, k]) without the whole
        product, where the layer is one screened Q8_0 weight (the fast CPU path's LM head:
        engine.weights.cpu_fast.cpu_int8_blocks_top, values bit for bit the full product's);
        None elsewhere."""
        return cpu_int8_blocks_top(x, self.parts[0], k) if self.screened else None

    @property
    def screened(self) -> bool:
        """Whether `top` answers here: the layer is one screened Q8_0 weight, no bias."""
        p = self.parts[0]
        return (len(self.parts) == 1 and self.bias is None and isinstance(p, CpuInt8Blocks)
                and p.screen is not None)

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None,
                 invariant: bool = False) -> torch.Tensor:
        """`invariant`: each row's result must not depend on the row count (a verify pass): dense
        parts then go to the row-invariant GPU kernel where there is one (engine.weights)."""
        w = self.dense_weight
        if w is not None and w.dtype == x.dtype and not invariant:
            if residual is not None and self.bias is None:
                return torch.addmm(residual, x, w.t())            # residual + x @ w^T, one kernel
            y = F.linear(x, w, self.bias)
        else:
            ys = [_apply(x, p, invariant) for p in self.parts]
            y = ys[0] if len(ys) == 1 else torch.cat(ys, dim=-1)
            if self.bias is not None:
                y = y + self.bias
        return y if residual is None else residual + y
