#!/usr/bin/env bash
# Extracts the perplexity corpus: a fixed excerpt of the King James Bible (public domain),
# Genesis 1:1 to 15:21 (about 46 KB of English prose), from Debian's bible-kjv-text
# package, read with its `bible` program (package bible-kjv). Installs both with apt-get
# when missing. The text is never committed: run this script to make it.
#
#   scripts/make-corpus-excerpt.sh [OUT]     (default OUT: data/kjv-excerpt.txt)
#
# Format: a "Genesis N" heading and a blank line before each chapter, then one verse per
# line without its number. Deterministic for a given package version (4.38 on Debian 12);
# the sha256 of the result is printed and compared with the one recorded below.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$ROOT/data/kjv-excerpt.txt}
RANGE="gen1:1-15:21"
EXPECTED_SHA256=708935ade76f099fbdcc3a62226a2dd025a4d340690e4e6102c0c08009d2903c

if ! command -v bible >/dev/null 2>&1 || [ ! -e /usr/lib/bible.data ]; then
    echo "make-corpus-excerpt: installing bible-kjv-text (and its reader, bible-kjv) with apt-get" >&2
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    if ! $SUDO apt-get install -y --no-install-recommends bible-kjv-text bible-kjv >/dev/null 2>&1; then
        $SUDO apt-get update >/dev/null
        $SUDO apt-get install -y --no-install-recommends bible-kjv-text bible-kjv >/dev/null
    fi
fi

mkdir -p "$(dirname "$OUT")"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
# -l100000: one verse per line whatever the terminal width (COLUMNS would wrap them).
bible -l100000 "$RANGE" | sed -E -e '1{/^$/d}' -e 's/^ +[0-9]+ //' >"$tmp"
if [ ! -s "$tmp" ]; then
    echo "make-corpus-excerpt: 'bible $RANGE' printed nothing" >&2
    exit 1
fi
mv "$tmp" "$OUT"
trap - EXIT
sum=$(sha256sum "$OUT" | cut -d' ' -f1)
echo "$OUT: $(wc -c <"$OUT") bytes, $(wc -l <"$OUT") lines, sha256 $sum"
if [ "$sum" != "$EXPECTED_SHA256" ]; then
    echo "make-corpus-excerpt: warning: sha256 differs from the recorded $EXPECTED_SHA256" \
         "(another bible-kjv-text version?); perplexities will not compare with recorded ones" >&2
fi
