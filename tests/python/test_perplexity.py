"""stride perplexity against an independent computation.

For tiny fixture models (tests/fixtures), a deterministic stream of token ids is written
to a file and scored with `stride perplexity --tokens FILE -c 32`. The same numbers are
then rebuilt here: every chunk of 32 ids (its first id replaced by BOS, since the fixture
vocabulary adds one) is run through `stride run --tokens CHUNK -n 0 --logits-out`, and
the negative log-likelihood of the second half is computed with NumPy in float64 from
those logits. The perplexity (and every running value, and the uncertainty) must agree
to 1e-6 relative: both sides see float32 logits of the same model; what differs is only
how the chunk is cut into forward passes (stride perplexity evaluates the first half
without logits) and the double-precision log-softmax. Error cases: a missing file, a
text shorter than one chunk, a bad -c, a malformed ids file.
"""
import argparse
import os
import re
import subprocess
import sys

import numpy as np

from harness import Checks, clean_env

CHECKS = Checks()
check = CHECKS.check

N_CTX = 32



def stride(args, **kw):
    return subprocess.run(args, env=clean_env(), capture_output=True, text=True, **kw)


def bos_of(model):
    import gguf
    r = gguf.GGUFReader(model)
    f = r.fields

    def scalar(key):
        fld = f.get(key)
        return None if fld is None else fld.parts[fld.data[0]][0]

    add = scalar("tokenizer.ggml.add_bos_token")
    bos = scalar("tokenizer.ggml.bos_token_id")
    return int(bos) if add and bos is not None else -1


