"""`stride inspect --layout` end to end: the planner's decisions on synthetic models of
real shapes, the policy flag and environment variables, and clear errors for bad values.

Run by ctest as: python3 test_inspect_layout.py --stride BIN --work DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

from harness import Checks, clean_env

CHECKS = Checks()
check = CHECKS.check


def run(args, env_extra=None, expect_rc=0):
    env = clean_env(env_extra)
    p = subprocess.run(args, env=env, capture_output=True, text=True)
    check(p.returncode == expect_rc, f"{' '.join(args)} (env {env_extra}) exited {p.returncode}, "
                                     f"expected {expect_rc}; stderr: {p.stderr.strip()}")
    return p


def layout(stride, model, *flags, env=None, kind="cpu"):
    p = run([stride, "inspect", model, "--layout", "--json", "--device-kind", kind, *flags], env)
    if p.returncode != 0:
        return None
    return json.loads(p.stdout)


def by_name(doc):
    return {t["name"]: t for t in doc["tensors"]}


GEMM_SUFFIXES = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                 "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")


def test_tiny_qwen3(stride, work):
    model = os.path.join(work, "tiny-qwen3-f16.gguf")
    run([stride, "synth", "tiny-qwen3", "-o", model, "--type", "f16"])
    # Default geometry: tiny rows (n_embd 64 -> 128 B) never reach the 2048 B alias.
    doc = layout(stride, model, "--pad-weights", "on")
    check(doc["layout"]["n_padded"] == 0, "tiny model with default alias: nothing padded")
    # Alias forced to the tiny row size (and the pad below it, since a pad of a whole alias
    # period would alias again): every GEMM weight whose row is a multiple of 128 B is padded.
    doc = layout(stride, model, "--pad-weights", "on", env={"STRIDE_ROW_ALIAS": "128", "STRIDE_ROW_PAD": "64"})
    t = by_name(doc)
    n_embd = doc["metadata"]["qwen3.embedding_length"]["value"]
    for name, e in t.items():
        if name.endswith(GEMM_SUFFIXES):
            row = e["packed_nb1"]
            if row % 128 == 0:
                check(e["padded"] and e["nb"][1] == row + 64,
                      f"{name}: row {row} B padded by 64 with alias 128")
            else:
                check(not e["padded"], f"{name}: row {row} B not a multiple of 128 stays packed")
            check(e["role"] == "gemm", f"{name}: role gemm")
        elif name == "token_embd.weight":
            check(not e["padded"] and e["role"] == "row-lookup",
                  "token_embd (tied output) stays packed: row lookup")
        elif name.endswith("norm.weight"):
            check(not e["padded"] and e["role"] == "norm", f"{name}: norm never padded")
    check("output.weight" not in t, "tiny-qwen3 is tied: no output.weight")
    check(doc["layout"]["n_padded"] > 0, "alias 128: something padded")
    extra = sum(e["extra_bytes"] for e in t.values())
    check(extra == doc["layout"]["total_extra_bytes"], "total extra bytes is the sum per tensor")
    check(extra == sum(64 * e["ne"][1] * (e["ne"][2] if len(e["ne"]) > 2 else 1)
                       for e in t.values() if e["padded"]),
          "extra bytes = pad x rows for every padded tensor")
    check(n_embd * 2 == 128, "tiny-qwen3 rows are 128 B in f16")

    # Off, the kill switches, and their precedence over the flag.
    for flags, env, what in [
        (["--pad-weights", "off"], {"STRIDE_ROW_ALIAS": "128", "STRIDE_ROW_PAD": "64"}, "--pad-weights off"),
        (["--pad-weights", "on"], {"STRIDE_ROW_ALIAS": "128", "STRIDE_ROW_PAD": "64", "STRIDE_NO_PAD_WEIGHTS": "1"},
         "STRIDE_NO_PAD_WEIGHTS=1 overrides --pad-weights on"),
        (["--pad-weights", "on"], {"STRIDE_ROW_ALIAS": "128", "STRIDE_ROW_PAD": "64", "GGML_CUDA_NO_PAD_WEIGHTS": "1"},
         "GGML_CUDA_NO_PAD_WEIGHTS=1 overrides --pad-weights on"),
        ([], {"STRIDE_ROW_ALIAS": "128", "STRIDE_ROW_PAD": "64", "STRIDE_PAD_WEIGHTS": "off"}, "STRIDE_PAD_WEIGHTS=off"),
    ]:
        doc = layout(stride, model, *flags, env=env)
        check(doc is not None and doc["layout"]["n_padded"] == 0, f"{what}: nothing padded")
    # The flag wins over STRIDE_PAD_WEIGHTS.
    doc = layout(stride, model, "--pad-weights", "on",
                 env={"STRIDE_ROW_ALIAS": "128", "STRIDE_ROW_PAD": "64", "STRIDE_PAD_WEIGHTS": "off"})
    check(doc["layout"]["n_padded"] > 0, "--pad-weights on beats STRIDE_PAD_WEIGHTS=off")
    # A custom pad.
    doc = layout(stride, model, "--pad-weights", "on",
                 env={"STRIDE_ROW_ALIAS": "128", "STRIDE_ROW_PAD": "32"})
    padded = [e for e in doc["tensors"] if e["padded"]]
    check(padded and all(e["nb"][1] == e["packed_nb1"] + 32 for e in padded), "STRIDE_ROW_PAD=32")
    # auto on a device kind whose built-in entry is on pads; Hopper's is off.
    doc = layout(stride, model, env={"STRIDE_ROW_ALIAS": "128", "STRIDE_ROW_PAD": "64"}, kind="amd-rdna3.5")
    check(doc["layout"]["pad_enabled"] and doc["layout"]["n_padded"] > 0, "auto on amd-rdna3.5: on")
    doc = layout(stride, model, env={"STRIDE_ROW_ALIAS": "128", "STRIDE_ROW_PAD": "64"}, kind="nvidia-hopper")
    check(not doc["layout"]["pad_enabled"] and doc["layout"]["n_padded"] == 0, "auto on nvidia-hopper: off")
    return model


def test_auto_sources(stride, model, work):
    """Which `auto` answered each tensor: with --device-kind (or on a device with no
    calibration cache) the built-in table, said per tensor and, for a real device, in one
    line on stderr; policies other than auto record none. (Cache contents: test_calibrate.py.)"""
    geo = {"STRIDE_ROW_ALIAS": "128", "STRIDE_ROW_PAD": "64", "XDG_CACHE_HOME": os.path.join(work, "empty-cache")}
    doc = layout(stride, model, env=geo)
    for e in doc["tensors"]:
        if e["padded"] or e["reason"] == "auto-off":
            check(e["auto"] == "builtin" and e["why"].endswith("auto: built-in table"),
                  f"{e['name']}: --device-kind: the built-in table: {e['why']}")
        else:
            check(e["auto"] is None and e["auto_gain"] is None, f"{e['name']}: no auto decision ({e['reason']})")
    check(doc["layout"]["n_auto_builtin"] == 14 and doc["layout"]["n_auto_calibrated"] == 0,
          "14 aliased GEMM weights decided by the built-in table")
    p = run([stride, "inspect", model, "--layout", "--json", "--backend", "cpu"], geo)
    doc = json.loads(p.stdout)
    check(doc["layout"]["n_auto_builtin"] == 14, "--backend cpu without a cache: the built-in table")
    lines = p.stderr.strip().splitlines()
    check(len(lines) == 1 and "no calibration" in lines[0] and "built-in table" in lines[0],
          f"--backend cpu without a cache: said in one line: {p.stderr!r}")
    doc = layout(stride, model, "--pad-weights", "on", env=geo)
    check(all(e["auto"] is None for e in doc["tensors"]), "--pad-weights on: no auto decision recorded")


def test_bad_values(stride, model):
    cases = [
        (["--pad-weights", "maybe"], {}, "--pad-weights"),
        (["--pad-weights"], {}, "--pad-weights"),
        ([], {"STRIDE_PAD_WEIGHTS": "yes please"}, "STRIDE_PAD_WEIGHTS"),
        ([], {"STRIDE_ROW_ALIAS": "1000"}, "STRIDE_ROW_ALIAS"),
        ([], {"STRIDE_ROW_ALIAS": "2048x"}, "STRIDE_ROW_ALIAS"),
        ([], {"STRIDE_ROW_PAD": "100"}, "STRIDE_ROW_PAD"),
        ([], {"STRIDE_ROW_ALIAS": "128"}, "STRIDE_ROW_ALIAS"),  # pad 128 >= alias
        ([], {"STRIDE_ROW_PAD": "-16"}, "STRIDE_ROW_PAD"),
        ([], {"STRIDE_NO_PAD_WEIGHTS": "perhaps"}, "STRIDE_NO_PAD_WEIGHTS"),
        (["--device-kind", "abacus"], {}, "--device-kind"),
    ]
    for flags, env, name in cases:
        p = run([stride, "inspect", model, "--layout", *flags], env, expect_rc=2)
        check(name in p.stderr, f"error for {flags} {env} names {name}: {p.stderr.strip()!r}")
    p = run([stride, "inspect", os.path.join(os.path.dirname(model), "missing.gguf")], expect_rc=1)
    check("missing.gguf" in p.stderr, f"missing file is named in the error: {p.stderr.strip()!r}")


def test_full_size(stride, work):
    """The issue's acceptance check on the real shapes (files of a few GB, deleted after)."""
    if shutil.disk_usage(work).free < 8 << 30:
        check(False, "need 8 GiB free in the work directory for the full-size presets")
        return
    q = os.path.join(work, "qwen3-1.7b-f16.gguf")
    run([stride, "synth", "qwen3-1.7b", "-o", q, "--type", "f16"])
    doc = layout(stride, q, "--pad-weights", "on")
    t = by_name(doc)
    for i in (0, 27):
        for s in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up"):
            e = t[f"blk.{i}.{s}.weight"]
            check(e["padded"] and e["packed_nb1"] == 4096 and e["nb"][1] == 4224,
                  f"qwen3-1.7b blk.{i}.{s}: 4096 -> 4224 B")
        e = t[f"blk.{i}.ffn_down.weight"]  # K = 6144: 12288 B = 6 x 2048
        check(e["padded"] and e["nb"][1] == 12288 + 128, f"qwen3-1.7b blk.{i}.ffn_down: 12288 -> 12416 B")
    check(not t["token_embd.weight"]["padded"], "qwen3-1.7b token_embd (tied output) untouched")
    check("output.weight" not in t, "qwen3-1.7b is tied")
    check(all(not e["padded"] for n, e in t.items() if "norm" in n), "qwen3-1.7b norms untouched")
    for flags, env in [(["--pad-weights", "off"], {}),
                       (["--pad-weights", "on"], {"STRIDE_NO_PAD_WEIGHTS": "1"})]:
        d = layout(stride, q, *flags, env=env)
        check(d["layout"]["n_padded"] == 0, f"qwen3-1.7b {flags} {env}: nothing padded")
    os.remove(q)

    g = os.path.join(work, "gemma-3-1b-f16.gguf")
    run([stride, "synth", "gemma-3-1b", "-o", g, "--type", "f16"])
    doc = layout(stride, g, "--pad-weights", "on")
    padded = sorted(e["name"] for e in doc["tensors"] if e["padded"])
    # K = 1152 (2304 B) and 6912 (13824 B) never hit the alias; only attn_output, whose
    # K = n_head * head_dim = 1024 (2048 B), does.
    check(padded and all(n.endswith("attn_output.weight") for n in padded),
          f"gemma-3-1b: only attn_output padded (got {padded[:4]}...)")
    check(len(padded) == 26, f"gemma-3-1b: 26 attn_output tensors padded, got {len(padded)}")
    os.remove(g)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--skip-full", action="store_true", help="skip the multi-GB full-size presets")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model = test_tiny_qwen3(a.stride, a.work)
    test_auto_sources(a.stride, model, a.work)
    test_bad_values(a.stride, model)
    if not a.skip_full:
        test_full_size(a.stride, a.work)
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
