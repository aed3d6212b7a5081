#!/usr/bin/env bash
# Device calls for issue 36: programmatic dependent launch (engine.kernels.pdl; SPECSCOPE_PDL=0
# off, 1 PDL launches, 2 PDL launches whose matmuls prefetch their first weight lines, the
# default) measured against itself and llama.cpp built in the same session. Expects the bundled
# GGUF joined at /tmp/model (../shared/tools/split-model-for-device), the gguf wheel in .whl,
# llama.cpp's source in .peers (../shared/tools/llamacpp-on-device) and the tokenizer GGUF in
# .device_tok. Results in $OUT.
#   bash bench/pdl_session.sh exact   # llama.cpp built in the background while the doctor and
#                                     # bench/gpu_exact_all_session.sh new run (PDL=${PDL:-2})
#   bash bench/pdl_session.sh all     # exact, then 2 rounds of tg128 / our decode PDL 0 / 2 and
#                                     # host_steps PDL 0 / 2 (one call when device time is short)
#   bash bench/pdl_session.sh min     # 'one' without llama.cpp
#   bash bench/pdl_session.sh speed   # bundled: 3 rounds of llama-bench tg128 d1000 against our
#                                     # decode with PDL 0 / 2 (1 once); host_steps PDL 0 / 2 twice;
#                                     # the one-row pass's kernels with PDL 0 and 2
#   bash bench/pdl_session.sh big     # the 8B-like Q4_K_M made here: llama-bench tg128 d1000
#                                     # and -p 1 / 16 against our decode and passes, PDL 0 / 2
#   bash bench/pdl_session.sh gate    # PDL off / on for every model / its late trigger, 8B-like
#                                     # and bundled shape, then the late trigger's exactness
#   bash bench/pdl_session.sh tree    # bundled: llama.cpp's n-gram speculation and ours on the
#                                     # same prompts (llamacpp_spec.py, tree_vs_llamacpp.py)
set -u
. bench/device_session.sh
decode() {  # model, pdl, tag
  SPECSCOPE_PDL=$2 timeout 200 python3 bench/gpu_speed.py decode --model $1 --out "$OUT/decode_p$2_$3" \
    2>&1 | grep "^decode" | sed "s/^/pdl=$2 /"
}
case "${1:-speed}" in
exact)
  lcpp_build 10 llama-bench llama-speculative-simple &
  SPECSCOPE_PDL=${PDL:-2} bash bench/gpu_exact_all_session.sh new
  wait ;;
all)        # one call: exact (PDL 2), then 2 rounds of tg128 against our decode PDL 0 / 2, host_steps
  lcpp_build 12 llama-bench > /tmp/lcpp_rc.txt 2>&1 &
  SPECSCOPE_PDL=2 bash bench/gpu_exact_all_session.sh new
  step "waiting for llama.cpp"; wait; cat /tmp/lcpp_rc.txt
  for r in 1 2; do
    order="0 2"; [ $r = 2 ] && order="2 0"
    tg $M bundled_$r
    for p in $order; do decode $M $p $r; done
  done
  host_steps_ab SPECSCOPE_PDL 2 0 2 ;;
one)        # a single call, no bundled file carried: the bundled model's shape with random Q4_1
            # weights (bench/make_model.py), the chain, exactness (bfloat16) with PDL 2, then
            # our decode PDL 0 / 2 twice around llama.cpp's tg128 on that file
  lcpp_build 12 llama-bench > /tmp/lcpp_rc.txt 2>&1 &
  MR=/tmp/m/smollm2-135m.Q4_1.gguf
  timeout 120 python3 bench/make_model.py --shape smollm2-135m --recipe Q4_1 --out $MR \
    --tokenizer-from .device_tok/tokenizer.gguf 2>&1 | tail -1
  step "launch chains"
  timeout 150 python3 bench/pdl_chain.py --json $OUT/pdl_chain.json 2>&1 | grep -v Warn
  step "exactness, PDL 2, bfloat16"
  SPECSCOPE_PDL=2 timeout 200 python3 bench/gpu_exact_all.py --device cuda --model $MR --dtypes bfloat16 \
    --json $OUT/exact_pdl2.json 2> $OUT/exact_pdl2.log | tee $OUT/exact_pdl2.txt | tail -n 3
  for p in 0 2 2 0; do decode $MR $p $SECONDS; done
  step "llama.cpp, if built within a minute"
  for i in $(seq 60); do [ -x $B/llama-bench ] && break; sleep 1; done
  tg $MR s135_1 && decode $MR 2 last ;;
