#!/usr/bin/env python3
"""Writes the malformed-GGUF corpus used by tests/unit/test_gguf_malformed.c.

    python3 tests/data/make_malformed_gguf.py [--out tests/data] [--seeds fuzz/corpus]

Output (deterministic, every file < 4 KiB, committed):
  ../../fuzz/corpus/*.gguf    valid seed inputs for fuzz/fuzz_gguf.c (--seeds DIR)
  valid_base.gguf             a small valid GGUF v3 file (scalars of several types, a
                              string array, a nested array, general.alignment, three
                              tensors: F32 2D, F16 1D, F32 3D)
  malformed/<name>.gguf       the base file with ONE defect each
  malformed/EXPECTED.tsv      file <TAB> status <TAB> substring of the reader's message

Files are built with struct from a small layout model that records where every field
starts, so "truncated in the middle of X" cuts exactly inside X. The expected substrings
are the reader's own words (checked by hand to name the problem, and the offset where
there is one); when the reader's wording changes, update cases() below and re-run. Data
bytes follow the pattern (i * 37 + 11) mod 256 over the data section, which the C test
checks for one tensor.
"""
import argparse
import os
import struct
import sys

# GGUF metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
# ggml tensor types used here: id -> (block size, bytes per block)
T_F32, T_F16, T_Q4_0, T_Q8_0, T_I32, T_BF16 = 0, 1, 2, 8, 26, 30
TYPE_BLOCK = {T_F32: (1, 4), T_F16: (1, 2), T_Q4_0: (32, 18), T_Q8_0: (32, 34), T_I32: (1, 4),
              T_BF16: (1, 2)}
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
              F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
ALIGN = 32  # general.alignment of every file written here


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def gstr(b):
    return u64(len(b)) + b


class Image:
    """A file under construction; marks[tag] = (start, end) of each named field."""

    def __init__(self):
        self.buf = bytearray()
        self.marks = {}

    def put(self, tag, data):
        start = len(self.buf)
        self.buf += data
        if tag is not None:
            self.marks[tag] = (start, len(self.buf))

    def at(self, tag):
        return self.marks[tag][0]


def put_value(img, tag, vtype, value):
    """value: python value for vtype; for ARR a tuple (elem_type, [elements])."""
    if vtype == STR:
        img.put(tag + ".len", u64(len(value)))
        img.put(tag + ".bytes", value)
    elif vtype == ARR:
        etype, elems = value
        img.put(tag + ".etype", u32(etype))
        img.put(tag + ".count", u64(len(elems)))
        start = len(img.buf)
        for i, e in enumerate(elems):
            put_value(img, "%s.%d" % (tag, i), etype, e)
        img.marks[tag + ".elems"] = (start, len(img.buf))
    elif vtype in SCALAR_FMT:
        img.put(tag, struct.pack(SCALAR_FMT[vtype], value))
    else:  # an invalid type id: value is the raw bytes that follow it
        img.put(tag, value)


def base_kvs():
    """(key, type, value) of the valid base file."""
    # The scalar and string pairs that truncation cases cut come last: the reader first
    # checks that n_kv pairs of minimal size fit at all, so only a cut past that point
    # reaches the code that parses one pair.
    return [
        (b"general.alignment", U32, ALIGN),
        (b"general.name", STR, b"stride malformed-corpus base file (valid)"),
        (b"test.scalar.uint8", U8, 200),
        (b"test.scalar.int16", I16, -1234),
        (b"test.scalar.int32", I32, -123456),
        (b"test.scalar.float32", F32, 1.5),
        (b"test.scalar.bool", BOOL, 1),
        (b"test.scalar.float64", F64, -0.25),
        (b"test.str_arr", ARR, (STR, [b"a", b"", b"a longer string"])),
        (b"test.nested", ARR, (ARR, [(I16, [1, -2]), (I16, [3])])),
        (b"test.u32_arr", ARR, (U32, [1, 2, 3])),
        (b"test.u64", U64, 1 << 40),
        (b"general.architecture", STR, b"llama"),
    ]


