#!/usr/bin/env python3
"""`stride synth` writes files that the `gguf` package (PyPI) reads with the tensor
names, types and shapes llama.cpp expects.

For every tiny preset and each of f32/f16/bf16/q8_0 the expected tensor set is computed
here, independently of stride, from the file's own metadata and llama.cpp's naming rules
(written out below), then compared with what the file holds. Also: vocabulary, weight
statistics, rope factors, the q8_0 weights against the f32 file's (dequantized by the
gguf package, within 0.57 of a block's step), determinism of the seed, and the command's
exit codes.
"""
import argparse
import math
import os
import subprocess
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType, quants

from harness import Checks

# What the test knows about each tiny preset without asking stride: its architecture,
# whether the output layer is tied to token_embd, the shapes it must have (checked
# against the file's metadata), and the llama3 rope scaling constants for llama.
TINY = {
    "tiny-llama": dict(arch="llama", tied=False, n_embd=64, n_head=4, n_head_kv=2, head_dim=16,
                       n_ctx_orig=1024),
    "tiny-qwen3": dict(arch="qwen3", tied=True, n_embd=64, n_head=4, n_head_kv=2, head_dim=16),
    "tiny-gemma3": dict(arch="gemma3", tied=True, n_embd=64, n_head=4, n_head_kv=2, head_dim=16),
    "tiny-phi3": dict(arch="phi3", tied=True, n_embd=64, n_head=4, n_head_kv=2, head_dim=16),
    "tiny-olmoe": dict(arch="olmoe", tied=False, n_embd=64, n_head=4, n_head_kv=4, head_dim=16),
    # four KV heads, for the -tp 2 and -tp 4 tests (tests/python/test_tensor_parallel.py)
    "tiny-llama-kv4": dict(arch="llama", tied=False, n_embd=128, n_head=8, n_head_kv=4, head_dim=16,
                           n_ctx_orig=1024),
    "tiny-qwen3-kv4": dict(arch="qwen3", tied=True, n_embd=128, n_head=8, n_head_kv=4, head_dim=16),
    "tiny-gemma3-kv4": dict(arch="gemma3", tied=True, n_embd=128, n_head=8, n_head_kv=4, head_dim=16),
    "tiny-phi3-kv4": dict(arch="phi3", tied=True, n_embd=128, n_head=8, n_head_kv=4, head_dim=16),
}
TYPES = {"f32": GGMLQuantizationType.F32, "f16": GGMLQuantizationType.F16,
         "bf16": GGMLQuantizationType.BF16, "q8_0": GGMLQuantizationType.Q8_0}
FILE_TYPES = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7}
F32 = GGMLQuantizationType.F32
N_FIXED_TOKENS = 3 + 256  # <unk> <s> </s> + byte tokens



def field(r, key):
    """Scalar or string value of a metadata key, or None when absent."""
    f = r.fields.get(key)
    if f is None:
        return None
    if len(f.types) == 1 and f.types[0].name == "STRING":
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    if len(f.types) == 1:
        return f.parts[f.data[0]][0].item()
    return f


def array_strings(f):
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def array_values(f):
    return np.array([f.parts[i][0] for i in f.data])


