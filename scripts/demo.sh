#!/usr/bin/env bash
# The main job on an embedded default: installs what is missing, builds, makes a small
# model itself and shows what stride does with it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/install-deps.sh"
"$here/scripts/build.sh"
stride="${STRIDE_BUILD_DIR:-$here/build}/stride"
models="$here/models"
mkdir -p "$models"
model="$models/tiny-qwen3-f16.gguf"
[ -f "$model" ] || "$stride" synth tiny-qwen3 -o "$model" --type f16 --seed 1
# Until `stride run` lands, the main job shows the planned weight layout of the model for
# this machine's device (the GPU when there is one), then the same with the alias period forced small enough that the
# tiny model's weights are padded.
"$stride" inspect "$model" --layout
echo
STRIDE_ROW_ALIAS=128 STRIDE_ROW_PAD=64 "$stride" inspect "$model" --layout --pad-weights on
