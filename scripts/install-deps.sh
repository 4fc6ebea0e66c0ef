#!/usr/bin/env bash
# Installs what stride needs to build and test on a fresh Debian machine: the compiler
# toolchain, CMake, cmocka (tests), clang with its sanitizer/libFuzzer runtimes,
# libmicrohttpd and jansson (stride serve), Chromium (the web page's test), the HIP headers
# and a clang that compiles for RDNA3.5 (clang-19: gfx1151 needs LLVM 17 or newer) for the
# HIP compile check (scripts/hip-compile-check.sh), and the Python packages the tests use
# (tests/requirements.txt). Idempotent: installs only what is missing.
# The CUDA toolkit is not installed here: the CUDA backend is built when nvcc is on PATH;
# then NCCL (tensor parallelism) comes from NVIDIA's wheel for the toolkit's CUDA major
# version (nvidia-nccl-cu13 for CUDA 13), which CMake finds through python.
# Nor is ROCm's hipBLAS, which Debian 12 does not package (README: AMD GPUs).
set -euo pipefail

packages=(build-essential cmake pkg-config libcmocka-dev clang libclang-rt-14-dev python3 python3-pip
          libmicrohttpd-dev libjansson-dev chromium clang-19 libamdhip64-dev)
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
if ! python3 -c 'import gguf, numpy, openai, jinja2, websockets' >/dev/null 2>&1; then
    echo "install-deps: pip install -r tests/requirements.txt"
    python3 -m pip install -q --disable-pip-version-check -r "$here/tests/requirements.txt" ||
        python3 -m pip install -q --disable-pip-version-check --break-system-packages -r "$here/tests/requirements.txt"
fi

# NCCL: only with a CUDA toolkit, and only the wheel built for its major version.
nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
if [ -n "$nvcc" ]; then
    cuda_major=$("$nvcc" --version | sed -n 's/.*release \([0-9][0-9]*\)\..*/\1/p')
    wheel="nvidia-nccl-cu$cuda_major"
    case "$cuda_major" in
    12 | 13)
        if ! python3 -c "import importlib.metadata as m; m.distribution('$wheel')" >/dev/null 2>&1; then
            echo "install-deps: pip install $wheel (NCCL for CUDA $cuda_major)"
            python3 -m pip install -q --disable-pip-version-check "$wheel" ||
                python3 -m pip install -q --disable-pip-version-check --break-system-packages "$wheel"
        fi
        ;;
    *) echo "install-deps: no NCCL wheel for CUDA '$cuda_major' (nvidia-nccl-cu12 and -cu13 exist): building without NCCL" ;;
    esac
fi
