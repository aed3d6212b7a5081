#!/usr/bin/env bash
# Device-tool session for "Drafts from a model" (BENCHMARKS.md): the roofline with early-exit
# draft passes, then bench_drafts.py with the priced configurations, one sampling mode a call.
#   call 1: mkdir -p /tmp/model && cp .device_model/a/part00 /tmp/model/
#   call 2: cat /tmp/model/part00 .device_model/b/part01 > /tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf
#           && bash bench/gpu_drafts_session.sh greedy        (carry .device_model/b and .whl)
#   call 3: bash bench/gpu_drafts_session.sh t0.7             (carry .whl)
set -u
M=/tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf
MODE=${1:-greedy}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SPECSCOPE_CACHE=/tmp/spcache
step() { echo "== $* ($(date +%T))"; }
if [ ! -f /tmp/spcache/roofline.txt ]; then
  step roofline
  mkdir -p /tmp/spcache
  python3 -m specscope.cli roofline --device cuda --model $M --exit-layers 4,8,12,16,20,24,28,30 \
      2>&1 | grep -v "^  round\|%)" | tee /tmp/spcache/roofline.txt
fi
cp /tmp/spcache/roofline.txt $OUT/; cp /tmp/spcache/profiles/*packed-bfloat16.json $OUT/h200_profile.json
step bench_drafts $MODE
python3 bench/bench_drafts.py --device cuda --model $M --new-tokens 128 --repeats 3 --code-prompts 2 \
    --per-category 2 --modes $MODE --adaptive --exit-layers 8 16 24 28 --ee-depth 4 --self-draft \
    --out drafts_cuda_$MODE 2>&1 | grep -v "^  \[" | tee $OUT/bench_$MODE.txt
cp bench/results/drafts_cuda_$MODE.json $OUT/
step done
