"""Which passes launch with programmatic dependent launch (engine.kernels.pdl): a model whose
pass is mostly launches gains, one whose pass is mostly its matmuls' streaming loses.

Measured on an H100 on 2026-12-06 (BENCHMARKS.md, "Programmatic dependent launch, measured"):
the bundled SmolLM2-135M's one-row step 1.08 -> 0.87 ms (1.24x), its layers' matrices at most
1.1 MB; the 8B-like Q4_K_M's 4.72 -> 5.11 ms with PDL on every launch, 4.72 -> 4.93 ms with
it on every launch but the matmuls over 8 MB (its largest layer matrix, gate|up, is 57 MB). So a model
launches its passes with PDL only where every layer matrix is at most ``MAX_LAYER_BYTES``
(SPECSCOPE_PDL_MAXW=B sets it; 0: every model). Models between the two are not measured.

No Triton here: the model (engine.model.transformer) asks this module at load and sets the
pass's answer around its launches; engine.kernels.pdl reads it.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from typing import Iterator

MAX_LAYER_BYTES = int(os.environ.get("SPECSCOPE_PDL_MAXW", str(8 << 20)) or 0)

_PASS: contextvars.ContextVar[bool | None] = contextvars.ContextVar("specscope_pass_pdl", default=None)


def wants_pdl(largest_layer_matrix_bytes: int) -> bool:
    """Whether a model whose largest layer matrix holds this many bytes launches with PDL."""
    return not MAX_LAYER_BYTES or largest_layer_matrix_bytes <= MAX_LAYER_BYTES


@contextlib.contextmanager
def pass_launches(pdl: bool) -> Iterator[None]:
    """Launches inside are a pass of a model that does (``pdl``) or does not launch with PDL."""
    token = _PASS.set(pdl)
    try:
        yield
    finally:
        _PASS.reset(token)


def pass_pdl() -> bool | None:
    """The pass's answer, None outside a model's pass (a kernel check: the mode decides)."""
    return _PASS.get()
