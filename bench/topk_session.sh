#!/usr/bin/env bash
# Device call for the GPU top-k (engine.kernels.triton_topk; BENCHMARKS.md "The top-k in two
# launches"). Expects the bundled GGUF joined at /tmp/model and the gguf wheel in .whl.
#   bash bench/topk_session.sh   # the top-k smoke on the card (float64 sort, bit for bit);
#                                # our decode at depth 1000 with torch's top-k and with ours,
#                                # interleaved, 2 rounds; then bench/gpu_exact_all_session.sh new
#                                # without the doctor (SKIP_DOCTOR=1)
set -u
M=/tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
python3 - <<'PY' | tee "$OUT/topk_smoke.txt"
import torch
from engine.kernels.kernel_catalog import _topk_smoke
for label, got, want, tol in _topk_smoke(torch.device("cuda")):
    print(f"{label}: {'same' if torch.equal(got, want) else 'DIFFERENT'}")
PY
for r in 1 2; do
  order="1 0"; [ $r = 2 ] && order="0 1"
  for t in $order; do
    SPECSCOPE_TORCH_TOPK=$t timeout 120 python3 bench/gpu_speed.py decode --model $M \
      --out "$OUT/decode_torchtopk${t}_$r" 2>&1 | grep "^decode" | sed "s/^/SPECSCOPE_TORCH_TOPK=$t /"
  done
done | tee "$OUT/decode_ab.txt"
SKIP_DOCTOR=1 bash bench/gpu_exact_all_session.sh new
