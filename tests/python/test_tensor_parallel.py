"""Tensor parallelism simulated on the CPU (`-tp N`, include/stride/tp.h) against the unsplit
model, for all five architectures.

Models: the committed fixtures (tests/fixtures: transformers-built, every weight type) split
in 2 (their two KV heads allow no more; olmoe's four also in 4), and synthetic models with
four KV heads (`stride synth tiny-*-kv4`, tiny-olmoe) split in 2 and 4. For each model and
split: the logits of a 12-token prompt and 4 teacher-forced decode steps agree with -tp 1's
within the tolerance below and have the same argmax everywhere; the 16 greedy tokens are
equal; -tp 1 is the unsplit code path, bit for bit; and padding on vs off gives
bit-identical logits at -tp N too (each shard laid out from its own shape). Also: the
batched engine (--parallel) gives the same text, inspect shows per-shard layouts that
differ from the whole's where the rule says so, and models that do not split are refused
with the reason.

Tolerance, as normalised error ||tp N - tp 1|| / ||tp 1|| over all logits:
  F32 KV cache: 2e-5. Both runs compute in float32 and differ only in summation order: the
    products that N GPUs would all-reduce (o, down, the experts' combine) become N partial
    dot products over K/N terms added in shard order, instead of one over K terms. That is
    the kind of discrepancy tests/python/test_model_reference.py bounds at 2e-5 between
    stride and transformers: a dot product of K terms carries a relative rounding error of
    about sqrt(K) * 2^-24 (1e-6 at K = 64..256 here), and a few layers with normalisations
    keep it near 1e-6..1e-5 on the logits. (Observed: about 3e-7.) The weights are the same
    bits in both runs: a shard holds its slice of them, unrounded.
  F16 KV cache (the default): 3e-3. The tiny differences above can move the rounding of a
    key or value to f16 (relative 2^-11 = 4.9e-4 each), which through softmax and the value
    sum lands near 1e-3 on the logits: the reference test's F16 bound, for the same reason.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

import numpy as np

from harness import Checks, clean_env

TOL = {"f32": 2e-5, "f16": 3e-3}
# The synthetic models and their seeds: the first seed (1..8) whose 16 greedy steps all have a
# top-1 over top-2 margin of at least MIN_MARGIN, as the fixtures' seeds were chosen (>= 0.05),
# so that equal tokens test the split rather than luck: the largest logit difference the
# splits make (F16 cache) is about 4e-4, a hundredth of that.
SYNTH = {"tiny-llama-kv4": 8, "tiny-qwen3-kv4": 8, "tiny-gemma3-kv4": 2, "tiny-phi3-kv4": 7, "tiny-olmoe": 7}
MIN_MARGIN = 0.04
PROMPT = [1, 87, 263, 5, 301, 44, 129, 377, 18, 250, 66, 312]
DECODE = [299, 12, 345, 150]

CHECKS = Checks()
check = CHECKS.check


def stride_run(stride, args, env=None):
    p = subprocess.run([stride, *args], env=clean_env(env), capture_output=True, text=True)
    ok = check(p.returncode == 0, f"stride {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return p if ok else None


def logits(stride, model, tp, kv, out, env=None, pad="off"):
    args = ["run", "-m", model, "--backend", "cpu", "--kv-type", kv, "--pad-weights", pad, "-tp", str(tp),
            "--tokens", ",".join(map(str, PROMPT)), "--decode-tokens", ",".join(map(str, DECODE)),
            "-n", "0", "--logits-out", out]
    return np.load(out) if stride_run(stride, args, env) else None


def greedy(stride, model, tp, out):
    """16 greedy tokens after the prompt (default F16 cache), and the logits that chose them."""
    args = ["run", "-m", model, "--backend", "cpu", "-tp", str(tp), "--tokens", ",".join(map(str, PROMPT)),
            "-n", "16", "--logits-out", out]
    p = stride_run(stride, args)
    if p is None:
        return None, None
    return [int(t) for t in p.stdout.split()], np.load(out)


def norm_err(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def compare(stride, work, name, model, splits):
    """Every check of one model at each split; returns how many splits were compared."""
    base = {kv: logits(stride, model, 1, kv, os.path.join(work, f"{name}-tp1-{kv}.npy")) for kv in TOL}
    toks1, glog1 = greedy(stride, model, 1, os.path.join(work, f"{name}-tp1-greedy.npy"))
    if any(v is None for v in base.values()) or toks1 is None:
        return 0
    # margins of the greedy choices (top-1 minus top-2 logit): the token comparison means
    # something only where they are well above the tolerance
    top2 = np.sort(glog1[len(PROMPT) - 1:], axis=1)[:, -2:]
    margin = float((top2[:, 1] - top2[:, 0]).min())
    check(margin >= MIN_MARGIN, f"{name}: greedy margins >= {MIN_MARGIN} (smallest {margin:.3f}): a seed to change")
    compared = 0
    for tp in splits:
        for kv, want in base.items():
            got = logits(stride, model, tp, kv, os.path.join(work, f"{name}-tp{tp}-{kv}.npy"))
            if got is None or not check(got.shape == want.shape, f"{name} -tp {tp} kv {kv}: shape {got.shape}"):
                continue
            err = norm_err(got, want)
            ok = bool(np.isfinite(got).all()) and err <= TOL[kv]
            print(f"{name:18s} -tp {tp} kv {kv}: normalised error {err:.2e} (max abs "
                  f"{float(np.abs(got - want).max()):.2e}, tolerance {TOL[kv]:.0e}) {'ok' if ok else 'FAIL'}",
                  flush=True)
            check(ok, f"{name} -tp {tp} kv {kv}: normalised error {err:.3e} > {TOL[kv]:.0e}")
            check(np.array_equal(got.argmax(1), want.argmax(1)), f"{name} -tp {tp} kv {kv}: argmax everywhere")
        toks, _ = greedy(stride, model, tp, os.path.join(work, f"{name}-tp{tp}-greedy.npy"))
        if toks is not None:
            print(f"{name:18s} -tp {tp} greedy: {'equal' if toks == toks1 else 'DIFFERENT'} "
                  f"(smallest margin {margin:.3f})", flush=True)
            check(toks == toks1, f"{name} -tp {tp}: greedy {toks} vs -tp 1 {toks1}")
        # padding on = off on the shards (alias 64 B, pad 32 B: the tiny rows pad)
        env = {"STRIDE_ROW_ALIAS": "64", "STRIDE_ROW_PAD": "32"}
        on = logits(stride, model, tp, "f16", os.path.join(work, f"{name}-tp{tp}-on.npy"), env, "on")
        off = logits(stride, model, tp, "f16", os.path.join(work, f"{name}-tp{tp}-off.npy"), env, "off")
        if on is not None and off is not None:
            check(on.tobytes() == off.tobytes(), f"{name} -tp {tp}: logits bit-identical with padding on and off")
        compared += 1
    # -tp 1 is the unsplit path: the same bits as a run without the flag
    args = ["run", "-m", model, "--backend", "cpu", "--kv-type", "f32", "--pad-weights", "off",
            "--tokens", ",".join(map(str, PROMPT)), "--decode-tokens", ",".join(map(str, DECODE)),
            "-n", "0", "--logits-out", os.path.join(work, f"{name}-noflag.npy")]
    if stride_run(stride, args):
        check(np.load(os.path.join(work, f"{name}-noflag.npy")).tobytes() == base["f32"].tobytes(),
              f"{name}: -tp 1 bit-identical to no -tp")
    return compared


def test_errors(stride, fixtures):
    model = os.path.join(fixtures, "qwen3-f16.gguf")
    for tp, want in ((4, "-tp 4: the 2 KV heads of qwen3 do not divide into 4 shards"),
                     (3, "-tp 3: the 2 KV heads of qwen3 do not divide into 3 shards"),
                     (4, "-tp can be 1 or 2 for this model")):
        p = subprocess.run([stride, "run", "-m", model, "--backend", "cpu", "-tp", str(tp), "--tokens", "1", "-n", "1"],
                           env=clean_env(), capture_output=True, text=True)
        check(p.returncode == 1 and want in p.stderr, f"-tp {tp} refused with '{want}': {p.returncode} {p.stderr!r}")
    for bad in ("0", "65", "two", "-1"):
        p = subprocess.run([stride, "run", "-m", model, "-tp", bad, "--tokens", "1"], env=clean_env(),
                           capture_output=True, text=True)
        check(p.returncode == 2 and "-tp" in p.stderr, f"-tp {bad}: a usage error: {p.returncode} {p.stderr!r}")
    p = subprocess.run([stride, "inspect", model, "-tp", "2"], env=clean_env(), capture_output=True, text=True)
    check(p.returncode == 2 and "needs --layout" in p.stderr, f"inspect -tp without --layout: {p.stderr!r}")


def test_inspect(stride, fixtures):
    """Alias 128 B, pad 64 B: attn_output's whole F16 row (64 values, 128 B) pads, its shards'
    (32 values, 64 B) do not; attn_q's shards keep its 128 B rows and pad."""
    model = os.path.join(fixtures, "llama-f16.gguf")
    env = clean_env({"STRIDE_ROW_ALIAS": "128", "STRIDE_ROW_PAD": "64"})
    p = subprocess.run([stride, "inspect", model, "--layout", "--json", "--pad-weights", "on", "--device-kind", "cpu",
                        "-tp", "2"], env=env, capture_output=True, text=True)
    if not check(p.returncode == 0, f"inspect --layout -tp 2: {p.stderr.strip()}"):
        return
    doc = json.loads(p.stdout)
    whole = {t["name"]: t for t in doc["tensors"]}
    tp = doc["tensor_parallel"]
    check(tp["n_shards"] == 2 and tp["output_tied"], "two shards, output head tied to token_embd")
    check(tp["shards"][1]["kv_heads"] == [1, 2] and tp["shards"][1]["q_heads"] == [2, 4],
          f"shard 1 owns KV head 1 and its query heads 2, 3: {tp['shards'][1]}")
    o = [e for e in tp["entries"] if e["name"] == "blk.0.attn_output.weight"]
    q = [e for e in tp["entries"] if e["name"] == "blk.0.attn_q.weight"]
    check(whole["blk.0.attn_output.weight"]["padded"], "the whole attn_output pads (128 B rows)")
    check(len(o) == 2 and all(not e["padded"] and e["ne"][:2] == [32, 64] and e["nb"][1] == 64 for e in o),
          f"attn_output's shards: 32 input columns, 64 B rows, not padded: {o}")
    check(o and o[1]["cols"] == [32, 64], "shard 1 takes attn_output's input columns 32..64")
    check(len(q) == 2 and all(e["padded"] and e["ne"][:2] == [64, 32] and e["nb"][1] == 128 + 64 for e in q),
          f"attn_q's shards: 32 rows of 128 B, padded: {q}")
    check(tp["n_padded"] == sum(e["padded"] for e in tp["entries"]) and tp["n_padded"] > 0, "n_padded counts")
    p = subprocess.run([stride, "inspect", model, "--layout", "--device-kind", "cpu", "-tp", "2"], env=env,
                       capture_output=True, text=True)
    check(p.returncode == 0 and "tensor parallel: -tp 2" in p.stdout and "shard 1: q heads 2..4" in p.stdout,
          f"inspect text shows the shards: {p.stdout[-400:]!r}")


