#!/usr/bin/env bash
# One device call: the full lossless matrix on the GPU in bfloat16 and float32 (all 25 prompts,
# lookup and tree at depths 1/4/8/16, widths 1/3, penalties off and on), split into $SHARDS
# shards per dtype run side by side on the one GPU; and the issue-14 sweep on the H200.
# Expects the bundled GGUF at /tmp/model (../shared/tools/split-model-for-device) and gguf in
# /tmp/site. Results in $OUT/matrix.tgz.
set -u
M=/tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf
R=/tmp/res; mkdir -p $R
S=${SHARDS:-8}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
step() { echo "== $* ($(date +%T))"; }
step sweep, code-edit, the issue-14 grid
/usr/bin/time -f "sweep wall %e s" timeout 200 python3 -m specscope.cli sweep --device cuda --model $M \
  --workload code-edit --drafts lookup,tree --depths 2,4,8,16 --widths 1,2,3 --new-tokens 128 \
  --out $R/sweep_h200_code-edit 2>&1 | grep -v -i "warn" | tail -8
step lossless matrix, bf16 and fp32, $S shards each
for dt in bfloat16 float32; do for k in $(seq 0 $((S - 1))); do
  OMP_NUM_THREADS=1 timeout ${MATRIX_S:-330} python3 bench/lossless_matrix.py --device cuda --dtype $dt \
    --model $M --depths 1,4,8,16 --widths 1,3 --shard $k/$S --out $R/matrix_${dt}_$k.json \
    > $R/matrix_${dt}_$k.txt 2>&1 &
done; done
wait
for dt in bfloat16 float32; do
  echo "$dt: $(cat $R/matrix_${dt}_*.txt | grep -c ' ok,') ok, $(cat $R/matrix_${dt}_*.txt | grep -c 'NEAR-TIE') near-tie, $(cat $R/matrix_${dt}_*.txt | grep -c 'FAILURE') failures; summaries:"
  grep -h "cases in" $R/matrix_${dt}_*.txt
done
grep -h "FAILURE\|NEAR-TIE" $R/matrix_*.txt | head
step done
tar czf $OUT/matrix.tgz -C $R .
