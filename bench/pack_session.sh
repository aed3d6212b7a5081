#!/usr/bin/env bash
# Device calls for the attention's rows packed (engine.kernels.triton_attention, PACK;
# SPECSCOPE_ATTN_PACK=0|1). Expects the gguf wheel in .whl and the tokenizer GGUF in
# .device_tok; the 8B-like Q4_K_M is made on the card. Results in $OUT.
#   bash bench/pack_session.sh attn    # bench/attn_ab.py with PACK off / on / on / off (bundled and
#                                      # 8B-like heads, 1 and 16 rows): same bits, µs a launch;
#                                      # the 8B-like passes PACK 1 / 0; its chains of rows
#                                      # against one-row passes (PACK on)
set -u
. bench/device_session.sh
case "${1:-attn}" in
attn)
  step "8B-like model"
  [ -f $M8 ] || timeout 300 python3 bench/make_model.py --shape qwen3-8b --recipe Q4_K_M --out $M8 \
    --tokenizer-from .device_tok/tokenizer.gguf 2>&1 | tail -1
  step "attention A/B: PACK 0 1 1 0"
  i=0
  for p in 0 1 1 0; do
    i=$((i + 1))
    SPECSCOPE_ATTN_PACK=$p timeout 150 python3 bench/attn_ab.py save $OUT/attn_$i.pt > $OUT/attn_$i.log 2>&1 || tail -5 $OUT/attn_$i.log
  done
  python3 bench/attn_ab.py compare $OUT/attn_1.pt $OUT/attn_2.pt 2>&1 | tee $OUT/attn_compare_a.txt
  python3 bench/attn_ab.py compare $OUT/attn_4.pt $OUT/attn_3.pt 2>&1 | tee $OUT/attn_compare_b.txt
  rm -f $OUT/attn_*.pt
  step "8B passes, PACK 1 0"
  for p in 1 0; do
    SPECSCOPE_ATTN_PACK=$p timeout 100 python3 bench/speed_steps.py $M8 quick 2>&1 | grep -v Warn | tail -1 | sed "s/^/pack=$p /"
  done
  step "chains of rows against one-row passes (PACK on)"
  timeout 150 python3 bench/speed_steps.py $M8 exact 2>&1 | grep "^exact" ;;
esac
step done
