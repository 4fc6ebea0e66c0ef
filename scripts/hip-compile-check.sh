#!/usr/bin/env bash
# The HIP build's compile check, for a machine without an AMD GPU or ROCm (CI's):
#   1. every GPU source (src/cuda/*.cu) compiled as HIP to device code for each target
#      (default: gfx1100, RDNA3; gfx1151, RDNA3.5), as GCN assembly: the whole back end
#      (instruction selection, register allocation) but no link, since Debian 12's ROCm
#      device libraries (5.2) have no gfx11 bitcode (-nogpulib; math calls stay undefined);
#   2. its host side compiled against the HIP runtime headers (libamdhip64-dev);
#   3. a wave64 target (gfx942, CDNA3) checked: each source either builds for 64 lanes or
#      stops at a static_assert naming its 32-lane or shared-memory assumption, never at
#      anything else (so that a CDNA build fails loudly instead of computing garbage).
# Warnings are errors. hipBLAS is not packaged in Debian 12: when its headers are missing,
# the sources are compiled with STRIDE_GPU_NO_BLAS, which leaves the BLAS calls out, and
# the parts left out are listed; those compile, and link, on a ROCm machine (README, AMD).
#
# Usage: scripts/hip-compile-check.sh
#   STRIDE_HIP_TARGETS  device targets of step 1 (default "gfx1100 gfx1151")
#   HIP_CLANG           the compiler (default: the first clang++-NN here that takes them all)
#   STRIDE_HIP_JOBS     parallel compiles (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."

