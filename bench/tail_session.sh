#!/usr/bin/env bash
# Device calls for issue 36 (BENCHMARKS.md, "The step after a split matmul in its tail"): the
# residual + norm and the split SwiGLU run in the matmul's tail (SPECSCOPE_TAIL=1, opt-in)
# (measured 2026-12-05 on an H100: exact, no faster; BENCHMARKS.md)
# against their own launches (SPECSCOPE_TAIL=0), one tree, and the figures beside
# llama.cpp built in the same session. Expects the bundled GGUF joined at /tmp/model
# (../shared/tools/split-model-for-device), the gguf wheel in .whl, llama.cpp's source in .peers
# (../shared/tools/llamacpp-on-device) and the tokenizer GGUF in .device_tok. Results in $OUT.
#   bash bench/tail_session.sh exact   # llama.cpp built in the background (llama-bench,
#                                      # llama-speculative-simple) while the doctor and
#                                      # bench/gpu_exact_all_session.sh new run with the tails
#                                      # on (TAIL=0 for the default path)
#   bash bench/tail_session.sh speed   # bundled: host_steps TAIL 0 / 1 interleaved twice; 3
#                                      # rounds of llama-bench tg128 d1000 and our decode
#                                      # (TAIL 0 / 1); the one-row pass's kernels
#   bash bench/tail_session.sh big     # the 8B-like Q4_K_M made here: llama-bench tg128 d1000
#                                      # and -p 16 / -p 1 at d1000 against our decode and
#                                      # pass (TAIL 0 / 1), 2 rounds; its one-row kernels
#   bash bench/tail_session.sh bigfresh  # the same 8B figures in one call on a fresh machine
#                                      # (llama.cpp builds meanwhile; tails off)
#   bash bench/tail_session.sh tree    # bundled: llama.cpp's n-gram speculation and ours on
#                                      # the same prompts (llamacpp_spec.py, tree_vs_llamacpp.py)
set -u
. bench/device_session.sh
decode() {  # model, tail, tag
  SPECSCOPE_TAIL=$2 timeout 200 python3 bench/gpu_speed.py decode --model $1 --out "$OUT/decode_t$2_$3" \
    2>&1 | grep "^decode" | sed "s/^/tail=$2 /"
}
case "${1:-speed}" in
exact)
  lcpp_build 10 llama-bench llama-speculative-simple &
  SPECSCOPE_TAIL=${TAIL:-1} bash bench/gpu_exact_all_session.sh new
  wait ;;
speed)
  host_steps_ab SPECSCOPE_TAIL 3 0 1 0 1
  for r in 1 2 3; do
    order="0 1"; [ $r = 2 ] && order="1 0"
    tg $M bundled_$r
    for t in $order; do decode $M $t $r; done
  done
  step "kernels, tail 1 and 0"
  for t in 1 0; do
    SPECSCOPE_TAIL=$t timeout 150 python3 bench/gpu_speed.py kernels --model $M --out "$OUT/k_t$t" --top 12 \
      2>&1 | grep -v Warn | tail -16
  done ;;
big)
  step "8B-like model"
  [ -f $M8 ] || timeout 300 python3 bench/make_model.py --shape qwen3-8b --recipe Q4_K_M --out $M8 \
    --tokenizer-from .device_tok/tokenizer.gguf 2>&1 | tail -2
  for r in 1 2; do
    order="0 1"; [ $r = 2 ] && order="1 0"
    tg $M8 8b_$r
    for t in $order; do decode $M8 $t 8b_$r; done
  done
  step "passes: llama-bench -p 1 / 16 at d1000; ours"
  [ -x $B/llama-bench ] && $B/llama-bench -m $M8 -ngl 99 -fa 1 -p 1,16 -n 0 -d 1000 -r 3 -o json \
    > "$OUT/lcpp_pass_8b.json" 2>/dev/null && python3 -c "import json,sys; [print('llama.cpp pass', r['n_prompt'], 'rows', round(1000 * r['n_prompt'] / r['avg_ts'], 2), 'ms') for r in json.load(open(sys.argv[1]))]" "$OUT/lcpp_pass_8b.json"
  for t in 1 0; do
    SPECSCOPE_TAIL=$t timeout 200 python3 bench/speed_steps.py $M8 quick 2>&1 | grep -v Warn | tail -4 | sed "s/^/tail=$t /"
  done
  step "kernels, 8B one row"
  timeout 200 python3 bench/gpu_speed.py kernels --model $M8 --out "$OUT/k8b" --top 14 2>&1 | grep -v Warn | tail -18 ;;
bigfresh)   # a fresh machine: llama.cpp builds while the 8B model is made and ours is measured
  lcpp_build 14 llama-bench > /tmp/lcpp_rc.txt 2>&1 &
  step "8B-like model"
  [ -f $M8 ] || timeout 300 python3 bench/make_model.py --shape qwen3-8b --recipe Q4_K_M --out $M8 \
    --tokenizer-from .device_tok/tokenizer.gguf 2>&1 | tail -2
  for r in 1 2; do decode $M8 0 8b_$r; done
  timeout 150 python3 bench/speed_steps.py $M8 quick 2>&1 | grep -v Warn | tail -4
  step "kernels, 8B one row"
  timeout 150 python3 bench/gpu_speed.py kernels --model $M8 --out "$OUT/k8b" --top 14 2>&1 | grep -v Warn | tail -18
  step "waiting for llama.cpp"; wait; cat /tmp/lcpp_rc.txt
  tg $M8 8b_1
  decode $M8 0 8b_3
  tg $M8 8b_2
  [ -x $B/llama-bench ] && $B/llama-bench -m $M8 -ngl 99 -fa 1 -p 1,16 -n 0 -d 1000 -r 3 -o json \
    > "$OUT/lcpp_pass_8b.json" 2>/dev/null && python3 -c "import json,sys; [print('llama.cpp pass', r['n_prompt'], 'rows', round(1000 * r['n_prompt'] / r['avg_ts'], 2), 'ms') for r in json.load(open(sys.argv[1]))]" "$OUT/lcpp_pass_8b.json" ;;
tree)
  step "llama.cpp n-gram speculation"
  timeout 300 python3 bench/llamacpp_spec.py --build /tmp/lcpp/llama.cpp/build --model $M --per-category 3 \
    --tokens 128 --extra "-ngl 99 -fa on" --out $OUT/llamacpp_spec_gpu.json 2>&1 | tail -6
  step "ours on the same prompts"
  timeout 300 python3 bench/tree_vs_llamacpp.py --model $M --llama $OUT/llamacpp_spec_gpu.json \
    --out $OUT/tree_vs_llamacpp.json 2>&1 | tail -20 ;;
esac
step done
