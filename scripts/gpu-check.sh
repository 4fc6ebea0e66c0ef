#!/usr/bin/env bash
# Checks stride on a machine with an NVIDIA GPU: builds it with the CUDA backend, runs the
# GPU tests, and measures the headline benchmark. From anywhere in the repository:
#
#   scripts/gpu-check.sh                     # every stage: build tests bench
#   scripts/gpu-check.sh tests bench         # only those stages (in this order)
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
    build | tests | bench) STAGES+=("$1"); shift ;;
    *) echo "gpu-check: unknown stage or option '$1' (stages: build tests bench; --out DIR)" >&2; exit 1 ;;
    esac
done
[ ${#STAGES[@]} -gt 0 ] || STAGES=(build tests bench)

BUILD=${BUILD_DIR:-$ROOT/build-gpu}
MODELS_DIR=${MODELS_DIR:-$ROOT/models}
MODELS=${MODELS:-llama-3.2-1b qwen3-1.7b qwen3-8b gemma-3-1b phi-4-mini olmoe-1b-7b}
STRIDE=$BUILD/stride
mkdir -p "$OUTDIR" || exit 1
OUTDIR=$(cd "$OUTDIR" && pwd)
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH

ROWS=()
FAILED=0
row() { # row STAGE RESULT DETAIL
    ROWS+=("$(printf '%-6s | %-4s | %s' "$1" "$2" "$3")")
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

stage_bench() {
    local t m f list="" n=0
    t=$(secs)
    if [ ! -x "$STRIDE" ]; then row bench FAIL "$STRIDE missing: run the build stage"; return; fi
    mkdir -p "$MODELS_DIR" || { row bench FAIL "cannot create $MODELS_DIR"; return; }
    : >"$OUTDIR/synth.log"
    for m in $MODELS; do
        f=$MODELS_DIR/$m.gguf
        if [ ! -s "$f" ]; then
            echo "== stride synth $m --type $(model_type "$m")" >>"$OUTDIR/synth.log"
            # written under another name first, so that an interrupted run leaves no file
            # that the next run would take for a whole model
            if ! "$STRIDE" synth "$m" -o "$f.part" --type "$(model_type "$m")" >>"$OUTDIR/synth.log" 2>&1 ||
                ! mv "$f.part" "$f"; then
                rm -f "$f.part"
                row bench FAIL "stride synth $m: synth.log"
                return
            fi
        fi
        list=$list${list:+,}$f
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

for s in "${STAGES[@]}"; do
    case $s in
    build) stage_build ;;
    tests) stage_tests ;;
    bench) stage_bench ;;
    esac
done

{
    echo "stride GPU check | commit $COMMIT | $(date -u +%F) | ${GPU:-no GPU} | $(($(secs) - T0)) s | $OUTDIR"
    for r in "${ROWS[@]}"; do echo "$r"; done
    if [ $FAILED -eq 0 ]; then echo "ALL PASSED"; else echo "SOME FAILED"; fi
} | tee "$OUTDIR/summary.txt"
exit $FAILED
