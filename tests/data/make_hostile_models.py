#!/usr/bin/env python3
"""Hostile MODEL files: well-formed GGUF v3 files whose model is wrong.

    python3 tests/data/make_hostile_models.py --out DIR     # the corpus + DIR/cases.json
    python3 tests/data/make_hostile_models.py --seeds DIR   # valid micro models (fuzz seeds)

The GGUF reader's corpus (make_malformed_gguf.py) breaks the file format; every file here
parses, and breaks what the file says about the model instead: tensor shapes and types
against the hyperparameters (norms, q/k norms, rope factors, router, experts), missing
and extra tensors, hyperparameter extremes (zero, negative, NaN, infinite, past every
limit), products that overflow 64 bits, and vocabularies that disagree with the
embeddings. stride must refuse each with one line naming the problem (exit 1..127, no
sanitizer report, no abort): tests/python/test_hostile_models.py runs them.

Each case starts from a valid micro model of one of the five architectures (built here,
seeded, a few KiB; the driver checks that every base model runs) and changes ONE thing.
The files are written at test time, never committed. Writing is done by a small writer of
its own (struct), so that any key can have any type and any value, which gguf-py's writer
does not allow (it writes general.architecture itself, checks types).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

# GGUF metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
              U64: "<Q", I64: "<q", F64: "<d"}
# ggml tensor types: id -> (block size, bytes per block)
T_F32, T_F16, T_Q8_0, T_IQ4_NL, T_I32, T_BF16 = 0, 1, 8, 20, 26, 30
TYPE_BLOCK = {T_F32: (1, 4), T_F16: (1, 2), T_Q8_0: (32, 34), T_IQ4_NL: (32, 18), T_I32: (1, 4),
              T_BF16: (1, 2)}
ALIGN = 32


# ---- a minimal GGUF v3 writer --------------------------------------------------------------

def _str(b):
    if isinstance(b, str):
        b = b.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, v):
    if vtype == STR:
        return _str(v)
    if vtype == ARR:
        etype, items = v
        out = struct.pack("<IQ", etype, len(items))
        for it in items:
            out += _value(etype, it)
        return out
    return struct.pack(SCALAR_FMT[vtype], v)


def tensor_bytes(ttype, ne, values):
    """The data of a tensor of ggml type ttype and shape ne from float values (ne order)."""
    n = int(np.prod(ne))
    v = np.asarray(values, dtype=np.float32).reshape(-1)
    assert v.size == n
    if ttype == T_F32:
        return v.astype("<f4").tobytes()
    if ttype == T_F16:
        return v.astype("<f2").tobytes()
    if ttype == T_BF16:
        return (v.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
    if ttype == T_I32:
        return np.round(v * 100).astype("<i4").tobytes()
    if ttype == T_Q8_0:  # per 32 values: f16 scale, 32 int8
        out = bytearray()
        for blk in v.reshape(-1, 32):
            d = float(np.max(np.abs(blk))) / 127.0
            q = np.zeros(32, np.int8) if d == 0 else np.clip(np.round(blk / d), -127, 127).astype(np.int8)
            out += np.float16(d).tobytes() + q.tobytes()
        return bytes(out)
    if ttype == T_IQ4_NL:  # any bytes: the type is refused before they are read
        return bytes(n // 32 * 18)
    raise ValueError(ttype)


class Model:
    """A GGUF file as data: metadata (key -> (type, value), in order) and tensors
    (name -> [ggml type, ne, data bytes], in order). Cases edit it, then write() it."""

    def __init__(self, arch):
        self.arch = arch
        self.kv = {}
        self.tensors = {}

    def set(self, key, vtype, value):
        self.kv[key] = (vtype, value)

    def a(self, suffix):
        return f"{self.arch}.{suffix}"

    def add(self, name, ttype, ne, values):
        self.tensors[name] = [ttype, list(ne), tensor_bytes(ttype, ne, values)]

    def retype(self, name, ttype):
        """Converts tensor `name` to ttype, keeping its values (f32 data re-encoded)."""
        old_t, ne, data = self.tensors[name]
        assert old_t == T_F32
        self.tensors[name] = [ttype, ne, tensor_bytes(ttype, ne, np.frombuffer(data, "<f4"))]

    def reshape(self, name, ne, rng):
        """Replaces tensor `name` by one of shape ne (same type, fresh values)."""
        ttype = self.tensors[name][0]
        self.tensors[name] = [ttype, list(ne), tensor_bytes(ttype, ne, values_for(name, ne, rng))]

    def write(self, path):
        head = b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))
        for k, (t, v) in self.kv.items():
            head += _str(k) + struct.pack("<I", t) + _value(t, v)
        offset, infos, blobs = 0, b"", []
        for name, (t, ne, data) in self.tensors.items():
            bs, bb = TYPE_BLOCK[t]
            assert ne[0] % bs == 0 and len(data) == int(np.prod(ne)) // bs * bb, name
            infos += _str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
            infos += struct.pack("<IQ", t, offset)
            blobs.append((offset, data))
            offset += (len(data) + ALIGN - 1) // ALIGN * ALIGN
        out = bytearray(head + infos)
        out += bytes(-len(out) % ALIGN)
        base = len(out)
        for off, data in blobs:
            out += bytes(base + off - len(out))
            out += data
        with open(path, "wb") as f:
            f.write(bytes(out))


# ---- the valid micro models ----------------------------------------------------------------

N_VOCAB, N_EMBD, N_LAYER, N_FF, CTX = 32, 16, 2, 32, 64


def values_for(name, ne, rng):
    n = int(np.prod(ne))
    if "norm" in name:
        return 1.0 + 0.1 * rng.standard_normal(n)
    if "rope" in name:
        return np.linspace(1.0, 4.0, n)
    return 0.2 * rng.standard_normal(n)


def vocabulary(m, n=N_VOCAB):
    """A SentencePiece-style vocabulary of n tokens: <unk> <s> </s> and plain pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"\u2581t{i}" for i in range(n - 3)]
    m.set("tokenizer.ggml.model", STR, "llama")
    m.set("tokenizer.ggml.tokens", ARR, (STR, tokens))
    m.set("tokenizer.ggml.scores", ARR, (F32, [-float(i) for i in range(n)]))
    m.set("tokenizer.ggml.token_type", ARR, (I32, [2, 3, 3] + [1] * (n - 3)))
    m.set("tokenizer.ggml.bos_token_id", U32, 1)
    m.set("tokenizer.ggml.eos_token_id", U32, 2)
    m.set("tokenizer.ggml.unknown_token_id", U32, 0)
    m.set("tokenizer.ggml.add_bos_token", BOOL, 1)


