"""The kernel catalog's launches and smoke checks of the matmul tails (engine.kernels.
triton_kernels.packed_residual_norm / packed_swiglu with ``tail``; opt-in, SPECSCOPE_TAIL=1):
engine.kernels.kernel_catalog's fused layer site calls these."""

from __future__ import annotations

from typing import Iterator

import torch

from engine.kernels.dot_precision import compiling_for
from engine.kernels.kernel_aot import Target
from engine.kernels.kernel_catalog import (DTYPES, HIDDEN, Call, Smoke, _dt, _meta, _meta_packed,
                                           _tolerances, random_packed)


def tail_configs(t: Target, scope: str, dtype: torch.dtype) -> Iterator[tuple[str, Call]]:
    """The residual + norm and the SwiGLU in a split matmul's tail, one row (a plain step): the
    bundled model's down, the 8B's down, the bundled gate|up (where the target splits it), and
    the order-free residual norm the rows past a tail take. Not in the kernels scope (make
    test): the tails are opt-in (SPECSCOPE_TAIL=1); quick and full compile them."""
    from engine.kernels import triton_fused as tf
    from engine.kernels import triton_kernels as tk
    if scope == "kernels":      # make test: the tails are opt-in; doctor --compile-for has them
        return
    yield (f"residual norm, order-free {_dt(dtype)} 576 S3",      # the rows the tails leave
           lambda d=dtype: tf.residual_norm(_meta(3, 9, 576), _meta(9, 576, dtype=d),
                                            _meta(9, 576, dtype=d), _meta(576, dtype=d), 1e-6,
                                            order_free=True))
    for q, (n, k) in (("Q4_1", (576, 1536)), ("Q4_K", (4096, 12288)), ("Q4_1", (3072, 576))):
        with compiling_for(t.backend):
            cfg = tk.kernel_config(q, n, k, t.units)
        if n in HIDDEN:
            yield (f"residual norm in the tail {q} {_dt(dtype)} {n}x{k}",
                   lambda n=n, k=k, q=q, d=dtype, c=cfg: tk.packed_residual_norm(
                       _meta(1, k, dtype=d), _meta_packed(q, n, k), _meta(1, n, dtype=d),
                       _meta(1, n, dtype=d), _meta(n, dtype=d), 1e-6, tail=True, **c))
        elif cfg["splits"] > 1:
            yield (f"SwiGLU in the tail {q} {_dt(dtype)} {n}x{k}",
                   lambda n=n, k=k, q=q, d=dtype, c=cfg: tk.packed_swiglu(
                       _meta(1, k, dtype=d), _meta_packed(q, n, k), tail=True, **c))


def tail_smoke(device: torch.device, g: torch.Generator, dtypes=DTYPES) -> Smoke:
    """The residual + norm and the SwiGLU in a split matmul's tail against their own kernels
    over the same partials, bit for bit (each dtype; 1 and 2 rows; 4 splits): the rows a tail
    runs must equal the rows the separate kernels run (checked whether SPECSCOPE_TAIL is on or
    not: the tails are opt-in, measured no faster on an H100)."""
    from engine.kernels import triton_fused as tf
    from engine.kernels import triton_kernels as tk
    out = []
    pw, _ = random_packed("Q4_K", 128, 1024, seed=7)
    gu, _ = random_packed("Q4_K", 128, 1024, seed=8)
    pw, gu = pw.to(device), gu.to(device)
    nw = torch.rand(128, generator=g).to(device)
    for dtype, _ in _tolerances(dtypes):
        for m in (1, 2):
            a = torch.randn(m, 1024, generator=g).to(device, dtype)
            x0 = torch.randn(m, 128, generator=g).to(device, dtype)
            xa, ha, xb, hb = x0.clone(), torch.empty_like(x0), x0.clone(), torch.empty_like(x0)
            tk.packed_residual_norm(a, pw, xa, ha, nw.to(dtype), 1e-6, tail=True, splits=4)
            tf.residual_norm(tk.packed_partials(a, pw, splits=4), xb, hb, nw.to(dtype), 1e-6,
                             order_free=True)
            out.append((f"tail residual + norm {_dt(dtype)} {m} row(s): x", xa.double().cpu(),
                        xb.double().cpu(), 0.0))
            out.append((f"tail residual + norm {_dt(dtype)} {m} row(s): h", ha.double().cpu(),
                        hb.double().cpu(), 0.0))
            got = tk.packed_swiglu(a, gu, tail=True, splits=4)
            want = tk.swiglu_from_partials(tk.packed_partials(a, gu, splits=4),
                                           tk.swiglu_block(gu, device), torch.empty_like(got))
            out.append((f"tail SwiGLU {_dt(dtype)} {m} row(s)", got.double().cpu(),
                        want.double().cpu(), 0.0))
    return out
