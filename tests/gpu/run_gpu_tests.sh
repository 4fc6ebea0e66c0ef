#!/usr/bin/env bash
# The GPU test run, on a machine with a CUDA device, from the repository root:
#
#   tests/gpu/run_gpu_tests.sh
#
#  1. configure + build with the CUDA backend (Release, sm_90) into build-gpu;
#  2. the ctest suite (the CPU unit and CLI tests);
#  3. test_cuda_ops: every CUDA op against the CPU backend; test_cuda_quant: the quantized
#     weights (cuda_quant_*.cu: every type, GEMV and GEMM paths, get_rows, mul_mat_id);
#     test_cuda_batch: attention over a paged cache, and the batched runner of every
#     architecture (prompt chunks and decode steps of several sequences) against the CPU;
#  4. whole models: every tiny synthetic preset in f32/f16/bf16, logits of `stride run
#     --backend cuda` vs `--exact` (the CPU reference ops) by normalised error (same tokens
#     on both: a prompt, then teacher-forced decode steps), and greedy tokens with --pad-weights on
#     vs off on CUDA (STRIDE_ROW_ALIAS=128 STRIDE_ROW_PAD=64, so that the tiny rows pad);
#     the transformers fixtures on CUDA against their reference logits
#     (tests/gpu/fixture_precision.py: F16/BF16 within 1.25x of the error rounding the
#     products' activations to the weight type alone gives); the fixtures' architectures quantized (tests/python/test_quant_model.py, needs the
#     gguf package: pip, or a copy of it under .whl/, which is put on PYTHONPATH) with
#     weights kept quantized, CUDA vs CPU;
#     QUANT_MODELS="a.gguf b.gguf" adds real quantized models (e.g. gemma-3-270m Q4_K_M);
#  5. the three test programs again under compute-sanitizer memcheck (leak check on);
#  6. a pass/fail table.
# Logs and the table go to $OUT when set, else ./gpu-test-out. STAGES="build ops models"
# runs a subset; MODEL_PRESETS="tiny-olmoe-wide" the presets stage 4 runs (default every
# tiny one); MEMCHECK="ops" the programs stage 5 runs (default "ops quant batch"), each
# within MEMCHECK_TIMEOUT seconds (default 300). Exit status: 0 when every stage asked for
# ran and passed; 1 when one failed; 2 when one could not run (ctest without cmocka), and
# the table says INCOMPLETE.
# A cmocka installed under .cm/ (include/, lib/) is found by itself.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUTDIR=${OUT:-$ROOT/gpu-test-out}
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
WORK=$(mktemp -d /tmp/stride-gpu-test.XXXXXX)
STAGES=${STAGES:-"build ctest ops quant batch models memcheck"}
JOBS=$(nproc 2>/dev/null || echo 4)
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
[ -f "$ROOT/.cm/include/cmocka.h" ] &&
    export CPATH=$ROOT/.cm/include LIBRARY_PATH=$ROOT/.cm/lib LD_LIBRARY_PATH=$ROOT/.cm/lib CMAKE_PREFIX_PATH=$ROOT/.cm
mkdir -p "$OUTDIR"
SUMMARY=$OUTDIR/summary.txt
: >"$SUMMARY"
ROWS=()
FAILED=0
SKIPPED=0

row() { # row STAGE RESULT DETAIL
    ROWS+=("$(printf '%-40s | %-5s | %s' "$1" "$2" "$3")")
    [ "$2" = FAIL ] && FAILED=1
    [ "$2" = SKIP ] && SKIPPED=1
    printf '%-40s | %-5s | %s\n' "$1" "$2" "$3"
}
want() { [[ " $STAGES " == *" $1 "* ]]; }
secs() { date +%s; }
T0=$(secs)

echo "== stride GPU tests: ${STRIDE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")} on $(hostname), $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"