def base_model(arch, seed=1):
    """A valid micro model of arch: n_embd 16, 2 layers, vocabulary 32, context 64; heads
    2 (kv 1) of 8, except olmoe (kv 2, 4 experts top-2) and phi3 (fused q|k|v and gate|up,
    6 of 8 dims rotary, long-rope factors)."""
    rng = np.random.default_rng(seed)
    m = Model(arch)
    n_head, n_head_kv, head_dim = 2, (2 if arch == "olmoe" else 1), 8
    n_rot = 6 if arch == "phi3" else head_dim
    q, kv = n_head * head_dim, n_head_kv * head_dim
    m.set("general.architecture", STR, arch)
    m.set("general.name", STR, f"hostile-base-{arch}")
    m.set(m.a("context_length"), U32, CTX)
    m.set(m.a("embedding_length"), U32, N_EMBD)
    m.set(m.a("block_count"), U32, N_LAYER)
    m.set(m.a("feed_forward_length"), U32, N_FF)
    m.set(m.a("attention.head_count"), U32, n_head)
    m.set(m.a("attention.head_count_kv"), U32, n_head_kv)
    m.set(m.a("attention.key_length"), U32, head_dim)
    m.set(m.a("attention.value_length"), U32, head_dim)
    m.set(m.a("rope.dimension_count"), U32, n_rot)
    m.set(m.a("rope.freq_base"), F32, 10000.0)
    m.set(m.a("attention.layer_norm_rms_epsilon"), F32, 1e-5)
    if arch == "gemma3":
        m.set(m.a("attention.sliding_window"), U32, 8)
        m.set(m.a("attention.sliding_window_pattern"), U32, 2)
        m.set(m.a("rope.freq_base_swa"), F32, 10000.0)
    if arch == "phi3":
        m.set(m.a("rope.scaling.original_context_length"), U32, 32)
        m.set(m.a("rope.scaling.attn_factor"), F32, 1.1)
        m.set(m.a("attention.sliding_window"), U32, 0)
    if arch == "olmoe":
        m.set(m.a("expert_count"), U32, 4)
        m.set(m.a("expert_used_count"), U32, 2)
    vocabulary(m)

    def t(name, *ne):
        m.add(name, T_F32, ne, values_for(name, ne, rng))

    if arch == "llama":
        t("rope_freqs.weight", n_rot // 2)
    if arch == "phi3":
        t("rope_factors_long.weight", n_rot // 2)
        t("rope_factors_short.weight", n_rot // 2)
    t("token_embd.weight", N_EMBD, N_VOCAB)
    for il in range(N_LAYER):
        b = f"blk.{il}."
        t(b + "attn_norm.weight", N_EMBD)
        if arch == "phi3":
            t(b + "attn_qkv.weight", N_EMBD, q + 2 * kv)
        else:
            t(b + "attn_q.weight", N_EMBD, q)
            t(b + "attn_k.weight", N_EMBD, kv)
            t(b + "attn_v.weight", N_EMBD, kv)
        if arch in ("qwen3", "gemma3"):
            t(b + "attn_q_norm.weight", head_dim)
            t(b + "attn_k_norm.weight", head_dim)
        if arch == "olmoe":
            t(b + "attn_q_norm.weight", q)
            t(b + "attn_k_norm.weight", kv)
        t(b + "attn_output.weight", q, N_EMBD)
        if arch == "gemma3":
            t(b + "post_attention_norm.weight", N_EMBD)
        t(b + "ffn_norm.weight", N_EMBD)
        if arch == "phi3":
            t(b + "ffn_up.weight", N_EMBD, 2 * N_FF)
            t(b + "ffn_down.weight", N_FF, N_EMBD)
        elif arch == "olmoe":
            t(b + "ffn_gate_inp.weight", N_EMBD, 4)
            t(b + "ffn_gate_exps.weight", N_EMBD, N_FF, 4)
            t(b + "ffn_up_exps.weight", N_EMBD, N_FF, 4)
            t(b + "ffn_down_exps.weight", N_FF, N_EMBD, 4)
        else:
            t(b + "ffn_gate.weight", N_EMBD, N_FF)
            t(b + "ffn_up.weight", N_EMBD, N_FF)
            t(b + "ffn_down.weight", N_FF, N_EMBD)
        if arch == "gemma3":
            t(b + "post_ffw_norm.weight", N_EMBD)
    t("output_norm.weight", N_EMBD)
    if arch in ("llama", "olmoe"):
        t("output.weight", N_EMBD, N_VOCAB)
    return m


ARCHS = ("llama", "qwen3", "gemma3", "phi3", "olmoe")

# ---- the cases -----------------------------------------------------------------------------
#
# case(name, arch, needles, cmd="run")(mutate): the file is base_model(arch) after
# mutate(m, rng); stride must fail with one line holding every needle. cmd: "run",
# "perplexity" or "bench" (each loads the model its own way). VALID lists variants that
# must load: the validator must not refuse what the forward pass handles.

CASES = []
VALID = []


def case(name, arch, needles, cmd="run"):
    def deco(fn):
        CASES.append(dict(name=name, arch=arch, needles=needles, cmd=cmd, mutate=fn))
        return fn
    return deco


def valid(name, arch):
    def deco(fn):
        VALID.append(dict(name=name, arch=arch, mutate=fn))
        return fn
    return deco


def u(m, key):
    """`<arch>.key`"""
    return m.a(key)


# norms: length, rank, type (each aborted in cpu_norm.c before the validator)
case("llama_attn_norm_len8", "llama", ["blk.0.attn_norm.weight", "shape [8]", "[16 = n_embd]"])(
    lambda m, r: m.reshape("blk.0.attn_norm.weight", [8], r))
case("llama_output_norm_len1", "llama", ["output_norm.weight", "shape [1]"])(
    lambda m, r: m.reshape("output_norm.weight", [1], r))
case("llama_ffn_norm_f16", "llama", ["blk.1.ffn_norm.weight", "type f16", "expected f32"])(
    lambda m, r: m.retype("blk.1.ffn_norm.weight", T_F16))
case("llama_attn_norm_two_rows", "llama", ["blk.0.attn_norm.weight", "shape [16, 2]"])(
    lambda m, r: m.reshape("blk.0.attn_norm.weight", [16, 2], r))
case("qwen3_q_norm_f16", "qwen3", ["blk.0.attn_q_norm.weight", "type f16"])(
    lambda m, r: m.retype("blk.0.attn_q_norm.weight", T_F16))
case("qwen3_k_norm_projection_wide", "qwen3", ["blk.1.attn_k_norm.weight", "[8 = head_dim]"])(
    lambda m, r: m.reshape("blk.1.attn_k_norm.weight", [16], r))
case("gemma3_post_attn_norm_len8", "gemma3", ["blk.0.post_attention_norm.weight", "shape [8]"])(
    lambda m, r: m.reshape("blk.0.post_attention_norm.weight", [8], r))
case("gemma3_post_ffw_norm_missing", "gemma3", ["missing tensor 'blk.1.post_ffw_norm.weight'"])(
    lambda m, r: m.tensors.pop("blk.1.post_ffw_norm.weight"))
case("gemma3_q_norm_bf16", "gemma3", ["blk.1.attn_q_norm.weight", "type bf16"], "perplexity")(
    lambda m, r: m.retype("blk.1.attn_q_norm.weight", T_BF16))
case("olmoe_k_norm_per_head", "olmoe", ["blk.0.attn_k_norm.weight", "n_head_kv*head_dim"])(
    lambda m, r: m.reshape("blk.0.attn_k_norm.weight", [8], r))
case("olmoe_q_norm_missing", "olmoe", ["missing tensor 'blk.1.attn_q_norm.weight'"])(
    lambda m, r: m.tensors.pop("blk.1.attn_q_norm.weight"))

# products
case("llama_attn_q_rows", "llama", ["blk.0.attn_q.weight", "shape [16, 8]", "n_head*head_dim"])(
    lambda m, r: m.reshape("blk.0.attn_q.weight", [16, 8], r))
case("llama_attn_k_input", "llama", ["blk.1.attn_k.weight", "shape [8, 8]"])(
    lambda m, r: m.reshape("blk.1.attn_k.weight", [8, 8], r))
case("llama_ffn_down_transposed", "llama", ["blk.0.ffn_down.weight", "shape [16, 32]", "[32 = n_ff, 16 = n_embd]"])(
    lambda m, r: m.reshape("blk.0.ffn_down.weight", [16, 32], r))
case("llama_ffn_gate_rows", "llama", ["blk.1.ffn_gate.weight", "shape [16, 31]"], "perplexity")(
    lambda m, r: m.reshape("blk.1.ffn_gate.weight", [16, 31], r))
case("llama_token_embd_width", "llama", ["token_embd.weight", "shape [8, 32]"])(
    lambda m, r: m.reshape("token_embd.weight", [8, 32], r))
case("llama_output_rows", "llama", ["output.weight", "shape [16, 31]", "n_vocab"])(
    lambda m, r: m.reshape("output.weight", [16, 31], r))
case("qwen3_token_embd_3d", "qwen3", ["token_embd.weight", "3 dimensions"])(
    lambda m, r: m.reshape("token_embd.weight", [16, 32, 2], r))
case("qwen3_attn_v_i32", "qwen3", ["blk.0.attn_v.weight", "type i32", "cannot read"])(
    lambda m, r: m.retype("blk.0.attn_v.weight", T_I32))
case("gemma3_ffn_down_iq4_nl", "gemma3", ["blk.1.ffn_down.weight", "iq4_nl", "cannot read"])(
    lambda m, r: m.retype("blk.1.ffn_down.weight", T_IQ4_NL))
case("gemma3_attn_output_rows", "gemma3", ["blk.0.attn_output.weight", "shape [16, 15]"], "bench")(
    lambda m, r: m.reshape("blk.0.attn_output.weight", [16, 15], r))
case("phi3_qkv_rows", "phi3", ["blk.0.attn_qkv.weight", "shape [16, 31]", "(n_head+2*n_head_kv)*head_dim"])(
    lambda m, r: m.reshape("blk.0.attn_qkv.weight", [16, 31], r))
case("phi3_ffn_up_not_fused", "phi3", ["blk.1.ffn_up.weight", "shape [16, 32]", "2*n_ff"])(
    lambda m, r: m.reshape("blk.1.ffn_up.weight", [16, 32], r))


@case("phi3_both_qkv_forms", "phi3", ["layer 0", "fused and the separate form"])
def _(m, r):
    for n, rows in (("attn_q", 16), ("attn_k", 8), ("attn_v", 8)):
        m.add(f"blk.0.{n}.weight", T_F32, [16, rows], values_for(n, [16, rows], r))


case("phi3_no_qkv", "phi3", ["missing tensor 'blk.1.attn_q.weight'"])(
    lambda m, r: m.tensors.pop("blk.1.attn_qkv.weight"))


@case("phi3_separate_qkv_partial", "phi3", ["missing tensor 'blk.0.attn_v.weight'"])
def _(m, r):
    m.tensors.pop("blk.0.attn_qkv.weight")
    for n, rows in (("attn_q", 16), ("attn_k", 8)):
        m.add(f"blk.0.{n}.weight", T_F32, [16, rows], values_for(n, [16, rows], r))


case("phi3_long_rope_without_short", "phi3", ["rope_factors_long.weight", "rope_factors_short.weight", "both"])(
    lambda m, r: m.tensors.pop("rope_factors_short.weight"))
case("phi3_rope_long_len", "phi3", ["rope_factors_long.weight", "shape [4]", "[3 = n_rot/2]"])(
    lambda m, r: m.reshape("rope_factors_long.weight", [4], r))
case("olmoe_router_rows", "olmoe", ["blk.0.ffn_gate_inp.weight", "shape [16, 3]", "n_expert"])(
    lambda m, r: m.reshape("blk.0.ffn_gate_inp.weight", [16, 3], r))
case("olmoe_gate_exps_count", "olmoe", ["blk.1.ffn_gate_exps.weight", "shape [16, 32, 3]"], "perplexity")(
    lambda m, r: m.reshape("blk.1.ffn_gate_exps.weight", [16, 32, 3], r))
case("olmoe_down_exps_transposed", "olmoe", ["blk.0.ffn_down_exps.weight", "shape [16, 32, 4]"])(
    lambda m, r: m.reshape("blk.0.ffn_down_exps.weight", [16, 32, 4], r))
case("olmoe_up_exps_2d", "olmoe", ["blk.0.ffn_up_exps.weight", "shape [16, 32]"])(
    lambda m, r: m.reshape("blk.0.ffn_up_exps.weight", [16, 32], r))
case("olmoe_router_missing", "olmoe", ["missing tensor 'blk.1.ffn_gate_inp.weight'"], "bench")(
    lambda m, r: m.tensors.pop("blk.1.ffn_gate_inp.weight"))
case("olmoe_router_i32", "olmoe", ["blk.0.ffn_gate_inp.weight", "type i32"])(
    lambda m, r: m.retype("blk.0.ffn_gate_inp.weight", T_I32))

# rope factors: shape, type, values (a zero divides the frequency)
case("llama_rope_freqs_len", "llama", ["rope_freqs.weight", "shape [5]", "[4 = n_rot/2]"])(
    lambda m, r: m.reshape("rope_freqs.weight", [5], r))
case("llama_rope_freqs_f16", "llama", ["rope_freqs.weight", "type f16", "rope factors"])(
    lambda m, r: m.retype("rope_freqs.weight", T_F16))


def rope_values(name, vals):
    def mutate(m, r):
        m.add(name, T_F32, [len(vals)], vals)
    return mutate


case("llama_rope_freqs_zero", "llama", ["rope_freqs.weight", "holds 0 at index 2", "finite and positive"])(
    rope_values("rope_freqs.weight", [1.0, 2.0, 0.0, 4.0]))
case("llama_rope_freqs_nan", "llama", ["rope_freqs.weight", "nan", "index 1"], "perplexity")(
    rope_values("rope_freqs.weight", [1.0, math.nan, 3.0, 4.0]))
case("llama_rope_freqs_negative", "llama", ["rope_freqs.weight", "-2"])(
    rope_values("rope_freqs.weight", [1.0, 2.0, 3.0, -2.0]))
case("phi3_rope_short_inf", "phi3", ["rope_factors_short.weight", "inf"])(
    rope_values("rope_factors_short.weight", [1.0, math.inf, 1.0]))

# presence and names
case("llama_no_token_embd", "llama", ["missing tensor 'token_embd.weight'"])(
    lambda m, r: m.tensors.pop("token_embd.weight"))
case("qwen3_no_output_norm", "qwen3", ["missing tensor 'output_norm.weight'"])(
    lambda m, r: m.tensors.pop("output_norm.weight"))
case("llama_no_attn_v_layer1", "llama", ["missing tensor 'blk.1.attn_v.weight'"], "perplexity")(
    lambda m, r: m.tensors.pop("blk.1.attn_v.weight"))
case("gemma3_layer_past_block_count", "gemma3", ["blk.2.attn_norm.weight", "layer 2", "block_count is 2"])(
    lambda m, r: m.add("blk.2.attn_norm.weight", T_F32, [16], np.ones(16)))
case("qwen3_unknown_tensor", "qwen3", ["blk.0.attn_gate.weight", "not a tensor of the qwen3 architecture"])(
    lambda m, r: m.add("blk.0.attn_gate.weight", T_F32, [16, 16], np.ones(256)))
case("llama_attn_q_bias", "llama", ["blk.0.attn_q.bias", "not read by stride's llama forward pass"])(
    lambda m, r: m.add("blk.0.attn_q.bias", T_F32, [16], np.zeros(16)))
case("llama_moe_router", "llama", ["blk.1.ffn_gate_inp.weight", "router", "not read"])(
    lambda m, r: m.add("blk.1.ffn_gate_inp.weight", T_F32, [16, 4], np.zeros(64)))
case("qwen3_tensor_name_escape", "qwen3", ["blk.0.\\x1b[31mred.weight", "not a tensor"])(
    lambda m, r: m.add("blk.0.\x1b[31mred.weight", T_F32, [4], np.ones(4)))
case("qwen3_tensor_name_nul", "qwen3", ["attn_norm.weight\\x00evil", "not a tensor"])(
    lambda m, r: m.add("blk.0.attn_norm.weight\x00evil", T_F32, [4], np.ones(4)))
case("llama_leading_zero_layer", "llama", ["blk.01.attn_norm.weight", "not a tensor"])(
    lambda m, r: m.add("blk.01.attn_norm.weight", T_F32, [16], np.ones(16)))


# hyperparameters
def set_key(suffix, vtype, value, prefixed=True):
    def mutate(m, r):
        m.set(m.a(suffix) if prefixed else suffix, vtype, value)
    return mutate


def drop_key(suffix):
    def mutate(m, r):
        m.kv.pop(m.a(suffix))
    return mutate


case("llama_block_count_missing", "llama", ["missing required metadata key 'llama.block_count'"])(
    drop_key("block_count"))
case("qwen3_block_count_zero", "qwen3", ["qwen3.block_count", "is 0", "expected 1.."])(
    set_key("block_count", U32, 0))
case("gemma3_block_count_1000", "gemma3", ["blk.2.", "block_count is 1000", "tensors of 2 layer(s)"])(
    set_key("block_count", U32, 1000))
case("phi3_block_count_2e40", "phi3", ["phi3.block_count", "1099511627776"])(
    set_key("block_count", U64, 1 << 40))
case("olmoe_block_count_string", "olmoe", ["olmoe.block_count", "type string", "integer"])(
    set_key("block_count", STR, "2"))
case("llama_embedding_length_zero", "llama", ["llama.embedding_length", "is 0"])(
    set_key("embedding_length", U32, 0))
case("qwen3_embedding_length_2e30", "qwen3", ["qwen3.embedding_length", "1073741824", "16777216"])(
    set_key("embedding_length", U32, 1 << 30))
case("gemma3_head_count_zero", "gemma3", ["gemma3.attention.head_count", "is 0"], "perplexity")(
    set_key("attention.head_count", U32, 0))


@case("llama_head_count_not_multiple", "llama", ["head_count 3", "not a multiple of attention.head_count_kv 2"])
def _(m, r):
    m.set(m.a("attention.head_count"), U32, 3)
    m.set(m.a("attention.head_count_kv"), U32, 2)


case("phi3_head_count_kv_zero", "phi3", ["phi3.attention.head_count_kv", "is 0"])(
    set_key("attention.head_count_kv", U32, 0))
case("olmoe_head_count_kv_above_head_count", "olmoe", ["olmoe.attention.head_count_kv", "is 4", "1..2"])(
    set_key("attention.head_count_kv", U32, 4))


@case("llama_key_length_wraps_product", "llama", ["llama.attention.key_length", "4611686018427387908"])
def _(m, r):
    # n_head 2 times 2^62+4 wraps to 8 in 64 bits; q/k/v shaped to the wrapped product
    m.set(m.a("attention.key_length"), U64, (1 << 62) + 4)
    m.set(m.a("attention.value_length"), U64, (1 << 62) + 4)


@case("qwen3_head_size_1026", "qwen3", ["qwen3.attention.key_length", "is 1026", "2..1024"])
def _(m, r):
    m.set(m.a("attention.key_length"), U32, 1026)
    m.set(m.a("attention.value_length"), U32, 1026)


@case("gemma3_key_length_odd", "gemma3", ["head size 7", "odd"])
def _(m, r):
    m.set(m.a("attention.key_length"), U32, 7)
    m.set(m.a("attention.value_length"), U32, 7)


@case("phi3_no_key_length_uneven", "phi3", ["key_length is absent", "embedding_length 16 / head_count 3"])
def _(m, r):
    m.kv.pop(m.a("attention.key_length"))
    m.kv.pop(m.a("attention.value_length"))
    m.set(m.a("attention.head_count"), U32, 3)
    m.set(m.a("attention.head_count_kv"), U32, 1)


case("olmoe_value_length_differs", "olmoe", ["value_length 4", "key head size 8"])(
    set_key("attention.value_length", U32, 4))
case("llama_rope_dims_above_head", "llama", ["llama.rope.dimension_count", "is 10", "2..8"])(
    set_key("rope.dimension_count", U32, 10))
case("qwen3_rope_dims_odd", "qwen3", ["rope.dimension_count 5", "odd"])(
    set_key("rope.dimension_count", U32, 5))
case("llama_rope_base_zero", "llama", ["llama.rope.freq_base", "is 0"])(
    set_key("rope.freq_base", F32, 0.0))
case("qwen3_rope_base_negative", "qwen3", ["qwen3.rope.freq_base", "-10000"], "perplexity")(
    set_key("rope.freq_base", F32, -10000.0))
case("gemma3_rope_base_nan", "gemma3", ["gemma3.rope.freq_base", "nan"])(
    set_key("rope.freq_base", F32, math.nan))
case("phi3_rope_base_inf", "phi3", ["phi3.rope.freq_base", "inf"])(
    set_key("rope.freq_base", F64, math.inf))
case("olmoe_rope_base_beyond_f32", "olmoe", ["olmoe.rope.freq_base", "1e+300"])(
    set_key("rope.freq_base", F64, 1e300))
case("gemma3_rope_base_swa_nan", "gemma3", ["gemma3.rope.freq_base_swa", "nan"], "bench")(
    set_key("rope.freq_base_swa", F32, math.nan))
case("llama_rope_base_u32", "llama", ["llama.rope.freq_base", "type uint32", "float32 or float64"])(
    set_key("rope.freq_base", U32, 10000))
case("qwen3_rms_eps_zero", "qwen3", ["layer_norm_rms_epsilon", "is 0"])(
    set_key("attention.layer_norm_rms_epsilon", F32, 0.0))
case("phi3_rms_eps_nan", "phi3", ["layer_norm_rms_epsilon", "nan"])(
    set_key("attention.layer_norm_rms_epsilon", F32, math.nan))
case("olmoe_rms_eps_negative", "olmoe", ["layer_norm_rms_epsilon", "-1e-05"])(
    set_key("attention.layer_norm_rms_epsilon", F32, -1e-5))
case("olmoe_rms_eps_zero_in_f32", "olmoe", ["layer_norm_rms_epsilon", "1e-60", "as the float32"])(
    set_key("attention.layer_norm_rms_epsilon", F64, 1e-60))
case("llama_context_length_zero", "llama", ["llama.context_length", "is 0"])(
    set_key("context_length", U32, 0))
case("gemma3_context_length_2e40", "gemma3", ["gemma3.context_length", "1099511627776"])(
    set_key("context_length", U64, 1 << 40))
case("qwen3_ffn_length_zero", "qwen3", ["qwen3.feed_forward_length", "is 0"])(
    set_key("feed_forward_length", U32, 0))
case("olmoe_expert_count_zero", "olmoe", ["olmoe.expert_count", "is 0"])(
    set_key("expert_count", U32, 0))
case("olmoe_expert_used_above_count", "olmoe", ["olmoe.expert_used_count", "is 5", "1..4"], "perplexity")(
    set_key("expert_used_count", U32, 5))
case("olmoe_expert_count_missing", "olmoe", ["missing required metadata key 'olmoe.expert_count'"])(
    drop_key("expert_count"))
case("phi3_attn_factor_zero", "phi3", ["phi3.rope.scaling.attn_factor", "is 0"])(
    set_key("rope.scaling.attn_factor", F32, 0.0))
case("phi3_sliding_window_negative", "phi3", ["phi3.attention.sliding_window", "is -1"])(
    set_key("attention.sliding_window", I32, -1))
case("gemma3_sliding_window_2e40", "gemma3", ["gemma3.attention.sliding_window", "1099511627776"])(
    set_key("attention.sliding_window", U64, 1 << 40))


@case("llama_head_width_overflow", "llama", ["n_head*head_dim = 67108864", "16777216"])
def _(m, r):
    m.set(m.a("attention.head_count"), U32, 65536)
    m.set(m.a("attention.head_count_kv"), U32, 1)
    m.set(m.a("attention.key_length"), U32, 1024)
    m.set(m.a("attention.value_length"), U32, 1024)


@case("olmoe_expert_width_overflow", "olmoe", ["feed_forward_length 8388608 times expert_used_count 3"])
def _(m, r):
    # each width within the limit, the experts' activations [n_ff, n_used] past it
    m.set(m.a("feed_forward_length"), U32, 1 << 23)
    m.set(m.a("expert_used_count"), U32, 3)


@case("unknown_architecture", "llama", ["architecture 'mamba' is not supported"])
def _(m, r):
    m.set("general.architecture", STR, "mamba")


@case("architecture_with_escape", "qwen3", ["architecture 'qwen3\\x1b[2J\\x07'", "not supported"])
def _(m, r):
    m.set("general.architecture", STR, "qwen3\x1b[2J\x07")


@case("architecture_not_a_string", "gemma3", ["general.architecture", "type uint32", "expected string"])
def _(m, r):
    m.set("general.architecture", U32, 3)


# vocabulary against token_embd (its rows are n_vocab)
@case("llama_vocab_shorter_than_embd", "llama", ["vocabulary has 24 tokens", "token_embd.weight has 32 rows"])
def _(m, r):
    vocabulary(m, 24)


@case("qwen3_vocab_longer_than_embd", "qwen3", ["vocabulary has 40 tokens", "32 rows"], "perplexity")
def _(m, r):
    vocabulary(m, 40)


case("gemma3_vocab_tokens_not_strings", "gemma3", ["tokenizer.ggml.tokens", "array of strings"])(
    set_key("tokenizer.ggml.tokens", ARR, (I32, list(range(32))), prefixed=False))
case("phi3_vocab_size_key", "phi3", ["phi3.vocab_size", "is 33", "32 rows"])(
    set_key("vocab_size", U32, 33))
case("olmoe_bos_outside", "olmoe", ["tokenizer.ggml.bos_token_id", "100000", "vocabulary of 32 tokens"])(
    set_key("tokenizer.ggml.bos_token_id", U32, 100000, prefixed=False))
case("llama_eos_negative", "llama", ["tokenizer.ggml.eos_token_id", "is -1"])(
    set_key("tokenizer.ggml.eos_token_id", I32, -1, prefixed=False))
case("qwen3_bos_string", "qwen3", ["tokenizer.ggml.bos_token_id", "type string"])(
    set_key("tokenizer.ggml.bos_token_id", STR, "1", prefixed=False))
case("gemma3_eot_equals_vocab", "gemma3", ["tokenizer.ggml.eot_token_id", "is 32"])(
    set_key("tokenizer.ggml.eot_token_id", U32, 32, prefixed=False))
case("phi3_bos_outside_perplexity", "phi3", ["tokenizer.ggml.bos_token_id", "is 32"], "perplexity")(
    set_key("tokenizer.ggml.bos_token_id", U32, 32, prefixed=False))

# variants the forward pass runs: the validator must accept them
valid("llama_ffn_down_q8_0", "llama")(lambda m, r: m.retype("blk.0.ffn_down.weight", T_Q8_0))
valid("llama_tied_output", "llama")(lambda m, r: m.tensors.pop("output.weight"))
valid("llama_no_rope_freqs", "llama")(lambda m, r: m.tensors.pop("rope_freqs.weight"))
valid("olmoe_router_f16", "olmoe")(lambda m, r: m.retype("blk.1.ffn_gate_inp.weight", T_F16))
valid("gemma3_weights_bf16", "gemma3")(lambda m, r: [m.retype(n, T_BF16) for n in list(m.tensors)
                                                      if n.endswith(("_q.weight", "_up.weight"))])


@valid("phi3_separate_qkv", "phi3")
def _(m, r):
    for il in range(N_LAYER):
        m.tensors.pop(f"blk.{il}.attn_qkv.weight")
        for n, rows in (("attn_q", 16), ("attn_k", 8), ("attn_v", 8)):
            m.add(f"blk.{il}.{n}.weight", T_F32, [16, rows], values_for(n, [16, rows], r))


@valid("qwen3_no_tokenizer", "qwen3")
def _(m, r):
    for k in [k for k in m.kv if k.startswith("tokenizer.")]:
        m.kv.pop(k)


def build(entry, seed):
    m = base_model(entry["arch"])
    entry["mutate"](m, np.random.default_rng(seed))
    return m


def write_corpus(out):
    os.makedirs(out, exist_ok=True)
    manifest = {"base": [], "cases": [], "valid": []}
    for arch in ARCHS:
        path = os.path.join(out, f"base_{arch}.gguf")
        base_model(arch).write(path)
        manifest["base"].append(dict(name=f"base_{arch}", arch=arch, path=path))
    names = set()
    for i, c in enumerate(CASES):
        assert c["name"] not in names, c["name"]
        names.add(c["name"])
        path = os.path.join(out, c["name"] + ".gguf")
        build(c, 1000 + i).write(path)
        manifest["cases"].append(dict(name=c["name"], arch=c["arch"], needles=c["needles"], cmd=c["cmd"], path=path))
    for i, v in enumerate(VALID):
        path = os.path.join(out, v["name"] + ".gguf")
        build(v, 2000 + i).write(path)
        manifest["valid"].append(dict(name=v["name"], arch=v["arch"], path=path))
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


def write_seeds(out):
    """Valid micro models, one per architecture: the model fuzzer's seeds (fuzz/corpus-model).
    Smaller than the base models above (a vocabulary of 8, no tokenizer metadata) so that
    the fuzzer mutates hyperparameters and the tensor table rather than weights."""
    os.makedirs(out, exist_ok=True)
    for arch in ARCHS:
        m = base_model(arch)
        for k in [k for k in m.kv if k.startswith("tokenizer.") or k == "general.name"]:
            m.kv.pop(k)
        rng = np.random.default_rng(7)
        for name in ("token_embd.weight", "output.weight"):
            if name in m.tensors:
                m.reshape(name, [16, 8], rng)
        for name, (t, ne, data) in list(m.tensors.items()):
            if t == T_F32 and len(ne) >= 2 and "gate_inp" not in name:
                m.retype(name, T_F16)  # half the bytes: more of the table per byte of input
        m.write(os.path.join(out, f"{arch}.gguf"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the hostile corpus and cases.json here")
    ap.add_argument("--seeds", help="write the model fuzzer's seed models here")
    a = ap.parse_args()
    if not a.out and not a.seeds:
        ap.error("give --out DIR and/or --seeds DIR")
    if a.out:
        m = write_corpus(a.out)
        print(f"{len(m['cases'])} hostile cases, {len(m['valid'])} valid variants, {len(m['base'])} base models "
              f"in {a.out}")
    if a.seeds:
        write_seeds(a.seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
