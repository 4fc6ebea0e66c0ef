"""`stride calibrate` and per-shape `--pad-weights auto` end to end on the CPU backend, with a
tiny synthetic model and a small alias period (STRIDE_ROW_ALIAS=128 STRIDE_ROW_PAD=64) so
that its rows can be padded:

  - calibrate prints a table with one row per shape and writes the cache file (header,
    length, FNV-1a checksum and key checked here independently);
  - inspect picks the cache up: with decisions edited into a valid file, exactly the
    shapes marked "pad" are padded, each tensor saying "auto: calibrated (+x.x%)"; shapes
    the cache lacks say "auto: built-in table";
  - the kill switch and --pad-weights off win over the cache;
  - a corrupted, truncated, stale (other driver) or foreign file is reported in one line
    and not trusted; loading the model with auto redoes it (a valid file afterwards);
  - STRIDE_CALIBRATE=0 falls back to the built-in table and says so; a bad value is an error.

Speeds are never asserted: the machine running the tests may be busy.

Run by ctest as: python3 test_calibrate.py --stride BIN --work DIR
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

from harness import Checks, clean_env

CHECKS = Checks()
check = CHECKS.check

GEOMETRY = {"STRIDE_ROW_ALIAS": "128", "STRIDE_ROW_PAD": "64"}
SHAPES = {(64, 64), (32, 64), (128, 64), (64, 128)}  # tiny-qwen3 f16, (N, K)


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def parse_cache(raw):
    """(header fields, key dict, shape rows) of a cache file, checked like stride does."""
    nl = raw.index(b"\n")
    magic, version, length, digest = raw[:nl].decode().split(" ")
    body = raw[nl + 1:]
    check(magic == "stride-calibration" and version == "1", f"header {raw[:nl]!r}")
    check(int(length) == len(body), f"header length {length} == body {len(body)}")
    check(int(digest, 16) == fnv1a64(body), "header checksum is FNV-1a 64 of the body")
    key, rows = {}, []
    for line in body.decode().splitlines():
        if line.startswith("#"):
            continue
        name, value = line.split(" ", 1)
        if name == "shape":
            rows.append(value.split(" "))
        else:
            key[name] = value
    return key, rows


def write_cache(path, key_lines, rows):
    body = "".join(f"{k} {v}\n" for k, v in key_lines) + "".join("shape " + " ".join(r) + "\n" for r in rows)
    data = body.encode()
    with open(path, "wb") as f:
        f.write(f"stride-calibration 1 {len(data)} {fnv1a64(data):016x}\n".encode() + data)


class Env:
    def __init__(self, work):
        self.cache_home = os.path.join(work, "xdg-cache")
        shutil.rmtree(self.cache_home, ignore_errors=True)

    def __call__(self, extra=None):
        e = {"XDG_CACHE_HOME": self.cache_home, **GEOMETRY}
        e.update(extra or {})
        return clean_env(e)

    def cache_files(self):
        d = os.path.join(self.cache_home, "stride")
        return [os.path.join(d, f) for f in sorted(os.listdir(d))] if os.path.isdir(d) else []


def run(args, env, expect_rc=0):
    p = subprocess.run(args, env=env, capture_output=True, text=True)
    check(p.returncode == expect_rc, f"{' '.join(args[1:4])}... exited {p.returncode}, expected {expect_rc}; "
                                     f"stderr: {p.stderr.strip()[-400:]}")
    return p


def inspect(stride, model, env, *flags):
    p = run([stride, "inspect", model, "--layout", "--json", "--backend", "cpu", *flags], env)
    return (json.loads(p.stdout) if p.returncode == 0 else None), p.stderr


def gemm_entries(doc):
    return [t for t in doc["tensors"] if t.get("role") == "gemm"]


def shape_of(t):
    return (t["ne"][1], t["ne"][0])


def test_calibrate_and_cache(stride, model, env):
    p = run([stride, "calibrate", "-m", model, "--backend", "cpu", "-r", "3", "--llc", "1", "-t", "1"], env())
    rows = [l for l in p.stdout.splitlines() if re.match(r"\| \d+ x \d+ \|", l)]
    check(len(rows) == len(SHAPES), f"one table row per shape: {len(rows)} rows")
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        n, k = (int(x) for x in cells[0].split(" x "))
        check((n, k) in SHAPES, f"row shape {n}x{k} is one of the model's")
        check(cells[1] == "f16" and cells[10] in ("pad", "packed"), f"row {cells[:2]} decision {cells[10]}")
        check(cells[2] == "3", f"row {cells[0]}: 3 pairs (-r 3): {cells[2]}")
        check(all(float(cells[i]) > 0 for i in (3, 4, 6, 7)), f"row {cells[0]}: positive times")
        check(re.fullmatch(r"[+-]\d+\.\d% \+- \d+\.\d%", cells[9]) is not None, f"gain +- noise: {cells[9]!r}")
    files = env.cache_files()
    check(len(files) == 1 and files[0].endswith("-a128-p64.txt"), f"one cache file named by geometry: {files}")
    check(f"cache: {files[0]}" in p.stdout if files else False, "calibrate names the cache file")
    key, cached = parse_cache(open(files[0], "rb").read())
    check(key.get("backend") == "cpu" and key.get("alias") == "128" and key.get("pad") == "64",
          f"key backend/geometry: {key}")
    check(all(k in key for k in ("device", "driver", "runtime", "stride")), f"key fields: {sorted(key)}")
    check({(int(r[1]), int(r[2])) for r in cached} == SHAPES, "cache holds every shape")
    check(all(r[-1] in ("pad", "packed") for r in cached), "cache rows end in a decision")
    # A calibration of the preset's shapes without writing anything finds the same shapes.
    p = run([stride, "calibrate", "--preset", "tiny-qwen3", "--backend", "cpu", "-r", "1", "--llc", "1", "-t", "1",
             "--no-save"], env())
    check(len([l for l in p.stdout.splitlines() if re.match(r"\| \d+ x \d+ \|", l)]) == len(SHAPES),
          "--preset tiny-qwen3: the same shapes, no model file needed")
    check("cache:" not in p.stdout, "--no-save writes nothing")
    return files[0], key, cached


def test_inspect_uses_cache(stride, model, env, path, key, cached):
    key_lines = [(k, key[k]) for k in ("backend", "device", "driver", "runtime", "stride", "alias", "pad")]
    # Decisions edited into a valid file: pad q/o (64x64) with +7.5%, keep k/v packed, and
    # drop gate/up so that they fall back to the built-in table.
    rows = []
    for r in cached:
        shape = (int(r[1]), int(r[2]))
        if shape == (128, 64):
            continue
        r = list(r)
        pad = shape == (64, 64)
        r[13] = "0.075" if pad else "-0.004"  # the gain
        r[-1] = "pad" if pad else "packed"
        rows.append(r)
    write_cache(path, key_lines, rows)
    doc, err = inspect(stride, model, env())
    if doc is None:
        return
    for t in gemm_entries(doc):
        s = shape_of(t)
        if s == (64, 64):
            check(t["padded"] and t["auto"] == "calibrated" and "auto: calibrated (+7.5%)" in t["why"],
                  f"{t['name']}: padded by the cache: {t['why']}")
            check(t["nb"][1] == t["packed_nb1"] + 64, f"{t['name']}: stride + 64")
        elif s == (128, 64):
            check(not t["padded"] and t["auto"] == "builtin" and "auto: built-in table" in t["why"],
                  f"{t['name']}: not in the cache: built-in table: {t['why']}")
        else:
            check(not t["padded"] and t["auto"] == "calibrated" and "auto: calibrated (-0.4%)" in t["why"],
                  f"{t['name']}: kept packed by the cache: {t['why']}")
    check(doc["layout"]["n_padded"] == 4, f"2 layers x (q, o) padded: {doc['layout']['n_padded']}")
    # per layer: q, k, v, o, down from the cache; gate, up from the built-in table
    check(doc["layout"]["n_auto_calibrated"] == 10 and doc["layout"]["n_auto_builtin"] == 4,
          f"calibrated/builtin counts: {doc['layout']['n_auto_calibrated']}/{doc['layout']['n_auto_builtin']}")
    check(len(err.strip().splitlines()) == 1 and "lacks" in err, f"one line about the missing shapes: {err!r}")
    # text output says the same
    p = run([stride, "inspect", model, "--layout", "--backend", "cpu"], env())
    check("auto: calibrated (+7.5%)" in p.stdout and "auto: built-in table" in p.stdout,
          "inspect --layout text shows both kinds of auto decision")
    # kill switch and off win over the cache; --device-kind plans with the built-in table
    for flags, extra, what in [([], {"STRIDE_NO_PAD_WEIGHTS": "1"}, "kill switch"),
                               ([], {"GGML_CUDA_NO_PAD_WEIGHTS": "1"}, "llama.cpp kill switch"),
                               (["--pad-weights", "off"], {}, "--pad-weights off"),
                               (["--device-kind", "cpu"], {}, "--device-kind: built-in table")]:
        doc, _ = inspect(stride, model, env(extra), *flags)
        check(doc is not None and doc["layout"]["n_padded"] == 0 and doc["layout"]["n_auto_calibrated"] == 0,
              f"{what}: nothing padded, no calibrated decision")
    doc, _ = inspect(stride, model, env(), "--pad-weights", "on")
    check(doc["layout"]["n_padded"] == 14 and all(t["auto"] is None for t in doc["tensors"]),
          "--pad-weights on pads every aliased weight, no auto decision")


def test_untrusted_caches(stride, model, env, path, key):
    good = open(path, "rb").read()
    body_at = good.index(b"\n") + 1
    stale_body = good[body_at:].replace(f"driver {key['driver']}\n".encode(), b"driver 99999\n")
    cases = [
        ("corrupt byte", good[:-20] + bytes([good[-20] ^ 1]) + good[-19:], "checksum"),
        ("truncated", good[:len(good) // 2], "truncated"),
        ("stale driver", f"stride-calibration 1 {len(stale_body)} {fnv1a64(stale_body):016x}\n".encode() + stale_body,
         "driver 99999"),
        ("foreign", b"GGUF\x03\x00\x00\x00 not a calibration\n", "not a stride calibration"),
    ]
    for what, data, words in cases:
        with open(path, "wb") as f:
            f.write(data)
        doc, err = inspect(stride, model, env())
        check(doc is not None and doc["layout"]["n_auto_calibrated"] == 0 and doc["layout"]["n_padded"] == 0,
              f"{what}: inspect does not trust it")
        lines = err.strip().splitlines()
        check(len(lines) == 1 and words in lines[0] and "built-in table" in lines[0],
              f"{what}: reported in one line naming '{words}': {err!r}")
    # Loading with auto redoes it: one line says so, and a valid file replaces the bad one.
    p = run([stride, "run", "-m", model, "-p", "hi", "-n", "1", "--temp", "0", "--backend", "cpu", "-t", "1"], env())
    lines = [l for l in p.stderr.splitlines() if "auto:" in l]
    check(len(lines) == 1 and "calibrated 4 weight shape(s)" in lines[0] and "not a stride calibration" in lines[0]
          and "saved to" in lines[0], f"load: one line, calibrated and saved: {lines}")
    key2, rows = parse_cache(open(path, "rb").read())
    check(key2 == key and len(rows) == 4, "load wrote a valid cache with the model's 4 shapes")
    # ... and the next load uses it without a word.
    p = run([stride, "run", "-m", model, "-p", "hi", "-n", "1", "--temp", "0", "--backend", "cpu", "-t", "1"], env())
    check("auto:" not in p.stderr, f"second load: the cache answers, nothing to say: {p.stderr.strip()[-300:]!r}")


def test_switch(stride, model, env, path):
    os.remove(path)
    p = run([stride, "run", "-m", model, "-p", "hi", "-n", "1", "--temp", "0", "--backend", "cpu"],
            env({"STRIDE_CALIBRATE": "0"}))
    lines = [l for l in p.stderr.splitlines() if "auto:" in l]
    check(len(lines) == 1 and "STRIDE_CALIBRATE=0" in lines[0] and "built-in table" in lines[0],
          f"STRIDE_CALIBRATE=0: one line, built-in table: {lines}")
    check(not os.path.exists(path), "STRIDE_CALIBRATE=0 writes no cache")
    p = run([stride, "run", "-m", model, "-p", "hi", "-n", "1", "--backend", "cpu"], env({"STRIDE_CALIBRATE": "maybe"}),
            expect_rc=1)
    check("STRIDE_CALIBRATE" in p.stderr, f"bad STRIDE_CALIBRATE is an error naming it: {p.stderr.strip()!r}")
    # Without an alias hit (default geometry) there is nothing to calibrate and nothing to say.
    e = env({"STRIDE_CALIBRATE": "1"})
    e.pop("STRIDE_ROW_ALIAS")
    e.pop("STRIDE_ROW_PAD")
    p = run([stride, "run", "-m", model, "-p", "hi", "-n", "1", "--backend", "cpu"], e)
    check("auto:" not in p.stderr, "default geometry on a tiny model: nothing to calibrate")
    for args, what in [(["--prefill-batch", "1"], "--prefill-batch"), (["-r", "0"], "-r"), (["--budget", "x"], "--budget"),
                       (["--preset", "nonesuch"], "--preset"), (["--type", "q8_0"], "--type"), (["--llc", "0"], "--llc"),
                       (["--frobnicate"], "--frobnicate")]:
        p = run([stride, "calibrate", "--backend", "cpu", *args], env(), expect_rc=2)
        check(what in p.stderr, f"calibrate {args}: usage error naming {what}: {p.stderr.strip()!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    env = Env(a.work)
    model = os.path.join(a.work, "tiny-qwen3-f16.gguf")
    run([a.stride, "synth", "tiny-qwen3", "-o", model, "--type", "f16"], env())
    path, key, cached = test_calibrate_and_cache(a.stride, model, env)
    test_inspect_uses_cache(a.stride, model, env, path, key, cached)
    test_untrusted_caches(a.stride, model, env, path, key)
    test_switch(a.stride, model, env, path)
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
