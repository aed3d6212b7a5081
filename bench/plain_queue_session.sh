#!/usr/bin/env bash
# Device calls for issue 36 item 2 (BENCHMARKS.md, "Plain steps queued on the device"). Expects
# the bundled GGUF joined at /tmp/model (../shared/tools/split-model-for-device), the gguf wheel
# in .whl, the tree before in .old/engine_old.tgz (`git archive <commit> engine | gzip`) and
# llama.cpp's source in .peers (../shared/tools/llamacpp-on-device). Results in $OUT.
#   bash bench/plain_queue_session.sh exact   # llama.cpp built in the background while
#                                             # bench/gpu_exact_all_session.sh new runs
#   bash bench/plain_queue_session.sh speed   # bench/host_steps.py, before / after interleaved
#                                             # twice; then 3 rounds of llama-bench tg128 at
#                                             # depth 1000 and our decode there, both trees
set -u
. bench/lcpp_build.sh
M=/tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf
B=/tmp/lcpp/llama.cpp/build/bin
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
rm -rf /tmp/old && mkdir -p /tmp/old && tar xzf .old/engine_old.tgz -C /tmp/old && cp -r bench assets /tmp/old/
tree() { if [ "$1" = old ]; then echo /tmp/old; else echo "$PWD"; fi; }
case "${1:-speed}" in
exact)
  lcpp_build 8 llama-bench &
  bash bench/gpu_exact_all_session.sh new
  wait ;;
speed)
  for t in old new old new; do
    d=$(tree $t); echo "== host_steps, $t"
    (cd "$d" && PYTHONPATH=$d:/tmp/site timeout 200 python3 bench/host_steps.py $M --prompts 3 \
      --tokens 96 --json "$OUT/host_steps_${t}_$SECONDS.json" 2>&1 | grep -v Warn | sed -n 2,7p)
  done
  for r in 1 2 3; do
    order="old new"; [ $r = 2 ] && order="new old"
    [ -x $B/llama-bench ] && $B/llama-bench -m $M -ngl 99 -fa 1 -p 0 -n 128 -d 1000 -r 3 -o json \
      > "$OUT/lcpp_tg_$r.json" 2>/dev/null && python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[0]; print('llama.cpp tg128 d1000', round(r['avg_ts'], 1), 'tok/s')" "$OUT/lcpp_tg_$r.json"
    for t in $order; do
      d=$(tree $t)
      (cd "$d" && PYTHONPATH=$d:/tmp/site timeout 120 python3 bench/gpu_speed.py decode --model $M \
        --out "$OUT/decode_${t}_$r" 2>&1 | grep "^decode" | sed "s/^/$t /")
    done
  done ;;
esac
