"""Is a MoE position's CUDA-vs-CPU difference a routing near-tie? (run_gpu_tests.sh)

The prompt's GEMMs on CUDA round their input to the weight type (cuBLAS takes A and B of
one type), the CPU does not, so a layer's hidden state, the router's input, differs from
the CPU's by about that rounding (the router's F32 product itself rounds nothing). That
moves every expert's logit a little; where the k-th and (k+1)-th largest logits of a token
are closer than that move, the two backends can choose different experts for the token: a
discrete change of its output that no kernel tolerance covers.

This script runs the float64 reference forward pass (tests/fixtures/gguf_forward.py)
over the prompt and, for every layer and prompt token, compares
  margin = logit_k - logit_(k+1)         (the k-th and (k+1)-th largest router logits)
  shift  = max over experts |router(round(h)) - router(h)| * 2
(two logits can move towards each other by at most twice the largest move). A position
whose margin < shift at some layer may route differently: printed as "near-tie".

    router_margin.py MODEL.gguf TOKENS(comma-separated) {f16|bf16} [POSITION]

With POSITION: exit 0 when that position is a near-tie, 1 otherwise.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from gguf_forward import Model, round_to  # noqa: E402


def main():
    path, tokens, kind = sys.argv[1], [int(t) for t in sys.argv[2].split(",")], sys.argv[3]
    want = int(sys.argv[4]) if len(sys.argv) > 4 else None
    m = Model(path)
    if m.arch != "olmoe":
        sys.exit(f"{path}: not a MoE model ({m.arch})")
    rows = []  # (position, layer, margin, shift)
    plain_ffn = m.ffn

    def ffn(il, h):
        W = m.w[f"blk.{il}.ffn_gate_inp.weight"]
        exact = h @ W.T
        shifted = round_to(h, kind) @ W.T
        for t in range(h.shape[0]):
            s = np.sort(exact[t])[::-1]
            margin = s[m.n_used - 1] - s[m.n_used]
            shift = 2.0 * np.abs(shifted[t] - exact[t]).max()
            rows.append((t, il, margin, shift))
        return plain_ffn(il, h)

    m.ffn = ffn
    m.forward(tokens)
    ties = sorted({t for t, il, margin, shift in rows if margin < shift})
    for t in range(len(tokens)):
        r = min((row for row in rows if row[0] == t), key=lambda row: row[2] / max(row[3], 1e-300))
        flag = "near-tie" if t in ties else ""
        print(f"position {t:3d}: smallest margin/shift {r[2] / max(r[3], 1e-300):8.3f} at layer {r[1]} "
              f"(margin {r[2]:.3e}, {kind} shift {r[3]:.3e}) {flag}")
    print(f"near-ties at positions: {ties if ties else 'none'}")
    if want is not None:
        sys.exit(0 if want in ties else 1)


if __name__ == "__main__":
    main()
