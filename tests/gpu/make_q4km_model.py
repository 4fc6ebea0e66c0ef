#!/usr/bin/env python3
"""A model with the tensor types of a llama.cpp Q4_K_M file and random quantized weights.

    make_q4km_model.py SRC.gguf OUT.gguf

SRC is any float GGUF (e.g. `stride synth gemma-3-270m --type f16`): its metadata and
non-matrix tensors are copied, and every matrix becomes random blocks of the type that
llama.cpp's Q4_K_M recipe gives it: q6_K for token_embd/output and for attn_v/ffn_down
on every other layer, q4_K for the rest; a row that is not a multiple of 256 values takes
llama.cpp's fallback (q4_K -> q5_0, q6_K -> q8_0). For gemma-3-270m this reproduces the
real file's table exactly: q4_K, q6_K, q5_0 and q8_0 (token_embd), so that CUDA-vs-CPU
logits cover the K-quant kernels in a whole model without the real weights.

Blocks are random bytes with sane f16 scales (weights of RMS ~0.02, the synthetic
models' scale). Needs the `gguf` and numpy packages.
"""
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import gguf  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402
from test_quant_model import copy_metadata  # noqa: E402

BLOCK = {Q.Q4_K: (256, 144), Q.Q6_K: (256, 210), Q.Q5_0: (32, 22), Q.Q8_0: (32, 34)}
FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}


def qtype_for(name, k):
    m = re.match(r"blk\.(\d+)\.", name)
    more_bits = m is not None and int(m.group(1)) % 2 == 0 and re.search(r"attn_v|ffn_down", name)
    t = Q.Q6_K if name in ("token_embd.weight", "output.weight") or more_bits else Q.Q4_K
    return t if k % 256 == 0 else FALLBACK[t]


def random_blocks(rng, qtype, n_blocks):
    qk, nbytes = BLOCK[qtype]
    b = rng.integers(0, 256, size=(n_blocks, nbytes), dtype=np.uint8)
    d = (rng.uniform(0.5, 1.5, n_blocks) * rng.choice([-1.0, 1.0], n_blocks)).astype(np.float32)
    if qtype == Q.Q8_0:  # d * int8 (RMS ~74)
        b[:, 0:2] = (d * 0.02 / 74).astype(np.float16).view(np.uint8).reshape(-1, 2)
    elif qtype == Q.Q5_0:  # d * (q - 16) (RMS ~9)
        b[:, 0:2] = (d * 0.02 / 9).astype(np.float16).view(np.uint8).reshape(-1, 2)
    elif qtype == Q.Q4_K:  # (d * 6-bit scale) * q - dmin * 6-bit min
        b[:, 0:2] = (np.abs(d) * 0.02 / 300).astype(np.float16).view(np.uint8).reshape(-1, 2)
        b[:, 2:4] = (np.abs(d) * 0.02 / 600).astype(np.float16).view(np.uint8).reshape(-1, 2)
    else:  # q6_K: (d * int8 scale) * (q - 32)
        b[:, 208:210] = (d * 0.02 / (74 * 18)).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return b


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    reader = gguf.GGUFReader(sys.argv[1])
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(sys.argv[2], arch)
    copy_metadata(reader, writer)
    rng = np.random.default_rng(270)
    counts = {}
    for t in reader.tensors:
        ne = [int(x) for x in t.shape]  # ggml order: ne[0] = K
        if not (t.name.endswith(".weight") and len(ne) >= 2):
            writer.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
            continue
        qtype = qtype_for(t.name, ne[0])
        qk, nbytes = BLOCK[qtype]
        rows = int(np.prod(ne[1:]))
        blocks = random_blocks(rng, qtype, rows * ne[0] // qk)
        writer.add_tensor(t.name, blocks.reshape(list(reversed(ne[1:])) + [ne[0] // qk * nbytes]), raw_dtype=qtype)
        counts[qtype.name] = counts.get(qtype.name, 0) + 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print("wrote %s: %s" % (sys.argv[2], ", ".join("%d %s" % (n, k) for k, n in sorted(counts.items()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
