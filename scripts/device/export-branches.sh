#!/usr/bin/env bash
# Copies the trees of git branches into .wt/NAME (NAME: the branch with '/' as '-'), a
# folder git ignores here, so that one device call can build and compare them beside
# the checkout: name .wt in the run's carry, then `scripts/device/h200-session.sh
# branches` (after its `build` stage: this checkout's build is the baseline). The trees
# count towards the call's 64 MiB: about 11 MiB each.
#
#   scripts/device/export-branches.sh wip/gemv-unroll-by-grid wip/moe-grouped-prefill
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.wt/' .git/info/exclude 2>/dev/null || echo '/.wt/' >>.git/info/exclude
rm -rf .wt
for branch in "$@"; do
    dir=.wt/${branch//\//-}
    mkdir -p "$dir"
    git archive "$branch" | tar -x -C "$dir"
    echo "$branch $(git rev-parse --short "$branch") -> $dir ($(du -sh "$dir" | cut -f1))"
done