def test_version(stride):
    """`stride version` says whether NCCL is linked, as CMake found it (STRIDE_TEST_EXPECT_NCCL:
    the wheel's version, empty without NCCL), asking the library itself."""
    expect = os.environ.get("STRIDE_TEST_EXPECT_NCCL")
    if not check(expect is not None, "STRIDE_TEST_EXPECT_NCCL is set (by tests/CMakeLists.txt)"):
        return
    p = subprocess.run([stride, "version"], env=clean_env(), capture_output=True, text=True)
    line = next((l for l in p.stdout.splitlines() if l.startswith("NCCL: ")), "")
    if expect:
        linked = re.match(r"NCCL: (\d+\.\d+\.\d+) linked ", line)
        check(linked is not None and expect.startswith(linked.group(1)),
              f"stride version reports NCCL {expect} linked: {line!r}")
    else:
        check(line.startswith("NCCL: not linked"), f"stride version reports no NCCL: {line!r}")


def test_engine(stride, model):
    """The batched engine (paged KV cache, several sequences) splits the same way."""
    out = []
    for tp in (1, 2):
        p = stride_run(stride, ["run", "-m", model, "--backend", "cpu", "-p", "Once upon a time", "-n", "12",
                                "--temp", "0", "--seed", "1", "-np", "3", "-tp", str(tp)])
        out.append(p.stdout if p else None)
    check(out[0] is not None and out[0] == out[1], "run --parallel 3: -tp 2 gives -tp 1's text")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(__file__), "..", "fixtures"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    compared, expected = 0, 0
    fixtures = sorted(glob.glob(os.path.join(a.fixtures, "*.gguf")))
    check(len(fixtures) == 15, f"5 architectures x 3 weight types of fixtures, found {len(fixtures)}")
    for path in fixtures:
        name = os.path.basename(path)[:-len(".gguf")]
        splits = (2, 4) if name.startswith("olmoe") else (2,)
        expected += len(splits)
        compared += compare(a.stride, a.work, name, path, splits)
    for preset, seed in SYNTH.items():
        path = os.path.join(a.work, f"{preset}-bf16.gguf")
        expected += 2
        if stride_run(a.stride, ["synth", preset, "-o", path, "--type", "bf16", "--seed", str(seed)]):
            compared += compare(a.stride, a.work, f"{preset}-bf16", path, (2, 4))
    check(compared == expected, f"compared {compared} model splits, expected {expected}")
    test_errors(a.stride, a.fixtures)
    test_inspect(a.stride, a.fixtures)
    test_engine(a.stride, os.path.join(a.fixtures, "olmoe-f16.gguf"))
    test_version(a.stride)
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
