"""``dot_f32``: a float32 ``tl.dot`` at the precision the launcher chose for its backend.

The precision arrives as the int constexpr ``IEEE`` (``dot_precision.F32_CODES``: Triton's
``if`` takes no strings); only the branch of that code is compiled, so a target never sees a
precision it lacks. Imported lazily, by the Triton kernel modules.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def dot_f32(a, b, acc, IEEE: tl.constexpr):
    """``acc + a @ b`` (``acc`` None: ``a @ b``) for float32 ``a``, ``b`` at precision code
    IEEE: 1 ieee, 2 tf32x3, 3 bf16x3, 4 bf16x6."""
    tl.static_assert(IEEE >= 1 and IEEE <= 4, "IEEE must be a precision code 1..4")
    if IEEE == 1:
        return tl.dot(a, b, acc, input_precision="ieee")
    elif IEEE == 2:
        return tl.dot(a, b, acc, input_precision="tf32x3")
    elif IEEE == 3:
        return tl.dot(a, b, acc, input_precision="bf16x3")
    else:
        return tl.dot(a, b, acc, input_precision="bf16x6")
