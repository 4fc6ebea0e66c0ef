#!/usr/bin/env bash
# Checks stride on a machine with an NVIDIA GPU: builds it with the CUDA backend, runs the
# GPU tests, and measures the headline benchmark. From anywhere in the repository:
#
#   scripts/gpu-check.sh                     # the stages build tests bench
#   scripts/gpu-check.sh tests bench         # only those stages (in this order)
#   scripts/gpu-check.sh batched             # the batched engine's and the server's records
#   scripts/gpu-check.sh --out DIR bench     # reports under DIR (else $OUT, else out/gpu-check)
#
# Stages:
#   build   scripts/install-deps.sh (what is missing: cmocka, the gguf Python package, ...),
#           then scripts/build.sh -DSTRIDE_CUDA=ON into $BUILD_DIR (default build-gpu),
#           for the GPU's architecture (nvidia-smi's compute capability; STRIDE_CUDA_ARCH=NN
#           overrides it).
#   tests   tests/gpu/run_gpu_tests.sh on that build: the CPU ctest suite, every CUDA op and
#           quantized op against the CPU backend, whole models CUDA vs CPU and padding on vs
#           off, compute-sanitizer memcheck. Its logs and table go to DIR/tests/.
#   bench   synthesizes the models that are not in $MODELS_DIR yet (default models/;
#           `stride synth PRESET`, F16, phi-4-mini BF16; ~46 GB for all six), then
#           stride bench --backend cuda -m ... -p 512 -n 128 -r 3 --pad-weights on,off
#           into DIR/bench.md (the tables) and DIR/bench.json (every repetition, device,
#           commit). $MODELS picks the presets (default: the six of bench/README.md); the
#           bench holds one model at a time, twice (on and off): ~33 GB of GPU memory for
#           qwen3-8b.
#   batched the batched engine and the server (bench/batched-*.md), llama-3.2-1b and qwen3-8b
#           synthesized as for bench: stride bench -np 1,8,32,64,128 -npp 128 -ntg 128 -r 3
#           --logits top; B=1 against one sequence at the same depths (-p 0 -n 128 -d 128,
#           --logits all, --logits top; two interleaved rounds); qwen3-8b -np 1,64 -r 2; then
#           stride serve -np 64 -c 512 on loopback under scripts/serve-load.py (64 streams,
#           1,024 requests of 128 + 128 tokens, after a warm-up of 64) beside the bench's
#           B=64 just before. Every JSON and the load's reports into DIR/batched/, the key
#           figures into DIR/batched/summary.md.
#
# Each stage logs to its own file under DIR; a summary table ends the run (and is kept as
# DIR/summary.txt). Exit status: 0 when every stage asked for passed, 1 otherwise.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

OUTDIR=${OUT:-$ROOT/out/gpu-check}
STAGES=()
while [ $# -gt 0 ]; do
    case $1 in
    -o | --out)
        [ $# -ge 2 ] || { echo "gpu-check: $1 needs a folder" >&2; exit 1; }
        OUTDIR=$2
        shift 2
        ;;
    -h | --help) usage; exit 0 ;;
    build | tests | bench | batched) STAGES+=("$1"); shift ;;
    *) echo "gpu-check: unknown stage or option '$1' (stages: build tests bench batched; --out DIR)" >&2; exit 1 ;;
    esac
done
[ ${#STAGES[@]} -gt 0 ] || STAGES=(build tests bench)

BUILD=${BUILD_DIR:-$ROOT/build-gpu}
MODELS_DIR=${MODELS_DIR:-$ROOT/models}
MODELS=${MODELS:-llama-3.2-1b qwen3-1.7b qwen3-8b gemma-3-1b phi-4-mini olmoe-1b-7b}
STRIDE=$BUILD/stride
mkdir -p "$OUTDIR" || exit 1
OUTDIR=$(cd "$OUTDIR" && pwd)
: >"$OUTDIR/synth.log" # this run's syntheses (ensure_model)
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH

ROWS=()
FAILED=0
row() { # row STAGE RESULT DETAIL
    ROWS+=("$(printf '%-7s | %-4s | %s' "$1" "$2" "$3")")
    [ "$2" = PASS ] || FAILED=1
    printf '== %s: %s (%s)\n' "$1" "$2" "$3"
}
secs() { date +%s; }
T0=$(secs)

GPU=$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null | head -n1)
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo "?")
echo "== stride GPU check: commit $COMMIT, ${GPU:-no GPU found by nvidia-smi}, stages ${STAGES[*]}, reports in $OUTDIR"