def base_tensors():
    """dicts: name, ne, type; offset is filled in by layout() unless given."""
    return [
        {"name": b"t.f32", "ne": [4, 2], "type": T_F32},
        {"name": b"t.f16", "ne": [8], "type": T_F16},
        {"name": b"t.3d", "ne": [2, 3, 2], "type": T_F32},
    ]


def nbytes(t):
    bs, bb = TYPE_BLOCK.get(t["type"], (1, 4))
    n = 1
    for d in t["ne"]:
        n *= d
    return n // bs * bb


def layout(tensors):
    """Assigns aligned, packed offsets to tensors that have none; returns the data size
    they need (meaningless for hostile shapes: pass build() a data_size then)."""
    off = 0
    for t in tensors:
        if "offset" not in t:
            t["offset"] = off
        off = max(off, t["offset"] + nbytes(t))
        off = (off + ALIGN - 1) // ALIGN * ALIGN
    return off


def build(kvs=None, tensors=None, magic=b"GGUF", version=3, n_kv=None, n_tensors=None,
          raw_kv=None, data_size=None):
    """Serialises a file. raw_kv: bytes appended after the regular KVs (counted in n_kv
    unless n_kv is given). Returns the Image."""
    kvs = base_kvs() if kvs is None else kvs
    tensors = base_tensors() if tensors is None else tensors
    size = layout(tensors)
    size = size if data_size is None else data_size
    img = Image()
    img.put("magic", magic)
    img.put("version", u32(version))
    img.put("n_tensors", u64(len(tensors) if n_tensors is None else n_tensors))
    img.put("n_kv", u64(len(kvs) + (1 if raw_kv else 0) if n_kv is None else n_kv))
    for i, (key, vtype, value) in enumerate(kvs):
        k = "kv%d" % i
        img.marks[k] = (len(img.buf), None)
        img.put(k + ".keylen", u64(len(key)))
        img.put(k + ".key", key)
        img.put(k + ".type", u32(vtype))
        put_value(img, k + ".value", vtype, value)
    if raw_kv:
        img.put("kv.raw", raw_kv)
    for i, t in enumerate(tensors):
        k = "ti%d" % i
        img.put(k + ".namelen", u64(len(t["name"])))
        img.put(k + ".name", t["name"])
        img.put(k + ".n_dims", u32(t.get("n_dims", len(t["ne"]))))
        img.put(k + ".ne", b"".join(u64(d & 0xFFFFFFFFFFFFFFFF) for d in t["ne"]))
        img.put(k + ".type", u32(t["type"]))
        img.put(k + ".offset", u64(t["offset"] & 0xFFFFFFFFFFFFFFFF))
    pad = (-len(img.buf)) % ALIGN
    img.put("pad", b"\0" * pad)
    data_start = len(img.buf)
    img.put("data", bytes((i * 37 + 11) & 0xFF for i in range(size)))
    for i, t in enumerate(tensors):
        img.marks["data.t%d" % i] = (data_start + t["offset"], None)
    return img


def cut(img, tag, extra):
    """The file cut `extra` bytes after the start of field `tag`."""
    return bytes(img.buf[: img.at(tag) + extra])


def with_kv(index, key=None, vtype=None, value=None):
    kvs = base_kvs()
    k, t, v = kvs[index]
    kvs[index] = (k if key is None else key, t if vtype is None else vtype,
                  v if value is None else value)
    return bytes(build(kvs).buf)


def with_tensor(index, **fields):
    """The base file with fields of tensor info `index` replaced; the data section keeps
    the base file's size, so a tensor made larger runs past it."""
    ts = base_tensors()
    ts[index].update(fields)
    return bytes(build(tensors=ts, data_size=layout(base_tensors())).buf)


def nested(depth):
    """A value body (after the type field) of `depth` arrays, each holding the next."""
    body = u32(U8) + u64(0)
    for _ in range(depth - 1):
        body = u32(ARR) + u64(1) + body
    return body