def reference(stride_bin, model, ids, work, name):
    """Running perplexities, final PPL and its uncertainty, from `stride run` logits."""
    bos = bos_of(model)
    nll = []
    running = []
    for c in range(len(ids) // N_CTX):
        chunk = list(ids[c * N_CTX:(c + 1) * N_CTX])
        if bos >= 0:
            chunk[0] = bos
        out = os.path.join(work, f"{name}-chunk{c}.npy")
        p = stride([stride_bin, "run", "-m", model, "--backend", "cpu", "--kv-type", "f32", "-c", str(N_CTX),
                    "--tokens", ",".join(map(str, chunk)), "-n", "0", "--logits-out", out])
        if not check(p.returncode == 0, f"{name}: stride run for chunk {c}: {p.stderr.strip()}"):
            return None
        logits = np.load(out).astype(np.float64)
        check(logits.shape[0] == N_CTX, f"{name}: chunk {c} logits rows {logits.shape}")
        for i in range(N_CTX // 2, N_CTX - 1):
            row = logits[i]
            m = row.max()
            lse = m + np.log(np.exp(row - m).sum())
            nll.append(lse - row[chunk[i + 1]])
        running.append(float(np.exp(np.mean(nll))))
    nll = np.array(nll)
    ppl = float(np.exp(nll.mean()))
    err = ppl * float(np.sqrt((np.mean(nll ** 2) - nll.mean() ** 2) / (len(nll) - 1)))
    return running, ppl, err, len(nll)


def parse(stdout):
    running = [float(v) for v in re.findall(r"\[\d+\]([0-9.]+),", stdout)]
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", stdout)
    return running, (float(m.group(1)), float(m.group(2))) if m else None


def rel(a, b):
    return abs(a - b) / abs(b)


def test_model(stride_bin, fixtures, work, name, n_vocab=384):
    model = os.path.join(fixtures, f"{name}.gguf")
    rng = np.random.default_rng(7)
    ids = rng.integers(3, n_vocab, size=3 * N_CTX + 13)  # 3 chunks and a tail that is dropped
    ids_path = os.path.join(work, f"{name}.ids")
    with open(ids_path, "w") as f:  # mixed separators on purpose
        f.write(",".join(map(str, ids[:40])) + "\n" + " ".join(map(str, ids[40:])) + "\n")
    want = reference(stride_bin, model, ids, work, name)
    if want is None:
        return
    w_running, w_ppl, w_err, w_n = want
    for b in ("512", "5"):
        p = stride([stride_bin, "perplexity", "-m", model, "--backend", "cpu", "--kv-type", "f32", "-c", str(N_CTX),
                    "-b", b, "--tokens", ids_path])
        if not check(p.returncode == 0, f"{name}: stride perplexity -b {b}: exit {p.returncode}: {p.stderr.strip()}"):
            continue
        running, final = parse(p.stdout)
        if not check(final is not None, f"{name}: no 'Final estimate' line in {p.stdout!r}"):
            continue
        ppl, err = final
        print(f"{name:12s} -b {b:>3s}: stride PPL {ppl:.4f} +/- {err:.5f}, NumPy {w_ppl:.4f} +/- {w_err:.5f} "
              f"(rel diff {rel(ppl, w_ppl):.1e}, {w_n} tokens)", flush=True)
        # printed with 4 and 5 decimals: the rounding adds at most 5e-5 / 5e-6 absolute
        check(abs(ppl - w_ppl) <= 1e-6 * w_ppl + 5e-5, f"{name} -b {b}: PPL {ppl} vs {w_ppl}")
        check(abs(err - w_err) <= 1e-5 * w_err + 5e-6, f"{name} -b {b}: uncertainty {err} vs {w_err}")
        check(len(running) == 3, f"{name} -b {b}: {len(running)} running values, expected 3 chunks")
        for i, (a, w) in enumerate(zip(running, w_running)):
            check(abs(a - w) <= 1e-6 * w + 5e-5, f"{name} -b {b}: running value {i + 1}: {a} vs {w}")
        check(running and running[-1] == ppl, f"{name} -b {b}: the last running value is the final one")
        check(re.search(rf"3 chunks of {N_CTX} tokens, scoring the last {N_CTX - 1 - N_CTX // 2}", p.stderr)
              is not None, f"{name}: stderr describes the chunks: {p.stderr!r}")
    # --chunks limits the evaluation; the value is the running value of chunk 2
    p = stride([stride_bin, "perplexity", "-m", model, "--backend", "cpu", "--kv-type", "f32", "-c", str(N_CTX),
                "--chunks", "2", "--tokens", ids_path])
    if check(p.returncode == 0, f"{name}: --chunks 2: {p.stderr.strip()}"):
        running, final = parse(p.stdout)
        check(len(running) == 2 and final is not None and abs(final[0] - w_running[1]) <= 1e-6 * w_running[1] + 5e-5,
              f"{name}: --chunks 2 gives {final}, expected {w_running[1]}")


def test_text(stride_bin, fixtures, work):
    """-f TEXT is the same as --tokens with the ids `stride tokenize` gives for TEXT."""
    model = os.path.join(fixtures, "llama-f32.gguf")
    text = os.path.join(work, "text.txt")
    with open(text, "w") as f:
        f.write("In the beginning the quick brown fox jumped over the lazy dog, twice; then it sat down. " * 6)
    t = stride([stride_bin, "tokenize", "-m", model, "-f", text, "--ids-only"])
    if not check(t.returncode == 0, f"stride tokenize: {t.stderr.strip()}"):
        return
    ids = [int(x) for x in re.findall(r"\d+", t.stdout)]
    ids_path = os.path.join(work, "text.ids")
    with open(ids_path, "w") as f:
        f.write(" ".join(map(str, ids)))
    common = [stride_bin, "perplexity", "-m", model, "--backend", "cpu", "-c", str(N_CTX)]
    a = stride(common + ["-f", text])
    b = stride(common + ["--tokens", ids_path])
    check(a.returncode == 0 and b.returncode == 0 and a.stdout == b.stdout and "Final estimate" in a.stdout,
          f"-f and --tokens agree: {a.stdout!r} {a.stderr.strip()!r} vs {b.stdout!r}")
    check(f"{len(ids)} tokens" in a.stderr, f"the token count is reported ({len(ids)}): {a.stderr!r}")


def test_padding(stride_bin, fixtures, work):
    """Padding is a pure layout change: perplexity identical with it on and off (alias forced
    small enough that the tiny weights are padded)."""
    model = os.path.join(fixtures, "gemma3-f16.gguf")
    ids_path = os.path.join(work, "pad.ids")
    rng = np.random.default_rng(3)
    with open(ids_path, "w") as f:
        f.write(" ".join(map(str, rng.integers(3, 384, size=2 * N_CTX))))
    env = clean_env({"STRIDE_ROW_ALIAS": "64", "STRIDE_ROW_PAD": "32"})
    outs = {}
    for pad in ("on", "off"):
        p = subprocess.run([stride_bin, "perplexity", "-m", model, "--backend", "cpu", "-c", str(N_CTX), "--tokens",
                            ids_path, "--pad-weights", pad], env=env, capture_output=True, text=True)
        check(p.returncode == 0, f"--pad-weights {pad}: {p.stderr.strip()}")
        outs[pad] = p
    check(outs["on"].stdout == outs["off"].stdout and "Final estimate" in outs["on"].stdout,
          f"perplexity identical with padding on and off: {outs['on'].stdout!r} vs {outs['off'].stdout!r}")
    check("padded layout" in outs["on"].stderr and "packed layout" in outs["off"].stderr,
          f"the padded run really pads: {outs['on'].stderr!r}")


def test_errors(stride_bin, fixtures, work):
    model = os.path.join(fixtures, "llama-f32.gguf")
    ids_path = os.path.join(work, "short.ids")
    with open(ids_path, "w") as f:
        f.write(" ".join(str(3 + i) for i in range(20)))
    cases = [
        (["-f", os.path.join(work, "does-not-exist.txt")], 1, "cannot open"),
        (["--tokens", os.path.join(work, "does-not-exist.ids")], 1, "cannot open"),
        (["--tokens", ids_path, "-c", "32"], 1, "the text is 20 tokens, shorter than one 32-token chunk"),
        (["--tokens", ids_path, "-c", "0"], 2, "-c"),
        (["--tokens", ids_path, "-c", "2"], 2, "at least 3"),
        (["--tokens", ids_path, "-c", "x"], 2, "-c"),
        (["--tokens", ids_path, "-b", "0"], 2, "-b"),
        (["--tokens", ids_path, "-f", ids_path], 2, "not both"),
        ([], 2, "no text given"),
        (["--tokens", os.path.join(fixtures, "README.md")], 1, "is not a token id"),
    ]
    for args, code, needle in cases:
        p = stride([stride_bin, "perplexity", "-m", model, "--backend", "cpu"] + args)
        check(p.returncode == code and needle in p.stderr,
              f"perplexity {' '.join(args)}: exit {p.returncode} (want {code}), stderr {p.stderr.strip()!r} "
              f"(want {needle!r})")
    p = stride([stride_bin, "perplexity", "-m", os.path.join(work, "missing.gguf"), "--tokens", ids_path])
    check(p.returncode == 1 and "missing.gguf" in p.stderr, f"missing model: {p.returncode} {p.stderr.strip()!r}")
    big = os.path.join(work, "big.ids")
    with open(big, "w") as f:
        f.write(" ".join(["5"] * 40 + ["384"] + ["5"] * 30))  # 384 is outside the 384-token vocabulary
    p = stride([stride_bin, "perplexity", "-m", model, "--backend", "cpu", "-c", "32", "--tokens", big])
    check(p.returncode == 1 and "outside the vocabulary" in p.stderr, f"bad id: {p.returncode} {p.stderr.strip()!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(__file__), "..", "fixtures"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    for name in ("llama-f32", "gemma3-f32", "qwen3-f16"):
        test_model(a.stride, a.fixtures, a.work, name)
    test_text(a.stride, a.fixtures, a.work)
    test_padding(a.stride, a.fixtures, a.work)
    test_errors(a.stride, a.fixtures, a.work)
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
