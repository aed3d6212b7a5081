#!/usr/bin/env bash
# Device calls for the attention's rows packed (engine.kernels.triton_attention, PACK;
# SPECSCOPE_ATTN_PACK=0|1). Expects the gguf wheel in .whl, the tokenizer GGUF in .device_tok and
# .old/engine_pre_pack.tgz (`git archive b1b7a53 engine | gzip`); the 8B-like Q4_K_M is made on
# the card. Results in $OUT.
#   bash bench/pack_session.sh attn    # bench/attn_ab.py on the tree before the change, PACK off,
#                                      # PACK on (bundled and 8B-like heads, 1 and 16 rows): same
#                                      # bits, µs a launch;
#                                      # the 8B-like passes PACK 1 / 0; its chains of rows
#                                      # against one-row passes (PACK on)
#   bash bench/pack_session.sh bits    # the attention A/B alone (no 8B-like model)
#   bash bench/pack_session.sh treei   # tree and default against llama.cpp, interleaved per prompt
#   bash bench/pack_session.sh group   # the group combine: this tree against the one before it
#                                      # (.old/engine_pre_group.tgz), PACK 0 and 1, no model
#   bash bench/pack_session.sh sb      # the split's length (SPECSCOPE_ATTN_SPLIT_BLOCKS 2, then 1
#                                      # and 4) at 1 and 25 rows: µs a launch (other bits: the
#                                      # splits' sums change, each row's own still); no model
#   bash bench/pack_session.sh l3      # the loads first (SPECSCOPE_ATTN_L3, then with
#                                      # SPECSCOPE_ATTN_KV2): the same bits (identical N/N
#                                      # expected), µs a launch at 1, 16 and 25 rows; no model
#   bash bench/pack_session.sh tree    # the bundled model (joined at /tmp/model) with .peers:
#                                      # tree and default against llama.cpp's n-gram speculation,
#                                      # PACK 1 / 0 / 0 / 1; host_steps PACK 1 / 0
# Its exactness check: SPECSCOPE_ATTN_PACK=1 bash bench/gpu_exact_all_session.sh new
set -u
. bench/device_session.sh
attn_ab() {  # bench/attn_ab.py: the tree before (b1b7a53), PACK 0, PACK 1; then the two comparisons
  step "attention: the tree before (b1b7a53, .old/engine_pre_pack.tgz), PACK 0, PACK 1"
  rm -rf /tmp/old2 && mkdir -p /tmp/old2 && tar xzf .old/engine_pre_pack.tgz -C /tmp/old2
  PYTHONPATH=/tmp/old2:/tmp/site timeout 150 python3 bench/attn_ab.py save $OUT/attn_old.pt > $OUT/attn_old.log 2>&1 || tail -5 $OUT/attn_old.log
  for p in 0 1; do
    SPECSCOPE_ATTN_PACK=$p timeout 150 python3 bench/attn_ab.py save $OUT/attn_$p.pt > $OUT/attn_$p.log 2>&1 || tail -5 $OUT/attn_$p.log
  done
  head -1 $OUT/attn_old.log $OUT/attn_0.log
  python3 bench/attn_ab.py compare $OUT/attn_old.pt $OUT/attn_0.pt 2>&1 | tee $OUT/attn_old_vs_0.txt | tail -1
  python3 bench/attn_ab.py compare $OUT/attn_0.pt $OUT/attn_1.pt 2>&1 | tee $OUT/attn_0_vs_1.txt
  rm -f $OUT/attn_*.pt
}
case "${1:-attn}" in
attn)
  step "8B-like model"
  m8
  attn_ab
  step "8B passes, PACK 1 0"
  for p in 1 0; do
    SPECSCOPE_ATTN_PACK=$p timeout 100 python3 bench/speed_steps.py $M8 quick 2>&1 | grep -v Warn | tail -1 | sed "s/^/pack=$p /"
  done
  step "chains of rows against one-row passes (PACK on)"
  SPECSCOPE_ATTN_PACK=1 timeout 150 python3 bench/speed_steps.py $M8 exact 2>&1 | grep "^exact" ;;
