#!/usr/bin/env bash
# Issue 33, point 2: is the llama.cpp export right on llama.cpp itself, on prompts it was not tuned on?
#
#   B=/tmp/lcpp/llama.cpp/build M=/tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf \
#       bash bench/llamacpp_export_check.sh [OUT_DIR]
#
# 1. specscope roofline --engine llamacpp: llama-bench's pass by rows, then llama.cpp's own
#    speculative loop timed (llama-speculative-simple beside llama-bench): the profile keeps both;
# 2. specscope sweep on the tuning prompts (code-edit 1-2, Spec-Bench summarization and qa rows
#    1-2): only its plain runs matter here (acceptance is replayed from them);
# 3. specscope export --format llamacpp --price-with the profile (its loop calibration by default),
#    its flags checked against the built llama-speculative-simple;
# 4. bench/llamacpp_spec.py with the exported flags on the held-out prompts (code-edit 3-5,
#    summarization and qa rows 3-6), printing predicted vs measured per category.
# About 5-8 minutes on an H200 with the bundled model. Needs B (a llama.cpp build with
# bin/llama-bench and bin/llama-speculative-simple) and M (a .gguf).
set -euo pipefail
B=${B:?set B to the llama.cpp build dir (bin/llama-bench, bin/llama-speculative-simple inside)}
M=${M:?set M to the .gguf model}
OUT=${1:-bench/results/llamacpp_export_check}
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}
TOKENS=${TOKENS:-128}
REPEATS=${REPEATS:-2}
BENCH_ARGS=${BENCH_ARGS:--ngl 99 -fa 1}
SPEC_ARGS=${SPEC_ARGS:--ngl 99 -fa on}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
step() { echo "== [+$(( $(date +%s) - T0 ))s] $*" >&2; }

step "prompts: tuning and held-out"
$PY - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
sys.path.insert(0, ".")
from engine.io.workloads import code_edit_rows, specbench_rows
out = Path(sys.argv[1])
code = code_edit_rows()
prose = {c: specbench_rows([c], 6) for c in ("summarization", "qa")}
def rows(code_part, prose_part):
    r = [{"id": x["id"], "category": "code-edit", "messages": x["messages"]} for x in code_part]
    for c, xs in prose.items():
        r += [{"id": f"{c}-{x['question_id']}", "category": c, "turns": x["turns"][:1]} for x in prose_part(xs)]
    return r
for name, part in (("tune", rows(code[:2], lambda xs: xs[:2])), ("heldout", rows(code[2:], lambda xs: xs[2:]))):
    (out / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in part))
    print(f"{name}: {len(part)} prompts", file=sys.stderr)
EOF

step "roofline --engine llamacpp (llama-bench, then llama.cpp's speculative loop)"
$PY -m specscope.cli roofline --engine llamacpp --llama-bench "$B/bin/llama-bench" --model "$M" \
    --context 1000 --llama-bench-args "$BENCH_ARGS" --llama-spec-args "$SPEC_ARGS" \
    --out "$OUT/lcpp.json" | tee "$OUT/roofline.txt"

step "sweep on the tuning prompts (its plain runs are what the export replays)"
$PY -m specscope.cli sweep --device "$DEVICE" --model "$M" --workload "$OUT/tune.jsonl" \
    --drafts lookup --depths 8 --widths 1 --no-adaptive-row --new-tokens "$TOKENS" \
    --out "$OUT/sweep" > "$OUT/sweep.txt"

step "export priced on llama.cpp's pass and loop"
$PY -m specscope.cli export --from "$OUT/sweep" --format llamacpp --price-with "$OUT/lcpp.json" \
    --check-binary "$B/bin/llama-speculative-simple" > "$OUT/exported.txt" 2> "$OUT/export.txt"
cat "$OUT/export.txt" "$OUT/exported.txt"

step "llama.cpp with the exported flags on the held-out prompts"
$PY bench/llamacpp_spec.py --build "$B" --model "$M" --config-file "$OUT/exported.txt" \
    --workload "$OUT/heldout.jsonl" --tokens "$TOKENS" --repeats "$REPEATS" --extra "$SPEC_ARGS" \
    --sweep "$OUT/sweep/sweep.json" --profile "$OUT/lcpp.json" --out "$OUT/llamacpp_spec.json" \
    | tee "$OUT/llamacpp_spec.txt"
step "done: $OUT"
