#!/usr/bin/env bash
# Re-measure of the priced configurations after a chooser change (both modes, one call):
#   call 1: mkdir -p /tmp/model && cp .device_model/a/part00 /tmp/model/
#   call 2: cat /tmp/model/part00 .device_model/b/part01 > /tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf
#           && bash bench/gpu_drafts_rerun.sh        (carry .device_model/b and .whl)
set -u
M=/tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SPECSCOPE_CACHE=/tmp/spcache
mkdir -p /tmp/spcache
python3 -m specscope.cli roofline --device cuda --model $M --exit-layers 8,16,24,28,30 2>&1 | grep -v "^  round\|%)" > $OUT/roofline.txt
for MODE in greedy t0.7; do
  python3 bench/bench_drafts.py --device cuda --model $M --new-tokens 128 --repeats 3 --code-prompts 2 \
      --per-category 3 --modes $MODE --adaptive --exit-layers 28 --ee-depth 4 \
      --only tree tree-ad ee-ad-28 takeover-ad-28 --out drafts_cuda_$MODE 2>&1 | grep -v "^  \[" | tee $OUT/bench_$MODE.txt
  cp bench/results/drafts_cuda_$MODE.json $OUT/
done
