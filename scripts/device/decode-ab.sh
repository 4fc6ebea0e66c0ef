#!/usr/bin/env bash
# Decode A/B on the device machine (from the repository root there): tg128 of the issue-5
# models under each setting given as an argument ("" is the default build behaviour,
# "NAME=V NAME2=V" sets environment variables; STRIDE=path picks another build), rounds interleaving the settings
# (A B C A B C ...) so that a drift of the machine spreads over all of them.
#
#   MODELS=a.gguf,b.gguf ROUNDS=2 scripts/device/decode-ab.sh "" "STRIDE_CUDA_GEMV_SPLIT=1"
#
# Prints one markdown row per model, setting and round.
set -uo pipefail
cd "$(dirname "$0")/../.."
MODELS=${MODELS:-models/llama-3.2-1b.gguf,models/qwen3-1.7b.gguf,models/qwen3-8b.gguf}
ROUNDS=${ROUNDS:-2}
for ((round = 1; round <= ROUNDS; round++)); do
    for setting in "$@"; do
        (
            [ -n "$setting" ] && export $setting
            "${STRIDE:-build-gpu/stride}" bench --backend cuda -m "$MODELS" -p 0 -n 128 -r 3 --pad-weights on -o md \
                2>/dev/null | grep -E "^\| .*tg" | sed "s#^#| round $round | ${setting:-default} #"
        )
    done
done
