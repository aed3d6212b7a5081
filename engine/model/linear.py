"""A linear layer whose weight is dense (compute dtype) or packed (quantized as in the file).

One `Linear` may hold several weights stacked along the output rows (q|k|v, gate|up): fusing
them saves a pass over the activations and a kernel launch per part. Dense parts are
concatenated into one matrix; packed parts of the same quantization are concatenated plane by
plane into one PackedWeight. Parts that cannot be merged (a Q4_K_M file stores v in Q6_K next
to q and k in Q4_K) stay separate and their outputs are concatenated.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.weights import PackedWeight, packed_linear

Weight = torch.Tensor | PackedWeight


def _merge(parts: list[Weight]) -> list[Weight]:
    out: list[list[Weight]] = []
    for w in parts:
        prev = out[-1][-1] if out else None
        same = (isinstance(w, torch.Tensor) and isinstance(prev, torch.Tensor)) or (
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


class Linear:
    """y = x @ W.T (+ bias) (+ residual), W given as row blocks (see the module doc)."""

    def __init__(self, parts: list[Weight], bias: torch.Tensor | None = None):
        self.parts = _merge(parts)
        self.bias = bias
        self.out_features = sum(p.shape[0] for p in self.parts)

    @property
    def packed(self) -> bool:
        return any(isinstance(p, PackedWeight) for p in self.parts)

    @property
    def nbytes(self) -> int:
        n = sum(p.nbytes if isinstance(p, PackedWeight) else p.numel() * p.element_size()
                for p in self.parts)
        return n + (self.bias.numel() * self.bias.element_size() if self.bias is not None else 0)

    @property
    def dense_weight(self) -> torch.Tensor | None:
        """The one dense matrix, when the layer is exactly that (the fast, unchanged path)."""
        if len(self.parts) == 1 and isinstance(self.parts[0], torch.Tensor):
            return self.parts[0]
        return None

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        w = self.dense_weight
        if w is not None:
            if residual is not None and self.bias is None:
                return torch.addmm(residual, x, w.t())            # residual + x @ w^T, one kernel
            y = F.linear(x, w, self.bias)
        else:
            ys = [packed_linear(x, p) if isinstance(p, PackedWeight) else F.linear(x, p)
                  for p in self.parts]
            y = ys[0] if len(ys) == 1 else torch.cat(ys, dim=-1)
            if self.bias is not None:
                y = y + self.bias
        return y if residual is None else residual + y