stage_build() {
    local log=$OUTDIR/build.log t arch
    t=$(secs)
    arch=${STRIDE_CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d '. ')}
    [ -n "$arch" ] || arch=90
    if {
        scripts/install-deps.sh &&
            STRIDE_BUILD_DIR=$BUILD scripts/build.sh -DSTRIDE_CUDA=ON -DSTRIDE_CUDA_ARCH="$arch"
    } >"$log" 2>&1 && [ -x "$STRIDE" ]; then
        row build PASS "sm_$arch into $BUILD, $(($(secs) - t)) s, build.log"
    else
        tail -n 20 "$log"
        row build FAIL "build.log"
    fi
}

stage_tests() {
    local log=$OUTDIR/tests.log t rc verdict
    t=$(secs)
    if [ ! -x "$STRIDE" ]; then row tests FAIL "$STRIDE missing: run the build stage"; return; fi
    OUT=$OUTDIR/tests BUILD_DIR=$BUILD STAGES="ctest ops quant models memcheck" \
        tests/gpu/run_gpu_tests.sh >"$log" 2>&1
    rc=$?
    verdict=$(tail -n1 "$OUTDIR/tests/summary.txt" 2>/dev/null)
    grep -E '\| (FAIL|SKIP|WARN) ' "$OUTDIR/tests/summary.txt" 2>/dev/null | head -n 20
    if [ "$rc" -eq 0 ]; then row tests PASS "${verdict:-ALL PASSED}, $(($(secs) - t)) s, tests/summary.txt"
    else row tests FAIL "${verdict:-no table} (exit $rc), tests.log, tests/summary.txt"; fi
}

model_type() { [ "$1" = phi-4-mini ] && echo bf16 || echo f16; }

# $MODELS_DIR/PRESET.gguf, synthesized when missing (synth.log); false when that fails.
ensure_model() {
    local f=$MODELS_DIR/$1.gguf
    [ -s "$f" ] && return 0
    mkdir -p "$MODELS_DIR" || return 1
    echo "== stride synth $1 --type $(model_type "$1")" >>"$OUTDIR/synth.log"
    # written under another name first, so that an interrupted run leaves no file that the
    # next run would take for a whole model
    if ! "$STRIDE" synth "$1" -o "$f.part" --type "$(model_type "$1")" >>"$OUTDIR/synth.log" 2>&1 ||
        ! mv "$f.part" "$f"; then
        rm -f "$f.part"
        return 1
    fi
}

stage_bench() {
    local t m list="" n=0
    t=$(secs)
    if [ ! -x "$STRIDE" ]; then row bench FAIL "$STRIDE missing: run the build stage"; return; fi
    for m in $MODELS; do
        ensure_model "$m" || { row bench FAIL "stride synth $m: synth.log"; return; }
        list=$list${list:+,}$MODELS_DIR/$m.gguf
        n=$((n + 1))
    done
    # -oe json writes the JSON report to stderr, after any message of the run
    "$STRIDE" bench --backend cuda -m "$list" -p 512 -n 128 -r 3 --pad-weights on,off -o md -oe json \
        >"$OUTDIR/bench.md" 2>"$OUTDIR/bench.log"
    local rc=$?
    sed -n '/^{$/,$p' "$OUTDIR/bench.log" >"$OUTDIR/bench.json"
    if [ "$rc" -eq 0 ] && [ -s "$OUTDIR/bench.json" ]; then
        grep -E '^\| .* \| (pp512|tg128) \|' "$OUTDIR/bench.md"
        row bench PASS "$n models, $(($(secs) - t)) s, bench.md, bench.json"
    else
        tail -n 20 "$OUTDIR/bench.log"
        row bench FAIL "exit $rc, bench.log"
    fi
}

