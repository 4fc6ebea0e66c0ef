#!/usr/bin/env python3
"""Quantized models end to end, with the `gguf` package's dequantizer as the reference.

    test_quant_model.py --stride STRIDE --work DIR [--fixtures DIR]

For every architecture's float32 fixture (tests/fixtures/<arch>-f32.gguf), this writes
  - Q:   the model with every matrix (GEMM weights, token embedding, output) quantized by
         gguf.quants.quantize, cycling through q8_0, q4_0, q4_1, q5_0, q5_1 tensor by
         tensor (the fixtures' rows of 32..128 values fit the 32-value legacy blocks; the
         K-quants need 256 and are covered by the op tests and the real model);
  - R32: the same model with those matrices replaced by gguf.quants.dequantize(Q), f32;
  - R16 / RB16: the same values rounded to f16 (numpy) / bf16 (gguf.quants, round to
         nearest even, as stride rounds),
and checks, on the CPU backend with an f32 KV cache:
  1. the reference ops (--exact): stride on Q (weights kept quantized, dequantized in
     the matmul) gives logits bit-identical to stride on R32: the dequantization is
     exact, and a quantized product is the f32 product on the dequantized row;
  2. on both paths, stride on Q with --weights f16 (bf16) is bit-identical to stride on
     R16 (RB16): the load-time conversion is dequantize-then-round;
  3. the fast path (the default) against the reference: with --weights f16 the products
     are f32 on both and differ only in summation order: normalised difference below
     2e-5, test_model_reference.py's f32 bound; with the weights kept quantized the fast
     path quantizes the activations to int8 per block of 32 (a rounding of up to 1/254 of
     the block's largest value an element, ~0.5-1% on a product): measured 2-4% on the
     logits of these two-layer models and 9% on olmoe, whose router's top-8 choice flips
     where two experts nearly tie. The bound, 0.2, leaves room for such flips and still
     catches a product wired wrongly (a wrong stride, view or op: differences of order 1);
     the op tests (tests/unit/test_cpu_fast_*.c) bound every product tightly;
  4. with --weights f16 and the alias forced small (every converted GEMM row then is a
     multiple of it), --pad-weights on and off give bit-identical logits and the same
     greedy tokens, and equal stride on R16 with padding on (whose plan `inspect`
     confirms pads tensors).
Prints each check and 'N passed, M failed'; exits non-zero on any failure and when
nothing was checked.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

from harness import Checks, clean_env

try:
    import gguf
    import gguf.quants
    from gguf import GGMLQuantizationType as Q
except ImportError as e:
    print("test_quant_model: the `gguf` Python package is needed (pip install gguf): %s" % e)
    sys.exit(1)

ARCHS = ["llama", "qwen3", "gemma3", "phi3", "olmoe"]
CYCLE = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1]
PAD_ENV = {"STRIDE_ROW_ALIAS": "64", "STRIDE_ROW_PAD": "32"}

CHECKS = Checks()
check = CHECKS.check


def copy_metadata(reader, writer):
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)


def is_matrix(t):
    return t.name.endswith(".weight") and len(t.data.shape) >= 2 and t.data.shape[-1] % 32 == 0


def write_models(src, work, name):
    """Writes the quantized model and its f32/f16/bf16 references; returns their paths."""
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    paths = {k: os.path.join(work, "%s-%s.gguf" % (name, k)) for k in ("q", "r32", "r16", "rb16")}
    writers = {k: gguf.GGUFWriter(p, arch) for k, p in paths.items()}
    for w in writers.values():
        copy_metadata(reader, w)
    n_matrix = 0
    for t in reader.tensors:
        data = np.array(t.data)
        if not is_matrix(t):
            for w in writers.values():
                w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
            continue
        assert t.tensor_type == Q.F32, t.name
        qtype = CYCLE[n_matrix % len(CYCLE)]
        n_matrix += 1
        q = gguf.quants.quantize(data.astype(np.float32), qtype)
        deq = np.asarray(gguf.quants.dequantize(q, qtype), dtype=np.float32).reshape(data.shape)
        writers["q"].add_tensor(t.name, q, raw_dtype=qtype)
        writers["r32"].add_tensor(t.name, deq, raw_dtype=Q.F32)
        writers["r16"].add_tensor(t.name, deq.astype(np.float16), raw_dtype=Q.F16)
        writers["rb16"].add_tensor(t.name, gguf.quants.quantize(deq, Q.BF16), raw_dtype=Q.BF16)
    for w in writers.values():
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return paths, n_matrix


FAST_VS_EXACT_FLOAT = 2e-5
FAST_VS_EXACT_INT8 = 0.2


def stride_run(stride, model, ref, out, weights=None, pad=None, env_extra=None, n=0, exact=False):
    env = clean_env(env_extra)
    args = [stride, "run", "-m", model, "--backend", "cpu", "--kv-type", "f32",
            "--tokens", ",".join(map(str, ref["prompt"])), "-n", str(n), "--logits-out", out]
    if exact:
        args += ["--exact"]
    if weights:
        args += ["--weights", weights]
    if pad:
        args += ["--pad-weights", pad]
    p = subprocess.run(args, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        check(False, "stride %s: exit %d: %s" % (" ".join(args[1:]), p.returncode, p.stderr.strip()[-400:]))
        return None, None
    return np.load(out), [int(x) for x in p.stdout.split()]


def bits_equal(a, b):
    return a is not None and b is not None and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_arch(stride, fixtures, work, arch):
    src = os.path.join(fixtures, "%s-f32.gguf" % arch)
    ref = json.load(open(os.path.join(fixtures, "%s-f32.ref.json" % arch)))
    paths, n_matrix = write_models(src, work, arch)
    check(n_matrix >= 5, "%s: %d matrices quantized (every legacy type used)" % (arch, n_matrix))
    out = lambda tag: os.path.join(work, "%s-%s.npy" % (arch, tag))

    lq, _ = stride_run(stride, paths["q"], ref, out("q-exact"), exact=True)
    l32, _ = stride_run(stride, paths["r32"], ref, out("r32-exact"), exact=True)
    check(lq is not None and np.isfinite(lq).all(), "%s: quantized logits finite" % arch)
    check(bits_equal(lq, l32), "%s: --exact: quantized == gguf-dequantized f32, bit for bit" % arch)

    for wt, key in (("f16", "r16"), ("bf16", "rb16")):
        for exact in (True, False):
            tag = "exact" if exact else "fast"
            lc, _ = stride_run(stride, paths["q"], ref, out("q-%s-%s" % (wt, tag)), weights=wt, exact=exact)
            lr, _ = stride_run(stride, paths[key], ref, out("%s-%s" % (key, tag)), exact=exact)
            check(bits_equal(lc, lr), "%s: %s: --weights %s == gguf-dequantized rounded to %s, bit for bit"
                  % (arch, tag, wt, wt))
            if exact and lc is not None and lq is not None:
                err = float(np.linalg.norm(lc - lq) / np.linalg.norm(lq))
                check(err < 2e-2, "%s: --exact: --weights %s vs quantized, normalised difference %.2e" % (arch, wt, err))
            if exact:
                lc_exact = lc
            elif lc is not None and lc_exact is not None:
                err = float(np.linalg.norm(lc - lc_exact) / np.linalg.norm(lc_exact))
                check(err < FAST_VS_EXACT_FLOAT, "%s: --weights %s, fast vs exact: normalised difference %.2e (bound %.0e)"
                      % (arch, wt, err, FAST_VS_EXACT_FLOAT))

    lf, _ = stride_run(stride, paths["q"], ref, out("q-fast"))
    check(lf is not None and np.isfinite(lf).all(), "%s: fast path: quantized logits finite" % arch)
    if lf is not None and lq is not None:
        err = float(np.linalg.norm(lf - lq) / np.linalg.norm(lq))
        check(err < FAST_VS_EXACT_INT8, "%s: quantized, fast (int8 activations) vs exact: normalised difference %.2e "
              "(bound %.1f)" % (arch, err, FAST_VS_EXACT_INT8))

    ins = subprocess.run([stride, "inspect", paths["r16"], "--layout", "--json", "--pad-weights", "on"],
                         env={**os.environ, **PAD_ENV}, capture_output=True, text=True)
    if check(ins.returncode == 0, "%s: inspect --layout %s" % (arch, ins.stderr.strip())):
        n_padded = json.loads(ins.stdout)["layout"]["n_padded"]
        check(n_padded > 0, "%s: the f16 layout with alias 64 pads %d tensors" % (arch, n_padded))
    on, g_on = stride_run(stride, paths["q"], ref, out("on"), "f16", "on", PAD_ENV, n=8)
    off, g_off = stride_run(stride, paths["q"], ref, out("off"), "f16", "off", PAD_ENV, n=8)
    r16_on, _ = stride_run(stride, paths["r16"], ref, out("r16-on"), None, "on", PAD_ENV, n=8)
    check(bits_equal(on, off), "%s: --weights f16, padding on vs off: logits bit-identical" % arch)
    check(g_on is not None and g_on == g_off, "%s: --weights f16, padding on vs off: greedy %s" % (arch, g_on))
    check(bits_equal(on, r16_on), "%s: --weights f16 padded == f16 reference padded" % arch)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    for arch in ARCHS:
        test_arch(a.stride, a.fixtures, a.work, arch)
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
