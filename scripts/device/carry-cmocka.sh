#!/usr/bin/env bash
# The device machine has no cmocka, so its builds leave out the ctest suite (and with it
# the CUDA cases of the unit tests, such as test_session's). This copies this machine's
# cmocka header and library into .cm, a folder git ignores: name .cm in the run's carry
# and h200-session.sh builds and runs the suite there too.
#
#   scripts/device/carry-cmocka.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.cm/' .git/info/exclude 2>/dev/null || echo '/.cm/' >>.git/info/exclude
header=/usr/include/cmocka.h
library=$(ls /usr/lib/*/libcmocka.so.0 2>/dev/null | head -n1)
if [ ! -f "$header" ] || [ -z "$library" ]; then
    echo "carry-cmocka: cmocka is not installed here (apt-get install libcmocka-dev)" >&2
    exit 1
fi
mkdir -p .cm/include .cm/lib
cp "$header" .cm/include/
[ -f /usr/include/cmocka_pbc.h ] && cp /usr/include/cmocka_pbc.h .cm/include/
cp -L "$library" .cm/lib/libcmocka.so.0
cp -L "$library" .cm/lib/libcmocka.so
echo "cmocka -> .cm ($(du -sh .cm | cut -f1))"
