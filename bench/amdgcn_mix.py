"""The instruction mix of each packed type's matmul on an AMD target, from the AMDGCN that
Triton's HIP backend emits ahead of time (no GPU needed).

    python bench/amdgcn_mix.py [--target gfx1201] [--rows 1,64] [--dtype bfloat16] [--json F]
    python bench/amdgcn_mix.py --target gfx1100 --types Q4_K --override I8=1   # the int8 path

For each GGUF type the packed matmul (engine.kernels.triton_kernels.packed_matmul) is recorded
on meta tensors for a Qwen3-8B gate/up shape (12288 x 4096: no split K on the target's CU
count, so the K loop has 8-16 trips and stays a loop), compiled for the target
(engine.kernels.kernel_aot), and its K loop found in the AMDGCN text: the backward branch whose
body holds the most WMMA instructions. Every instruction of that body is classified:

    VALU   v_*  (WMMA counted apart)          SALU   s_* arithmetic / logic / moves
    VMEM   global_* / buffer_* loads          LDS    ds_* (shared memory)
    SMEM   s_load* / s_buffer_load*           WMMA   v_wmma_*
    other  s_waitcnt, s_nop, s_delay_alu, branches, barriers, scratch_*

and divided by the weights one thread handles per trip (BN x 256*SB / (32 x warps)): the
per-weight cost of the instruction stream each SIMD lane issues, the same normalization as the
"~4.4 instructions per weight" SASS figure of the H200 in triton_kernels.py's docstring.
The header of the function (VGPRs, scratch, occupancy) is reported too: scratch > 0 is spilling.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.kernels.dot_precision import compiling_for  # noqa: E402
from engine.kernels.kernel_aot import TARGETS, compile_launch, record  # noqa: E402
from engine.kernels.kernel_catalog import _meta, _meta_packed  # noqa: E402
from engine.kernels import triton_kernels as tk  # noqa: E402

SHAPE = (12288, 4096)
CLASSES = ("VALU", "SALU", "VMEM", "LDS", "SMEM", "WMMA", "other")
_INSN = re.compile(r"^\s+([a-z][a-z0-9_]*)\b")
_LABEL = re.compile(r"^(\.LBB\d+_\d+):")
_BRANCH = re.compile(r"^\s+s_(?:c?branch)\w*\s+(\.LBB\d+_\d+)")


def classify(op: str) -> str:
    if op.startswith("v_wmma"):
        return "WMMA"
    if op.startswith("v_"):
        return "VALU"
    if op.startswith(("global_", "buffer_")):
        return "VMEM"
    if op.startswith("ds_"):
        return "LDS"
    if op.startswith(("s_load", "s_buffer_load")):
        return "SMEM"
    if op.startswith(("s_waitcnt", "s_nop", "s_delay_alu", "s_branch", "s_cbranch", "s_barrier",
                      "s_clause", "s_setprio", "s_sleep", "s_endpgm", "s_wait_", "scratch_")):
        return "other"
    if op.startswith("s_"):
        return "SALU"
    return "other"


def k_loop(asm: str) -> list[str]:
    """The instructions of the loop (a label and a later branch back to it) with the most WMMAs."""
    lines = asm.splitlines()
    labels = {}
    best: list[str] = []
    for i, line in enumerate(lines):
        m = _LABEL.match(line)
        if m:
            labels[m.group(1)] = i
        b = _BRANCH.match(line)
        if b and b.group(1) in labels:
            body = [_INSN.match(s).group(1) for s in lines[labels[b.group(1)]:i + 1] if _INSN.match(s)]
            if sum(op.startswith("v_wmma") for op in body) > sum(op.startswith("v_wmma") for op in best):
                best = body
    return best


def header(asm: str, key: str) -> int | None:
    m = re.search(rf";\s*{key}:\s*(\d+)", asm)
    return int(m.group(1)) if m else None


def mix(qtype: str, rows: int, dtype: torch.dtype, target_name: str, override: dict | None = None) -> dict:
    t = TARGETS[target_name]
    n, k = SHAPE
    with compiling_for(t.backend):          # the backend's own configuration (XP, RNE)
        cfg = tk.kernel_config(qtype, n, k, t.units, **(override or {}))
    launches = [launch for launch in record(
        lambda: tk.packed_matmul(_meta(rows, k, dtype=dtype), _meta_packed(qtype, n, k), **cfg),
        t.backend) if launch.name.endswith(("_packed_mm_kernel", "_q4k_i8_kernel"))]   # I8=1: the int8 path
    res = compile_launch(launches[0], t, keep_asm=True)
    if not res.ok:
        return {"qtype": qtype, "rows": rows, "error": res.error}
    asm = res.asm["amdgcn"]
    body = k_loop(asm)
    kw = launches[0].kwargs
    weights_per_thread = kw["BN"] * 256 * kw.get("SB", 1) / (32 * kw["num_warps"])
    counts = {c: 0 for c in CLASSES}
    for op in body:
        counts[classify(op)] += 1
    return {"qtype": qtype, "rows": rows, "dtype": str(dtype).replace("torch.", ""),
            "kernel": launches[0].name.rsplit(".", 1)[-1],
            "wmma": sorted({op for op in body if op.startswith("v_wmma")}),
            "BN": kw["BN"], "warps": kw["num_warps"], "stages": kw["num_stages"], "SB": kw.get("SB", 1),
            "splits": cfg["splits"], "trips": kw["TPS"], "loop_insns": len(body),
            "per_weight": {c: round(v / weights_per_thread, 3) for c, v in counts.items()},
            "total_per_weight": round(len(body) / weights_per_thread, 3),
            "vgprs": header(asm, "NumVgprs"), "scratch": header(asm, "ScratchSize"),
            "occupancy": header(asm, "Occupancy"), "lds": res.shared, "compile_s": round(res.seconds, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="gfx1201", choices=[n for n, t in TARGETS.items()
                                                            if t.backend == "hip"])
    ap.add_argument("--rows", default="1,64", help="activation rows (NMB = ceil(rows/16))")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--types", default=",".join(tk.SUPPORTED_QTYPES), help="GGUF types to compile")
    ap.add_argument("--override", default="", help="kernel_config keys, e.g. SI=0 (the default's A/B)")
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    out = []
    print(f"# {a.target} ({TARGETS[a.target].card}), packed matmul {SHAPE[0]}x{SHAPE[1]}, {a.dtype} "
          f"activations; per weight, per lane, in the K loop")
    print("| type | rows | BN/warps/stages | trips | " + " | ".join(CLASSES) + " | total | VGPRs | "
          "scratch B | LDS B |")
    print("|" + "---|" * (len(CLASSES) + 8))
    for rows in (int(r) for r in a.rows.split(",")):
        override = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in a.override.split(",") if kv}
        for qtype in a.types.split(","):
            r = mix(qtype, rows, dtype, a.target, override)
            out.append(r)
            if "error" in r:
                print(f"| {qtype} | {rows} | compile failed: {r['error']} |")
                continue
            pw = r["per_weight"]
            print(f"| {qtype} | {rows} | {r['BN']}/{r['warps']}/{r['stages']} | {r['trips']} | "
                  + " | ".join(f"{pw[c]:.2f}" for c in CLASSES)
                  + f" | {r['total_per_weight']:.2f} | {r['vgprs']} | {r['scratch']} | {r['lds']} |",
                  flush=True)
    meta = {"date": datetime.date.today().isoformat(), "machine": platform.node(),
            "command": " ".join(sys.argv), "target": a.target, "rows": out}
    if a.json:
        Path(a.json).write_text(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
