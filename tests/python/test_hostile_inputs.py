#!/usr/bin/env python3
"""Hostile inputs and paths: what a user (or an accident) hands stride besides a model.

Writers (synth -o, run --logits-out; the calibration cache alike) write a temporary file
beside the target and rename it over it:
  - a full disk (RLIMIT_FSIZE, which needs no privileges) fails cleanly: the existing
    target is unchanged, no temporary file is left, no new file appears;
  - SIGINT or SIGTERM in the middle of synth's write: exit 130, nothing left behind;
  - a FIFO, a directory, /dev/null (only stat'ed, never written) or a symbolic link to one
    is refused; a link to a regular file replaces that file and stays a link; a dangling
    link is refused.
Inputs are regular files only: a FIFO given as the model, prompt, text, token file or
placed where the calibration cache lives is refused at once instead of blocking (each
command runs under a timeout).
Also: run refuses a prompt longer than the trained context unless -c asks for it and warns
for a -c beyond it; id lists are range-checked naming the flag; an empty --tokens is a usage
error (and leaks nothing under LeakSanitizer); a generated piece of 3,000 bytes is printed
whole; names from the file are escaped; perplexity refuses an id outside the vocabulary in
a scored-only slot (the assert it used to reach); a metadata key over 65,535 bytes is a
format error.
"""
import argparse
import os
import re
import resource
import signal
import stat
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
import make_hostile_models as hm  # noqa: E402

from harness import Checks, clean_env  # noqa: E402

CHECKS = Checks()
check = CHECKS.check
TIMEOUT = 60  # a command that waits on a FIFO would exceed this
SANITIZER_MARKS = ("Sanitizer", "runtime error:", "assertion failed")


def run(binary, args, env=None, preexec=None, timeout=TIMEOUT):
    try:
        p = subprocess.run([binary] + args, env=clean_env(env), capture_output=True, timeout=timeout,
                           preexec_fn=preexec)
    except subprocess.TimeoutExpired:
        return None, "", f"TIMEOUT after {timeout} s (blocked?)"
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def clean_failure(rc, err, needles=()):
    """Exit 1, one line, the needles, no sanitizer report."""
    lines = err.strip().splitlines()
    return (rc == 1 and len(lines) == 1 and all(n in err for n in needles)
            and not any(s in err for s in SANITIZER_MARKS))


def temps(directory):
    return [n for n in os.listdir(directory) if ".tmp-" in n]


def fsize_limit(nbytes):
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return limit


def is_gguf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"


# ---- writers ---------------------------------------------------------------------------------

