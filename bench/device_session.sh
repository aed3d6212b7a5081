# Sourced by the device session scripts (tail_session.sh, pdl_session.sh): the paths they share,
# the gguf wheel from .whl on the path, `step` (a timestamped heading), `tg MODEL TAG`
# (llama-bench tg128 at depth 1000, once llama.cpp is built by lcpp_build), lcpp_build and `m8`
# (the 8B-like Q4_K_M at $M8, made once a machine start; its tokenizer from .device_tok),
# `host_steps_ab VAR PROMPTS VALUE...` (bench/host_steps.py on the bundled model, VAR=each value).
. bench/lcpp_build.sh
M=/tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf
M8=/tmp/m/qwen3-8b.Q4_K_M.gguf
B=/tmp/lcpp/llama.cpp/build/bin
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
step() { echo "== $* ($(date +%T))"; }
tg() {  # model, tag: llama-bench tg128 at depth 1000
  [ -x $B/llama-bench ] && $B/llama-bench -m $1 -ngl 99 -fa 1 -p 0 -n 128 -d 1000 -r 3 -o json \
    > "$OUT/lcpp_tg_$2.json" 2>/dev/null && python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[0]; print('llama.cpp tg128 d1000', round(r['avg_ts'], 1), 'tok/s')" "$OUT/lcpp_tg_$2.json"
}
m8() {
  [ -f $M8 ] || timeout 300 python3 bench/make_model.py --shape qwen3-8b --recipe Q4_K_M --out $M8 \
    --tokenizer-from .device_tok/tokenizer.gguf 2>&1 | tail -1
}
host_steps_ab() {  # VAR PROMPTS VALUE...: the window's host cost with VAR set to each value in turn
  local var=$1 prompts=$2 v; shift 2
  for v in "$@"; do
    step "host_steps, $var=$v"
    env "$var=$v" timeout 200 python3 bench/host_steps.py $M --prompts "$prompts" --tokens 96 \
      --json "$OUT/host_steps_${var#SPECSCOPE_}_${v}_$SECONDS.json" 2>&1 | grep -v Warn | sed -n 2,9p
  done
}
