#!/usr/bin/env bash
# Device calls for XP_FUSED (issue 36: the 8B-like model's XP copies, one launch before each
# big Q4_K matmul, written instead by the kernel before it: engine.model.fused_layer). Expects
# the gguf wheel in .whl, llama.cpp's source in .peers and the tokenizer GGUF in .device_tok;
# the 8B-like Q4_K_M is made on the card. Results in $OUT.
#   bash bench/xpf_session.sh passes   # llama.cpp built in the background; the 8B-like model;
#                                      # same bits XP_FUSED on / off (bench/xp_fused_bits.py);
#                                      # chains of rows against one-row passes; the passes
#                                      # XP_FUSED 1 / 0 / 0 / 1; the one-row pass's kernels
#   bash bench/xpf_session.sh decode   # llama-bench tg128 d1000 against our decode, new / old,
#                                      # two interleaved rounds; llama-bench -p 1,16 at d1000
set -u
. bench/device_session.sh
case "${1:-passes}" in
passes)
  [ -x $B/llama-bench ] || lcpp_build 14 llama-bench > /tmp/lcpp_rc.txt 2>&1 &
  step "8B-like model"
  m8
  step "same bits: XP_FUSED on / off"
  timeout 200 python3 bench/xp_fused_bits.py $M8 2>&1 | grep -v Warn | tail -3
  step "chains of rows against one-row passes"
  timeout 150 python3 bench/speed_steps.py $M8 exact 2>&1 | grep "^exact"
  step "8B passes, XP_FUSED 1 0 0 1"
  for f in 1 0 0 1; do
    SPECSCOPE_XP_FUSED=$f timeout 100 python3 bench/speed_steps.py $M8 quick 2>&1 | grep -v Warn | tail -1 | sed "s/^/xpf=$f /"
  done
  step "the one-row pass's kernels, XP_FUSED on"
  timeout 150 python3 bench/speed_steps.py $M8 2>&1 | grep -v Warn | tail -19 ;;
decode)
  step "waiting for llama.cpp"; for i in $(seq 300); do [ -x $B/llama-bench ] && break; sleep 1; done
  tail -2 /tmp/lcpp_rc.txt 2>/dev/null
  for r in 1 2; do
    order="new old"; [ $r = 2 ] && order="old new"
    tg $M8 8b_$r
    for t in $order; do
      f=1; [ $t = old ] && f=0
      SPECSCOPE_XP_FUSED=$f timeout 150 python3 bench/gpu_speed.py decode --model $M8 --out "$OUT/decode_${t}_$r" \
        2>&1 | grep "^decode" | sed "s/^/$t /"
    done
  done
  [ -x $B/llama-bench ] && $B/llama-bench -m $M8 -ngl 99 -fa 1 -p 1,16 -n 0 -d 1000 -r 3 -o json \
    > "$OUT/lcpp_pass_8b.json" 2>/dev/null && python3 -c "import json,sys; [print('llama.cpp pass', r['n_prompt'], 'rows', round(1000 * r['n_prompt'] / r['avg_ts'], 2), 'ms') for r in json.load(open(sys.argv[1]))]" "$OUT/lcpp_pass_8b.json" ;;
esac
step done
