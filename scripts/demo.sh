#!/usr/bin/env bash
# The main job on an embedded default: installs what is missing, builds, makes a small
# model itself (a synthetic Qwen3-architecture model with random weights) and runs it on
# the GPU when there is one, else on the CPU.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/install-deps.sh"
"$here/scripts/build.sh"
stride="${STRIDE_BUILD_DIR:-$here/build}/stride"
models="$here/models"
mkdir -p "$models"
model="$models/tiny-qwen3-f16.gguf"
[ -f "$model" ] || "$stride" synth tiny-qwen3 -o "$model" --type f16 --seed 1

echo "== the planned weight layout (summary)"
"$stride" inspect "$model" --layout | grep -E '^(layout|padded):|^ {11}alias'
echo "== greedy generation from token ids (text prompts arrive with the tokenizers)"
"$stride" run -m "$model" --tokens 1,100,200,300 -n 32 --temp 0
