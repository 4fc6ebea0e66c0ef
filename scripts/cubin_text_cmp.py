#!/usr/bin/env python3
"""Compares the kernels of two cubins (ELF) section by section, with no CUDA tools: each
`.text.<kernel>` section's bytes. For a change that should not alter device code (a
refactor, a comment), build both sides with the same flags and compare:

    nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc -DSTRIDE_HAVE_CUDA=1 -cubin -o a.cubin FILE.cu
    scripts/cubin_text_cmp.py a.cubin b.cubin

A side may be several cubins (a file split into several, or several files at once): list
the old side's, `--`, then the new side's; each side's kernels are pooled by name:

    scripts/cubin_text_cmp.py old.cubin -- new1.cubin new2.cubin new3.cubin

Exits 0 when every kernel is byte-identical and both sides hold the same kernels."""
import struct
import sys


def kernels(path):
    b = open(path, "rb").read()
    if b[:4] != b"\x7fELF" or b[4] != 2:
        sys.exit(f"{path}: not a 64-bit ELF (a cubin: nvcc -cubin)")
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    hdr = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    strtab = hdr[shstrndx][4]

    def name(off):
        end = b.index(b"\0", strtab + off)
        return b[strtab + off:end].decode()

    return {name(h[0]): b[h[4]:h[4] + h[5]] for h in hdr if name(h[0]).startswith(".text.")}


def pooled(paths):
    """The kernels of several cubins by name; a name two of them hold with different bytes
    is an error (the comparison would be ambiguous)."""
    out = {}
    for path in paths:
        for k, text in kernels(path).items():
            if k in out and out[k] != text:
                sys.exit(f"{path}: {k[len('.text.'):]} differs from the same kernel in an earlier cubin of its side")
            out[k] = text
    return out


def main():
    args = sys.argv[1:]
    if "--" in args:
        i = args.index("--")
        old, new = args[:i], args[i + 1:]
    elif len(args) == 2:
        old, new = args[:1], args[1:]
    else:
        sys.exit(__doc__)
    if not old or not new:
        sys.exit(__doc__)
    a, b = pooled(old), pooled(new)
    if not a:
        sys.exit(f"{' '.join(old)}: no kernels")
    differ = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    only = sorted(a.keys() ^ b.keys())
    for k in differ:
        print("differs:", k[len(".text."):])
    for k in only:
        print("in one only:", k[len(".text."):])
    print(f"{len(a.keys() & b.keys()) - len(differ)} of {len(a.keys() | b.keys())} kernels byte-identical")
    return 1 if differ or only else 0


if __name__ == "__main__":
    sys.exit(main())
