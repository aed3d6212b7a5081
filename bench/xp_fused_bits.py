"""XP_FUSED's bits on a card: the fused layer with the norm before gate|up and the SwiGLU before
down writing their outputs in the next matmul's XP order (engine.model.fused_layer,
engine.kernels.xp_order.xp_dest) against the same model with every matmul permuting its
own x (the path before), on one runtime, eager (graphs off, so the switch takes effect):
the logits of verify passes of 1, 2, 5, 16, 17, 33 rows at context 1,000 must be equal bit
for bit.

    python3 bench/xp_fused_bits.py MODEL.gguf
"""
import sys

import torch

sys.path.insert(0, ".")
from engine.io.load import load_model  # noqa: E402
from engine.model.runtime import Runtime, chain  # noqa: E402

rt = Runtime(load_model(sys.argv[1]), device="cuda", dtype="bfloat16", capacity=2048, graphs=False)
fused = rt.model.fused
assert fused is not None, "the fused forward does not apply to this model here"
print(f"layers {len(fused.xp)}: gate|up inputs in the XP order {sum(a is not None for a, _ in fused.xp)}, "
      f"down inputs {sum(b is not None for _, b in fused.xp)}", flush=True)
S = rt.session(1100)
g = torch.Generator().manual_seed(0)
S.prefill(torch.randint(10, 40000, (1000,), generator=g).tolist())
rows = (1, 2, 5, 16, 17, 33)
toks = {r: torch.randint(10, 40000, (r,), generator=g).tolist() for r in rows}


def logits() -> dict:
    return {r: S.scratch(toks[r], *chain(r), at=1000).logits.clone() for r in rows}


new = logits()
keep = fused.xp
fused.xp = [(None, None)] * len(keep)
old = logits()
fused.xp = keep
again = logits()
same = [r for r in rows if torch.equal(new[r], old[r]) and torch.equal(new[r], again[r])]
print(f"xp fused: identical {len(same)}/{len(rows)} (rows {', '.join(map(str, rows))}); "
      f"max |diff| {max(float((new[r] - old[r]).abs().max()) for r in rows)}", flush=True)
sys.exit(0 if len(same) == len(rows) else 1)