min)        # 'one' without llama.cpp (little device time left)
  MR=/tmp/m/smollm2-135m.Q4_1.gguf
  timeout 60 python3 bench/make_model.py --shape smollm2-135m --recipe Q4_1 --out $MR \
    --tokenizer-from .device_tok/tokenizer.gguf 2>&1 | tail -1
  step "launch chains"
  timeout 100 python3 bench/pdl_chain.py --rounds 2 --json $OUT/pdl_chain.json 2>&1 | grep -v Warn
  for p in 2 0; do decode $MR $p $SECONDS; done
  step "exactness, PDL 2, bfloat16"
  SPECSCOPE_PDL=2 timeout 150 python3 bench/gpu_exact_all.py --device cuda --model $MR --dtypes bfloat16 \
    --json $OUT/exact_pdl2.json 2> $OUT/exact_pdl2.log | tee $OUT/exact_pdl2.txt | tail -n 3 ;;
speed)
  for r in 1 2 3; do
    order="0 1 2"; [ $r = 2 ] && order="2 0"; [ $r = 3 ] && order="0 2"
    tg $M bundled_$r
    for p in $order; do decode $M $p $r; done
  done
  host_steps_ab SPECSCOPE_PDL 3 0 2 2 0
  step "kernels, pdl 2 and 0"
  for p in 2 0; do
    SPECSCOPE_PDL=$p timeout 150 python3 bench/gpu_speed.py kernels --model $M --out "$OUT/k_p$p" --top 10 \
      2>&1 | grep -v Warn | tail -14
  done ;;
big)
  [ -x $B/llama-bench ] || lcpp_build 14 llama-bench > /tmp/lcpp_rc.txt 2>&1 &
  step "8B-like model"
  [ -f $M8 ] || timeout 300 python3 bench/make_model.py --shape qwen3-8b --recipe Q4_K_M --out $M8 \
    --tokenizer-from .device_tok/tokenizer.gguf 2>&1 | tail -2
  for p in 2 0; do
    SPECSCOPE_PDL=$p timeout 150 python3 bench/speed_steps.py $M8 quick 2>&1 | grep -v Warn | tail -4 | sed "s/^/pdl=$p /"
  done
  step "waiting for llama.cpp"; wait; cat /tmp/lcpp_rc.txt 2>/dev/null
  for r in 1 2; do
    order="0 2"; [ $r = 2 ] && order="2 0"
    tg $M8 8b_$r
    for p in $order; do decode $M8 $p 8b_$r; done
  done
  [ -x $B/llama-bench ] && $B/llama-bench -m $M8 -ngl 99 -fa 1 -p 1,16 -n 0 -d 1000 -r 3 -o json \
    > "$OUT/lcpp_pass_8b.json" 2>/dev/null && python3 -c "import json,sys; [print('llama.cpp pass', r['n_prompt'], 'rows', round(1000 * r['n_prompt'] / r['avg_ts'], 2), 'ms') for r in json.load(open(sys.argv[1]))]" "$OUT/lcpp_pass_8b.json"
  step "kernels, 8B one row, pdl 2"
  timeout 200 python3 bench/gpu_speed.py kernels --model $M8 --out "$OUT/k8b" --top 12 2>&1 | grep -v Warn | tail -16 ;;
