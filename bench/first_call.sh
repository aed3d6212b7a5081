#!/usr/bin/env bash
# One device call for what needs no model, when machine starts are scarce (2026-12-08: seven
# tries, none started): the attention's loads first (`pack_session.sh l3`: same bits, µs),
# the packed attention's group combine against the tree before it (`pack_session.sh group`),
# the split's length (`pack_session.sh sb`), then Triton's compile cache for the next session
# (`triton_cache.sh save`). Every log goes back in one file,
# $OUT/first.tgz (a call returns at most 8 files: the cache takes the rest); the comparisons
# are printed. Carry .whl and .old (and .device_model/a1 to start the model's transfer:
# `mkdir -p /tmp/model && cp .device_model/a1/p /tmp/model/a1 && bash bench/first_call.sh`).
set -u
real_out=$OUT
export OUT=/tmp/first_out
rm -rf $OUT && mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
bash bench/pack_session.sh l3 2>&1 | grep -v Warn
ATTN_AB_ROWS=16,25 bash bench/pack_session.sh group 2>&1 | grep -v Warn
bash bench/pack_session.sh sb 2>&1 | grep -v Warn
tar czf $real_out/first.tgz -C $OUT .
OUT=$real_out bash bench/triton_cache.sh save