targets=${STRIDE_HIP_TARGETS:-gfx1100 gfx1151}
jobs=${STRIDE_HIP_JOBS:-$(nproc)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A clang that compiles HIP device code for every target (gfx1151 needs LLVM 17 or newer:
# Debian 12's clang-19; hipcc 5.2.3 drives clang-15, which knows gfx1100 only).
printf '#include <hip/hip_runtime.h>\n__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n' >"$work/probe.cu"
takes_targets() {
    local cc=$1 t
    command -v "$cc" >/dev/null 2>&1 || return 1
    for t in $targets; do
        "$cc" -x hip --offload-arch="$t" --offload-device-only -nogpulib -S -o /dev/null "$work/probe.cu" \
            >/dev/null 2>&1 || return 1
    done
}
cc=${HIP_CLANG:-}
if [ -z "$cc" ]; then
    for v in 22 21 20 19 18 17; do
        if takes_targets "clang++-$v"; then cc=clang++-$v; break; fi
    done
fi
if [ -z "$cc" ] || ! takes_targets "$cc"; then
    echo "hip-compile-check: no clang that compiles HIP for: $targets (scripts/install-deps.sh installs" \
         "clang-19 and the HIP headers, libamdhip64-dev)" >&2
    exit 1
fi

root=$PWD
flags=(-x hip -std=c++17 -O3 "-I$root/include" "-I$root/src" -DSTRIDE_HAVE_CUDA=1 -ffp-contract=off
       -Wall -Wextra -Wshadow -Wno-unused-parameter -Werror)
if printf '#include <hipblas/hipblas.h>\n' | "$cc" -x hip --offload-host-only -E -o /dev/null - >/dev/null 2>&1; then
    blas="compiled against the hipBLAS headers found here"
else
    flags+=(-DSTRIDE_GPU_NO_BLAS)
    blas="left out: no hipBLAS headers here (not packaged in Debian 12)"
fi
flags_targets=()
for t in $targets; do flags_targets+=(--offload-arch="$t"); done

echo "hip-compile-check: $("$cc" --version | head -1)"
echo "hip-compile-check: targets $targets; BLAS calls $blas"
if [[ " ${flags[*]} " == *" -DSTRIDE_GPU_NO_BLAS "* ]]; then
    echo "hip-compile-check: STRIDE_GPU_NO_BLAS leaves out gpu_runtime.h's hipBLAS include and names, and" \
         "the parts under #if ST_GPU_HAVE_BLAS (in the function or declaration named):"
    # "file:line: in <the definition around it>", or at file scope the definition after it
    awk 'FNR == 1 { cand = ""; scope = ""; pending = 0 }
         /^#if ST_GPU_HAVE_BLAS/ { if (scope != "") print "    " FILENAME ":" FNR ": in " scope; else pending = 1; next }
         pending && /^[A-Za-z]/ { d = $0; sub(/\(.*/, "()", d); sub(/ *\{$/, "", d); print "    " FILENAME ":" FNR ": " d; pending = 0 }
         /^[A-Za-z]/ && !/;[[:space:]]*$/ { cand = $0 }
         /\{[[:space:]]*$/ && scope == "" && cand != "" { scope = cand; sub(/\(.*/, "()", scope); sub(/ *\{$/, "", scope) }
         /^\}/ { scope = ""; cand = "" }' src/cuda/*.cu src/cuda/*.cuh
fi

# The compiles, `jobs` at a time: "<kind> <source>" a line; each leaves its log and exit
# status in $work/<kind>.<name>.{log,rc} (device: its assembly in $work/device.<name>/).
printf '%s\n' "${flags[@]}" >"$work/flags"
printf '%s\n' "${flags_targets[@]}" >"$work/targets"
compile_one() {
    local kind=$1 src=$root/$2 name rc=0
    local -a flags targets
    mapfile -t flags <"$work/flags"
    mapfile -t targets <"$work/targets"
    name=$(basename "$src" .cu)
    case $kind in
    device)
        mkdir -p "$work/device.$name"
        (cd "$work/device.$name" && "$cc" "${flags[@]}" "${targets[@]}" --offload-device-only -nogpulib -S "$src") ;;
    host) "$cc" "${flags[@]}" "${targets[@]}" --offload-host-only -c -o "$work/host.$name.o" "$src" ;;
    wave64) "$cc" "${flags[@]}" -DSTRIDE_GPU_WARP_SIZE=64 --offload-arch=gfx942 --offload-device-only -nogpulib \
                -fsyntax-only "$src" ;;
    esac >"$work/$kind.$name.log" 2>&1 || rc=$?
    echo "$rc" >"$work/$kind.$name.rc"
}
export -f compile_one
export cc work root

sources=(src/cuda/*.cu)
start=$(date +%s)
for s in "${sources[@]}"; do printf 'device %s\nhost %s\nwave64 %s\n' "$s" "$s" "$s"; done |
    xargs -P "$jobs" -L 1 bash -c 'compile_one "$0" "$1"'

failed=0
for s in "${sources[@]}"; do
    name=$(basename "$s" .cu)
    line="  $name.cu:"
    for kind in device host; do
        if [ "$(cat "$work/$kind.$name.rc")" = 0 ] && ! grep -q "warning:" "$work/$kind.$name.log"; then
            if [ "$kind" = device ]; then
                for t in $targets; do
                    [ -s "$work/device.$name/$name-hip-amdgcn-amd-amdhsa-$t.s" ] || { echo "$s: no $t assembly"; failed=1; }
                done
                line+=" $(echo "$targets" | tr ' ' ',') ok;"
            else
                line+=" host ok;"
            fi
        else
            echo "---- $s ($kind):"
            cat "$work/$kind.$name.log"
            line+=" $kind FAILED;"
            failed=1
        fi
    done
    # wave64: builds, or every error is a static_assert (its message names the assumption)
    log="$work/wave64.$name.log"
    if [ "$(cat "$work/wave64.$name.rc")" = 0 ]; then
        line+=" wave64 builds"
    elif ! grep "error:" "$log" | grep -qv "static assertion failed" &&
        grep -q "static assertion failed" "$log"; then
        line+=" wave64 refused: $(grep -m1 -o "static assertion failed.*" "$log" |
            sed -E "s/static assertion failed( due to requirement '.*')?: //")"
    else
        echo "---- $s (wave64, gfx942: an error other than a static_assert):"
        cat "$log"
        line+=" wave64 FAILED"
        failed=1
    fi
    echo "$line"
done
echo "hip-compile-check: ${#sources[@]} sources in $(($(date +%s) - start)) s"
if [ "$failed" != 0 ]; then
    echo "hip-compile-check: FAILED" >&2
    exit 1
fi
echo "hip-compile-check: passed"
