#!/usr/bin/env bash
# The CUDA packed kernels of .old/engine_old.tgz (`git archive <commit> engine | gzip`) against
# this tree's, bit for bit (bench/kernel_same_bits.py), one process a type and tree, in parallel.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
rm -rf /tmp/old && mkdir -p /tmp/old && tar xzf .old/engine_old.tgz -C /tmp/old
export PYTHONUNBUFFERED=1
TYPES="Q8_0 Q4_0 Q4_1 Q4_K Q5_K Q6_K Q6_K8"
for t in $TYPES; do
  (cd /tmp/old && PYTHONPATH=/tmp/old:$OLDPWD:/tmp/site python3 $OLDPWD/bench/kernel_same_bits.py save /tmp/old_$t.pt $t > /tmp/old_$t.log 2>&1) &
  PYTHONPATH=$PWD:/tmp/site python3 bench/kernel_same_bits.py save /tmp/new_$t.pt $t > /tmp/new_$t.log 2>&1 &
done
wait
grep -h "engine from" /tmp/old_Q8_0.log /tmp/new_Q8_0.log
tail -n 2 /tmp/*_Q*.log | grep -i -B1 error | head
python3 bench/kernel_same_bits.py compare $(echo $TYPES | sed 's#\([^ ]*\)#/tmp/old_\1.pt#g; s/ /,/g') \
  $(echo $TYPES | sed 's#\([^ ]*\)#/tmp/new_\1.pt#g; s/ /,/g') | tee "$OUT/same_bits.txt"
