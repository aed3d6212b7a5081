#!/usr/bin/env bash
# Device calls for issue 36's SF tile (engine.kernels.triton_sf; SPECSCOPE_SF=0|1). Expects the
# gguf wheel in .whl, llama.cpp's source in .peers and the tokenizer GGUF in .device_tok; the
# 8B-like Q4_K_M is made on the card. Results in $OUT.
#   bash bench/sf_session.sh ab      # llama.cpp built in the background; the kernel A/B
#                                    # (bench/sf_ab.py); the 8B-like passes SF 0 / 1 / 1 / 0
#                                    # and SF's chains of rows against one-row passes
#   bash bench/sf_session.sh split   # llama.cpp built in the background; the 8B-like passes with
#                                    # CUDA Q4_K's split rule (new), without it (old), with SF;
#                                    # chains of rows against one-row passes, new and SF
#   bash bench/sf_session.sh decode  # llama-bench tg128 d1000 and -p 1 / 16 against our decode
#                                    # new / old / SF, two interleaved rounds
set -u
. bench/device_session.sh
case "${1:-ab}" in
ab)
  [ -x $B/llama-bench ] || lcpp_build 14 llama-bench > /tmp/lcpp_rc.txt 2>&1 &
  step "8B-like model"
  [ -f $M8 ] || timeout 200 python3 bench/make_model.py --shape qwen3-8b --recipe Q4_K_M --out $M8 \
    --tokenizer-from .device_tok/tokenizer.gguf 2>&1 | tail -1
  step "kernel A/B"
  timeout 300 python3 bench/sf_ab.py --json $OUT/sf_ab.json 2>&1 | grep -v Warn
  step "8B passes"
  for s in 0 1 1 0; do
    SPECSCOPE_SF=$s timeout 100 python3 bench/speed_steps.py $M8 quick 2>&1 | grep -v Warn | tail -1 | sed "s/^/sf=$s /"
  done
  step "SF: chains of rows against one-row passes"
  SPECSCOPE_SF=1 timeout 100 python3 bench/speed_steps.py $M8 exact 2>&1 | grep -v Warn | tail -4 ;;
split)
  [ -x $B/llama-bench ] || lcpp_build 14 llama-bench > /tmp/lcpp_rc.txt 2>&1 &
  [ -f $M8 ] || timeout 200 python3 bench/make_model.py --shape qwen3-8b --recipe Q4_K_M --out $M8 \
    --tokenizer-from .device_tok/tokenizer.gguf 2>&1 | tail -1
  step "8B passes"
  for g in "new" "old SPECSCOPE_Q4K_SPLITS=0" "sf SPECSCOPE_SF=1" "old SPECSCOPE_Q4K_SPLITS=0" "new" "sf SPECSCOPE_SF=1"; do
    set -- $g; t=$1; shift
    env $* timeout 100 python3 bench/speed_steps.py $M8 quick 2>&1 | grep -v Warn | tail -1 | sed "s/^/$t /"
  done
  step "chains of rows against one-row passes: new, SF"
  timeout 100 python3 bench/speed_steps.py $M8 exact 2>&1 | grep "^exact"
  SPECSCOPE_SF=1 timeout 100 python3 bench/speed_steps.py $M8 exact 2>&1 | grep "^exact" ;;
decode)
  step "waiting for llama.cpp"; for i in $(seq 200); do [ -x $B/llama-bench ] && break; sleep 1; done
  cat /tmp/lcpp_rc.txt 2>/dev/null | tail -2
  for r in 1 2; do
    order="new old sf"; [ $r = 2 ] && order="sf old new"
    tg $M8 8b_$r
    for t in $order; do
      e=""; [ $t = old ] && e=SPECSCOPE_Q4K_SPLITS=0; [ $t = sf ] && e=SPECSCOPE_SF=1
      env $e timeout 150 python3 bench/gpu_speed.py decode --model $M8 --out "$OUT/decode_${t}_$r" \
        2>&1 | grep "^decode" | sed "s/^/$t /"
    done
  done
  [ -x $B/llama-bench ] && $B/llama-bench -m $M8 -ngl 99 -fa 1 -p 1,16 -n 0 -d 1000 -r 3 -o json \
    > "$OUT/lcpp_pass_8b.json" 2>/dev/null && python3 -c "import json,sys; [print('llama.cpp pass', r['n_prompt'], 'rows', round(1000 * r['n_prompt'] / r['avg_ts'], 2), 'ms') for r in json.load(open(sys.argv[1]))]" "$OUT/lcpp_pass_8b.json" ;;
esac
step done
