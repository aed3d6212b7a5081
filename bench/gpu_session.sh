#!/usr/bin/env bash
# One device-tool session: everything the GPU figures in BENCHMARKS.md come from.
# Expects the bundled GGUF at /tmp/model (see ../shared/tools/split-model-for-device) and the
# gguf wheel in .whl/. Results are packed into $OUT/gpu.tgz (the tool returns at most 8 files).
set -u
M=/tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf
R=/tmp/res; mkdir -p $R
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
step() { echo "== $* ($(date +%T))"; }
step roofline
python3 -m specscope.cli roofline --device cuda --model $M --out $R/h200_smollm2_bf16.json 2>&1 | tail -30 | tee $R/roofline.txt
step gpu_check
python3 bench/gpu_check.py --model $M --out $R/gpu_check.json 2>&1 | grep -v Warn
step bench code-edit
python3 -m specscope.cli bench --device cuda --model $M --workload code-edit --new-tokens 256 --repeats 2 --peers transformers --out $R/bench_code 2>&1 | grep -v -i "warn\|it/s" | tail -25
step bench summarization+rag
python3 -m specscope.cli bench --device cuda --model $M --workload specbench:summarization,rag --per-category 5 --new-tokens 128 --repeats 2 --peers transformers --out $R/bench_sumrag 2>&1 | grep -v -i "warn\|it/s" | tail -25
step adaptive
python3 bench/bench_adaptive.py --device cuda --model $M --new-tokens 128 --prompts 3 --depths 2,4,8,12 --widths 1,2,3 2>&1 | tail -25
cp bench/results/adaptive_cuda.json $R/ 2>/dev/null
step done
tar czf $OUT/gpu.tgz -C $R .
