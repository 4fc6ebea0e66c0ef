#!/usr/bin/env bash
# The main job: installs what is missing, builds, and generates text with the real model
# when it is present (scripts/fetch-gemma3-270m.sh puts Gemma 3 270M in models/), else
# with a small synthetic model it makes itself. Runs on the GPU when there is one (the
# real model's quantized weights are converted to f16 for it), else on the CPU.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/install-deps.sh"
"$here/scripts/build.sh"
stride="${STRIDE_BUILD_DIR:-$here/build}/stride"
models="$here/models"
mkdir -p "$models"
real="$models/gemma-3-270m-q4_k_m.gguf"

if [ -f "$real" ]; then
    weights=()
    # quantized weights run on the CPU backend only so far: convert them for the GPU
    if "$stride" inspect "$real" --layout | grep -q 'device nvidia'; then weights=(--weights f16); fi
    echo "== $real"
    "$stride" inspect "$real" --layout | grep -E '^(layout|padded):'
    "$stride" run -m "$real" "${weights[@]}" -p "The capital of France is" -n 48 --temp 0
else
    model="$models/tiny-qwen3-f16.gguf"
    [ -f "$model" ] || "$stride" synth tiny-qwen3 -o "$model" --type f16 --seed 1
    echo "== $model (synthetic: random weights; scripts/fetch-gemma3-270m.sh fetches a real model)"
    "$stride" inspect "$model" --layout | grep -E '^(layout|padded):'
    "$stride" run -m "$model" --tokens 1,100,200,300 -n 32
fi
