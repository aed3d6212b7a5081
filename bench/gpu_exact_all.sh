#!/usr/bin/env bash
# Issue 31 on the GPU machine, one device call: bench/gpu_exact_all.py (same prompt, same
# tokens: one used runtime against fresh ones, bfloat16 and float32, 128 new tokens, 12 prompts,
# 8 settings). Its last stdout line is `identical k/n`; exit status 0 iff k == n.
# Expects the bundled GGUF at /tmp/model (../shared/tools/split-model-for-device) and gguf in
# /tmp/site, as bench/gpu_exact_session.sh does; without /tmp/model the bundled default is used.
# Results: $OUT/exact_all.json and $OUT/exact_all.log (progress). Extra arguments go to the
# script, e.g. `bash bench/gpu_exact_all.sh --dtypes bfloat16 --prompts 6`; a CPU dry run here:
#   OUT=/tmp/ea DEVICE=cpu PYTHON=.venv/bin/python bash bench/gpu_exact_all.sh --quick
set -u
M=/tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf
R=${OUT:-/tmp/exact_all}; mkdir -p "$R"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
model=(); [ -f "$M" ] && model=(--model "$M")
"${PYTHON:-python3}" bench/gpu_exact_all.py --device "${DEVICE:-cuda}" "${model[@]}" --json "$R/exact_all.json" "$@" \
  2> >(grep -v Warn | tee "$R/exact_all.log" >&2)