def test_synth_writer(binary, work):
    d = os.path.join(work, "synth")
    os.makedirs(d, exist_ok=True)
    target = os.path.join(d, "model.gguf")

    # a full disk: the write fails, the existing file is untouched, nothing is left
    with open(target, "wb") as f:
        f.write(b"precious")
    rc, out, err = run(binary, ["synth", "tiny-llama", "-o", target], preexec=fsize_limit(64 << 10))
    check(clean_failure(rc, err, ["File too large", "is unchanged"]), f"synth on a full disk: {rc} {err!r}")
    check(open(target, "rb").read() == b"precious", "a failed synth leaves the existing file as it was")
    check(temps(d) == [], f"no temporary file after a failed write: {temps(d)}")
    new = os.path.join(d, "new.gguf")
    rc, out, err = run(binary, ["synth", "tiny-llama", "-o", new], preexec=fsize_limit(64 << 10))
    check(rc == 1 and not os.path.exists(new) and temps(d) == [], f"full disk, new file: {rc} {err!r}")

    # SIGINT / SIGTERM mid-write: exit 130, the target unchanged, no temporary file
    for sig in (signal.SIGINT, signal.SIGTERM):
        p = subprocess.Popen([binary, "synth", "qwen3-1.7b", "--type", "f16", "-o", target], env=clean_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        started, deadline = False, time.time() + TIMEOUT
        while time.time() < deadline and p.poll() is None:
            t = [os.path.join(d, n) for n in temps(d)]
            if t and os.path.getsize(t[0]) >= 8 << 20:  # well into the tensor data
                started = True
                break
            time.sleep(0.01)
        p.send_signal(sig)
        try:
            _, err_b = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err_b = p.communicate()
        err = err_b.decode("utf-8", "replace")
        check(started and p.returncode == 130 and "interrupted" in err and "is unchanged" in err,
              f"synth {sig.name} mid-write (started {started}): exit {p.returncode}, {err.strip()[-300:]!r}")
        check(open(target, "rb").read() == b"precious", f"{sig.name} mid-write leaves the file as it was")
        check(temps(d) == [], f"no temporary file after {sig.name}: {temps(d)}")

    # a symbolic link to a regular file: that file is replaced (mode kept), the link stays
    real = os.path.join(d, "real.gguf")
    with open(real, "wb") as f:
        f.write(b"old")
    os.chmod(real, 0o640)
    link = os.path.join(d, "link.gguf")
    os.symlink("real.gguf", link)
    rc, out, err = run(binary, ["synth", "tiny-qwen3", "-o", link])
    check(rc == 0 and os.path.islink(link) and is_gguf(real) and stat.S_IMODE(os.stat(real).st_mode) == 0o640,
          f"synth through a link: {rc} {err!r}, link {os.path.islink(link)}, mode {oct(os.stat(real).st_mode)}")
    check(temps(d) == [], "no temporary file after a write through a link")
    rc, out, err = run(binary, ["run", "-m", link, "--backend", "cpu", "--tokens", "1,2", "-n", "2"])
    check(rc == 0, f"the model written through the link runs: {rc} {err!r}")

    # targets that are not regular files: refused before anything is created
    dangling = os.path.join(d, "dangling.gguf")
    os.symlink("nowhere/missing.gguf", dangling)
    fifo = os.path.join(d, "fifo")
    os.mkfifo(fifo)
    devlink = os.path.join(d, "devnull.gguf")
    os.symlink("/dev/null", devlink)
    subdir = os.path.join(d, "dir.gguf")
    os.mkdir(subdir)
    for path, needle in ((dangling, "does not exist"), (fifo, "a FIFO"), (devlink, "a character device"),
                         (subdir, "a directory"), ("/dev/null", "a character device")):
        rc, out, err = run(binary, ["synth", "tiny-llama", "-o", path])
        check(clean_failure(rc, err, [needle, "not a regular file" if path != dangling else "dangling"]),
              f"synth -o {path}: {rc} {err!r}")
    check(stat.S_ISFIFO(os.stat(fifo).st_mode) and os.path.isdir(subdir) and os.listdir(subdir) == [],
          "the FIFO and the directory are untouched")
    check(stat.S_ISCHR(os.stat("/dev/null").st_mode), "/dev/null is still a device")
    check(not os.path.exists(os.path.join(d, "nowhere")), "nothing created through the dangling link")
    check(temps(d) == [], f"no temporary files: {temps(d)}")
    rc, out, err = run(binary, ["synth", "tiny-llama", "-o", os.path.join(d, "missing-dir", "x.gguf")])
    check(clean_failure(rc, err, ["cannot create a file in", "missing-dir"]), f"synth into a missing dir: {err!r}")


def test_logits_writer(binary, work, model):
    d = os.path.join(work, "logits")
    os.makedirs(d, exist_ok=True)
    base = ["run", "-m", model, "--backend", "cpu", "--tokens", "1,2,3", "-n", "2"]
    out_path = os.path.join(d, "logits.npy")
    rc, out, err = run(binary, base + ["--logits-out", out_path])
    a = np.load(out_path) if rc == 0 else None
    check(rc == 0 and a is not None and a.shape == (5, hm.N_VOCAB) and temps(d) == [],
          f"--logits-out writes a (5, vocab) array: {rc} {err!r}")
    # a full disk: the earlier file stays as it was. The limit leaves room for the OpenMP
    # runtime's own small files (LLVM's libomp registers itself in a 1 KiB file) but not for
    # the (23, 32) array of 3 + 20 positions.
    before = open(out_path, "rb").read()
    rc, out, err = run(binary, ["run", "-m", model, "--backend", "cpu", "--tokens", "1,2,3", "-n", "20",
                                "--logits-out", out_path], preexec=fsize_limit(2048))
    check(clean_failure(rc, err, ["File too large"]) and open(out_path, "rb").read() == before and temps(d) == [],
          f"--logits-out on a full disk: {rc} {err!r}")
    fifo = os.path.join(d, "fifo.npy")
    os.mkfifo(fifo)
    t0 = time.time()
    for path, needle in ((fifo, "a FIFO"), (d, "a directory"), ("/dev/null", "a character device"),
                         (os.path.join(d, "missing-dir", "x.npy"), "missing-dir: No such file")):
        rc, out, err = run(binary, base + ["--logits-out", path])
        check(clean_failure(rc, err, [needle]), f"--logits-out {path}: {rc} {err!r}")
    check(time.time() - t0 < TIMEOUT, "refused at once")
    check(stat.S_ISFIFO(os.stat(fifo).st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode), "targets untouched")
    real = os.path.join(d, "real.npy")
    with open(real, "wb") as f:
        f.write(b"x")
    link = os.path.join(d, "link.npy")
    os.symlink(real, link)
    rc, out, err = run(binary, base + ["--logits-out", link])
    check(rc == 0 and os.path.islink(link) and np.load(real).shape == (5, hm.N_VOCAB), f"through a link: {err!r}")


# ---- inputs ----------------------------------------------------------------------------------

def test_fifo_inputs(binary, work, model):
    d = os.path.join(work, "fifos")
    os.makedirs(d, exist_ok=True)
    fifo = os.path.join(d, "input")
    os.mkfifo(fifo)
    cases = [
        (["run", "-m", fifo, "--tokens", "1"], "GGUF file"),
        (["inspect", fifo], "GGUF file"),
        (["tokenize", "-m", fifo, "-p", "x"], "GGUF file"),
        (["perplexity", "-m", fifo, "-f", model], "GGUF file"),
        (["bench", "-m", fifo, "-p", "4", "-n", "0", "-r", "1"], "a FIFO"),
        (["run", "-m", model, "-f", fifo], "prompt file"),
        (["perplexity", "-m", model, "-f", fifo], "text file"),
        (["perplexity", "-m", model, "--tokens", fifo], "token file"),
        (["tokenize", "-m", model, "-f", fifo], "text file"),
    ]
    for args, needle in cases:
        rc, out, err = run(binary, args + (["--backend", "cpu"] if args[0] in ("run", "perplexity") else []))
        check(rc is not None and rc == 1 and "a FIFO, not a regular file" in err and needle in err
              and len(err.strip().splitlines()) == 1, f"{' '.join(args[:3])} on a FIFO: {rc} {err!r}")

    # the calibration cache: a FIFO or a directory where the cache file lives is reported
    # and worked around, never waited on. inspect names the cache path without measuring;
    # STRIDE_CALIBRATE=0 keeps the load from measuring too (the check is the reading).
    cache_home = os.path.join(d, "cache")
    env = {"XDG_CACHE_HOME": cache_home, "STRIDE_ROW_ALIAS": "128", "STRIDE_ROW_PAD": "64"}
    rc, out, err = run(binary, ["inspect", model, "--layout", "--backend", "cpu"], env=env)
    m = re.search(r"no calibration for .* yet \((/[^)]*\.txt)\)", err)
    check(rc == 0 and m is not None, f"inspect names the cache path: {rc} {err.strip()[-300:]!r}")
    if m:
        path = m.group(1)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        for kind in ("FIFO", "directory"):
            if os.path.isdir(path):
                os.rmdir(path)
            elif os.path.lexists(path):
                os.remove(path)
            if kind == "FIFO":
                os.mkfifo(path)
            else:
                os.mkdir(path)
            rc, out, err = run(binary, ["run", "-m", model, "--backend", "cpu", "--pad-weights", "auto",
                                        "--tokens", "1,2", "-n", "2"], env={**env, "STRIDE_CALIBRATE": "0"})
            check(rc == 0 and f"it is a {kind}, not a regular file" in err and "unreadable (read error)" not in err,
                  f"run: the cache path is a {kind}: {rc} {err.strip()[-400:]!r}")
            rc, out, err = run(binary, ["inspect", model, "--layout", "--backend", "cpu"], env=env)
            check(rc == 0 and f"it is a {kind}, not a regular file" in err, f"inspect: the cache is a {kind}: {err!r}")


def test_run_limits(binary, work, model):
    base = ["run", "-m", model, "--backend", "cpu"]
    long_prompt = ",".join(["5"] * (hm.CTX + 16))
    rc, out, err = run(binary, base + ["--tokens", long_prompt, "-n", "1"])
    check(clean_failure(rc, err, [f"prompt is {hm.CTX + 16} tokens", f"{hm.CTX}-token context", "-c"]),
          f"a prompt past the trained context: {rc} {err!r}")
    rc, out, err = run(binary, base + ["--tokens", long_prompt, "-n", "1", "-c", str(hm.CTX + 32)])
    check(rc == 0 and "warning" in err and f"exceeds the {hm.CTX}" in err, f"-c past the trained context: {err!r}")
    rc, out, err = run(binary, base + ["--tokens", "1,2", "-n", "1000"])
    check(rc == 0 and "context full" in err, f"generation stops at the trained context by default: {err!r}")
    rc, out, err = run(binary, base + ["--tokens", "1,2", "--decode-tokens", "3,32,4"])
    check(clean_failure(rc, err, ["--decode-tokens", "token id 32 (entry 2)", "outside the vocabulary"]),
          f"--decode-tokens out of range: {rc} {err!r}")
    rc, out, err = run(binary, base + ["--tokens", "-1,2"])
    check(rc == 2 and "--tokens" in err, f"a negative id: {rc} {err!r}")
    rc, out, err = run(binary, base + ["--tokens", ""])
    check(rc == 2 and "--tokens" in err and not any(s in err for s in SANITIZER_MARKS),
          f"--tokens '' is a usage error and leaks nothing: {rc} {err!r}")


def test_long_pieces(binary, work):
    """Two tokens of 3,000-byte pieces, and an output head that always picks one of them:
    the generated text holds the whole piece. Pieces "A", "AA", ... "A" * 2048 let the
    tokenizer merge a text of 2,048 A into one token, which tokenize must show whole."""
    m = hm.base_model("llama")
    tokens = m.kv["tokenizer.ggml.tokens"][1][1]
    tokens[3] = "\u2581"
    for k in range(12):
        tokens[4 + k] = "A" * (1 << k)
    tokens[30] = "\u2581" + "A" * 3000
    tokens[31] = "\u2581" + "B" * 3000
    rng = np.random.default_rng(3)
    w = np.zeros((hm.N_VOCAB, hm.N_EMBD), np.float32)  # [vocab][embd]: row i is token i's
    w[30] = rng.standard_normal(hm.N_EMBD)
    w[31] = -w[30]
    m.add("output.weight", hm.T_F32, [hm.N_EMBD, hm.N_VOCAB], w.reshape(-1))
    path = os.path.join(work, "long_pieces.gguf")
    m.write(path)
    rc, out, err = run(binary, ["run", "-m", path, "--backend", "cpu", "-p", "A", "-n", "3", "--temp", "0"])
    check(rc == 0 and ("A" * 3000 in out or "B" * 3000 in out), f"a 3,000-byte piece printed whole: {rc} "
          f"{len(out)} bytes out, {err.strip()[-200:]!r}")
    rc, out, err = run(binary, ["tokenize", "-m", path, "-p", "A" * 2048])
    check(rc == 0 and f"'{'A' * 2048}'" in out, f"tokenize shows a 2,048-byte piece whole: {rc} {out[:200]!r}")


def test_escaping(binary, work):
    m = hm.base_model("qwen3")
    m.set("tokenizer.ggml.model", hm.STR, "\x1b]0;owned\x07")
    m.add("blk.0.attn_norm.weight\x00evil", hm.T_F32, [4], np.ones(4))
    path = os.path.join(work, "escape.gguf")
    m.write(path)
    rc, out, err = run(binary, ["tokenize", "-m", path, "-p", "x"])
    check(clean_failure(rc, err, ["\\x1b]0;owned\\x07"]) and "\x1b" not in err, f"tokenizer family escaped: {err!r}")
    rc, out, err = run(binary, ["inspect", path])
    check(rc == 0 and "blk.0.attn_norm.weight\\x00evil" in out and "\x1b" not in out and "\x07" not in out,
          f"inspect shows the whole name, escaped: {rc}")
    rc, out, err = run(binary, ["inspect", path, "--json"])
    check(rc == 0 and "attn_norm.weight\\u0000evil" in out, "inspect --json escapes a NUL in a name")


def test_perplexity_ids(binary, work, model):
    ids = os.path.join(work, "scored.ids")
    with open(ids, "w") as f:
        f.write("1,2,3,99999,4")  # the file: 99999 is the target of the chunk's last logits
    rc, out, err = run(binary, ["perplexity", "-m", model, "--backend", "cpu", "-c", "4", "--tokens", ids])
    check(rc == 1 and "token id 99999 at position 3" in err and not any(s in err for s in SANITIZER_MARKS),
          f"perplexity with an id outside the vocabulary in a scored slot: {rc} {err.strip()!r}")


def test_long_key(binary, work):
    m = hm.base_model("llama")
    m.set("k" * 70000, hm.U32, 1)
    path = os.path.join(work, "long_key.gguf")
    m.write(path)
    rc, out, err = run(binary, ["inspect", path])
    check(clean_failure(rc, err, ["key of 70000 bytes", "at most 65535"]), f"a 70,000-byte key: {rc} {err[:300]!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    for n in os.listdir(a.work):  # the FIFOs and links of a previous run
        p = os.path.join(a.work, n)
        subprocess.run(["rm", "-rf", p], check=True)
    model = os.path.join(a.work, "base_qwen3.gguf")
    hm.base_model("qwen3").write(model)
    test_synth_writer(a.stride, a.work)
    test_logits_writer(a.stride, a.work, model)
    test_fifo_inputs(a.stride, a.work, model)
    test_run_limits(a.stride, a.work, model)
    test_long_pieces(a.stride, a.work)
    test_escaping(a.stride, a.work)
    test_perplexity_ids(a.stride, a.work, model)
    test_long_key(a.stride, a.work)
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