# stride serve on loopback under the load generator: DIR/batched/load.{json,md}; false when
# the server does not come up or the load does not complete every request.
batched_serve() {
    local d=$1 model=$2 port=${SERVE_PORT:-8090} pid ok=1 url
    url=http://127.0.0.1:$port
    "$STRIDE" serve --backend cuda -m "$model" -np 64 -c 512 --port "$port" >"$d/serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 240); do
        python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/health", timeout=1)' "$url" \
            2>/dev/null && { ok=0; break; }
        kill -0 $pid 2>/dev/null || break
        sleep 0.5
    done
    if [ $ok -eq 0 ]; then
        local load=(python3 scripts/serve-load.py --url "$url" -c 64 --prompt-tokens 128 --gen-tokens 128 --temperature 0)
        "${load[@]}" -n 64 --json "$d/load-warmup.json" >>"$d/load.log" 2>&1 &&
            "${load[@]}" -n 1024 --json "$d/load.json" --markdown "$d/load.md" >>"$d/load.log" 2>&1 || ok=1
    fi
    kill -INT $pid 2>/dev/null
    wait $pid
    return $ok
}

stage_batched() {
    local t m d=$OUTDIR/batched L Q r rc=0
    t=$(secs)
    if [ ! -x "$STRIDE" ]; then row batched FAIL "$STRIDE missing: run the build stage"; return; fi
    mkdir -p "$d" || { row batched FAIL "cannot create $d"; return; }
    for m in llama-3.2-1b qwen3-8b; do
        ensure_model "$m" || { row batched FAIL "stride synth $m: synth.log"; return; }
    done
    L=$MODELS_DIR/llama-3.2-1b.gguf
    Q=$MODELS_DIR/qwen3-8b.gguf
    local bench=("$STRIDE" bench --backend cuda -o json)
    local np=(-npp 128 -ntg 128)
    : >"$d/bench.log"
    "${bench[@]}" -m "$L" -np 1,8,32,64,128 "${np[@]}" -r 3 --logits top >"$d/np.json" 2>>"$d/bench.log" || rc=1
    for r in 1 2; do
        "${bench[@]}" -m "$L" -p 0 -n 128 -d 128 -r 3 >"$d/one-d128-$r.json" 2>>"$d/bench.log" || rc=1
        "${bench[@]}" -m "$L" -np 1 "${np[@]}" -r 3 --logits all >"$d/b1-all-$r.json" 2>>"$d/bench.log" || rc=1
        "${bench[@]}" -m "$L" -np 1 "${np[@]}" -r 3 --logits top >"$d/b1-top-$r.json" 2>>"$d/bench.log" || rc=1
    done
    "${bench[@]}" -m "$Q" -np 1,64 "${np[@]}" -r 2 --logits top >"$d/qwen3-8b-np.json" 2>>"$d/bench.log" || rc=1
    "${bench[@]}" -m "$L" -np 64 "${np[@]}" -r 2 --logits top >"$d/np64-serve.json" 2>>"$d/bench.log" || rc=1
    batched_serve "$d" "$L" || rc=1
    python3 scripts/batched-summary.py "$d" >"$d/summary.md" 2>>"$d/bench.log" || rc=1
    cat "$d/summary.md"
    if [ $rc -eq 0 ]; then row batched PASS "$(($(secs) - t)) s, batched/summary.md"
    else tail -n 20 "$d/bench.log"; row batched FAIL "batched/bench.log, batched/serve.log, batched/load.log"; fi
}

for s in "${STAGES[@]}"; do
    case $s in
    build) stage_build ;;
    tests) stage_tests ;;
    bench) stage_bench ;;
    batched) stage_batched ;;
    esac
done

{
    echo "stride GPU check | commit $COMMIT | $(date -u +%F) | ${GPU:-no GPU} | $(($(secs) - T0)) s | $OUTDIR"
    for r in "${ROWS[@]}"; do echo "$r"; done
    if [ $FAILED -eq 0 ]; then echo "ALL PASSED"; else echo "SOME FAILED"; fi
} | tee "$OUTDIR/summary.txt"
exit $FAILED
