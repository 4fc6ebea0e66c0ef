#!/usr/bin/env bash
# The device sessions behind bench/ and tests/gpu/RESULTS.md, as stages (run from the
# repository root on the `run` tool's machine, in one call or over several warm calls):
#
#   scripts/device/h200-session.sh STAGE [STAGE ...]
#
#   build        configure + build build-gpu (tests/gpu/run_gpu_tests.sh's build stage)
#   synth        synthesize $MODELS (preset names; phi-4-mini as BF16, the rest F16) into
#                models/, in parallel
#   tests        the GPU test script's ctest (when .cm is carried), ops, quant, models (with
#                .whl carried: scripts/device/carry-whl.sh) and memcheck stages (~6 min: run
#                it alone in its call; its rows reach $OUT as they are decided)
#   issue5       tg128/pp512 padding on vs off, -r 3, interleaved ($MODELS), markdown and JSON
#   greedy       64 greedy tokens with padding on vs off ($MODELS)
#   seed         the seed-form table: pp128..pp8192, tg128, TTFT512 at depth 0/4096/8192,
#                on/off/auto, -r 2, with JSON and the SVG chart ($MODELS)
#   kernels      bench/kernels/decode_step_bench.cu against build-gpu: each decode kernel's
#                time per layer, alone and back to back, packed and padded
#   depths       decode_step_bench's attention rows (padded) at depths $DEPTHS (64 1024
#                4000) for build-gpu and every .wt tree built by `branches` (attention
#                changes whose cost grows with the splits: measure them deep, not at tg128)
#   sweep        the same bench against builds with other CUDA defines ($SWEEP: variants
#                separated by ';', each its -D flags, e.g. "-DCUDA_GEMV_UNROLL=4;-DGEMV_NORM_IN_LOOP_ON=0");
#                each build has the CLI too (build-sweep-N/stride, for decode-ab.sh)
#   checks       the GPU test script's ops and models stages only (quick, for kernels in work)
#   ab           tg128 of $MODELS: this checkout's build against each sweep build (decode-ab.sh)
#   threshold    bench/kernels/gemv_gemm_threshold_bench.cu against build-gpu: the own GEMV vs
#                cuBLAS for M = 1..16 on model shapes (where ST_CUDA_GEMM_MIN_M should be)
#   persistent   bench/kernels/persistent_gemv_bench.cu: a layer's four products as separate
#                kernels in a graph vs one persistent cooperative kernel (llama-3.2-1b,
#                qwen3-1.7b and qwen3-8b shapes)
#   chain        bench/kernels/stream_chain_bench.cu: the four products as separate kernels vs
#                one persistent block an SM whose producer warp streams the weights by
#                cp.async.bulk across the products' dependencies (the three shapes; one
#                build for each of $CHAIN_VARIANTS, ';'-separated -D flags, each run at
#                each ring depth cap of $CHAIN_STAGES)
#   ffn          bench/kernels/fused_ffn_bench.cu: a decode step's FFN (norm, gate/up, SwiGLU,
#                down, add) in one kernel split by columns of g plus a sum kernel, against the
#                copy rate (the three shapes; one build for each of $FFN_VARIANTS, ';'-separated
#                -D flags, each run at each of $FFN_BPS blocks an SM)
#   floor        bench/kernels/read_floor_bench.cu: one kernel reading N MB from HBM, back to
#                back in a graph (the floor under a decode product of that size)
#   variants     bench/kernels/gemv_variants_bench.cu: the plain one-warp-a-row GEMV under
#                stride's traits one at a time (loads in flight, register bound, 64-bit
#                indices), each product of the three issue-5 shapes
#   branches     every tree under .wt/ (scripts/device/export-branches.sh): built, its GPU
#                test script's ops and models stages run and its own decode_step_bench
#                (packed); then tg128 of $MODELS against this checkout's build
#                (decode-ab.sh) and, when olmoe-1b-7b is in models/, its pp512
#   real         the real model (gemma-3-270m Q4_K_M; when it is not in models/, reassembled
#                from the pieces earlier warm calls carried as .xfer/part.* and kept in
#                /tmp/xfer: the tree a call takes is limited to 64 MiB) converted to F16/BF16 at load: perplexity over
#                data/kjv-excerpt.txt and 64 greedy tokens, padding on vs off vs auto, and
#                with the alias forced to 256 B so that every converted row pads
#
# Each stage writes one log (and the seed stage its JSON and SVG) under $OUT: the tool
# returns at most 8 files a call. The device's copy of the tree may carry stale git
# metadata: pass the tree's commit as STRIDE_COMMIT=... so that the GPU test table names it.
set -uo pipefail
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O" models
export PATH=/usr/local/cuda/bin:$PATH PYTHONPATH=$PWD/.whl XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/stride-xdg}
MODELS=${MODELS:-llama-3.2-1b qwen3-1.7b qwen3-8b}
IFS=';' read -r -a CHAIN_VARIANTS <<<"${CHAIN_VARIANTS:--DCONSUMER_WARPS=16}"
CHAIN_STAGES=${CHAIN_STAGES:-8} # caps on the ring's stages (8: as many as shared memory holds)
IFS=';' read -r -a FFN_VARIANTS <<<"${FFN_VARIANTS:--DFFN_THREADS=512}"
FFN_BPS=${FFN_BPS:-1} # blocks an SM of the fused FFN kernel
S=build-gpu/stride
# cmocka carried as .cm (scripts/device/carry-cmocka.sh): the builds include the ctest suite
if [ -f .cm/include/cmocka.h ]; then
    export CPATH=$PWD/.cm/include LIBRARY_PATH=$PWD/.cm/lib LD_LIBRARY_PATH=$PWD/.cm/lib CMAKE_PREFIX_PATH=$PWD/.cm
