#!/usr/bin/env bash
# The device machine reaches no package index, and the GPU test script's models stage reads
# GGUF files in Python (tests/python/test_quant_model.py, tests/gpu/router_margin.py,
# tests/gpu/make_q4km_model.py): the gguf package at tests/requirements.txt's pin, and the
# two packages gguf imports that the device lacks (pyyaml, tqdm; numpy is the device's own).
# This installs them into .whl, a folder git ignores: name .whl in the run's carry, and the
# test script and h200-session.sh put it on PYTHONPATH.
#
#   scripts/device/carry-whl.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
gguf=$(grep -E '^gguf==' tests/requirements.txt)
rm -rf .whl
PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check --target .whl --no-deps "$gguf" pyyaml tqdm
PYTHONPATH=$PWD/.whl python3 -c 'import gguf, yaml, tqdm' # the copy imports on its own
echo "$gguf, pyyaml, tqdm -> .whl ($(du -sh .whl | cut -f1))"
