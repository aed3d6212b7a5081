#!/usr/bin/env bash
# One device call (~10 min): what limits the one-row packed matmul, beside the card's read ceiling
# and llama.cpp's own matrix-vector kernels on the same 8B-like file.
#   carry: .peers .whl .device_tok      run: bash bench/ncu_session.sh
# Writes under $OUT: bw.json (bench/ncu_matmul.py bw), ours_{1,16}.txt (Nsight Compute details
# of _packed_mm_kernel on 28672x8192 at 1 and 16 rows), ours_1_sass.csv (per-instruction
# samples), read.txt (the read kernel), lcpp.csv (llama.cpp's kernels of a decode step),
# lcpp_tg.json (llama-bench tg128 at depth 1000).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv
which ncu || ls /usr/local/cuda*/bin/ncu
(mkdir -p /tmp/lcpp && tar xzf .peers/*.tgz -C /tmp/lcpp && cd /tmp/lcpp/llama.cpp &&
 cmake -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF \
   -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF \
   -DCMAKE_BUILD_TYPE=Release > /tmp/lcpp/cmake.log 2>&1 &&
 cmake --build build -j 10 --target llama-bench > /tmp/lcpp/build.log 2>&1; echo "llama.cpp build rc $?") &
BUILD=$!
python3 bench/make_model.py --shape qwen3-8b --recipe Q4_K_M --out /tmp/m/q4km.gguf \
  --tokenizer-from .device_tok/tokenizer.gguf > /tmp/make.log 2>&1 || tail -5 /tmp/make.log
python3 bench/ncu_matmul.py bw --json "$OUT/bw.json" 2>&1 | tail -14
NCU="ncu --clock-control none --launch-count 1 --set full --import-source yes"
for m in 1 16; do
  $NCU --kernel-name regex:_packed_mm_kernel --launch-skip 3 -f -o /tmp/ours_$m \
    python3 bench/ncu_matmul.py run --rows $m > /tmp/ncu_$m.log 2>&1 || tail -5 /tmp/ncu_$m.log
  ncu -i /tmp/ours_$m.ncu-rep --page details > "$OUT/ours_$m.txt" 2>&1
done
ncu -i /tmp/ours_1.ncu-rep --page source --csv --print-source sass > "$OUT/ours_1_sass.csv" 2>&1 || true
$NCU --kernel-name regex:_read_kernel --launch-skip 3 -f -o /tmp/read \
  python3 bench/ncu_matmul.py run --rows 1 > /tmp/ncu_r.log 2>&1 || tail -5 /tmp/ncu_r.log
ncu -i /tmp/read.ncu-rep --page details > "$OUT/read.txt" 2>&1
wait $BUILD
B=/tmp/lcpp/llama.cpp/build/bin
if [ -x $B/llama-bench ]; then
  $B/llama-bench -m /tmp/m/q4km.gguf -ngl 99 -fa 1 -p 0 -n 128 -d 1000 -r 3 -o json > "$OUT/lcpp_tg.json" 2>/dev/null
  grep -E '"avg_ts"|"n_gen"' "$OUT/lcpp_tg.json"
  ncu --clock-control none --kernel-name regex:mul_mat_vec --launch-skip 400 --launch-count 14 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats -f -o /tmp/lcpp \
    $B/llama-bench -m /tmp/m/q4km.gguf -ngl 99 -fa 1 -p 0 -n 4 -r 1 > /tmp/ncu_l.log 2>&1 || tail -5 /tmp/ncu_l.log
  ncu -i /tmp/lcpp.ncu-rep --page details --csv > "$OUT/lcpp.csv" 2>&1
else
  tail -20 /tmp/lcpp/build.log
fi
ls -la "$OUT"
