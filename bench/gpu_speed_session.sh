#!/usr/bin/env bash
# Issue 22 on the GPU machine: our packed path beside llama.cpp, same card, same files, one
# session. One device call per mode; each finishes inside BUDGET seconds (default 560) and packs
# everything measured so far (this call and earlier calls on the same warm machine, kept under
# /tmp/speed) into $OUT/speed.tgz after every phase, with $OUT/summary.md (the goal table),
# $OUT/session.log and one raw llama-bench JSON beside it.
#
# Prepare once, in the checkout the device tool sends (all four are git-ignored):
#   ../shared/tools/llamacpp-on-device                 # .peers/ (llama.cpp source, 6.5 MB)
#   ../shared/tools/split-model-for-device             # .device_model/a and /b (bundled model)
#   python bench/make_model.py --tokenizer-only --out .device_tok/tokenizer.gguf    # 1.8 MB
#   .whl/gguf-*.whl                                    # the gguf wheel (python3 there lacks gguf)
#
# Device calls (the second within the ~30 s the machine stays warm):
#   1. carry [".peers", ".whl", ".device_tok", ".device_model/a"], timeout_s 600 (~5 min):
#        bash bench/gpu_speed_session.sh --build-only
#      builds llama.cpp (-j 14, in the background), makes the 8B-like Q4_K_M model, and runs the
#      parts whose figures are device times only while the CPU builds: `matmul` and the 8B's
#      `kernels` table (1 and 16 rows)
#   2. carry [".peers", ".whl", ".device_tok", ".device_model/b"], timeout_s 600 (~4-6 min):
#        bash bench/gpu_speed_session.sh --build
#      (--build only builds when the machine is fresh after all, i.e. /tmp/lcpp is gone; then the
#      bundled model's first part is gone too and only the 8B is measured)
#      joins the bundled model; for the 8B and then the bundled model, one process each: 3 rounds
#      of ours (roofline, decode at depth 1000, prefill 512) interleaved with llama-bench (rows
#      curve, tg128 at depth 1000, pp512), order alternating; generate 256; the bundled model's
#      exactness check (gpu_exact.py model --rows-only); the summary (goal table)
#   or, in one call when nothing was built before: bash bench/gpu_speed_session.sh --build
#      (carry [".peers", ".whl", ".device_tok"]; phases that no longer fit the budget are skipped)
#   the bundled model alone: call A, carry [".device_model/a"]: mkdir -p /tmp/model && cp
#      .device_model/a/part00 /tmp/model/ (seconds); call B at once, carry [".peers", ".whl",
#      ".device_model/b"]: bash bench/gpu_speed_session.sh --build --no-8b (~5 min with the build)
#   kernel loop: carry [".whl", ".device_tok"], bash bench/gpu_speed_session.sh --quick (~1-2 min
#      warm, +25 s to make the model on a fresh machine): the 8B's kernels table, the matmul
#      table, the 1- and 16-row pass and one QUICK line; $OUT/quick.tgz
#
# Options: --no-bundled (skip the bundled model), --no-8b, --fresh (drop earlier results),
# --rounds=N (default 3). Env: BUDGET (s), LCPP_JOBS (build jobs), LCPP_CMAKE (extra cmake flags);
# for a dry run on a machine without a GPU: SPEED_DEVICE=cpu, SHAPE=tiny, M8, MB, BIN, R (paths),
# SPEED_EXTRA (more gpu_speed.py options, e.g. smaller --context and --rows).
# Files it finds: the bundled model at /tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf, or its two parts
# (.device_model/a/part00 carried in call 1 is copied to /tmp/model; .device_model/b/part01
# carried in call 2 is joined to it); the gguf wheel in .whl/ (installed to /tmp/site when
# python3 lacks gguf); the tokenizer GGUF in .device_tok/ (when the bundled model is not there).
set -u
T0=$(date +%s)
BUDGET=${BUDGET:-560}
R=${R:-/tmp/speed}
SHAPE=${SHAPE:-qwen3-8b}
M8=${M8:-/tmp/m/$SHAPE.Q4_K_M.gguf}
MB=${MB:-/tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf}
LCPP_ROOT=${LCPP_ROOT:-/tmp/lcpp}
LCPP=$LCPP_ROOT/llama.cpp
BIN=${BIN:-$LCPP/build/bin}
DEV="--device ${SPEED_DEVICE:-cuda} ${SPEED_EXTRA:-}"
BUILD=0; BUILD_ONLY=0; QUICK=0; BUNDLED=1; BIG=1; ROUNDS=3
for a in "$@"; do
  case $a in
    --build) BUILD=1 ;;
    --build-only) BUILD=1; BUILD_ONLY=1 ;;
    --quick) QUICK=1 ;;
    --no-bundled) BUNDLED=0 ;;
    --no-8b) BIG=0 ;;
    --fresh) rm -rf $R ;;
    --rounds=*) ROUNDS=${a#--rounds=} ;;
    *) echo "gpu_speed_session.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-/tmp/speed_out}