def cases():
    """(name, bytes, status, expected message substring). A substring names the field
    and, where the reader reports one, the byte offset, computed here from the layout,
    so the test also checks that the reader points at the right place."""
    base = build()
    b = bytes(base.buf)
    at = base.at
    c = []

    def add(name, data, sub, status="format"):
        c.append((name, data, status, sub))

    def with_raw_kv(key, vtype, body):
        """The base file plus one pair (key, vtype, raw body) after the others; returns
        the bytes and the offset of the body."""
        img = build(raw_kv=gstr(key) + u32(vtype) + body)
        return bytes(img.buf), img.at("kv.raw") + 8 + len(key) + 4

    # --- header -------------------------------------------------------------------------
    add("empty", b"", "(0 bytes)")
    add("three_bytes", b[:3], "truncated header: a GGUF header needs 24 bytes")
    add("bad_magic", b"GGML" + b[4:], "bad magic at byte offset 0")
    add("version_1", bytes(build(version=1).buf), "GGUF version 1 at byte offset 4")
    add("version_2", bytes(build(version=2).buf), "GGUF version 2 at byte offset 4")
    add("version_4", bytes(build(version=4).buf), "GGUF version 4 at byte offset 4")
    add("version_byteswapped", bytes(build(version=3 << 24).buf), "big-endian")
    add("trunc_header_n_tensors", cut(base, "n_tensors", 5), "truncated header")
    add("trunc_header_n_kv", cut(base, "n_kv", 3), "truncated header")
    add("huge_n_kv", bytes(build(n_kv=1 << 63).buf),
        "n_kv = %d at byte offset 16 cannot be right" % (1 << 63))
    add("huge_n_tensors", bytes(build(n_tensors=(1 << 64) - 1).buf),
        "n_tensors = %d at byte offset 8 cannot be right" % ((1 << 64) - 1))
    # --- metadata: truncation inside every part of a key/value pair ---------------------
    # (cut early, the count check fires first: n_kv pairs cannot fit in what is left)
    add("trunc_metadata_early", cut(base, "kv1.value.bytes", 10),
        "n_kv = 13 at byte offset 16 cannot be right")
    add("trunc_key_len", cut(base, "kv12.keylen", 3),
        "truncated file: key of metadata entry 12 at byte offset %d" % at("kv12"))
    add("trunc_key_bytes", cut(base, "kv12.key", 7),
        "key of metadata entry 12 at byte offset %d has length 20, which runs past the end"
        % at("kv12"))
    add("trunc_value_type", cut(base, "kv11.type", 2),
        "truncated file: value type of metadata key 'test.u64' at byte offset %d" % at("kv11.type"))
    add("trunc_scalar_value", cut(base, "kv11.value", 5),
        "truncated file: value of metadata key 'test.u64' at byte offset %d" % at("kv11.value"))
    add("trunc_string_len", cut(base, "kv12.value.len", 4),
        "truncated file: string value of metadata key 'general.architecture' at byte offset %d"
        % at("kv12.value.len"))
    add("trunc_string_bytes", cut(base, "kv12.value.bytes", 3),
        "string value of metadata key 'general.architecture' at byte offset %d has length 5, "
        "which runs past the end" % at("kv12.value.len"))
    add("trunc_array_elem_type", cut(base, "kv10.value.etype", 1),
        "truncated file: array element type of metadata key 'test.u32_arr' at byte offset %d"
        % at("kv10.value.etype"))
    add("trunc_array_count", cut(base, "kv10.value.count", 6),
        "truncated file: array length of metadata key 'test.u32_arr' at byte offset %d"
        % at("kv10.value.count"))
    add("trunc_array_elems", cut(base, "kv10.value.elems", 5),
        "array of 3 uint32 elements at byte offset %d cannot fit" % at("kv10.value.etype"))
    add("trunc_string_array", cut(base, "kv8.value.2.bytes", 3),
        "at byte offset %d has length 15, which runs past the end" % at("kv8.value.2.len"))
    add("trunc_nested_array", cut(base, "kv9.value.1.count", 4),
        "truncated file: array length of metadata key 'test.nested' at byte offset %d"
        % at("kv9.value.1.count"))
    # --- metadata: hostile values --------------------------------------------------------
    add("huge_key_len", cut(base, "kv0.keylen", 0) + u64((1 << 64) - 1) + b[at("kv0.key"):],
        "key of metadata entry 0 at byte offset 24 has length %d, which runs past the end"
        % ((1 << 64) - 1))
    add("huge_string_len", cut(base, "kv1.value.len", 0) + u64((1 << 64) - 1)
        + b[at("kv1.value.bytes"):],
        "string value of metadata key 'general.name' at byte offset %d has length %d"
        % (at("kv1.value.len"), (1 << 64) - 1))
    data, off = with_raw_kv(b"test.big", ARR, u32(U64) + u64(1 << 62) + u64(7))
    add("huge_array_count", data, "array of %d uint64 elements at byte offset %d cannot fit"
        % (1 << 62, off))
    add("unknown_value_type_13", with_kv(2, vtype=13, value=b"\x07"),
        "unknown metadata value type 13 at byte offset %d" % at("kv2.type"))
    add("unknown_value_type_ffffffff", with_kv(2, vtype=0xFFFFFFFF, value=b"\x07"),
        "unknown metadata value type 4294967295 at byte offset %d" % at("kv2.type"))
    data, off = with_raw_kv(b"test.bad", ARR, u32(13) + u64(1) + u32(0))
    add("unknown_array_elem_type", data, "unknown array element type 13 at byte offset %d" % off)
    data, off = with_raw_kv(b"test.deep", ARR, nested(250))
    add("deep_nested_array", data, "metadata key 'test.deep': arrays nested deeper than")
    add("empty_key", with_kv(3, key=b""),
        "metadata entry 3 at byte offset %d has an empty key" % at("kv3"))
    add("duplicate_key", with_kv(3, key=b"test.scalar.uint8"),
        "duplicate metadata key 'test.scalar.uint8' at byte offsets %d and %d" % (at("kv2"), at("kv3")))
    add("alignment_0", with_kv(0, value=0), "general.alignment = 0 at byte offset 24 is not a power of two")
    add("alignment_3", with_kv(0, value=3), "general.alignment = 3 at byte offset 24 is not a power of two")
    add("alignment_string", with_kv(0, vtype=STR, value=b"32"),
        "general.alignment at byte offset 24 has type string, must be uint32")
    # --- tensor infos: truncation ---------------------------------------------------------
    add("trunc_tensor_name", cut(base, "ti1.name", 2),
        "name of tensor info 1 at byte offset %d has length 5, which runs past the end" % at("ti1.namelen"))
    add("trunc_tensor_n_dims", cut(base, "ti1.n_dims", 1),
        "truncated file: n_dims of tensor 't.f16' at byte offset %d" % at("ti1.n_dims"))
    add("trunc_tensor_ne", cut(base, "ti2.ne", 12),
        "truncated file: shape of tensor 't.3d' at byte offset %d" % (at("ti2.ne") + 8))
    add("trunc_tensor_type", cut(base, "ti2.type", 3),
        "truncated file: type of tensor 't.3d' at byte offset %d" % at("ti2.type"))
    add("trunc_tensor_offset", cut(base, "ti2.offset", 7),
        "truncated file: data offset of tensor 't.3d' at byte offset %d" % at("ti2.offset"))
    add("trunc_before_data", cut(base, "pad", 0),
        "tensor 't.f32': data at offset 0 (32 bytes) runs past the end of the file")
    add("trunc_in_tensor_data", cut(base, "data.t2", 20),
        "tensor 't.3d': data at offset 64 (48 bytes) runs past the end of the file")
    # --- tensor infos: hostile values ----------------------------------------------------
    ts = base_tensors()
    ts[1]["name"] = ts[0]["name"]
    add("duplicate_tensor_name", bytes(build(tensors=ts).buf), "duplicate tensor name 't.f32' (tensors 0 and 1)")
    add("empty_tensor_name", with_tensor(1, name=b""),
        "tensor 1 at byte offset %d has an empty name" % at("ti1.namelen"))
    add("long_tensor_name", with_tensor(1, name=b"n" * 65),
        "at byte offset %d has 65 bytes; ggml allows at most 63" % at("ti1.namelen"))
    add("n_dims_0", with_tensor(1, ne=[], n_dims=0),
        "tensor 't.f16': n_dims = 0 at byte offset %d, must be 1..4" % at("ti1.n_dims"))
    add("n_dims_5", with_tensor(1, ne=[1, 1, 8, 1, 1]),
        "tensor 't.f16': n_dims = 5 at byte offset %d, must be 1..4" % at("ti1.n_dims"))
    add("ne_zero", with_tensor(0, ne=[4, 0]),
        "tensor 't.f32': ne[1] = 0 at byte offset %d, must be > 0" % (at("ti0.ne") + 8))
    add("ne_negative", with_tensor(0, ne=[4, -2]),
        "tensor 't.f32': ne[1] = -2 at byte offset %d, must be > 0" % (at("ti0.ne") + 8))
    add("ne_product_overflow", with_tensor(2, ne=[1 << 32, 1 << 32, 1 << 32], offset=64),
        "tensor 't.3d': the element count of its shape (byte offset %d) overflows"
        % at("ti2.n_dims"))  # the reader points at n_dims, where the shape begins
    add("nbytes_overflow", with_tensor(2, ne=[1 << 31, 1 << 31], offset=64),
        "tensor 't.3d': its byte size overflows")
    add("tensor_type_4", with_tensor(1, type=4),
        "tensor 't.f16': unknown tensor type id 4 at byte offset %d" % at("ti1.type"))
    add("tensor_type_99", with_tensor(1, type=99),
        "tensor 't.f16': unknown tensor type id 99 at byte offset %d" % at("ti1.type"))
    add("q4_0_ne0_not_block_multiple", with_tensor(1, type=T_Q4_0, ne=[33, 1]),
        "tensor 't.f16': ne[0] = 33 is not a multiple of the q4_0 block size 32")
    add("misaligned_offset", with_tensor(1, offset=36),
        "tensor 't.f16': data offset 36 at byte offset %d is not a multiple of the alignment 32"
        % at("ti1.offset"))
    add("offset_past_end", with_tensor(2, offset=1 << 20),
        "tensor 't.3d': data at offset %d (48 bytes) runs past the end of the file" % (1 << 20))
    add("data_past_end", with_tensor(2, ne=[2, 3, 40], offset=64),
        "tensor 't.3d': data at offset 64 (960 bytes) runs past the end of the file")
    add("tensors_overlap", with_tensor(1, offset=0),
        "tensors 't.f32' (offset 0, 32 bytes) and 't.f16' (offset 0, 16 bytes) overlap")
    add("offset_size_overflow", with_tensor(2, offset=(1 << 64) - 32),
        "tensor 't.3d': data at offset %d (48 bytes) runs past the end of the file" % ((1 << 64) - 32))
    return base, c


