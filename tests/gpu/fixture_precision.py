"""CUDA's logits on the transformers fixtures, against the reference (run_gpu_tests.sh).

    fixture_precision.py STRIDE

For every fixture tests/fixtures/<arch>-<type>.gguf: `stride run --backend cuda --kv-type
f32` over its prompt and teacher-forced decode tokens (the 16 positions the reference
holds), and the normalised error ||cuda - ref|| / ||ref|| over all logits.

  F32 weights: within 2e-5, test_model_reference.py's F32 tolerance (f32 products on both
    sides, different summation orders).
  F16/BF16 weights: the reference computes in float32 on the rounded weights, so the weight
    type adds nothing; but CUDA's products over several tokens take their activations
    rounded to the weight type (cuBLAS needs A and B of one type). The float64 forward pass
    that rounds exactly those (gguf_forward.Model(round_products=True)) gives the error
    the rounding alone causes, E_round; CUDA must stay within 1.25 E_round. The F32 cache
    keeps the cache's rounding out of both. Any error of stride's own on top of the
    rounding (an expert chosen other than the rounded forward pass chooses, a product
    accumulated in f16, a key masked wrongly) shows as a ratio above the bound.

Prints a row per fixture and a summary line; exit 0 when all 15 fixtures were checked and
passed, 1 otherwise.
"""
import glob
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")
sys.path.insert(0, FIXTURES)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from gguf_forward import Model  # noqa: E402
from test_model_reference import norm_err, run_stride  # noqa: E402  (the CPU's fixture test)

TOL_F32 = 2e-5
ROUNDING_RATIO = 1.25


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    stride = sys.argv[1]
    refs = sorted(glob.glob(os.path.join(FIXTURES, "*.ref.json")))
    passed = failed = 0
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for path in refs:
            ref = json.load(open(path))
            stem = os.path.basename(path)[:-len(".ref.json")]
            model = os.path.join(FIXTURES, ref["model"])
            want = np.fromfile(os.path.join(FIXTURES, ref["logits_file"]), dtype=np.float32)
            want = want.reshape(ref["positions"], ref["n_vocab"]).astype(np.float64)
            got = run_stride(stride, model, ref, os.path.join(tmp, stem + ".npy"), "f32", backend="cuda")
            if got is None or got.size != want.size:
                print(f"{stem:12} FAIL stride run: {'no logits' if got is None else f'{got.size} logits'}")
                failed += 1
                continue
            e = norm_err(got.reshape(want.shape), want)
            if ref["type"] == "f32":
                ok, detail = e <= TOL_F32, f"cuda {e:.2e} (tol {TOL_F32:.0e})"
            else:
                tokens = ref["prompt"] + ref["decode_tokens"]
                e_round = norm_err(Model(model, round_products=True).forward(tokens), want)
                ratio = e / e_round
                worst = max(worst, ratio)
                ok = ratio <= ROUNDING_RATIO
                detail = f"cuda {e:.2e}, the rounding alone {e_round:.2e}, ratio {ratio:.2f} (at most {ROUNDING_RATIO})"
            print(f"{stem:12} {'PASS' if ok else 'FAIL'} {detail}")
            passed += ok
            failed += not ok
    print(f"{passed} passed, {failed} failed ({len(refs)} fixtures; worst ratio to the rounding {worst:.2f})")
    sys.exit(0 if failed == 0 and passed == 15 else 1)


if __name__ == "__main__":
    main()
