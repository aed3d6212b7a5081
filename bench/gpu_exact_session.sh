#!/usr/bin/env bash
# One device call for the exact-on-GPU figures (BENCHMARKS.md, "Exact on the GPU"): op and model
# bitwise checks, verify-pass cost new vs old, CPU pass cost, code-edit tok/s, and the lossless
# matrix in bfloat16 and float32 (4 shards each, run side by side on the one GPU).
# Expects the bundled GGUF at /tmp/model (../shared/tools/split-model-for-device) and gguf in
# /tmp/site. Results in $OUT/exact.tgz.
set -u
M=/tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf
R=/tmp/res; mkdir -p $R
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
step() { echo "== $* ($(date +%T))"; }
step kernels alone
timeout 120 python3 bench/gpu_exact.py ops --out $R/ops.json 2>&1 | grep -v Warn | cut -c1-400
step model rows and pass cost
timeout 200 python3 bench/gpu_exact.py model --model $M --out $R/model.json 2>&1 | grep -v Warn
step code-edit tok/s
for w in auto dequantized; do
  timeout 150 python3 -m specscope.cli bench --device cuda --model $M --weights $w --workload code-edit \
    --new-tokens 256 --repeats 2 --peers --out $R/bench_code_$w 2>&1 | grep "^| ours"
done
step lossless matrix, bf16 and fp32, 4 shards each
for dt in bfloat16 float32; do for k in 0 1 2 3; do
  OMP_NUM_THREADS=2 timeout ${MATRIX_S:-300} python3 bench/lossless_matrix.py --device cuda --dtype $dt --model $M --depths 1,4,8,16 \
    --widths 1,3 --shard $k/4 --out $R/matrix_${dt}_$k.json > $R/matrix_${dt}_$k.txt 2>&1 &
done; done
wait
tail -n 4 $R/matrix_*.txt
grep -h -c " ok," $R/matrix_*.txt; grep -h "FAILURE\|NEAR-TIE" $R/matrix_*.txt | head
step done
tar czf $OUT/exact.tgz -C $R .
