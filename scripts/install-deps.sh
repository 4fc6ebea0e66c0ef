#!/usr/bin/env bash
# Installs what stride needs to build and test on a fresh Debian machine: the compiler
# toolchain, CMake, cmocka (tests), clang with its sanitizer/libFuzzer runtimes, and the
# Python packages the tests read files back with. Idempotent: installs only what is missing.
# The CUDA toolkit is not installed here: the CUDA backend is built when nvcc is on PATH.
set -euo pipefail

packages=(build-essential cmake pkg-config libcmocka-dev clang libclang-rt-14-dev python3 python3-pip)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: apt-get install ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

here=$(cd "$(dirname "$0")/.." && pwd)
if ! python3 -c 'import gguf, numpy' >/dev/null 2>&1; then
    echo "install-deps: pip install -r tests/requirements.txt"
    python3 -m pip install -q --disable-pip-version-check -r "$here/tests/requirements.txt" ||
        python3 -m pip install -q --disable-pip-version-check --break-system-packages -r "$here/tests/requirements.txt"
fi
