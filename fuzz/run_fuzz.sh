#!/usr/bin/env bash
# Fuzzes the GGUF reader (or the model loader) with libFuzzer + ASan + UBSan.
#
#   fuzz/run_fuzz.sh [SECONDS] [TARGET]     (default 60, fuzz_gguf)
#
# TARGET: fuzz_gguf, the GGUF reader (seeds fuzz/corpus, with the malformed-file corpus
# tests/data/malformed as extra read-only seeds), or fuzz_model, the model loader past the
# reader: hyperparameters, tensor table and a forward pass of what the validator accepts
# (seeds fuzz/corpus-model).
# Configures its own build directory (STRIDE_FUZZ_BUILD, default build-fuzz in the
# repository) with clang, builds TARGET and runs it for SECONDS on a scratch COPY of its
# committed seed corpus. The committed corpora are never written.
# Exits non-zero on any crash, leak, timeout or out-of-memory; the input that caused it is
# kept under the scratch directory (printed) and copied to $STRIDE_FUZZ_ARTIFACTS if set.
set -euo pipefail

seconds="${1:-60}"
target="${2:-fuzz_gguf}"
case "$target" in
  fuzz_gguf)  corpus=corpus;       extra="tests/data/malformed" ;;
  fuzz_model) corpus=corpus-model; extra="" ;;
  *) echo "run_fuzz.sh: TARGET must be fuzz_gguf or fuzz_model, got '$target'" >&2; exit 2 ;;
esac
case "$seconds" in
  ''|*[!0-9]*) echo "run_fuzz.sh: SECONDS must be a positive integer, got '$seconds'" >&2; exit 2 ;;
esac
[ "$seconds" -gt 0 ] || { echo "run_fuzz.sh: SECONDS must be > 0" >&2; exit 2; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${STRIDE_FUZZ_BUILD:-$root/build-fuzz}"
cc="${STRIDE_FUZZ_CC:-clang}"
command -v "$cc" >/dev/null || { echo "run_fuzz.sh: $cc not found (libFuzzer needs clang)" >&2; exit 2; }

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DSTRIDE_FUZZ=ON -DSTRIDE_TESTS=OFF -DSTRIDE_CUDA=OFF >/dev/null
cmake --build "$build" --target "$target" -j "$(nproc 2>/dev/null || echo 2)"

work="$(mktemp -d "${TMPDIR:-/tmp}/stride-fuzz.XXXXXX")"
mkdir -p "$work/corpus" "$work/artifacts"
cp "$root/fuzz/$corpus"/* "$work/corpus/"
n_seeds=$(ls "$work/corpus" | wc -l)
extra_dirs=()
n_extra=0
if [ -n "$extra" ]; then
  extra_dirs=("$root/$extra")
  n_extra=$(ls "$root/$extra"/*.gguf | wc -l)
fi
echo "run_fuzz.sh: $target, $n_seeds seeds + $n_extra extra files, ${seconds}s, scratch $work"

set +e
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}" \
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}" \
"$build/fuzz/$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    "$work/corpus" ${extra_dirs[@]+"${extra_dirs[@]}"} 2>&1 | tee "$work/fuzz.log"
rc=${PIPESTATUS[0]}
set -e

execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz.log" | tail -n 1)
echo "run_fuzz.sh: $target: ${execs:-unknown} executions in ${seconds}s; corpus grew from $n_seeds to $(ls "$work/corpus" | wc -l) inputs"
if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$work/artifacts")" ]; then
  echo "run_fuzz.sh: FAILED (libFuzzer exit $rc); reproducers:" >&2
  ls -l "$work/artifacts" >&2
  if [ -n "${STRIDE_FUZZ_ARTIFACTS:-}" ]; then
    mkdir -p "$STRIDE_FUZZ_ARTIFACTS" && cp "$work"/artifacts/* "$STRIDE_FUZZ_ARTIFACTS"/ 2>/dev/null || true
  fi
  exit 1
fi
if [ -z "$execs" ] || [ "$execs" -eq 0 ]; then
  echo "run_fuzz.sh: FAILED: the fuzzer executed nothing" >&2
  exit 1
fi
rm -rf "$work"
echo "run_fuzz.sh: OK, no findings"