fi
t0=$(date +%s)
elapsed() { echo "$1 $(( $(date +%s) - t0 )) s"; }
model_type() { [ "$1" = phi-4-mini ] && echo bf16 || echo f16; }
model_list() { local m l=""; for m in $MODELS; do l="$l${l:+,}models/$m.gguf"; done; echo "$l"; }

stage_build() {
    STAGES=build OUT=/tmp/gpu-build tests/gpu/run_gpu_tests.sh >"$O/build.log" 2>&1 || { tail -40 "$O/build.log"; exit 1; }
    elapsed build
}
stage_synth() {
    local m
    for m in $MODELS; do
        [ -s models/$m.gguf ] || $S synth $m -o models/$m.gguf --type "$(model_type $m)" >/dev/null 2>&1 &
    done
    wait; ls -l models; elapsed synth
}
stage_tests() {
    # each row as it is decided, into $OUT: a call that runs out of time still returns them
    STAGES="ctest ops quant models memcheck" OUT=/tmp/gpu-tests tests/gpu/run_gpu_tests.sh 2>&1 |
        grep --line-buffered -E '\| (PASS|FAIL|SKIP|WARN) ' >"$O/gpu-tests-rows.txt"
    cp /tmp/gpu-tests/summary.txt "$O/gpu-tests-summary.txt"
    grep -E "FAIL|WARN|ALL|SOME|memcheck|test_cuda" "$O/gpu-tests-summary.txt"; elapsed tests
}
stage_issue5() {
    $S bench --backend cuda -m "$(model_list)" -p 512 -n 128 -r 3 --pad-weights on,off -o md -oe json \
        >"$O/issue5.md" 2>"$O/issue5.json"
    # (the JSON goes to stderr: a failed run's messages are in issue5.json, shown when no row came)
    grep -E "^\| .*(pp|tg)" "$O/issue5.md" || tail -5 "$O/issue5.json"; elapsed issue5
}
stage_greedy() {
    local m pad
    for m in $MODELS; do
        for pad in on off; do
            $S run --backend cuda -m models/$m.gguf -p "The quick brown fox" -n 64 --temp 0 --pad-weights $pad \
                >/tmp/greedy-$m-$pad.txt 2>/tmp/greedy-$m-$pad.err
            echo "== $m $pad: $(grep -h "padded\|layout" /tmp/greedy-$m-$pad.err | head -2 | tr '\n' ' ')"
            cat /tmp/greedy-$m-$pad.txt; echo
        done
        if cmp -s /tmp/greedy-$m-on.txt /tmp/greedy-$m-off.txt; then echo "$m greedy64 on=off: identical"
        else echo "$m greedy64 on=off: DIFFER"; fi
    done >"$O/greedy.log" 2>&1
    grep "greedy64" "$O/greedy.log"; elapsed greedy
}
stage_seed() {
    $S bench --backend cuda -m "$(model_list)" -p 128,512,2048,8192 -n 128 --ttft 512 --ttft-depth 0,4096,8192 \
        -r 2 --pad-weights on,off,auto --chart "$O/seed-table.svg" -o md -oe json >"$O/seed-table.md" \
        2>"$O/seed-table.json"
    sed -n '/shape/,$p' "$O/seed-table.md" | head -40; elapsed seed
}
decode_bench() { # decode_bench BUILD_DIR: the bench linked against that build's library
    nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc -DSTRIDE_HAVE_CUDA=1 bench/kernels/decode_step_bench.cu \
        "$1/libstride.a" -lcublas -lcublasLt -Xcompiler -fopenmp -lm -o "$1/decode_step_bench"
}
stage_kernels() {
    decode_bench build-gpu || exit 1
    { build-gpu/decode_step_bench; build-gpu/decode_step_bench --pad; } >"$O/decode-step.md" 2>&1
    cat "$O/decode-step.md"; elapsed kernels
}
stage_depths() {
    local b d
    [ -x build-gpu/decode_step_bench ] || decode_bench build-gpu || exit 1
    for b in build-gpu .wt/*/build-gpu; do
        [ -d "$b" ] || continue
        if [ ! -x "$b/decode_step_bench" ]; then ( cd "${b%/build-gpu}" && decode_bench build-gpu ) || continue; fi
        for d in ${DEPTHS:-64 1024 4000}; do
            echo "== $b, depth $d"
            "$b/decode_step_bench" --pad --depth "$d" | grep -E "layers|attention"
        done
    done >"$O/depths.md" 2>&1
    cat "$O/depths.md"; elapsed depths
}
stage_sweep() {
    local i=0 flags
    IFS=';' read -ra variants <<<"${SWEEP:--DCUDA_GEMV_UNROLL=4}"
    for flags in "${variants[@]}"; do
        i=$((i + 1))
        ( cmake -S . -B build-sweep-$i -DCMAKE_BUILD_TYPE=Release -DSTRIDE_CUDA=ON -DSTRIDE_CUDA_ARCH=90 -DSTRIDE_TESTS=OFF \
              "-DCMAKE_CUDA_FLAGS=$flags" >/dev/null && cmake --build build-sweep-$i -j8 --target stride >/dev/null &&
          decode_bench build-sweep-$i ) &
    done
    wait
    i=0
    for flags in "${variants[@]}"; do
        i=$((i + 1)); echo "== build-sweep-$i: $flags"; build-sweep-$i/decode_step_bench
    done >"$O/gemv-sweep.md" 2>&1
    grep -E "^==|^[a-z].*layers|attention|norm|back to back" "$O/gemv-sweep.md"; elapsed sweep
}
stage_checks() {
    STAGES="ops models" OUT=/tmp/gpu-checks tests/gpu/run_gpu_tests.sh >/dev/null 2>&1
    cp /tmp/gpu-checks/summary.txt "$O/gpu-checks-summary.txt"
    grep -E "FAIL|WARN|ALL|SOME|test_cuda" "$O/gpu-checks-summary.txt"; elapsed checks
}
stage_ab() {
    local d settings=("")
    for d in build-sweep-*/; do settings+=("STRIDE=${d%/}/stride"); done
    MODELS=$(model_list) scripts/device/decode-ab.sh "${settings[@]}" >"$O/decode-ab.md" 2>&1
    cat "$O/decode-ab.md"; elapsed ab
}
stage_threshold() {
    nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc -DSTRIDE_HAVE_CUDA=1 bench/kernels/gemv_gemm_threshold_bench.cu \
        build-gpu/libstride.a -lcublas -lcublasLt -Xcompiler -fopenmp -lm -o build-gpu/gemv_gemm_threshold_bench || exit 1
    build-gpu/gemv_gemm_threshold_bench >"$O/threshold.md" 2>&1
    sed -n '/faster at every/,$p' "$O/threshold.md"; elapsed threshold
}
stage_persistent() {
    nvcc -O3 -std=c++17 -arch=sm_90 bench/kernels/persistent_gemv_bench.cu -o /tmp/persistent_gemv_bench || exit 1
    { /tmp/persistent_gemv_bench; /tmp/persistent_gemv_bench 2048 2048 1024 6144 28;
      /tmp/persistent_gemv_bench 4096 4096 1024 12288 36; } >"$O/persistent.md" 2>&1
    cat "$O/persistent.md"; elapsed persistent
}
# sweep_variants LOG SRC KNOB "VALUES" "ARGS|ARGS|ARGS" VARIANT...: bench/kernels/SRC built once
# for each VARIANT (-D flags), run with each ARGS (the shapes; empty: its default) for each
# VALUE of the environment variable KNOB; everything into $O/LOG.md.
sweep_variants() {
    local log=$1 src=$2 knob=$3 values=$4 v x a args bin=/tmp/${2%.cu}
    IFS='|' read -r -a args <<<"$5"
    shift 5
    for v in "$@"; do
        echo "build: $v"
        nvcc -O3 -std=c++17 -arch=sm_90 $v "bench/kernels/$src" -o "$bin" || exit 1
        for x in $values; do
            for a in "${args[@]}"; do env "$knob=$x" "$bin" $a; done
        done
    done >"$O/$log.md" 2>&1
    cat "$O/$log.md"
}
stage_chain() {
    sweep_variants chain stream_chain_bench.cu STAGES "$CHAIN_STAGES" "|2048 2048 1024 6144 28|4096 4096 1024 12288 36" \
        "${CHAIN_VARIANTS[@]}"
    elapsed chain
}
stage_ffn() {
    sweep_variants ffn fused_ffn_bench.cu BPS "$FFN_BPS" "|2048 6144 28|4096 12288 36" "${FFN_VARIANTS[@]}"
    elapsed ffn
}
stage_floor() {
    nvcc -O3 -std=c++17 -arch=sm_90 bench/kernels/read_floor_bench.cu -o /tmp/read_floor_bench || exit 1
    /tmp/read_floor_bench >"$O/read-floor.md" 2>&1
    cat "$O/read-floor.md"; elapsed floor
}
stage_variants() {
    nvcc -O3 -std=c++17 -arch=sm_90 bench/kernels/gemv_variants_bench.cu -o /tmp/gemv_variants_bench || exit 1
    { /tmp/gemv_variants_bench; /tmp/gemv_variants_bench 2048 2048 1024 6144 28;
      /tmp/gemv_variants_bench 4096 4096 1024 12288 36; } >"$O/gemv-variants.md" 2>&1
    cat "$O/gemv-variants.md"; elapsed variants
}
stage_branches() {
    local d settings=("") m
    for d in .wt/*/; do
        d=${d%/}
        ( cd "$d" && STAGES=build OUT=/tmp/wt-$(basename "$d")-build tests/gpu/run_gpu_tests.sh >/dev/null 2>&1 ) &
    done
    wait
    for d in .wt/*/; do
        d=${d%/}
        echo "== $d: $(grep -E '^build' /tmp/wt-$(basename "$d")-build/summary.txt | cut -c1-80)"
        ( cd "$d" && STAGES="ops models" OUT=/tmp/wt-$(basename "$d") PYTHONPATH=$OLDPWD/.whl \
            tests/gpu/run_gpu_tests.sh >/dev/null 2>&1 )
        grep -E "FAIL|ALL|SOME|test_cuda" /tmp/wt-$(basename "$d")/summary.txt
        ( cd "$d" && decode_bench build-gpu && build-gpu/decode_step_bench ) | grep -E "layers|rope|attention|back to back"
        settings+=("STRIDE=$d/build-gpu/stride")
    done >"$O/branches.md" 2>&1
    MODELS=$(model_list) scripts/device/decode-ab.sh "${settings[@]}" >>"$O/branches.md" 2>&1
    if [ -s models/olmoe-1b-7b.gguf ]; then
        for m in build-gpu/stride .wt/*/build-gpu/stride; do
            echo "== $m"; $m bench --backend cuda -m models/olmoe-1b-7b.gguf -p 512 -n 0 -r 3 --pad-weights off -o md 2>/dev/null | grep -E "pp512"
        done >>"$O/branches.md" 2>&1
    fi
    cat "$O/branches.md"; elapsed branches
}
stage_real() {
    local rm=models/gemma-3-270m-q4_k_m.gguf w pad env_alias log=$O/real-model.log
    if [ ! -s $rm ]; then cat /tmp/xfer/part.* >$rm || exit 1; fi
    sha256sum $rm | tee "$log"
    for w in f16 bf16; do
        for env_alias in "" "STRIDE_ROW_ALIAS=256 STRIDE_ROW_PAD=128"; do
            for pad in on off auto; do
                echo "== perplexity --weights $w --pad-weights $pad ${env_alias:-(device alias)}" >>"$log"
                env $env_alias $S perplexity --backend cuda -m $rm --weights $w --pad-weights $pad \
                    -f data/kjv-excerpt.txt -c 512 >>"$log" 2>&1
                env $env_alias $S run --backend cuda -m $rm --weights $w --pad-weights $pad \
                    -p "The capital of France is" -n 64 --temp 0 >/tmp/real-$w-$pad.txt 2>/tmp/real-$w-$pad.err
                grep -h "padded\|layout" /tmp/real-$w-$pad.err | head -2 >>"$log"
                echo "greedy: $(tr '\n' ' ' </tmp/real-$w-$pad.txt)" >>"$log"
            done
        done
    done
    grep -E "^==|layout|estimate|greedy" "$log" | cut -c1-200; elapsed real
}

# a piece of the real model carried by this call (see `real`)
mkdir -p /tmp/xfer && cp .xfer/part.* /tmp/xfer/ 2>/dev/null
for stage in "$@"; do "stage_$stage"; done