# ---- 1. build ------------------------------------------------------------------------------
STRIDE=$BUILD/stride
OPS=$BUILD/tests/gpu/test_cuda_ops
QUANT=$BUILD/tests/gpu/test_cuda_quant
BATCH=$BUILD/tests/gpu/test_cuda_batch
if want build; then
    t=$(secs)
    TESTS=ON
    if ! echo '#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>' | cc -E -x c - >/dev/null 2>&1; then
        TESTS=OFF # cmocka is missing here: the CPU ctest suite cannot be built
    fi
    {
        cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSTRIDE_CUDA=ON -DSTRIDE_CUDA_ARCH=90 \
              -DSTRIDE_TESTS=$TESTS &&
        cmake --build "$BUILD" -j"$JOBS"
    } >"$OUTDIR/build.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then row build PASS "$(($(secs) - t)) s, tests $TESTS"; else
        row build FAIL "see build.log"; tail -n 30 "$OUTDIR/build.log"; fi
fi

# ---- 2. ctest (CPU) --------------------------------------------------------------------------
if want ctest; then
    if [ -f "$BUILD/CTestTestfile.cmake" ] && grep -q "STRIDE_TESTS:BOOL=ON" "$BUILD/CMakeCache.txt"; then
        t=$(secs)
        (cd "$BUILD" && ctest -L 'unit|cli' --no-tests=error -j"$JOBS" --output-on-failure) >"$OUTDIR/ctest.log" 2>&1
        rc=$?
        line=$(grep -E "tests passed|tests failed" "$OUTDIR/ctest.log" | tail -n1)
        if [ $rc -eq 0 ]; then row "ctest (unit, cli)" PASS "$line, $(($(secs) - t)) s"
        else row "ctest (unit, cli)" FAIL "$line (ctest.log)"; fi
    else
        row "ctest (unit, cli)" SKIP "not built (cmocka missing on this machine?)"
    fi
fi

# ---- 3. test_cuda_ops ------------------------------------------------------------------------
if want ops; then
    t=$(secs)
    if [ -x "$OPS" ]; then
        "$OPS" >"$OUTDIR/ops.log" 2>&1
        rc=$?
        line=$(tail -n1 "$OUTDIR/ops.log")
        sed -n '/^op  *|  *cases/,$p' "$OUTDIR/ops.log"
        grep '^FAIL' "$OUTDIR/ops.log" | head -n 20
        if [ $rc -eq 0 ]; then row test_cuda_ops PASS "$line, $(($(secs) - t)) s"
        else row test_cuda_ops FAIL "$line (rc $rc, ops.log)"; fi
    else
        row test_cuda_ops FAIL "$OPS missing"
    fi
fi

# ---- 3c. test_cuda_batch -----------------------------------------------------------------------
if want batch; then
    t=$(secs)
    if [ -x "$BATCH" ]; then
        "$BATCH" >"$OUTDIR/batch.log" 2>&1
        rc=$?
        line=$(tail -n1 "$OUTDIR/batch.log")
        sed -n '/^op  *|  *cases/,$p' "$OUTDIR/batch.log"
        grep '^FAIL' "$OUTDIR/batch.log" | head -n 20
        if [ $rc -eq 0 ]; then row test_cuda_batch PASS "$line, $(($(secs) - t)) s"
        else row test_cuda_batch FAIL "$line (rc $rc, batch.log)"; fi
    else
        row test_cuda_batch FAIL "$BATCH missing"
    fi
fi

# ---- 3b. test_cuda_quant -----------------------------------------------------------------------
if want quant; then
    t=$(secs)
    if [ -x "$QUANT" ]; then
        "$QUANT" >"$OUTDIR/quant.log" 2>&1
        rc=$?
        line=$(tail -n1 "$OUTDIR/quant.log")
        sed -n '/^op  *|  *cases/,$p' "$OUTDIR/quant.log"
        grep '^FAIL' "$OUTDIR/quant.log" | head -n 20
        if [ $rc -eq 0 ]; then row test_cuda_quant PASS "$line, $(($(secs) - t)) s"
        else row test_cuda_quant FAIL "$line (rc $rc, quant.log)"; fi
    else
        row test_cuda_quant FAIL "$QUANT missing"
    fi
fi