def expected_tensors(r, arch, tied, wtype):
    """name -> (ggml type, ne list) following llama.cpp's tensor tables for `arch`, with
    every size taken from the file's metadata."""
    k = lambda key: field(r, f"{arch}.{key}")
    n_embd, n_layer, n_ff = k("embedding_length"), k("block_count"), k("feed_forward_length")
    n_head, n_head_kv, head_dim = k("attention.head_count"), k("attention.head_count_kv"), k("attention.key_length")
    n_vocab, n_rot = len(r.fields["tokenizer.ggml.tokens"].data), k("rope.dimension_count")
    n_q, n_kv = n_head * head_dim, n_head_kv * head_dim
    exp = {}

    def mat(name, *ne):
        exp[name] = (wtype, list(ne))

    def vec(name, n):
        exp[name] = (F32, [n])

    mat("token_embd.weight", n_embd, n_vocab)
    vec("output_norm.weight", n_embd)
    if not tied:
        mat("output.weight", n_embd, n_vocab)
    if arch == "llama":
        vec("rope_freqs.weight", n_rot // 2)
    if arch == "phi3":
        vec("rope_factors_long.weight", n_rot // 2)
        vec("rope_factors_short.weight", n_rot // 2)
    for i in range(n_layer):
        b = f"blk.{i}."
        vec(b + "attn_norm.weight", n_embd)
        vec(b + "ffn_norm.weight", n_embd)
        mat(b + "attn_output.weight", n_q, n_embd)
        if arch == "phi3":
            mat(b + "attn_qkv.weight", n_embd, n_q + 2 * n_kv)
            mat(b + "ffn_up.weight", n_embd, 2 * n_ff)
            mat(b + "ffn_down.weight", n_ff, n_embd)
            continue
        mat(b + "attn_q.weight", n_embd, n_q)
        mat(b + "attn_k.weight", n_embd, n_kv)
        mat(b + "attn_v.weight", n_embd, n_kv)
        if arch in ("qwen3", "gemma3"):
            vec(b + "attn_q_norm.weight", head_dim)
            vec(b + "attn_k_norm.weight", head_dim)
        if arch == "gemma3":
            vec(b + "post_attention_norm.weight", n_embd)
            vec(b + "post_ffw_norm.weight", n_embd)
        if arch == "olmoe":
            n_exp = k("expert_count")
            vec(b + "attn_q_norm.weight", n_q)
            vec(b + "attn_k_norm.weight", n_kv)
            exp[b + "ffn_gate_inp.weight"] = (F32, [n_embd, n_exp])  # the converter keeps it F32
            mat(b + "ffn_gate_exps.weight", n_embd, n_ff, n_exp)
            mat(b + "ffn_up_exps.weight", n_embd, n_ff, n_exp)
            mat(b + "ffn_down_exps.weight", n_ff, n_embd, n_exp)
        else:
            mat(b + "ffn_gate.weight", n_embd, n_ff)
            mat(b + "ffn_up.weight", n_embd, n_ff)
            mat(b + "ffn_down.weight", n_ff, n_embd)
    return exp


def llama3_factors(base, n_rot, orig, factor=32.0, low=1.0, high=4.0):
    out = []
    for i in range(n_rot // 2):
        wavelen = 2 * math.pi * base ** (2 * i / n_rot)
        if wavelen < orig / high:
            out.append(1.0)
        elif wavelen > orig / low:
            out.append(factor)
        else:
            smooth = (orig / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out)


def check_file(c, path, preset, info, tname):
    r = GGUFReader(path)
    arch = info["arch"]
    tag = f"{preset}/{tname}"
    c.check(field(r, "general.architecture") == arch, f"{tag}: architecture {field(r, 'general.architecture')!r}")
    c.check(field(r, "general.name") == preset, f"{tag}: general.name")
    c.check(field(r, "general.file_type") == FILE_TYPES[tname], f"{tag}: general.file_type")
    for key in ("n_embd", "n_head", "n_head_kv", "head_dim"):
        meta = {"n_embd": "embedding_length", "n_head": "attention.head_count",
                "n_head_kv": "attention.head_count_kv", "head_dim": "attention.key_length"}[key]
        c.check(field(r, f"{arch}.{meta}") == info[key], f"{tag}: {arch}.{meta} = {field(r, f'{arch}.{meta}')}")
    for key in ("context_length", "block_count", "feed_forward_length", "rope.freq_base",
                "attention.layer_norm_rms_epsilon", "attention.value_length", "rope.dimension_count"):
        c.check(field(r, f"{arch}.{key}") is not None, f"{tag}: missing {arch}.{key}")
    n_rot, head_dim = field(r, f"{arch}.rope.dimension_count"), field(r, f"{arch}.attention.key_length")
    if arch == "phi3":
        c.check(n_rot < head_dim, f"{tag}: phi3 preset must use partial rotary ({n_rot} of {head_dim})")
        c.check(field(r, "phi3.rope.scaling.original_context_length") is not None, f"{tag}: original ctx")
    else:
        c.check(n_rot == head_dim, f"{tag}: rotary dims {n_rot} != head_dim {head_dim}")
    if arch == "gemma3":
        n_layer, pattern = field(r, "gemma3.block_count"), field(r, "gemma3.attention.sliding_window_pattern")
        window, ctx = field(r, "gemma3.attention.sliding_window"), field(r, "gemma3.context_length")
        c.check(pattern is not None and 1 < pattern <= n_layer, f"{tag}: pattern {pattern} must give both layer kinds")
        c.check(window is not None and 0 < window < ctx, f"{tag}: window {window} vs context {ctx}")
        c.check(field(r, "gemma3.rope.freq_base_swa") is not None, f"{tag}: rope.freq_base_swa")
    if arch == "olmoe":
        n_exp, n_used = field(r, "olmoe.expert_count"), field(r, "olmoe.expert_used_count")
        c.check(n_exp and n_used and 0 < n_used < n_exp, f"{tag}: experts {n_used}/{n_exp}")

    # vocabulary
    tokens = array_strings(r.fields["tokenizer.ggml.tokens"])
    scores = array_values(r.fields["tokenizer.ggml.scores"])
    ttypes = array_values(r.fields["tokenizer.ggml.token_type"])
    n_vocab = len(tokens)
    c.check(field(r, "tokenizer.ggml.model") == "llama", f"{tag}: tokenizer model")
    c.check(n_vocab > N_FIXED_TOKENS and len(scores) == n_vocab and len(ttypes) == n_vocab,
            f"{tag}: vocab sizes tokens={n_vocab} scores={len(scores)} types={len(ttypes)}")
    c.check(field(r, f"{arch}.vocab_size") == n_vocab, f"{tag}: {arch}.vocab_size")
    c.check(len(set(tokens)) == n_vocab, f"{tag}: tokens are not unique")
    c.check(all(f"<0x{b:02X}>" in tokens[3:259] for b in range(256)), f"{tag}: byte tokens")
    c.check(all(ttypes[3:259] == 6) and ttypes[0] == 2 and ttypes[1] == 3 and ttypes[2] == 3,
            f"{tag}: special/byte token types")
    c.check(all(ttypes[259:] == 1) and np.all(np.diff(scores[259:]) < 0), f"{tag}: normal pieces and scores")
    for key, want in (("bos_token_id", 1), ("eos_token_id", 2), ("unknown_token_id", 0)):
        got = field(r, f"tokenizer.ggml.{key}")
        c.check(got == want and tokens[got] in ("<unk>", "<s>", "</s>"), f"{tag}: {key} = {got}")
    c.check(field(r, "tokenizer.ggml.add_bos_token") is True, f"{tag}: add_bos_token")

    # tensors
    exp = expected_tensors(r, arch, info["tied"], TYPES[tname])
    got = {t.name: t for t in r.tensors}
    c.check(len(got) == len(r.tensors), f"{tag}: duplicate tensor names")
    c.check(set(got) == set(exp), f"{tag}: tensor names: missing {sorted(set(exp) - set(got))}, "
                                  f"unexpected {sorted(set(got) - set(exp))}")
    for name, (etype, ene) in exp.items():
        t = got.get(name)
        if t is None:
            continue
        c.check(t.tensor_type == etype, f"{tag}: {name} type {t.tensor_type.name}, want {etype.name}")
        c.check([int(x) for x in t.shape] == ene, f"{tag}: {name} shape {list(t.shape)}, want {ene}")
        v = values(t)
        c.check(v.size == int(np.prod(ene)), f"{tag}: {name} element count")
        c.check(bool(np.all(np.isfinite(v))), f"{tag}: {name} not finite")
        if name.startswith("rope_"):
            c.check(bool(np.all(v > 0)), f"{tag}: {name} factors must be positive")
            if name == "rope_freqs.weight":
                want = llama3_factors(field(r, "llama.rope.freq_base"), n_rot, info["n_ctx_orig"])
                c.check(np.allclose(v, want, rtol=1e-5), f"{tag}: rope_freqs {v} != {want}")
                c.check(v.min() == 1.0 and v.max() == 32.0 and np.any((v > 1) & (v < 32)),
                        f"{tag}: rope_freqs must cover all three llama3 regimes")
            continue
        c.check(v.min() != v.max(), f"{tag}: {name} is constant")
        if len(ene) == 1:  # RMSNorm weights: near 1 (also gemma3: the converter folds in its +1)
            c.check(abs(v.mean() - 1.0) < 0.05 and v.min() > 0.85 and v.max() < 1.15,
                    f"{tag}: {name} norm weights mean {v.mean():.3f} range [{v.min():.3f}, {v.max():.3f}]")
        else:  # uniform with variance 1/K (K = ne[0]): std 1/sqrt(K), bound sqrt(3/K)
            k = ene[0]
            std, want = float(v.std()), 1.0 / math.sqrt(k)
            c.check(abs(std / want - 1.0) < 0.10, f"{tag}: {name} std {std:.4f}, want {want:.4f} (+-10%)")
            c.check(abs(float(v.mean())) < 0.1 * want, f"{tag}: {name} mean {v.mean():.4f} not ~0")
            c.check(float(np.abs(v).max()) <= math.sqrt(3.0 / k) * 1.01, f"{tag}: {name} exceeds sqrt(3/K)")
    return r


def values(t):
    """A tensor's elements as f32, flat."""
    if t.tensor_type == GGMLQuantizationType.BF16:  # gguf hands back raw uint16 bits
        return (np.asarray(t.data).view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(-1)
    if t.tensor_type == GGMLQuantizationType.Q8_0:  # raw blocks
        return quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32).reshape(-1)
    return np.asarray(t.data).astype(np.float32).reshape(-1)


def check_q8_0_against_f32(c, q8_path, f32_path, tag):
    """Every q8_0 matrix holds the f32 file's values quantized: per block of 32, the error is
    at most half a step d = max|x| / 127, plus d's rounding to f16 (2^-11 d on each of up
    to 127 steps): 0.57 d."""
    f32 = {t.name: values(t) for t in GGUFReader(f32_path).tensors}
    n = 0
    for t in GGUFReader(q8_path).tensors:
        if t.tensor_type != GGMLQuantizationType.Q8_0:
            continue
        x, q = f32[t.name].reshape(-1, 32), values(t).reshape(-1, 32)
        d = np.abs(x).max(axis=1, keepdims=True) / 127.0
        worst = float((np.abs(q - x) / np.maximum(d, 1e-30)).max())
        c.check(worst <= 0.57, f"{tag}: {t.name} q8_0 is {worst:.3f} steps off the f32 values (at most 0.57)")
        n += 1
    c.check(n > 0, f"{tag}: no q8_0 matrix in the file")


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    c = Checks()
    files_checked = 0

    for preset, info in TINY.items():
        for tname in TYPES:
            path = os.path.join(args.work, f"{preset}-{tname}.gguf")
            p = run([args.stride, "synth", preset, "-o", path, "--type", tname, "--seed", "7"])
            if not c.check(p.returncode == 0, f"{preset}/{tname}: exit {p.returncode}: {p.stderr.strip()}"):
                continue
            c.check(p.stdout.startswith(f"wrote {path}: "), f"{preset}/{tname}: summary line {p.stdout!r}")
            check_file(c, path, preset, info, tname)
            files_checked += 1
            if tname == "q8_0":  # (f32 came first: TYPES' order)
                check_q8_0_against_f32(c, path, os.path.join(args.work, f"{preset}-f32.gguf"), f"{preset}/q8_0")

        # determinism: the same seed gives the same bytes, another seed other weights
        a, b, d = (os.path.join(args.work, f"{preset}-seed{x}.gguf") for x in ("7a", "7b", "8"))
        ok = all(run([args.stride, "synth", preset, "-o", f, "--seed", s]).returncode == 0
                 for f, s in ((a, "7"), (b, "7"), (d, "8")))
        if c.check(ok, f"{preset}: seeded runs"):
            c.check(open(a, "rb").read() == open(b, "rb").read(), f"{preset}: same seed, different bytes")
            ra, rd = GGUFReader(a), GGUFReader(d)
            ta = {t.name: np.asarray(t.data) for t in ra.tensors}
            for t in rd.tensors:
                if t.name.startswith("rope_"):
                    continue  # computed, not random
                c.check(not np.array_equal(ta[t.name], np.asarray(t.data)), f"{preset}: seed 8 == seed 7 for {t.name}")
            for f in (a, b, d):
                os.remove(f)

    # the command's errors: usage problems exit 2, I/O problems exit 1
    out = os.path.join(args.work, "err.gguf")
    for argv, code, what in (
        (["no-such-preset", "-o", out], 2, "unknown preset"),
        (["tiny-llama"], 2, "missing -o"),
        (["tiny-llama", "-o", out, "--type", "q4_K"], 2, "bad type"),
        (["tiny-llama", "-o", out, "--seed", "x1"], 2, "bad seed"),
        (["tiny-llama", "-o", out, "--bogus"], 2, "unknown option"),
        (["tiny-llama", "-o", os.path.join(args.work, "no-dir", "x.gguf")], 1, "unwritable path"),
    ):
        p = run([args.stride, "synth"] + argv)
        c.check(p.returncode == code and p.stderr.strip() != "",
                f"stride synth {' '.join(argv)} ({what}): exit {p.returncode}, want {code}; stderr {p.stderr!r}")
    c.check(not os.path.exists(out), "a failed synth left a file behind")
    p = run([args.stride, "synth", "no-such-preset", "-o", out])
    c.check("tiny-qwen3" in p.stderr, "unknown preset: the valid presets are listed")
    p = run([args.stride, "synth", "--help"])
    c.check(p.returncode == 0 and all(n in p.stdout for n in ("llama-3.2-1b", "qwen3-8b", "qwen3-32b", "gemma-3-270m",
                                                              "phi-4-mini", "olmoe-1b-7b")),
            "synth --help lists the full-size presets")

    expected_files = len(TINY) * len(TYPES)
    c.check(files_checked == expected_files, f"checked {files_checked} files, expected {expected_files}")
    print(f"{c.passed} passed, {c.failed} failed ({files_checked} files)")
    if c.passed == 0 or c.failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
