#!/usr/bin/env bash
# Device calls for issue 36's window cost (the host's work a window, its one copy back): the
# exactness check on this tree, then bench/host_steps.py on this engine against an older one
# (.old/engine_old.tgz, made here with `git archive <commit> engine | gzip`), alternated, then the
# tree against llama.cpp. Expects the bundled GGUF joined at /tmp/model
# (../shared/tools/split-model-for-device), the gguf wheel in .whl and llama.cpp's source in
# .peers (../shared/tools/llamacpp-on-device). Results in $OUT.
#   bash bench/window_session.sh check   # llama.cpp (if .peers is carried) built in the background while the doctor and
#                                        # bench/gpu_exact_all_session.sh new run; then
#                                        # host_steps new / old / old / new
#   bash bench/window_session.sh tree    # bench/pdl_session.sh tree (llama.cpp's n-gram
#                                        # speculation and ours on the same prompts)
#   bash bench/window_session.sh floor   # the same, this tree's fixed tree and default against
#                                        # the older engine's default, alternated
set -u
. bench/device_session.sh
hs() {  # tag, engine root
  step "host_steps, $1"
  timeout 200 python3 $2/bench/host_steps.py $M --prompts ${PROMPTS:-3} --tokens 96 \
    --json "$OUT/host_steps_$1_$SECONDS.json" 2>&1 | grep -v Warn | sed -n 2,9p
}
case "${1:-check}" in
check)
  [ -d .peers ] && lcpp_build 10 llama-bench llama-speculative-simple > /tmp/lcpp_rc.txt 2>&1 &
  bash bench/gpu_exact_all_session.sh new
  step "waiting for llama.cpp"; wait; cat /tmp/lcpp_rc.txt
  rm -rf /tmp/old && mkdir -p /tmp/old && tar xzf .old/engine_old.tgz -C /tmp/old && cp -r bench assets /tmp/old/
  for t in new old old new; do
    if [ $t = new ]; then hs new $PWD; else hs old /tmp/old; fi
  done ;;
tree)
  bash bench/pdl_session.sh tree ;;
floor)  # llama.cpp's n-gram speculation, then this tree's fixed tree and user default against the
        # older engine's default (/tmp/old, unpacked by `check` on this machine), rounds alternated
  [ -x $B/llama-speculative-simple ] || lcpp_build 16 llama-bench llama-speculative-simple
  step "llama.cpp n-gram speculation"
  timeout 300 python3 bench/llamacpp_spec.py --build /tmp/lcpp/llama.cpp/build --model $M --per-category 3 \
    --tokens 128 --extra "-ngl 99 -fa on" --out $OUT/llamacpp_spec_gpu.json 2>&1 | tail -6
  for t in new old old new; do
    step "ours, $t"
    if [ $t = new ]; then r=$PWD c=none,tree:8:3,default; else r=/tmp/old c=default; fi
    timeout 200 python3 $r/bench/tree_vs_llamacpp.py --model $M --llama $OUT/llamacpp_spec_gpu.json \
      --configs $c --out $OUT/tvl_${t}_$SECONDS.json 2>&1 | grep -v Warn | tail -9
  done ;;
esac
step done
