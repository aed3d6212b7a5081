"""XP_FUSED: the inputs of the big Q4_K matmuls written in the order the matmul reads them.

engine.kernels.triton_kernels permutes x into the dots' K order (XP, 16-byte loads) with one copy
per call. Where the kernel that writes a matmul's input can write it in that order
(engine.model.fused_layer: the norm before gate|up, the SwiGLU before down), it does, and the
matmul skips its copy (``xp_in``): one launch fewer a matmul, the same values in the same order,
so the same bits. Imported lazily, as triton_kernels (Triton is optional).
"""

from __future__ import annotations

import os

import torch

from .dot_precision import ieee_code
from .triton_kernels import _CODES, _qtype, _variants, device_sms, kernel_config
from .triton_tiles import _xperm_order

# SPECSCOPE_XP_FUSED=0: every matmul permutes its own x (for the A/B)
XP_FUSED = os.environ.get("SPECSCOPE_XP_FUSED", "1") != "0"
_XP_DEST: dict = {}      # (device, k, JS, rdna, si) -> int32 [K]


def xp_dest(w, dtype: torch.dtype, device: torch.device, **override) -> torch.Tensor | None:
    """Where x's column c sits in the order w's matmul reads x, as int32 [K] on `device`
    (x_xp[:, dest[c]] = x[:, c]), or None where that matmul does not permute x (XP off for the
    shape, another tile, XP_FUSED off). A kernel that writes the matmul's input there lets the
    matmul run with ``xp_in=True``. ``override``: as ``kernel_config``'s, the matmul's own."""
    qtype = _qtype(w)
    if not XP_FUSED or qtype not in _CODES:
        return None
    n, k = (int(s) for s in w.shape)
    cfg = kernel_config(qtype, n, k, device_sms(device), **override)
    rdna, si, _, xp = _variants(qtype, k, cfg, ieee_code(dtype))
    if not xp or cfg.get("I8"):
        return None
    key = (device, k, cfg["JS"], rdna, si)
    if key not in _XP_DEST:
        shape, perm = _xperm_order(1, k, cfg["JS"], rdna, si)
        src = torch.arange(k).reshape(shape).permute(perm).reshape(k)   # x_xp[j] = x[src[j]]
        dest = torch.empty(k, dtype=torch.int32)
        dest[src] = torch.arange(k, dtype=torch.int32)
        _XP_DEST[key] = dest.to(device)
    return _XP_DEST[key]
