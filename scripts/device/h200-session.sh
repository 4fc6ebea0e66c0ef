#!/usr/bin/env bash
# One device session (the `run` tool's machine; run from the repository root there):
# the GPU test script, the issue-5 figures (pp512/tg128 on vs off), 64 greedy tokens on vs
# off on seed-shape models, and the seed-form on/off/auto table with TTFT. Writes under
# $OUT as it goes, so a time-out still returns what finished. This is the script behind
# bench/cuda-bench-h200.md and bench/pad-seed-table-h200.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O" models
export PATH=/usr/local/cuda/bin:$PATH PYTHONPATH=$PWD/.whl XDG_CACHE_HOME=$O/cache
t0=$(date +%s)
S=build-gpu/stride
STAGES="build" OUT=$O/gputest-build tests/gpu/run_gpu_tests.sh 2>&1 | grep -E "^build"
# the models in the background while the tests run
( for m in llama-3.2-1b qwen3-1.7b qwen3-8b; do $S synth $m -o models/$m.gguf --type f16 >/dev/null 2>&1 & done; wait
  echo "synth $(( $(date +%s) - t0 )) s" >"$O/synth.txt" ) &
SYN=$!
STAGES="ops quant models memcheck" OUT=$O/gputest tests/gpu/run_gpu_tests.sh >"$O/gputest.log" 2>&1
echo "gpu tests $(( $(date +%s) - t0 )) s"; tail -n 80 "$O/gputest/summary.txt" | grep -E "FAIL|WARN|ALL|SOME|memcheck|test_cuda"
wait $SYN; cat "$O/synth.txt"
M3=models/llama-3.2-1b.gguf,models/qwen3-1.7b.gguf,models/qwen3-8b.gguf
$S bench --backend cuda -m $M3 -p 512 -n 128 -r 3 --pad-weights on,off -o md -oe json >"$O/bench-issue5.md" 2>"$O/bench-issue5.json"
grep -E "^\| .*(pp|tg)" "$O/bench-issue5.md"; echo "bench $(( $(date +%s) - t0 )) s"
for m in llama-3.2-1b qwen3-1.7b qwen3-8b; do
  for pad in on off; do
    $S run --backend cuda -m models/$m.gguf -p "The quick brown fox" -n 64 --temp 0 --pad-weights $pad \
       >"$O/greedy-$m-$pad.txt" 2>"$O/greedy-$m-$pad.err"
  done
  if cmp -s "$O/greedy-$m-on.txt" "$O/greedy-$m-off.txt"; then echo "$m greedy64 on=off: identical"; else echo "$m greedy64 on=off: DIFFER"; fi
  grep -h "padded\|layout" "$O/greedy-$m-on.err" | head -2
done
echo "greedy $(( $(date +%s) - t0 )) s"
$S bench --backend cuda -m $M3 -p 128,512,2048,8192 -n 128 --ttft 512 --ttft-depth 0,4096,8192 -r 2 \
   --pad-weights on,off,auto --chart "$O/seed-table.svg" -o md -oe json >"$O/seed-table.md" 2>"$O/seed-table.json"
sed -n '/shape/,$p' "$O/seed-table.md" | head -40
echo "total $(( $(date +%s) - t0 )) s"
