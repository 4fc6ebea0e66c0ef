"""stride's CPU backend against Hugging Face transformers (the reference implementation).

For every committed fixture (tests/fixtures/<arch>-<type>.ref.json, made by
tests/fixtures/make_fixtures.py from tiny random models of the real transformers classes),
on both of the CPU backend's paths (the fast path, the default, and the reference ops with
--exact; the fixtures' weights are float, so both compute every product in f32 and the
same tolerances hold):
  - the logits of the 12 prompt positions (prefill) and of 4 teacher-forced decode steps
    match the reference logits;
  - the greedy continuation of 16 tokens matches token for token;
  - padding on vs off (alias forced small enough that the tiny weights are padded) gives
    bit-identical logits and tokens, and the plan really padded tensors.

Tolerances, as normalised error ||stride - ref|| / ||ref|| over all logits:
  F32 KV cache: 2e-5. Both sides compute in float32 with different summation orders; a
    dot product of K terms carries a relative error of about sqrt(K) * 2^-24 (~1e-6 at
    K = 64..128), and a handful of layers with normalisations keep it near 1e-6..1e-5.
    The F16/BF16 fixtures are compared against the reference run on the same rounded
    weights, so the weight type adds nothing.
  F16 KV cache (the default): 3e-3. K and V are rounded to f16 (relative 2^-11 = 4.9e-4
    each); through softmax and the value sum that lands near 1e-3 on the logits.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

import numpy as np

from harness import Checks, clean_env

TOL = {"f32": 2e-5, "f16": 3e-3}

CHECKS = Checks()
check = CHECKS.check


PATHS = (("fast", []), ("exact", ["--exact"]))


def run_stride(stride, model, ref, out, kv, extra_env=None, pad=None, path=(), backend="cpu"):
    env = clean_env(extra_env)
    args = [stride, "run", "-m", model, "--backend", backend, *path, "--kv-type", kv,
            "--tokens", ",".join(map(str, ref["prompt"])),
            "--decode-tokens", ",".join(map(str, ref["decode_tokens"])),
            "-n", "0", "--logits-out", out]
    if pad:
        args += ["--pad-weights", pad]
    p = subprocess.run(args, env=env, capture_output=True, text=True)
    if not check(p.returncode == 0, f"{' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}"):
        return None
    return np.load(out)


def greedy(stride, model, ref, n, extra_env=None, pad=None, path=()):
    env = clean_env(extra_env)
    args = [stride, "run", "-m", model, "--backend", "cpu", *path, "--kv-type", "f32",
            "--tokens", ",".join(map(str, ref["prompt"])), "-n", str(n)]
    if pad:
        args += ["--pad-weights", pad]
    p = subprocess.run(args, env=env, capture_output=True, text=True)
    if not check(p.returncode == 0, f"{' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}"):
        return None
    return [int(t) for t in p.stdout.split()]


def norm_err(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_fixture(stride, fixtures, work, ref_path, path_name, path):
    ref = json.load(open(ref_path))
    name = os.path.basename(ref_path).replace(".ref.json", "") + "-" + path_name
    model = os.path.join(fixtures, ref["model"])
    V = ref["n_vocab"]
    want = np.fromfile(os.path.join(fixtures, ref["logits_file"]), dtype="<f4")
    positions = len(ref["prompt"]) + len(ref["decode_tokens"])
    check(want.size == positions * V, f"{name}: reference logits hold {positions} x {V}")
    want = want.reshape(positions, V)

    for kv in ("f32", "f16"):
        got = run_stride(stride, model, ref, os.path.join(work, f"{name}-{kv}.npy"), kv, path=path)
        if got is None:
            continue
        check(got.shape == want.shape, f"{name}: logits shape {got.shape} vs {want.shape}")
        if got.shape != want.shape:
            continue
        err = norm_err(got, want)
        maxabs = float(np.abs(got - want).max())
        ok = np.isfinite(got).all() and err <= TOL[kv]
        print(f"{name:20s} kv {kv}: normalised error {err:.2e} (max abs {maxabs:.2e}, tolerance {TOL[kv]:.0e})"
              f" {'ok' if ok else 'FAIL'}", flush=True)
        check(ok, f"{name} kv {kv}: normalised error {err:.3e} > {TOL[kv]:.0e}")
        check(np.array_equal(got.argmax(1), want.argmax(1)), f"{name} kv {kv}: argmax at every position")

    toks = greedy(stride, model, ref, len(ref["greedy"]), path=path)
    if toks is not None:
        check(toks == ref["greedy"], f"{name}: greedy {toks} vs transformers {ref['greedy']}")

    # Padding equality: alias 64 B / pad 32 B makes every tiny GEMM weight row a multiple.
    env = {"STRIDE_ROW_ALIAS": "64", "STRIDE_ROW_PAD": "32"}
    ins = subprocess.run([stride, "inspect", model, "--layout", "--json", "--pad-weights", "on"],
                         env={**os.environ, **env}, capture_output=True, text=True)
    if check(ins.returncode == 0, f"{name}: inspect --layout: {ins.stderr.strip()}"):
        n_padded = json.loads(ins.stdout)["layout"]["n_padded"]
        check(n_padded > 0, f"{name}: the padded run really pads ({n_padded} tensors)")
    on = run_stride(stride, model, ref, os.path.join(work, f"{name}-on.npy"), "f16", env, "on", path)
    off = run_stride(stride, model, ref, os.path.join(work, f"{name}-off.npy"), "f16", env, "off", path)
    if on is not None and off is not None:
        check(on.tobytes() == off.tobytes(), f"{name}: logits bit-identical with padding on and off")
    g_on = greedy(stride, model, ref, 16, env, "on", path)
    g_off = greedy(stride, model, ref, 16, env, "off", path)
    check(g_on is not None and g_on == g_off, f"{name}: greedy tokens identical on vs off")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(__file__), "..", "fixtures"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    refs = sorted(glob.glob(os.path.join(a.fixtures, "*.ref.json")))
    check(len(refs) >= 15, f"expected 5 architectures x 3 weight types of fixtures, found {len(refs)}")
    for r in refs:
        for path_name, path in PATHS:
            test_fixture(a.stride, a.fixtures, a.work, r, path_name, path)
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