# ---- 4. whole models ---------------------------------------------------------------------------
# Normalised-error tolerances for whole-model logits, CUDA vs CPU (same tokens). A tiny
# model chains ~4 GEMMs per layer (2-4 layers) plus the head: the per-GEMM error of the
# op test (f32 ~1e-6, f16 activations rounded ~3e-4, bf16 ~2.3e-3) grows ~sqrt(chain
# length ~13) and through the norms; the tolerance is ~3x that.
tol_for() { case $1 in f32) echo 1e-4 ;; f16) echo 3e-3 ;; bf16) echo 2.5e-2 ;; esac; }
# The tolerance of a preset's prompt logits (the GEMM path) against the CPU: tol_for its
# type, but f16's where the prompt's attention takes the tensor-core flash kernel, which
# rounds q and P to f16 (test_cuda_ops' attn_tol: ~9e-4 for the attention itself):
# tiny-qwen3-hd128 and tiny-qwen3-wide, whose 12-token prompts have 24 query rows a kv head,
# more than the split-KV kernel holds at head_dim 128 (an f16 or bf16 model's tolerance
# covers it already).
prompt_tol() { case $1-$2 in tiny-qwen3-hd128-f32 | tiny-qwen3-wide-f32) tol_for f16 ;; *) tol_for $2 ;; esac; }
PROMPT=1,17,42,99,5,300,7,256,11,480,3,64 # 12 tokens: the prompt runs the GEMM path (M >= 8)
DECODE=8,9,10,100,200,300,400,500          # then 8 teacher-forced steps: the GEMV path (M = 1)
compare_npy() { # compare_npy A B TOL [SKIP] -> prints "nerr ... argmax-agree i/n", exit 0 when nerr <= TOL
    # SKIP: comma-separated positions (rows) left out of the comparison
    python3 - "$1" "$2" "$3" "${4:-}" <<'EOF'
import sys, numpy as np
a, b, tol = np.load(sys.argv[1]), np.load(sys.argv[2]), float(sys.argv[3])
if sys.argv[4] and a.shape == b.shape and a.ndim == 2:
    keep = [i for i in range(a.shape[0]) if i not in {int(p) for p in sys.argv[4].split(",")}]
    a, b = a[keep], b[keep]
ok = a.shape == b.shape and np.isfinite(a).all() and np.isfinite(b).all()
nerr = float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)) if a.shape == b.shape else float("inf")
agree = int((a.argmax(-1) == b.argmax(-1)).sum()) if a.shape == b.shape else 0
worst = ""
if a.shape == b.shape and a.ndim == 2:
    pos = np.linalg.norm(a - b, axis=1) / np.maximum(np.linalg.norm(b, axis=1), 1e-30)
    worst = f", worst position {int(pos.argmax())} ({pos.max():.1e})"