gate)       # which launches gain: the 8B-like pass and the bundled shape's decode (random
            # weights) with PDL off, PDL for every model (SPECSCOPE_PDL_MAXW=0; by default only
            # for models of layer matrices up to 8 MB: engine.kernels.pass_launch), and that with
            # the matmuls' late trigger (pdl_late); both models made on the card; then exactness
            # (bfloat16) of the late trigger on the bundled shape
  MR=/tmp/m/smollm2-135m.Q4_1.gguf
  [ -f $MR ] || timeout 60 python3 bench/make_model.py --shape smollm2-135m --recipe Q4_1 --out $MR \
    --tokenizer-from .device_tok/tokenizer.gguf 2>&1 | tail -1
  [ -f $M8 ] || timeout 120 python3 bench/make_model.py --shape qwen3-8b --recipe Q4_K_M --out $M8 \
    --tokenizer-from .device_tok/tokenizer.gguf 2>&1 | tail -1
  v() { env $2 timeout 100 python3 bench/speed_steps.py $M8 quick 2>&1 | grep -v Warn | tail -1 | sed "s/^/8b $1 /"; }
  b() { env $2 timeout 100 python3 bench/gpu_speed.py decode --model $MR --out $OUT/b_$1_$SECONDS 2>&1 \
    | grep "^decode" | sed "s/^.*at depth/s135 $1: at depth/"; }
  for g in "p0 SPECSCOPE_PDL=0" "all SPECSCOPE_PDL_MAXW=0" "late SPECSCOPE_PDL_MAXW=0 SPECSCOPE_PDL_LATE=1" \
           "p0 SPECSCOPE_PDL=0" "late SPECSCOPE_PDL_MAXW=0 SPECSCOPE_PDL_LATE=1" "all SPECSCOPE_PDL_MAXW=0"; do
    set -- $g; t=$1; shift; v $t "$*"; b $t "$*"
  done
  step "exactness, the late trigger, bfloat16"
  SPECSCOPE_PDL_MAXW=0 SPECSCOPE_PDL_LATE=1 timeout 150 python3 bench/gpu_exact_all.py --device cuda --model $MR --dtypes bfloat16 \
    --json $OUT/exact_late.json 2> $OUT/exact_late.log | tee $OUT/exact_late.txt | tail -n 3 ;;
gate8)      # 'gate' on the 8B-like model alone (little device time): passes and decode with PDL
            # off, its late trigger and PDL everywhere, then the late trigger's chains of rows
  [ -f $M8 ] || timeout 120 python3 bench/make_model.py --shape qwen3-8b --recipe Q4_K_M --out $M8 \
    --tokenizer-from .device_tok/tokenizer.gguf 2>&1 | tail -1
  v() { env $2 timeout 100 python3 bench/speed_steps.py $M8 quick 2>&1 | grep -v Warn | tail -1 | sed "s/^/8b $1 /"; }
  d() { env $2 timeout 100 python3 bench/gpu_speed.py decode --model $M8 --out $OUT/d_$1_$SECONDS 2>&1 \
    | grep "^decode" | sed "s/^.*at depth/8b $1: at depth/"; }
  for g in "p0 SPECSCOPE_PDL=0" "late SPECSCOPE_PDL_MAXW=0 SPECSCOPE_PDL_LATE=1" "all SPECSCOPE_PDL_MAXW=0" \
           "late SPECSCOPE_PDL_MAXW=0 SPECSCOPE_PDL_LATE=1" "p0 SPECSCOPE_PDL=0"; do
    set -- $g; t=$1; shift; d $t "$*"; [ $t = all ] || v $t "$*"
  done
  step "the late trigger's chains of rows against one-row passes"
  SPECSCOPE_PDL_MAXW=0 SPECSCOPE_PDL_LATE=1 timeout 100 python3 bench/speed_steps.py $M8 exact 2>&1 | grep "^exact" ;;
tree)
  step "llama.cpp n-gram speculation"
  timeout 300 python3 bench/llamacpp_spec.py --build /tmp/lcpp/llama.cpp/build --model $M --per-category 3 \
    --tokens 128 --extra "-ngl 99 -fa on" --out $OUT/llamacpp_spec_gpu.json 2>&1 | tail -6
  step "ours on the same prompts"
  timeout 300 python3 bench/tree_vs_llamacpp.py --model $M --llama $OUT/llamacpp_spec_gpu.json \
    --out $OUT/tree_vs_llamacpp.json 2>&1 | tail -20 ;;
esac
step done
