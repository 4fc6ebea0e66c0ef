#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs the whole suite with ctest.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/install-deps.sh"
"$here/scripts/build.sh"
cd "${STRIDE_BUILD_DIR:-$here/build}"
ctest --output-on-failure -j"$(nproc)" --no-tests=error