print(f"nerr {nerr:.2e} (tol {tol:.1e}), argmax agrees {agree}/{b.shape[0]}{worst}")
sys.exit(0 if ok and nerr <= tol else 1)
EOF
}
if want models; then
    : >"$OUTDIR/models.log"
    if [ ! -x "$STRIDE" ]; then row models FAIL "$STRIDE missing"; else
        for preset in ${MODEL_PRESETS:-tiny-llama tiny-qwen3 tiny-gemma3 tiny-phi3 tiny-olmoe tiny-llama-hd64 \
            tiny-qwen3-hd128 tiny-qwen3-wide tiny-olmoe-wide}; do
            for type in f32 f16 bf16; do
                m=$WORK/$preset-$type.gguf
                name="$preset $type"
                if ! "$STRIDE" synth "$preset" -o "$m" --type "$type" >>"$OUTDIR/models.log" 2>&1; then
                    row "$name synth" FAIL "models.log"; continue
                fi
                for be in cpu cuda cuda-ub1; do
                    echo "== $name --backend $be" >>"$OUTDIR/models.log"
                    ub=512; [ $be = cuda-ub1 ] && ub=1
                    exact=; [ $be = cpu ] && exact=--exact # the reference ops, not the CPU fast path
                    "$STRIDE" run -m "$m" --tokens $PROMPT --decode-tokens $DECODE -n 0 --backend ${be%-ub1} -ub $ub $exact \
                        --logits-out "$WORK/$preset-$type-$be.npy" >>"$OUTDIR/models.log" 2>&1
                done
                # one token per forward pass: no cuBLAS, so no rounding of activations to
                # f16/bf16: every type must then match the CPU to f32 summation order
                res1=$(compare_npy "$WORK/$preset-$type-cuda-ub1.npy" "$WORK/$preset-$type-cpu.npy" 1e-4 2>&1)
                rc1=$?
                res=$(compare_npy "$WORK/$preset-$type-cuda.npy" "$WORK/$preset-$type-cpu.npy" "$(prompt_tol $preset $type)" 2>&1)
                rc=$?
                echo "$name logits cuda vs cpu: $res; -ub 1: $res1" >>"$OUTDIR/models.log"
                if [ $rc -eq 0 ]; then row "$name logits cuda~cpu" PASS "$res"
                elif [[ "$preset" == tiny-olmoe* ]] && [ "$type" != f32 ] && [ $rc1 -eq 0 ]; then
                    # MoE: the prompt's GEMMs round their inputs to f16/bf16 (the router's own
                    # F32 product does not), so the router's input differs from the CPU's by
                    # about that rounding, which can flip a near-tie in the top-k choice of a
                    # token: a discrete change of that position's output (and, through its
                    # keys and values, a smaller one of every later position), not an error of
                    # the kernels, which the -ub 1 row (no rounding) checks at 1e-4.
                    # router_margin.py finds the prompt positions whose top-k margin is below
                    # the rounding's shift: the worst position must be one of them, and argmax
                    # must agree everywhere.
                    worst=$(sed -n 's/.*worst position \([0-9]*\).*/\1/p' <<<"$res")
                    rm_out=$(PYTHONPATH="$ROOT/.whl${PYTHONPATH:+:$PYTHONPATH}" python3 tests/gpu/router_margin.py "$m" "$PROMPT" "$type" "$worst" 2>&1)
                    rm_rc=$?
                    echo "$rm_out" >>"$OUTDIR/models.log"
                    ties=$(sed -n 's/^near-ties at positions: \[\(.*\)\]/\1/p' <<<"$rm_out" | tr -d ' ')
                    rest=$(compare_npy "$WORK/$preset-$type-cuda.npy" "$WORK/$preset-$type-cpu.npy" "$(tol_for $type)" "$ties" 2>&1)
                    if [ $rm_rc -eq 0 ] && [[ "$res" == *"argmax agrees 20/20"* ]]; then
                        row "$name logits cuda~cpu" PASS "router near-tie at position $worst ($(grep "^position *$worst:" <<<"$rm_out" | sed 's/.*smallest //;s/ *near-tie//')); without it: $rest"
                    else row "$name logits cuda~cpu" FAIL "$res; router_margin: $(tail -n1 <<<"$rm_out")"; fi
                else row "$name logits cuda~cpu" FAIL "$res"; fi
                if [ $rc1 -eq 0 ]; then row "$name logits cuda -ub 1~cpu" PASS "$res1"; else row "$name logits cuda -ub 1~cpu" FAIL "$res1"; fi

                # the residual adds preparing the next product's norm wherever the decode
                # kernel can (the tiny shapes never meet the rule) against nowhere. Not the
                # same bits: the add sums x . x by groups of 4 rows, the loop by lanes, so
                # within f32 summation order, as -ub 1 ~ cpu
                # (the chained kernels themselves: test_cuda_ops' "fused chain" rows).
                # Not for MoE layers or post-norms (olmoe, gemma3), which do not chain.
                if [[ "$preset" != tiny-olmoe* ]] && [ "$preset" != tiny-gemma3 ]; then
                    for chain in 0 2; do
                        echo "== $name --backend cuda STRIDE_CUDA_TUNING=norm_prepared=$chain" >>"$OUTDIR/models.log"
                        STRIDE_CUDA_TUNING=norm_prepared=$chain "$STRIDE" run -m "$m" --tokens $PROMPT --decode-tokens $DECODE \
                            -n 0 --backend cuda --logits-out "$WORK/$preset-$type-chain$chain.npy" >>"$OUTDIR/models.log" 2>&1
                    done
                    resc=$(compare_npy "$WORK/$preset-$type-chain2.npy" "$WORK/$preset-$type-chain0.npy" 1e-4 2>&1)
                    if [ $? -eq 0 ]; then row "$name norms prepared = in the loop" PASS "$resc"
                    else row "$name norms prepared = in the loop" FAIL "$resc"; fi
                fi

                # the decode kernels launched early (early_launch=511: the products staged,
                # their rows' copies issued before they wait for the kernel ahead, x read after
                # it; the warps attention's K/V rows loaded before its wait; the post-norms
                # waiting for the product ahead; the router's rows loaded before its wait; the
                # experts' down rows loaded before it waits for their gated unit) against plain
                # launches: the same sums in the same order, so the same bits. tiny-qwen3-wide's
                # rows (2,048) reach the block-a-row kernels that do this; tiny-gemma3 has the
                # post-norms, tiny-olmoe-wide the routing and the experts.
                if [ "$preset" = tiny-qwen3-wide ] || [ "$preset" = tiny-gemma3 ] || [ "$preset" = tiny-olmoe-wide ]; then
                    for early in 0 511; do
                        echo "== $name --backend cuda STRIDE_CUDA_TUNING=early_launch=$early" >>"$OUTDIR/models.log"
                        STRIDE_CUDA_TUNING=early_launch=$early "$STRIDE" run -m "$m" --tokens $PROMPT --decode-tokens $DECODE \
                            -n 0 --backend cuda --logits-out "$WORK/$preset-$type-early$early.npy" >>"$OUTDIR/models.log" 2>&1
                    done
                    rese=$(compare_npy "$WORK/$preset-$type-early511.npy" "$WORK/$preset-$type-early0.npy" 0 2>&1)
                    if [ $? -eq 0 ] && cmp -s "$WORK/$preset-$type-early511.npy" "$WORK/$preset-$type-early0.npy"; then
                        row "$name launched early = plain" PASS "logits bitwise identical ($rese)"
                    else row "$name launched early = plain" FAIL "$rese"; fi
                fi

                # greedy tokens, padding on vs off (CUDA), forced to pad the tiny rows
                for pad in on off; do
                    echo "== $name cuda --pad-weights $pad" >>"$OUTDIR/models.log"
                    STRIDE_ROW_ALIAS=128 STRIDE_ROW_PAD=64 "$STRIDE" run -m "$m" --tokens $PROMPT -n 32 \
                        --backend cuda --pad-weights $pad --logits-out "$WORK/$preset-$type-pad$pad.npy" \
                        >"$WORK/$preset-$type-pad$pad.txt" 2>>"$OUTDIR/models.log"
                    cat "$WORK/$preset-$type-pad$pad.txt" >>"$OUTDIR/models.log"
                done
                on=$(cat "$WORK/$preset-$type-padon.txt"); off=$(cat "$WORK/$preset-$type-padoff.txt")
                lres=$(compare_npy "$WORK/$preset-$type-padon.npy" "$WORK/$preset-$type-padoff.npy" "$(tol_for $type)" 2>&1)
                if [ -n "$on" ] && [ "$on" = "$off" ]; then row "$name greedy pad on=off" PASS "32 tokens identical; logits $lres"
                else row "$name greedy pad on=off" FAIL "on [$on] off [$off]; logits $lres"; fi
            done
        done

        # The transformers fixtures on CUDA against their reference logits: F32 at the CPU's
        # tolerance; F16/BF16 within 1.25x of the error that rounding the products'
        # activations to the weight type alone gives (fixture_precision.py)
        t=$(secs)
        fp_out=$(PYTHONPATH="$ROOT/.whl${PYTHONPATH:+:$PYTHONPATH}" python3 tests/gpu/fixture_precision.py "$STRIDE" 2>&1)
        rc=$?
        echo "$fp_out" >>"$OUTDIR/models.log"
        if [ $rc -eq 0 ]; then row "fixtures cuda~transformers" PASS "$(tail -n1 <<<"$fp_out"), $(($(secs) - t)) s"
        else row "fixtures cuda~transformers" FAIL "$(grep -m1 FAIL <<<"$fp_out" || tail -n1 <<<"$fp_out")"; fi

        # Quantized models, weights kept as stored (cuda_quant_*.cu), CUDA vs CPU. The prompt
        # runs the dequantize-to-F16 GEMM, which rounds the weights AND the activations to
        # f16: ~sqrt(2) times an f16 model's per-GEMM error, so 1.5x the f16 tolerance; -ub 1
        # runs only the matrix-vector kernel, whose weights are the CPU's f32 values, so the
        # f32 tolerance. The fixtures' rows (64..128) fit only the 32-value legacy types:
        # test_quant_model.py cycles q8_0, q4_0, q4_1, q5_0, q5_1 over the matrices
        # (token_embd and output included). The K-quants: gemma-3-270m's shapes with the
        # tensor types of its real Q4_K_M file (q4_K, q6_K, q5_0, q8_0; random blocks,
        # make_q4km_model.py): 18 layers chain ~10x the tiny models' ~13 products, so its
        # tolerances are sqrt(10) ~ 3x larger. QUANT_MODELS="a.gguf ..." adds real files
        # (tolerated as the 270m).
        qdir=$WORK/quant
        mkdir -p "$qdir"
        qmodels=()
        if qmsg=$(PYTHONPATH="$ROOT/.whl${PYTHONPATH:+:$PYTHONPATH}" python3 - "$ROOT" "$qdir" 2>&1 <<'EOF'
import os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "tests", "python"))
import test_quant_model as q  # exits with a message when the gguf package is missing
for arch in q.ARCHS:
    src = os.path.join(sys.argv[1], "tests", "fixtures", arch + "-f32.gguf")
    paths, n = q.write_models(src, sys.argv[2], arch)
    print(arch, n, "matrices quantized")