def seeds():
    """(name, bytes) of valid inputs for fuzz/corpus: the base file and variants shaped
    like what stride meets (a llama-like model with a vocabulary, MoE expert tensors)."""
    out = [("base.gguf", bytes(build().buf))]
    out.append(("no_tensors_no_kv.gguf", bytes(build(kvs=[], tensors=[]).buf)))
    out.append(("kv_only.gguf", bytes(build(tensors=[]).buf)))
    out.append(("quant_and_int.gguf", bytes(build(tensors=[
        {"name": b"q", "ne": [64, 2], "type": T_Q8_0},
        {"name": b"i", "ne": [5], "type": T_I32},
        {"name": b"b", "ne": [3, 1, 1, 2], "type": T_BF16},
        {"name": b"q4", "ne": [32], "type": T_Q4_0}]).buf)))
    n_vocab, d, ff = 16, 8, 16
    toks = [b"<unk>", b"<s>", b"</s>"] + [("\u2581t%d" % i).encode() for i in range(n_vocab - 3)]
    kvs = [
        (b"general.architecture", STR, b"llama"),
        (b"general.alignment", U32, ALIGN),
        (b"llama.block_count", U32, 1),
        (b"llama.context_length", U32, 64),
        (b"llama.embedding_length", U32, d),
        (b"llama.feed_forward_length", U32, ff),
        (b"llama.attention.head_count", U32, 2),
        (b"llama.attention.head_count_kv", U32, 1),
        (b"llama.rope.freq_base", F32, 10000.0),
        (b"llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
        (b"tokenizer.ggml.model", STR, b"llama"),
        (b"tokenizer.ggml.tokens", ARR, (STR, toks)),
        (b"tokenizer.ggml.scores", ARR, (F32, [-float(i) for i in range(n_vocab)])),
        (b"tokenizer.ggml.token_type", ARR, (I32, [2, 3, 3] + [1] * (n_vocab - 3))),
        (b"tokenizer.ggml.bos_token_id", U32, 1),
        (b"tokenizer.ggml.eos_token_id", U32, 2),
    ]
    ts = [{"name": b"token_embd.weight", "ne": [d, n_vocab], "type": T_F16}]
    for name, ne, ty in [("attn_norm", [d], T_F32), ("attn_q", [d, d], T_F16),
                         ("attn_k", [d, 4], T_F16), ("attn_v", [d, 4], T_F16),
                         ("attn_output", [d, d], T_F16), ("ffn_norm", [d], T_F32),
                         ("ffn_gate", [d, ff], T_F16), ("ffn_up", [d, ff], T_F16),
                         ("ffn_down", [ff, d], T_F16)]:
        ts.append({"name": ("blk.0.%s.weight" % name).encode(), "ne": ne, "type": ty})
    ts.append({"name": b"output_norm.weight", "ne": [d], "type": T_F32})
    out.append(("llama_tiny.gguf", bytes(build(kvs=kvs, tensors=ts).buf)))
    moe_kvs = [(b"general.architecture", STR, b"olmoe"), (b"olmoe.expert_count", U32, 4),
               (b"olmoe.expert_used_count", U32, 2)]
    moe = [{"name": b"blk.0.ffn_gate_inp.weight", "ne": [d, 4], "type": T_F32},
           {"name": b"blk.0.ffn_gate_exps.weight", "ne": [d, 4, 4], "type": T_BF16},
           {"name": b"blk.0.ffn_down_exps.weight", "ne": [4, d, 4], "type": T_BF16}]
    out.append(("moe_tiny.gguf", bytes(build(kvs=moe_kvs, tensors=moe).buf)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=here, help="where valid_base.gguf and malformed/ go")
    ap.add_argument("--seeds", default=os.path.join(here, "..", "..", "fuzz", "corpus"),
                    help="where the fuzzer's seed inputs go")
    args = ap.parse_args()
    os.makedirs(args.seeds, exist_ok=True)
    for name, data in seeds():
        assert len(data) < 4096, (name, len(data))
        with open(os.path.join(args.seeds, name), "wb") as f:
            f.write(data)
    base, cs = cases()
    mdir = os.path.join(args.out, "malformed")
    os.makedirs(mdir, exist_ok=True)
    with open(os.path.join(args.out, "valid_base.gguf"), "wb") as f:
        f.write(base.buf)
    names = set()
    rows = ["# file\tstatus\texpected message substring (written by make_malformed_gguf.py)"]
    for name, data, status, sub in cs:
        assert name not in names, name
        names.add(name)
        assert len(data) < 4096, (name, len(data))
        assert data != bytes(base.buf), name
        with open(os.path.join(mdir, name + ".gguf"), "wb") as f:
            f.write(data)
        rows.append("%s.gguf\t%s\t%s" % (name, status, sub))
    stale = [n for n in os.listdir(mdir) if n.endswith(".gguf") and n[:-5] not in names]
    for n in stale:
        os.remove(os.path.join(mdir, n))
    with open(os.path.join(mdir, "EXPECTED.tsv"), "w") as f:
        f.write("\n".join(rows) + "\n")
    print("wrote valid_base.gguf (%d bytes), %d malformed files to %s, %d seeds to %s"
          % (len(base.buf), len(cs), mdir, len(seeds()), os.path.normpath(args.seeds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
