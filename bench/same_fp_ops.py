"""Do two engine trees' kernels compute the same arithmetic? Checked without a card: each
launch below is compiled for each target by both trees (engine.kernels.kernel_aot, on meta
tensors), and the floating-point operations of its LLVM IR (fadd, fmul, fma, exp2, the matrix
intrinsics, conversions...) are compared in program order. Equal sequences mean the change
moved addressing, loads or control flow only; a card's exactness check is still the proof.

    python3 bench/same_fp_ops.py OLD_ROOT [--targets sm_90,gfx1201] [--only attn|mm|norm]

OLD_ROOT holds the other tree's `engine/` (`git archive <commit> engine | tar x -C OLD_ROOT`).
Used on 2026-12-07 for the attention kernel's refactor (BENCHMARKS.md, "The XP copies written
by the kernels before them").
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FP = re.compile(r"=\s*(?:(?:fast|contract|nnan|ninf|nsz|reassoc|afn|arcp)\s+)*"
                r"(fadd|fsub|fmul|fdiv|fneg|fcmp \w+|fptrunc|fpext|call [^@]*@([\w.]+))")


def fp_ops(llir: str) -> list[str]:
    ops = []
    for line in llir.splitlines():
        m = FP.search(line.split(", !dbg")[0])
        if not m:
            continue
        if m.group(1).startswith("call"):
            if not re.search(r"fma|exp|max|min|mma|wmma|dot|sqrt|rcp|cvt|bf16|f32", m.group(2)):
                continue
            ops.append(m.group(2))
        else:
            ops.append(m.group(1))
    return ops


def launches(only: str):
    import torch
    from engine.kernels import triton_fused as tf, triton_kernels as tk
    from engine.kernels.catalog_attention import _graph_layout
    from engine.kernels.kernel_catalog import _meta, _meta_packed
    from engine.kernels.triton_attention import layout_attention_triton
    if only in ("", "attn"):
        for hq, hkv, d in ((32, 8, 128), (9, 3, 64)):
            for dt in (torch.bfloat16, torch.float32):
                for rows in (1, 16):
                    def call(hq=hq, hkv=hkv, d=d, dt=dt, rows=rows):
                        kv = _meta(2, hkv, 2048, d, dtype=dt)
                        layout_attention_triton(_meta(rows, hq, d, dtype=dt), kv[0], kv[1],
                                                _graph_layout(rows))
                    yield f"attention {hq}/{hkv}x{d} {str(dt)[6:]} rows {rows}", call
    if only in ("", "mm"):
        for q, n, k in (("Q4_K", 24576, 4096), ("Q4_K", 4096, 12288), ("Q4_1", 1536, 576),
                        ("Q6_K8", 4096, 12288)):
            for dt in (torch.bfloat16, torch.float32):
                yield (f"matmul {q} {n}x{k} {str(dt)[6:]}",
                       lambda q=q, n=n, k=k, dt=dt: tk.packed_matmul(_meta(1, k, dtype=dt),
                                                                     _meta_packed(q, n, k)))
    if only in ("", "norm"):
        yield "residual norm 4096", lambda: tf.residual_norm(
            _meta(1, 3, 4096), _meta(3, 4096, dtype=torch.bfloat16),
            _meta(3, 4096, dtype=torch.bfloat16), _meta(4096, dtype=torch.bfloat16), 1e-6)


def dump(targets: list[str], only: str) -> None:
    """(in a child, with a tree first on sys.path) {target/label: fp ops} as JSON on stdout."""
    import triton
    from triton.compiler import ASTSource
    from engine.kernels import kernel_aot as ka
    by_name = ka.TARGETS
    out = {}
    for name in targets:
        t = by_name[name]
        for label, call in launches(only):
            for i, launch in enumerate(ka.record(call, t.backend, label)):
                options, signature, constexprs, attrs = ka._bind(launch, t)
                ck = triton.compile(ASTSource(launch.kernel, signature, constexprs, attrs),
                                    target=t.gpu_target(), options=options.__dict__)
                out[f"{name} {label} #{i}"] = fp_ops(ck.asm["llir"])
    json.dump(out, sys.stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("old_root")
    ap.add_argument("--targets", default="sm_90,gfx1201")
    ap.add_argument("--only", default="", choices=["", "attn", "mm", "norm"])
    ap.add_argument("--dump", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.dump:
        sys.path.insert(0, a.old_root)
        dump(a.targets.split(","), a.only)
        return 0
    got = {}
    for tag, root in (("old", str(Path(a.old_root).resolve())), ("new", str(ROOT))):
        r = subprocess.run([sys.executable, __file__, root, "--targets", a.targets, "--only", a.only,
                            "--dump"], capture_output=True, text=True, cwd="/")
        if r.returncode:
            print(f"{tag} tree ({root}): {r.stderr.strip().splitlines()[-1]}", file=sys.stderr)
            return 2
        got[tag] = json.loads(r.stdout)
    same = 0
    for key, ops in got["new"].items():
        old = got["old"].get(key)
        verdict = "no such launch in the old tree" if old is None else (
            "same" if old == ops else f"DIFFERENT ({len(old)} -> {len(ops)} ops)")
        same += verdict == "same"
        print(f"{key:<48} {len(ops):>6} fp ops  {verdict}")
    print(f"same floating-point operations: {same}/{len(got['new'])}")
    return 0 if same == len(got["new"]) else 1


if __name__ == "__main__":
    sys.exit(main())