tree)    # the bundled model at /tmp/model: llama.cpp's n-gram speculation (built if needed), then
         # our tree and default with PACK 1 / 0 / 0 / 1, then host_steps' window cost PACK 1 / 0
  [ -x $B/llama-speculative-simple ] || lcpp_build 16 llama-bench llama-speculative-simple
  step "llama.cpp n-gram speculation"
  timeout 300 python3 bench/llamacpp_spec.py --build /tmp/lcpp/llama.cpp/build --model $M --per-category 3 \
    --tokens 128 --extra "-ngl 99 -fa on" --out $OUT/llamacpp_spec_gpu.json 2>&1 | tail -3
  for p in 1 0 0 1; do
    step "ours, PACK $p"
    SPECSCOPE_ATTN_PACK=$p timeout 200 python3 bench/tree_vs_llamacpp.py --model $M \
      --llama $OUT/llamacpp_spec_gpu.json --configs none,tree:8:3,default \
      --out $OUT/tvl_pack${p}_$SECONDS.json 2>&1 | grep -v Warn | tail -9
  done
  host_steps_ab SPECSCOPE_ATTN_PACK 3 1 0 ;;
bits)    # the attention A/B alone (no model)
  attn_ab ;;
treei)   # the bundled model at /tmp/model, llama.cpp built: its n-gram runs interleaved with ours,
         # prompt by prompt (bench/tree_vs_llamacpp.py --llama-build), PACK as set by the caller
  [ -x $B/llama-speculative-simple ] || lcpp_build 16 llama-bench llama-speculative-simple
  step "tree and default against llama.cpp's n-gram speculation, interleaved"
  timeout 500 python3 bench/tree_vs_llamacpp.py --model $M --llama-build /tmp/lcpp/llama.cpp/build \
    --llama-extra "-ngl 99 -fa on" --configs none,tree:8:3,default --out $OUT/tvli_$SECONDS.json \
    --llama-out $OUT/llamai_$SECONDS.json 2>&1 | grep -v Warn | tail -30 ;;
group)   # one combine a group of packed rows (this tree) against one a row (the tree before it,
         # .old/engine_pre_group.tgz: `git archive 5386279 engine | gzip`), PACK 0 and 1; no model
  step "attention: the tree before the group combine and this tree, PACK 0 and 1"
  rm -rf /tmp/og && mkdir -p /tmp/og && tar xzf .old/engine_pre_group.tgz -C /tmp/og
  for p in 0 1; do
    PYTHONPATH=/tmp/og:/tmp/site SPECSCOPE_ATTN_PACK=$p timeout 150 python3 bench/attn_ab.py save $OUT/og_$p.pt > $OUT/og_$p.log 2>&1 || tail -5 $OUT/og_$p.log
    SPECSCOPE_ATTN_PACK=$p timeout 150 python3 bench/attn_ab.py save $OUT/new_$p.pt > $OUT/new_$p.log 2>&1 || tail -5 $OUT/new_$p.log
  done
  head -1 $OUT/og_0.log $OUT/new_0.log
  for ab in "og_0 new_0" "og_1 new_1" "new_0 new_1"; do
    set -- $ab; step "$1 -> $2"
    python3 bench/attn_ab.py compare $OUT/$1.pt $OUT/$2.pt 2>&1 | tee $OUT/$1_vs_$2.txt | tail -31
  done
  rm -f $OUT/*.pt ;;
l3)      # the loads first: default, SPECSCOPE_ATTN_L3=1 (the combine's partials), L3 + KV2
         # (and a split's two blocks): the same bits, µs a launch
  for v in 00 10 11; do
    step "attention, L3=${v:0:1} KV2=${v:1:1}"
    SPECSCOPE_ATTN_L3=${v:0:1} SPECSCOPE_ATTN_KV2=${v:1:1} timeout 150 python3 bench/attn_ab.py save $OUT/l3_$v.pt > $OUT/l3_$v.log 2>&1 || tail -5 $OUT/l3_$v.log
  done
  for v in 10 11; do
    python3 bench/attn_ab.py compare $OUT/l3_00.pt $OUT/l3_$v.pt 2>&1 | tee $OUT/l3_00_vs_$v.txt
  done
  rm -f $OUT/*.pt ;;
sb)      # SPECSCOPE_ATTN_SPLIT_BLOCKS 2 (the default), 1, 4 at 1 and 25 rows (PACK off); a
         # different length gives other bits (each row's own: exact either way), so compare µs
  for sb in 2 1 4; do
    step "attention, SPLIT_BLOCKS $sb"
    SPECSCOPE_ATTN_SPLIT_BLOCKS=$sb ATTN_AB_ROWS=1,25 timeout 150 python3 bench/attn_ab.py save $OUT/sb$sb.pt > $OUT/sb$sb.log 2>&1 || tail -5 $OUT/sb$sb.log
  done
  for sb in 1 4; do
    python3 bench/attn_ab.py compare $OUT/sb2.pt $OUT/sb$sb.pt 2>&1 | tee $OUT/sb2_vs_$sb.txt
  done
  rm -f $OUT/*.pt ;;
esac
step done