EOF
        ); then
            for arch in llama qwen3 gemma3 phi3 olmoe; do qmodels+=("$qdir/$arch-q.gguf"); done
            if "$STRIDE" synth gemma-3-270m -o "$qdir/g270-f16.gguf" --type f16 >>"$OUTDIR/models.log" 2>&1 &&
               PYTHONPATH="$ROOT/.whl${PYTHONPATH:+:$PYTHONPATH}" python3 tests/gpu/make_q4km_model.py \
                   "$qdir/g270-f16.gguf" "$qdir/gemma-3-270m-q4km-random.gguf" >>"$OUTDIR/models.log" 2>&1; then
                qmodels+=("$qdir/gemma-3-270m-q4km-random.gguf")
            else row "gemma-3-270m q4_K_M-like (write)" FAIL "models.log"; fi
            rm -f "$qdir/g270-f16.gguf"
        else
            row "quantized fixtures (write)" FAIL "$(tail -n1 <<<"$qmsg")"
        fi
        echo "$qmsg" >>"$OUTDIR/models.log"
        for m in ${qmodels[@]+"${qmodels[@]}"} ${QUANT_MODELS:-}; do
            name="$(basename "$m" .gguf)"
            qtol=4.5e-3; qtol1=1e-4
            [[ "$m" == "$qdir"/*-q.gguf ]] || { qtol=1.5e-2; qtol1=3e-4; }
            ref=$ROOT/tests/fixtures/${name%-q}-f32.ref.json
            ptoks=$PROMPT; dtoks=$DECODE
            if [ -f "$ref" ]; then # the fixture's own tokens (its vocabulary is 384)
                read -r ptoks dtoks < <(python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
print(",".join(map(str, r["prompt"])), ",".join(map(str, r["decode_tokens"])))' "$ref")
            fi
            for be in cpu cuda cuda-ub1; do
                echo "== $name (quantized) --backend $be" >>"$OUTDIR/models.log"
                ub=512; [ $be = cuda-ub1 ] && ub=1
                exact=; [ $be = cpu ] && exact=--exact
                "$STRIDE" run -m "$m" --tokens "$ptoks" --decode-tokens "$dtoks" -n 0 --backend ${be%-ub1} -ub $ub $exact \
                    --logits-out "$WORK/$name-$be.npy" >>"$OUTDIR/models.log" 2>&1
            done
            res=$(compare_npy "$WORK/$name-cuda.npy" "$WORK/$name-cpu.npy" $qtol 2>&1)
            rc=$?
            res1=$(compare_npy "$WORK/$name-cuda-ub1.npy" "$WORK/$name-cpu.npy" $qtol1 2>&1)
            rc1=$?
            echo "$name logits cuda vs cpu: $res; -ub 1: $res1" >>"$OUTDIR/models.log"
            if [ $rc -eq 0 ]; then row "$name logits cuda~cpu" PASS "$res"
            elif [[ "$name" == olmoe* ]] && [ $rc1 -eq 0 ]; then
                # as for the float MoE models: f16 rounding in the prompt's GEMMs can flip a
                # router near-tie; the -ub 1 row (no rounding) checks the kernels
                row "$name logits cuda~cpu" WARN "$res: above tol, -ub 1 matches: a routing flip?"
            else row "$name logits cuda~cpu" FAIL "$res"; fi
            if [ $rc1 -eq 0 ]; then row "$name logits cuda -ub 1~cpu" PASS "$res1"
            else row "$name logits cuda -ub 1~cpu" FAIL "$res1"; fi
        done
    fi
fi

# ---- 5. memcheck -------------------------------------------------------------------------------
if want memcheck; then
    for which in ${MEMCHECK:-ops quant batch}; do
        case $which in
        ops) prog=$OPS ;; quant) prog=$QUANT ;; batch) prog=$BATCH ;;
        *) row "memcheck $which" FAIL "MEMCHECK names ops, quant, batch"; continue ;;
        esac
        t=$(secs)
        pname=$(basename "$prog")
        log=$OUTDIR/memcheck.log
        [ "$pname" = test_cuda_ops ] || log=$OUTDIR/memcheck-${pname#test_cuda_}.log
        if ! command -v compute-sanitizer >/dev/null; then row "memcheck $pname" FAIL "compute-sanitizer not found"
        elif [ ! -x "$prog" ]; then row "memcheck $pname" FAIL "$prog missing"
        else
            timeout ${MEMCHECK_TIMEOUT:-300} compute-sanitizer --tool memcheck --leak-check full --error-exitcode 99 \
                "$prog" >"$log" 2>&1
            rc=$?
            summary=$(grep -E "ERROR SUMMARY" "$log" | tail -n1)
            if [ $rc -eq 0 ]; then row "memcheck $pname" PASS "$summary, $(($(secs) - t)) s"
            elif [ $rc -eq 124 ]; then row "memcheck $pname" FAIL "timed out after ${MEMCHECK_TIMEOUT:-300} s"
            else row "memcheck $pname" FAIL "rc $rc: $summary $(grep -m1 -E 'Device not supported|Invalid|Leaked' "$log")"; fi
        fi
    done
fi

# ---- 6. the table ------------------------------------------------------------------------------
{
    echo "stride GPU tests | commit ${STRIDE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")} | $(date -u +%F) | $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n1) | $(($(secs) - T0)) s"
    printf '%-40s | %-5s | %s\n' stage result detail
    printf -- '-----------------------------------------+-------+-------\n'
    for r in "${ROWS[@]}"; do echo "$r"; done
    if [ $FAILED -ne 0 ]; then echo "SOME FAILED"
    elif [ $SKIPPED -ne 0 ]; then echo "INCOMPLETE: a stage asked for did not run"
    else echo "ALL PASSED"; fi
} | tee "$SUMMARY"
rm -rf "$WORK"
[ $FAILED -ne 0 ] && exit 1
[ $SKIPPED -ne 0 ] && exit 2
exit 0
