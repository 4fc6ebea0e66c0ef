#!/usr/bin/env python3
"""Reference vectors for stride's dequantizers, from the `gguf` package (PyPI).

    test_quant_vectors.py [--stride STRIDE --work DIR]      check the committed vectors
    test_quant_vectors.py --write                           regenerate them

tests/data/quant/<type>.blocks holds packed blocks of one ggml type and <type>.f32 the
float32 values gguf.quants.dequantize gives for them; tests/unit/test_quant.c checks that
stride's C dequantizers reproduce every value bit for bit. The legacy types (q4_0 ..
q8_0) are quantized from Gaussian data by gguf.quants.quantize, so that the blocks are
what a converter writes; the K-quants (which gguf can dequantize but not quantize) are
random bytes with their f16 scales set to moderate values, which exercises every bit of
the layout. q8_K has no gguf dequantizer: the C test covers it with its own reference.

Checking (the default, as ctest runs it): every expected file exists with the expected
size, and dequantizing the committed blocks with gguf again gives the committed values
exactly. Prints each mismatch and 'N passed, M failed'; exits non-zero on any failure
and when nothing was checked.
"""
import argparse
import os
import sys

import numpy as np

try:
    import gguf.quants
    from gguf import GGMLQuantizationType as Q
    from gguf.constants import GGML_QUANT_SIZES
except ImportError as e:
    print("test_quant_vectors: the `gguf` Python package is needed (pip install gguf): %s" % e)
    sys.exit(1)

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "quant")
SEED = 20240611

# type -> blocks in the vector: several blocks per type, small files
LEGACY = {Q.Q8_0: 8, Q.Q4_0: 8, Q.Q4_1: 8, Q.Q5_0: 8, Q.Q5_1: 8}
KQUANTS = {Q.Q2_K: 4, Q.Q3_K: 4, Q.Q4_K: 4, Q.Q5_K: 4, Q.Q6_K: 4}

# byte offsets of the f16 scales (d, dmin) in a K-quant block (the layouts in quant.h)
K_SCALE_OFFSETS = {Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}


def name_of(t):
    return t.name.lower().replace("_k", "_K")


def make_blocks(rng, t, n_blocks):
    block, size = GGML_QUANT_SIZES[t]
    if t in LEGACY:
        x = (rng.standard_normal(n_blocks * block) * 0.05).astype(np.float32)
        x[:block] *= 20  # one block of large values
        return np.asarray(gguf.quants.quantize(x.reshape(1, -1), t), dtype=np.uint8).reshape(-1)
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in K_SCALE_OFFSETS[t]:
        mag = np.ldexp(1.0 + rng.integers(0, 1024, n_blocks) / 1024.0, rng.integers(-12, -2, n_blocks))
        sign = np.where(rng.integers(0, 2, n_blocks) == 1, -1.0, 1.0)
        raw[:, off:off + 2] = (sign * mag).astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(-1)


def dequantize(t, blocks):
    out = gguf.quants.dequantize(blocks.reshape(1, -1), t)
    return np.asarray(out, dtype=np.float32).reshape(-1)


def write():
    rng = np.random.default_rng(SEED)
    os.makedirs(DATA, exist_ok=True)
    for t, n in list(LEGACY.items()) + list(KQUANTS.items()):
        blocks = make_blocks(rng, t, n)
        values = dequantize(t, blocks)
        assert np.all(np.isfinite(values))
        blocks.tofile(os.path.join(DATA, name_of(t) + ".blocks"))
        values.astype("<f4").tofile(os.path.join(DATA, name_of(t) + ".f32"))
        print("wrote %s: %d blocks, %d values" % (name_of(t), n, values.size))
    return 0


def check():
    passed = failed = 0
    for t, n in list(LEGACY.items()) + list(KQUANTS.items()):
        block, size = GGML_QUANT_SIZES[t]
        bpath = os.path.join(DATA, name_of(t) + ".blocks")
        fpath = os.path.join(DATA, name_of(t) + ".f32")
        if not (os.path.exists(bpath) and os.path.exists(fpath)):
            print("FAIL %s: %s or %s missing (regenerate with --write)" % (name_of(t), bpath, fpath))
            failed += 1
            continue
        blocks = np.fromfile(bpath, dtype=np.uint8)
        values = np.fromfile(fpath, dtype="<f4")
        if blocks.size != n * size or values.size != n * block:
            print("FAIL %s: %d bytes / %d values, expected %d / %d" % (name_of(t), blocks.size, values.size,
                                                                       n * size, n * block))
            failed += 1
            continue
        again = dequantize(t, blocks)
        if not np.array_equal(again.view(np.uint32), values.view(np.uint32)):
            bad = np.flatnonzero(again.view(np.uint32) != values.view(np.uint32))
            print("FAIL %s: %d values differ from gguf's dequantization, first #%d: %r vs %r" %
                  (name_of(t), bad.size, bad[0], values[bad[0]], again[bad[0]]))
            failed += 1
            continue
        if not np.all(np.isfinite(values)):
            print("FAIL %s: non-finite values" % name_of(t))
            failed += 1
            continue
        print("ok   %s: %d blocks, %d values match gguf.quants.dequantize" % (name_of(t), n, values.size))
        passed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 and passed > 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="regenerate tests/data/quant/")
    ap.add_argument("--stride", help="(ctest passes it; unused)")
    ap.add_argument("--work", help="(ctest passes it; unused)")
    args = ap.parse_args()
    return write() if args.write else check()


if __name__ == "__main__":
    sys.exit(main())