mkdir -p $R $OUT
exec > >(tee -a $R/session.log) 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SPECSCOPE_CACHE=/tmp/spcache
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET - $(el) )); }
step() { echo "== [$(date +%T) +$(el)s, $(left)s left] $*"; }
pack() {
  local name=${1:-speed.tgz}
  tar czf $OUT/$name.part --exclude=session.log -C $R . && mv $OUT/$name.part $OUT/$name
  cp $R/session.log $OUT/session.log 2>/dev/null
  [ -f $R/summary.md ] && cp $R/summary.md $OUT/summary.md
  true
}
# run a python phase with the time left (minus a margin to pack); skip it if less than $1 s remain
phase() {
  local need=$1; shift
  local t=$(( $(left) - 15 ))
  if [ $t -lt $need ]; then step "SKIPPED (needs ~${need}s, ${t}s left): $*"; return 1; fi
  step "$*"
  timeout $t "$@"
  local rc=$?
  [ $rc -eq 124 ] && echo "!! timed out after ${t}s: $*"
  [ $rc -ne 0 ] && echo "!! rc $rc: $*"
  return $rc
}

step "setup on $(hostname): $(nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader 2>/dev/null | head -1)"
if ! python3 -c "import gguf" 2>/dev/null; then
  ls .whl/*.whl >/dev/null 2>&1 || { echo "!! python3 has no gguf and no .whl/*.whl was carried"; exit 1; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
mkdir -p /tmp/model
[ -f .device_model/a/part00 ] && [ ! -f $MB ] && cp .device_model/a/part00 /tmp/model/ && echo "copied bundled part 1"
if [ ! -f $MB ] && [ -f /tmp/model/part00 ] && [ -f .device_model/b/part01 ]; then
  cat /tmp/model/part00 .device_model/b/part01 > $MB && echo "joined the bundled model: $(sha256sum $MB | cut -c1-16)"
fi

# -- llama.cpp -----------------------------------------------------------------------------------
BUILD_PID=
if [ $BUILD = 1 ] && [ ! -x $BIN/llama-bench ]; then
  if [ ! -f .peers/llama.cpp-0.3.36-src.tgz ]; then
    echo "!! --build needs .peers/llama.cpp-0.3.36-src.tgz (../shared/tools/llamacpp-on-device puts it there)"
  else
    step "llama.cpp build started in the background (log: $R/llamacpp_build.log)"
    rm -rf $LCPP_ROOT && mkdir -p $LCPP_ROOT && tar xzf .peers/llama.cpp-0.3.36-src.tgz -C $LCPP_ROOT
    ( cd $LCPP && cmake -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF \
        -DCMAKE_BUILD_TYPE=Release ${LCPP_CMAKE:-} && cmake --build build -j ${LCPP_JOBS:-14} \
        --target llama-bench llama-speculative-simple ) > $R/llamacpp_build.log 2>&1 &
    BUILD_PID=$!
  fi
fi
wait_build() {
  [ -z "$BUILD_PID" ] && return 0
  step "waiting for the llama.cpp build"
  while kill -0 $BUILD_PID 2>/dev/null; do
    if [ $(left) -lt 20 ]; then
      echo "!! the llama.cpp build is still running and the budget is spent: it is lost with this call"
      tail -3 $R/llamacpp_build.log; BUILD_PID=; return 1
    fi
    sleep 3
  done
  wait $BUILD_PID; local rc=$?
  BUILD_PID=
  if [ $rc -ne 0 ] || [ ! -x $BIN/llama-bench ]; then echo "!! llama.cpp build failed (rc $rc):"; tail -20 $R/llamacpp_build.log
  else step "llama.cpp built"; fi
}

# -- the 8B-like model ---------------------------------------------------------------------------
if [ $BIG = 1 ] && [ ! -f $M8 ]; then
  TOK=$MB
  [ -f $TOK ] || TOK=$(ls .device_tok/*.gguf 2>/dev/null | head -1)
  if [ -z "$TOK" ] || [ ! -f "$TOK" ]; then
    echo "!! no tokenizer for the 8B-like model: carry .device_tok (python bench/make_model.py --tokenizer-only --out .device_tok/tokenizer.gguf) or the bundled model"
    BIG=0
  else
    # written aside and renamed, so a file cut short by the budget is never taken for the model
    phase 60 python3 bench/make_model.py --shape $SHAPE --recipe Q4_K_M --out $M8.part.gguf --tokenizer-from $TOK \
      && [ -f $M8.part.gguf ] && mv $M8.part.gguf $M8
  fi
  [ -f $M8 ] || BIG=0
fi

SPEED="python3 bench/gpu_speed.py"
if [ $QUICK = 1 ]; then
  Q=$R/quick; rm -rf $Q; mkdir -p $Q
  [ $BIG = 1 ] && phase 60 $SPEED all --quick --matmul --no-linear --model $M8 --tag 8b $DEV --out $Q
  tar czf $OUT/quick.tgz -C $Q . ; cp $R/session.log $OUT/ 2>/dev/null
  step "done (quick)"
  exit 0
fi

if [ -n "$BUILD_PID" ]; then
  # while the build loads the CPU: the parts whose figures are device times only
  [ -f $R/matmul.json ] || phase 90 $SPEED matmul $DEV --out $R
  pack
  [ $BIG = 1 ] && [ ! -f $R/kernels_8b.json ] && phase 60 $SPEED kernels --model $M8 --tag 8b --kernel-rows 1,16 $DEV --out $R
  pack
fi
if [ $BUILD_ONLY = 1 ]; then
  wait_build
  pack
  step "done (build-only): now call 2 (bash bench/gpu_speed_session.sh) within the warm window"
  exit 0
fi

wait_build
LB=""; [ -x $BIN/llama-bench ] && LB="--llama-bin $BIN" || echo "!! no llama-bench at $BIN: ours only (use --build, or --build-only in a call before)"
if [ $BIG = 1 ]; then
  K=""; [ -f $R/kernels_8b.json ] && K="--no-kernels"
  MM=""; [ -f $R/matmul.json ] || MM="--matmul"
  phase 150 $SPEED all --model $M8 --tag 8b $LB --rounds $ROUNDS $K $MM --kernel-rows 1,16 $DEV --out $R
  pack
fi
if [ $BUNDLED = 1 ] && [ -f $MB ]; then
  phase 90 $SPEED all --model $MB --tag bundled $LB --rounds $ROUNDS --exact --exact-timeout 150 $DEV --out $R
  pack
elif [ $BUNDLED = 1 ]; then
  echo "!! no bundled model at $MB (../shared/tools/split-model-for-device; carry .device_model/a in call 1, .device_model/b in call 2)"
fi
# issue 23 on this card: llama.cpp's speculative decoding, plain / its defaults / our export priced
# on llama.cpp's own curve just measured here (acceptance from the CPU sweep fixture's replay)
if [ "${SPEC23:-1}" = 1 ] && [ -f $MB ] && [ -x $BIN/llama-speculative-simple ]; then
  LBJ=$(ls $R/llamabench_bundled_rows_tg*.json 2>/dev/null | head -1)
  if [ -n "$LBJ" ]; then
    step "export priced on llama.cpp's curve ($LBJ)"
    python3 -m specscope.cli export --from tests/fixtures/llamacpp/sweep_cpu_code-edit.json \
       --format llamacpp --price-with $LBJ > $R/export_llamacpp_bundled.txt 2> $R/export_llamacpp_bundled.err
    cat $R/export_llamacpp_bundled.txt $R/export_llamacpp_bundled.err
    phase 60 python3 bench/llamacpp_spec.py --build $LCPP/build --model $MB \
      --config-file $R/export_llamacpp_bundled.txt --per-category 2 --tokens 128 \
      --extra "-ngl 99 -fa on" --out $R/llamacpp_spec_gpu.json
    pack
    # ours on the same prompts: tree d8 w3 (and plain, lookup) against llama.cpp's best n-gram
    [ -f $R/llamacpp_spec_gpu.json ] && phase 60 python3 bench/tree_vs_llamacpp.py --model $MB \
      --llama $R/llamacpp_spec_gpu.json --out $R/tree_vs_llamacpp.json
    pack
  fi
fi
step summary
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>/dev/null
python3 bench/gpu_speed.py summary --out $R
for f in $R/llamabench_8b_rows_tg_0.json $R/llamabench_8b_rows_tg.json; do [ -f $f ] && cp $f $OUT/ && break; done
pack
step done
