"""Offline sm_90 compile of the Q4_K packed matmul at one row, X1=0 vs X1=1: registers, shared
memory, main-loop SASS instruction count, x loads a trip."""
import os, re, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch
import triton
from triton.compiler import ASTSource
from engine.kernels.kernel_aot import TARGETS, record, _bind
from engine.kernels import triton_kernels as tk
from engine.kernels.kernel_catalog import _meta, _meta_packed

BIN = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
t = TARGETS["sm_90"]
n, k = int(sys.argv[1]) if len(sys.argv) > 1 else 28672, int(sys.argv[2]) if len(sys.argv) > 2 else 8192
extra = dict(a.split("=") for a in sys.argv[3:])
extra = {a: int(b) for a, b in extra.items()}
for x1, xp in ((0, 0), (1, 0), (0, 1), (1, 1)):
    cfg = dict(BN=64, num_warps=4, num_stages=3, JS=8, SB=1, X1=x1, XP=xp)
    cfg.update(extra)
    M = cfg.pop('M', 1)
    launches = [l for l in record(lambda: tk.packed_matmul(_meta(M, k, dtype=torch.bfloat16), _meta_packed("Q4_K", n, k), **cfg), "cuda") if "packed_mm" in l.name]
    L = launches[0]
    options, signature, constexprs, attrs = _bind(L, t)
    ck = triton.compile(ASTSource(L.kernel, signature, constexprs, attrs), target=t.gpu_target(), options=options.__dict__)
    d = f"/tmp/x1/x1_{x1}_xp{xp}_m{M}"
    os.makedirs(d, exist_ok=True)
    open(f"{d}/k.cubin", "wb").write(ck.asm["cubin"])
    open(f"{d}/k.ptx", "w").write(ck.asm["ptx"])
    open(f"{d}/k.ttgir", "w").write(ck.asm["ttgir"])
    sass = subprocess.run([f"{BIN}/cuobjdump", "-sass", f"{d}/k.cubin"], capture_output=True, text=True).stdout
    open(f"{d}/k.sass", "w").write(sass)
    res = subprocess.run([f"{BIN}/cuobjdump", "-res-usage", f"{d}/k.cubin"], capture_output=True, text=True).stdout
    regs = re.search(r"REG:(\d+)", res).group(1)
    # instructions: lines like "        /*0a10*/   LDG.E ... ;"
    ins = [(int(m.group(1), 16), m.group(2).strip()) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    # main loop: the backward branch with the largest span
    loops = []
    for addr, txt in ins:
        m = re.search(r"BRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))", txt)
        if m and m.group(1):
            tgt = int(m.group(1), 16)
            if tgt < addr:
                loops.append((addr - tgt, tgt, addr))
    if not loops:
        # labels form
        labels = {}
        for m in re.finditer(r"\.L_x_(\d+):\s*\n\s*/\*([0-9a-f]+)\*/", sass):
            labels[m.group(1)] = int(m.group(2), 16)
        for addr, txt in ins:
            m = re.search(r"BRA\s+`\(\.L_x_(\d+)\)", txt)
            if m and m.group(1) in labels and labels[m.group(1)] < addr:
                loops.append((addr - labels[m.group(1)], labels[m.group(1)], addr))
    span, lo, hi = max(loops)
    body = [txt for a, txt in ins if lo <= a <= hi]
    def cnt(pat):
        return sum(1 for b in body if re.search(pat, b))
    keys = [("LDGSTS", r"LDGSTS"), ("LDGSTS16", r"LDGSTS.*\.128"), ("LDG", r"\bLDG\.E"), ("LDGDEPBAR", r"LDGDEPBAR"),
            ("LDS", r"\bLDS(\.|\s)"), ("LDSM", r"LDSM"), ("STS", r"\bSTS(\.|\s)"), ("HGMMA", r"HGMMA"), ("BAR", r"\bBAR"),
            ("WARPGROUP", r"WARPGROUP"), ("SEL", r"\bSEL"), ("PRMT", r"PRMT"), ("SHFL", r"SHFL")]
    counts = ", ".join(f"{a} {cnt(b)}" for a, b in keys)
    print(f"X1={x1} XP={xp} M={M} {n}x{k}: regs {regs}, shared {ck.metadata.shared} B, main loop {len(body)} instr "
          f"(0x{lo:x}..0x{hi:x}); {counts}", flush=True)
