#!/usr/bin/env bash
# Device calls for "Same prompt, same tokens" (BENCHMARKS.md). Expects the bundled GGUF joined at
# /tmp/model (../shared/tools/split-model-for-device) and the gguf wheel in .whl. Results in $OUT.
#   bash bench/gpu_exact_all_session.sh new   # specscope doctor, then bench/gpu_exact_all.py on
#                                             # this tree (bfloat16 and float32)
#   bash bench/gpu_exact_all_session.sh old   # the same check on .old/engine_old.tgz (made here
#                                             # with `git archive <commit> engine | gzip`): the
#                                             # control that shows the check sees the leak
set -u
M=/tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
step() { echo "== $* ($(date +%T))"; }
case "${1:-new}" in
new)
  [ -n "${SKIP_DOCTOR:-}" ] || { step doctor
  PYTHONPATH=/tmp/site:$PWD timeout 240 python3 -m specscope.cli doctor --model $M 2>&1 | grep -v Warn | tee $OUT/doctor.txt; }
  step "exactness, this tree"
  timeout ${NEW_S:-420} python3 bench/gpu_exact_all.py --device cuda --model $M ${NEW_ARGS:-} \
    --json $OUT/exact_new.json 2> $OUT/exact_new.log | tee $OUT/exact_new.txt | tail -n 25 ;;
old)
  step "exactness, the old engine (control)"
  rm -rf /tmp/old && mkdir -p /tmp/old && tar xzf .old/engine_old.tgz -C /tmp/old && cp -r bench assets /tmp/old/
  timeout ${OLD_S:-420} python3 /tmp/old/bench/gpu_exact_all.py --device cuda --model $M ${OLD_ARGS:-} \
    --json $OUT/exact_old.json 2> $OUT/exact_old.log | tee $OUT/exact_old.txt | tail -n 25 ;;
esac
step done
