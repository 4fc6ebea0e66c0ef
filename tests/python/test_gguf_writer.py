#!/usr/bin/env python3
"""stride's GGUF writer, read back by the reference reader (the `gguf` package, PyPI).

    test_gguf_writer.py --stride STRIDE --work DIR [--tool GGUF_WRITE_SAMPLE]

Runs tests/tools/gguf_write_sample (path from --tool, else $STRIDE_GGUF_WRITE_SAMPLE,
which tests/CMakeLists.txt sets for ctest), reads the file it wrote with
gguf.GGUFReader and checks every key (order, type, value; nested arrays element by
element), every tensor (name, type, shape, data bytes, aligned offset) and the alignment
against the values below, which mirror the tool's. Prints each mismatch and a
'N passed, M failed' line; exits non-zero on any failure, and when nothing was checked.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

from harness import Checks

try:
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFValueType as V
except ImportError as e:  # a clear message instead of a traceback
    print("test_gguf_writer: the `gguf` Python package is needed (pip install gguf): %s" % e)
    sys.exit(1)

ALIGNMENT = 64


def arr(etype, elems):
    return ("arr", etype, elems)


# key -> (value type, value) in the order the tool writes them. Floats are exact in their
# type, so they compare with ==.
EXPECTED_KV = [
    ("general.alignment", V.UINT32, ALIGNMENT),
    ("general.architecture", V.STRING, "sample"),
    ("s.u8", V.UINT8, 250),
    ("s.i8", V.INT8, -100),
    ("s.u16", V.UINT16, 65000),
    ("s.i16", V.INT16, -32000),
    ("s.u32", V.UINT32, 4000000000),
    ("s.i32", V.INT32, -2000000000),
    ("s.f32", V.FLOAT32, 3.25),
    ("s.bool_true", V.BOOL, True),
    ("s.bool_false", V.BOOL, False),
    ("s.str", V.STRING, "h\u00e9llo w\u00f6rld \u2713"),
    ("s.str_empty", V.STRING, ""),
    ("s.u64", V.UINT64, (1 << 63) + 5),
    ("s.i64", V.INT64, -(1 << 62) - 7),
    ("s.f64", V.FLOAT64, 1.0 / 3.0),
    ("a.u8", V.ARRAY, arr(V.UINT8, [0, 1, 255])),
    ("a.i8", V.ARRAY, arr(V.INT8, [-128, 0, 127])),
    ("a.u16", V.ARRAY, arr(V.UINT16, [0, 65535])),
    ("a.i16", V.ARRAY, arr(V.INT16, [-32768, 32767, -1])),
    ("a.u32", V.ARRAY, arr(V.UINT32, [1, 2, 4294967295])),
    ("a.i32", V.ARRAY, arr(V.INT32, [-2147483648, 2147483647])),
    ("a.f32", V.ARRAY, arr(V.FLOAT32, [1.5, -2.25, 0.0])),
    ("a.bool", V.ARRAY, arr(V.BOOL, [True, False, True])),
    ("a.u64", V.ARRAY, arr(V.UINT64, [0, (1 << 64) - 1])),
    ("a.i64", V.ARRAY, arr(V.INT64, [-(1 << 63), (1 << 63) - 1])),
    ("a.f64", V.ARRAY, arr(V.FLOAT64, [0.1, -1e300])),
    ("a.empty_u32", V.ARRAY, arr(V.UINT32, [])),
    ("a.str", V.ARRAY, arr(V.STRING, ["alpha", "", "\u00fcn\u00efc\u00f6d\u00e9", "\u65e5\u672c\u8a9e"])),
    ("a.nested_i32", V.ARRAY, arr(V.ARRAY, [arr(V.INT32, [1, 2, 3]), arr(V.INT32, []),
                                            arr(V.INT32, [4])])),
    ("a.nested_str", V.ARRAY, arr(V.ARRAY, [arr(V.STRING, ["x", "yz"]), arr(V.STRING, ["\u00e9"])])),
    ("a.nested3_u8", V.ARRAY, arr(V.ARRAY, [arr(V.ARRAY, [arr(V.UINT8, [7]),
                                                          arr(V.UINT8, [8, 9])])])),
]


def f16_bytes(values):
    return np.asarray(values, dtype=np.float32).astype(np.float16).tobytes()


def bf16_bytes(values):
    # the values are exact in bf16, so truncating the float32 bits is exact too
    bits = np.asarray(values, dtype=np.float32).view(np.uint32) >> 16
    return bits.astype(np.uint16).tobytes()


# name, type, shape (ne[0] first), data bytes: the formulas of the tool's fill_tensor()
EXPECTED_TENSORS = [
    ("w.f32", Q.F32, [5, 3], np.arange(15, dtype=np.float32) * 0.25 - 1.0),
    ("w.f16", Q.F16, [7, 2], f16_bytes(np.arange(14) * 0.5 - 2.0)),
    ("w.bf16", Q.BF16, [4, 2], bf16_bytes(np.arange(8) - 3.5)),
    ("w.q8_0", Q.Q8_0, [64, 2], bytes((i * 7 + 3) & 0xFF for i in range(2 * 2 * 34))),
    ("w.i32", Q.I32, [6], (np.arange(6, dtype=np.int32) * 1000 - 2500)),
    ("w.3d", Q.F32, [3, 2, 4], np.arange(24, dtype=np.float32) + 100.0),
]



def decode(parts, i, vtype):
    """Rebuilds one value from a ReaderField's parts (the reader keeps them in file
    order: an array is [elem type, count, elements...]); returns (value, next index)."""
    if vtype == V.ARRAY:
        etype = V(int(parts[i][0]))
        n = int(parts[i + 1][0])
        i += 2
        elems = []
        for _ in range(n):
            e, i = decode(parts, i, etype)
            elems.append(e)
        return ("arr", etype, elems), i
    if vtype == V.STRING:
        return bytes(parts[i + 1]).decode("utf-8"), i + 2
    return parts[i][0].item(), i + 1


def check_metadata(c, r):
    fields = [(k, f) for k, f in r.fields.items() if not k.startswith("GGUF.")]
    c.check([k for k, _ in fields] == [k for k, _, _ in EXPECTED_KV],
            "keys in file order %s, want %s" % ([k for k, _ in fields], [k for k, _, _ in EXPECTED_KV]))
    c.check(r.fields["GGUF.version"].contents() == 3, "version %s" % r.fields["GGUF.version"].contents())
    c.check(r.fields["GGUF.kv_count"].contents() == len(EXPECTED_KV), "kv_count")
    for key, vtype, want in EXPECTED_KV:
        f = r.get_field(key)
        if not c.check(f is not None, "key %s missing" % key):
            continue
        got_type = V(int(f.parts[2][0]))
        c.check(got_type == vtype, "%s: type %s, want %s" % (key, got_type.name, vtype.name))
        got, end = decode(f.parts, 3, got_type)
        c.check(end == len(f.parts), "%s: %d trailing parts" % (key, len(f.parts) - end))
        c.check(got == want and repr(got) == repr(want), "%s: value %r, want %r" % (key, got, want))


def check_tensors(c, r):
    c.check(r.alignment == ALIGNMENT, "alignment %d, want %d" % (r.alignment, ALIGNMENT))
    c.check(r.data_offset % ALIGNMENT == 0, "data section at %d, not %d-aligned" % (r.data_offset, ALIGNMENT))
    c.check([t.name for t in r.tensors] == [t[0] for t in EXPECTED_TENSORS],
            "tensor names %s" % [t.name for t in r.tensors])
    by_name = {t.name: t for t in r.tensors}
    end = 0
    for name, ttype, shape, data in EXPECTED_TENSORS:
        t = by_name.get(name)
        if not c.check(t is not None, "tensor %s missing" % name):
            continue
        c.check(t.tensor_type == ttype, "%s: type %s, want %s" % (name, t.tensor_type.name, ttype.name))
        c.check(t.shape.tolist() == shape, "%s: shape %s, want %s" % (name, t.shape.tolist(), shape))
        rel = t.data_offset - r.data_offset
        c.check(rel % ALIGNMENT == 0, "%s: offset %d not %d-aligned" % (name, rel, ALIGNMENT))
        c.check(t.data_offset >= end, "%s: overlaps the previous tensor" % name)
        want = data if isinstance(data, bytes) else np.asarray(data).tobytes()
        got = t.data.tobytes()
        c.check(t.n_bytes == len(want), "%s: %d bytes, want %d" % (name, t.n_bytes, len(want)))
        if not c.check(got == want, "%s: data differs" % name):
            diff = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), None)
            print("      first difference at byte %s of %d/%d" % (diff, len(got), len(want)))
        end = t.data_offset + t.n_bytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stride", help="the stride binary (unused: the writer is driven by --tool)")
    ap.add_argument("--work", required=True, help="scratch directory")
    ap.add_argument("--tool", default=os.environ.get("STRIDE_GGUF_WRITE_SAMPLE"),
                    help="gguf_write_sample binary (default: $STRIDE_GGUF_WRITE_SAMPLE)")
    args = ap.parse_args()
    if not args.tool or not os.access(args.tool, os.X_OK):
        print("test_gguf_writer: no gguf_write_sample tool (give --tool or set "
              "STRIDE_GGUF_WRITE_SAMPLE; got %r)" % args.tool)
        return 1
    os.makedirs(args.work, exist_ok=True)
    path = os.path.join(args.work, "sample.gguf")
    if os.path.exists(path):
        os.remove(path)
    p = subprocess.run([args.tool, path], capture_output=True, text=True)
    if p.returncode != 0:
        print("test_gguf_writer: %s failed (exit %d): %s%s" % (args.tool, p.returncode, p.stdout, p.stderr))
        return 1
    print(p.stdout.strip())

    c = Checks()
    try:
        r = gguf.GGUFReader(path)
    except Exception as e:  # the reference reader refusing the file is the finding
        print("FAIL: gguf.GGUFReader cannot read %s: %s: %s" % (path, type(e).__name__, e))
        return 1
    check_metadata(c, r)
    check_tensors(c, r)
    size = os.path.getsize(path)
    last = r.tensors[-1] if r.tensors else None
    end = last.data_offset + last.n_bytes if last is not None else -1
    # the file ends after the last tensor, at most padded to the alignment
    c.check(0 <= size - end < ALIGNMENT, "file is %d bytes, last tensor ends at %d" % (size, end))
    print("%d passed, %d failed" % (c.passed, c.failed))
    if c.passed == 0:
        print("FAIL: nothing was checked")
        return 1
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
