"""Do two engine trees compile the GPU kernels to the same floating-point arithmetic? A check that
needs no card (for a session with no device lent): the default path's launches (the packed
matmul of the bundled model's and the 8B's shapes, its split partials and SwiGLU epilogue, the
residual norm, the split SwiGLU) are compiled ahead of time for sm_90 and gfx1201 from each tree
(engine.kernels.kernel_aot), and each kernel's floating-point instructions (conversions, dots,
shuffles of reductions included) are compared in order, their registers renamed by first use:
the same sequence means the same operations on the same operands in the same order, so the same
bits, whatever the integer and address code around them does.

    git archive <commit> engine | tar x -C /tmp/old
    python bench/fp_dataflow_ab.py /tmp/old .       # prints one line a kernel and target

"same dataflow" is the strong answer; "same fp ops" (the opcodes in order, register pairing
differing) is what an elementwise kernel shows when its elements are interleaved otherwise.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

_FP = re.compile(r"^(fma|add|sub|mul|div|rcp|rsqrt|sqrt|ex2|lg2|cvt|wgmma|mma|max|min|neg|abs|shfl"
                 r"|v_fma|v_add_f|v_mul_f|v_sub_f|v_cvt|v_max_f|v_min_f|v_exp|v_rsq|v_rcp|v_wmma"
                 r"|v_pk_|v_dot|v_fmac|v_mac|v_div|v_ldexp|v_med3|ds_swizzle|v_mov_b32_dpp|ds_bpermute)")
_INT = re.compile(r"^(add|sub|mul|max|min|neg|abs)\.(s|u|b|lo|hi|wide)")
_REG = re.compile(r"%[a-z]+\d+|\bv\[?\d+(:\d+)?\]?|\bs\[?\d+(:\d+)?\]?")


def dump(root: str) -> dict:
    """{"target:case:i:kernel": asm} for the default path's launches, compiled from `root`."""
    sys.path.insert(0, root)
    import torch
    from engine.kernels import kernel_catalog as kc
    from engine.kernels import triton_fused as tf
    from engine.kernels import triton_kernels as tk
    from engine.kernels.kernel_aot import TARGETS, compile_launch, record
    meta, packed, bf = kc._meta, kc._meta_packed, torch.bfloat16
    cases = {
        "q4_1 576x576": lambda: tk.packed_matmul(meta(1, 576, dtype=bf), packed("Q4_1", 576, 576)),
        "q4_1 partials": lambda: tk.packed_partials(meta(1, 1536, dtype=bf), packed("Q4_1", 576, 1536)),
        "q4_k swiglu": lambda: tk.packed_swiglu(meta(1, 4096, dtype=bf), packed("Q4_K", 24576, 4096)),
        "q6_k8 16 rows": lambda: tk.packed_partials(meta(16, 12288, dtype=bf), packed("Q6_K8", 4096, 12288)),
        "residual norm": lambda: tf.residual_norm(meta(3, 2, 576), meta(2, 576, dtype=bf),
                                                  meta(2, 576, dtype=bf), meta(576, dtype=bf), 1e-6),
        "split swiglu": lambda: tf.reduce_swiglu(meta(3, 2, 3072), 32, meta(2, 1536, dtype=bf)),
    }
    out = {}
    for name in ("sm_90", "gfx1201"):
        t = TARGETS[name]
        for case, call in cases.items():
            for i, launch in enumerate(record(call, t.backend)):
                asm = compile_launch(launch, t, keep_asm=True).asm
                out[f"{name}:{case}:{i}:{launch.name.rsplit('.', 1)[-1]}"] = asm.get("ptx") or asm.get("amdgcn", "")
    return out


def fp_lines(asm: str) -> list[str]:
    """The floating-point instructions in order, registers renamed by first use."""
    names: dict[str, str] = {}
    out = []
    for line in asm.splitlines():
        line = line.strip()
        op = re.split(r"\s", line)[0]
        if not _FP.match(op) or _INT.match(op) or any(t in op for t in (".s32", ".u32", ".s64", ".u64")):
            continue
        out.append(_REG.sub(lambda m: names.setdefault(m.group(0), f"R{len(names)}"), line))
    return out


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--dump":     # child: one tree per process
        json.dump(dump(sys.argv[2]), open(sys.argv[3], "w"))
        return
    old, new = sys.argv[1], sys.argv[2]
    got = []
    for i, root in enumerate((old, new)):
        path = f"/tmp/fp_dataflow_{i}.json"
        subprocess.run([sys.executable, __file__, "--dump", root, path], check=True)
        got.append(json.load(open(path)))
    for key in sorted(got[0]):
        a, b = fp_lines(got[0][key]), fp_lines(got[1].get(key, ""))
        ops = [x.split()[0] for x in a] == [x.split()[0] for x in b]
        print(f"{key}: {'same dataflow' if a == b else 'same fp ops' if ops else 'DIFFERENT'} ({len(a)} fp instructions)")


if __name__ == "__main__":
    main()
