"""stride run: sampling flags, text mode, stopping, timings and errors, on the tiny
fixture models (tests/fixtures).

Exact expectations where the fixtures allow them: every greedy step of the fixtures has a
top-1/top-2 logit margin >= 0.05 (tests/fixtures/README.md), so filters that keep only
the top token (top-k 1, top-p 0.01, min-p 0.99 at any temperature: e^-0.05 = 0.95 < 0.99)
must reproduce the greedy continuation whatever the seed. The repetition penalty is
checked step by step against the logits stride writes (--logits-out): the penalised
argmax over the history of the last N tokens must be the token stride chose.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np

from harness import Checks, clean_env

CHECKS = Checks()
check = CHECKS.check



def run(stride, model, *args):
    return subprocess.run([stride, "run", "-m", model, "--backend", "cpu", *args], env=clean_env(),
                          capture_output=True, encoding="utf-8", errors="replace")


def ids_of(p):
    return [int(t) for t in p.stdout.split()]


def test_id_mode(stride, fixtures, work):
    ref = json.load(open(os.path.join(fixtures, "llama-f32.ref.json")))
    model = os.path.join(fixtures, "llama-f32.gguf")
    prompt = ",".join(map(str, ref["prompt"]))
    greedy = ref["greedy"]
    n = str(len(greedy))

    p = run(stride, model, "--tokens", prompt, "-n", n, "--temp", "0")
    check(p.returncode == 0 and ids_of(p) == greedy, f"--temp 0 is greedy: {p.stdout!r} {p.stderr.strip()}")
    for extra in (["--temp", "1.5", "--top-k", "1"], ["--temp", "1.5", "--top-k", "0", "--top-p", "0.01"],
                  ["--temp", "5", "--top-k", "0", "--top-p", "1", "--min-p", "0.99"]):
        for seed in ("1", "2"):
            p = run(stride, model, "--tokens", prompt, "-n", n, "--seed", seed, *extra)
            check(p.returncode == 0 and ids_of(p) == greedy,
                  f"{' '.join(extra)} --seed {seed} keeps only the top token: {ids_of(p)} vs {greedy}")

    # seeded sampling: reproducible, and the seed matters
    def sample(seed, *extra):
        p = run(stride, model, "--tokens", prompt, "-n", "32", "--temp", "1.2", "--top-k", "0", "--top-p", "1",
                "--min-p", "0", "--seed", seed, *extra)
        check(p.returncode == 0, f"sampling --seed {seed}: {p.stderr.strip()}")
        return ids_of(p)

    a, b, c = sample("11"), sample("11"), sample("12")
    check(len(a) == 32 and a == b, "the same seed gives the same tokens")
    check(a != c, "different seeds give different tokens")
    check(a != greedy + a[16:], "temperature 1.2 without filters is not greedy")
    p = run(stride, model, "--tokens", prompt, "-n", "4", "--temp", "0.8")
    check(p.returncode == 0 and re.search(r"seed \d+", p.stderr) is not None,
          f"an unseeded sampling run prints its seed: {p.stderr!r}")

    # repetition penalty, checked step by step against the logits
    for penalty, last_n in (("1.7", "6"), ("0.6", "64"), ("3", "-1")):
        out = os.path.join(work, f"penalty-{penalty}.npy")
        p = run(stride, model, "--tokens", prompt, "-n", "24", "--temp", "0", "--repeat-penalty", penalty,
                "--repeat-last-n", last_n, "--logits-out", out, "-c", "40")
        if not check(p.returncode == 0, f"--repeat-penalty {penalty}: {p.stderr.strip()}"):
            continue
        gen = ids_of(p)
        logits = np.load(out)
        history = list(ref["prompt"])
        window = 40 if last_n == "-1" else int(last_n)  # -1: the whole context (-c 40)
        ok = len(gen) == 24 and logits.shape[0] == len(history) + 24
        for i, tok in enumerate(gen if ok else []):
            row = logits[len(ref["prompt"]) - 1 + i].astype(np.float32).copy()
            for t in set(history[-window:]):
                row[t] = row[t] * np.float32(penalty) if row[t] <= 0 else row[t] / np.float32(penalty)
            ok &= int(np.argmax(row)) == tok
            history.append(tok)
        check(ok, f"--repeat-penalty {penalty} --repeat-last-n {last_n}: every step is the penalised argmax")
        if penalty == "1.7":
            check(gen != greedy + gen[16:], "the penalty changes the greedy continuation")

    # -n -1 generates until the context is full; -c smaller than the request stops early
    p = run(stride, model, "--tokens", prompt, "-n", "-1", "-c", "20")
    check(p.returncode == 0 and len(ids_of(p)) == 20 - 12 + 1 and "context full" in p.stderr,
          f"-n -1 -c 20: {len(ids_of(p))} tokens, {p.stderr.strip()!r}")
    p = run(stride, model, "--tokens", prompt, "-n", "30", "-c", "16")
    check(p.returncode == 0 and ids_of(p) == greedy[:5] and "context full" in p.stderr,
          f"-n 30 -c 16: {ids_of(p)} {p.stderr.strip()!r}")
    # timings
    p = run(stride, model, "--tokens", prompt, "-n", "8")
    check(re.search(r"prompt .* 12 tokens .* tok/s", p.stderr) and re.search(r"generation .* 8 tokens .* tok/s", p.stderr)
          and re.search(r"load .* s", p.stderr), f"timings on stderr: {p.stderr!r}")


def vocab(model):
    import gguf
    r = gguf.GGUFReader(model)
    fld = r.fields["tokenizer.ggml.tokens"]
    return [bytes(fld.parts[i]).decode("utf-8") for i in fld.data]


def detok(pieces, ids):
    out = b""
    for i in ids:
        s = pieces[i]
        m = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", s)
        if m:
            out += bytes([int(m.group(1), 16)])
        elif s.startswith("<") and s.endswith(">") and i < 3:
            continue
        else:
            out += s.replace("\u2581", " ").encode("utf-8")
    return out.decode("utf-8", errors="replace")


def test_text_mode(stride, fixtures, work):
    model = os.path.join(fixtures, "llama-f32.gguf")
    pieces = vocab(model)
    out = os.path.join(work, "text.npy")
    p = run(stride, model, "-p", "the cat sat on", "-n", "12", "--temp", "0", "--ignore-eos", "--logits-out", out)
    if not check(p.returncode == 0, f"text prompt: {p.stderr.strip()}"):
        return
    m = re.search(r"prompt .*?(\d+) tokens", p.stderr)
    if not check(m is not None, f"prompt token count in {p.stderr!r}"):
        return
    n_prompt = int(m.group(1))
    logits = np.load(out)
    check(logits.shape[0] == n_prompt + 12, f"text mode keeps {logits.shape[0]} rows of logits")
    gen = [int(np.argmax(logits[n_prompt - 1 + i])) for i in range(12)]
    text = p.stdout[:-1] if p.stdout.endswith("\n") else p.stdout
    want = detok(pieces, gen)
    check(text.strip() == want.strip(), f"streamed text {text!r} is the detokenized greedy ids {gen} ({want!r})")
    # --echo puts the prompt first
    p2 = run(stride, model, "-p", "the cat sat on", "-n", "12", "--temp", "0", "--ignore-eos", "--echo")
    check(p2.returncode == 0 and p2.stdout == "the cat sat on" + p.stdout, f"--echo: {p2.stdout!r}")
    # -f reads the prompt from a file: same output as -p
    pf = os.path.join(work, "prompt.txt")
    with open(pf, "w") as f:
        f.write("the cat sat on")
    p3 = run(stride, model, "-f", pf, "-n", "12", "--temp", "0", "--ignore-eos")
    check(p3.returncode == 0 and p3.stdout == p.stdout, f"-f gives the -p output: {p3.stdout!r}")

    # Stopping at end of generation (EOS, id 2): find a seed whose sampled continuation hits
    # it; the run must stop there (not printing it) and --ignore-eos must go on past it.
    found = False
    for seed in range(1, 60):
        args = ["-p", "a", "-n", "120", "--temp", "3", "--top-k", "0", "--top-p", "1", "--min-p", "0",
                "--seed", str(seed)]
        p = run(stride, model, *args)
        if p.returncode != 0:
            check(False, f"sampling seed {seed}: {p.stderr.strip()}")
            break
        if "end of generation" in p.stderr:
            found = True
            q = run(stride, model, *args, "--ignore-eos")
            m1 = re.search(r"generation .*?(\d+) tokens", p.stderr)
            m2 = re.search(r"generation .*?(\d+) tokens", q.stderr)
            check(m1 and m2 and int(m1.group(1)) < 120 and int(m2.group(1)) == 120,
                  f"seed {seed}: stops at EOS ({m1 and m1.group(1)} tokens), --ignore-eos runs to 120 "
                  f"({m2 and m2.group(1)})")
            check(q.stdout.startswith(p.stdout.rstrip("\n")), f"seed {seed}: the stopped text is a prefix")
            break
    check(found, "some seed in 1..59 samples EOS within 120 tokens at temperature 3")


def test_errors(stride, fixtures, work):
    model = os.path.join(fixtures, "llama-f32.gguf")
    usage = [
        (["-p", "x", "--temp", "-0.5"], "temperature -0.5 is invalid"),
        (["-p", "x", "--temp", "nan"], "--temp"),
        (["-p", "x", "--top-p", "0"], "top-p 0 is invalid"),
        (["-p", "x", "--top-p", "1.2"], "top-p 1.2 is invalid"),
        (["-p", "x", "--min-p", "1"], "min-p 1 is invalid"),
        (["-p", "x", "--min-p", "-0.1"], "min-p -0.1 is invalid"),
        (["-p", "x", "--top-k", "-1"], "top-k -1 is invalid"),
        (["-p", "x", "--repeat-penalty", "0"], "repeat penalty 0 is invalid"),
        (["-p", "x", "--repeat-penalty", "-1"], "repeat penalty -1 is invalid"),
        (["-p", "x", "--repeat-last-n", "-2"], "repeat-last-n -2 is invalid"),
        (["-p", "x", "--seed", "-3"], "--seed"),
        (["-p", "x", "--top-k", "abc"], "--top-k"),
        (["-p", "x", "-n", "-2"], "-n"),
        (["-p", "x", "--tokens", "1,2"], "give one prompt"),
        (["-p", "x", "-f", "x.txt"], "give one prompt"),
        ([], "no prompt given"),
        (["--tokens", "1,x"], "--tokens"),
        (["-p", "x", "--bogus"], "unknown argument"),
    ]
    for args, needle in usage:
        p = run(stride, model, *args)
        check(p.returncode == 2 and needle in p.stderr,
              f"run {' '.join(args)}: exit {p.returncode} (want 2), stderr {p.stderr.strip()!r} (want {needle!r})")
    failing = [
        (["-m", os.path.join(work, "missing.gguf"), "-p", "x"], "missing.gguf"),
        (["-m", os.path.join(fixtures, "README.md"), "-p", "x"], "not a GGUF file"),
        (["-m", work, "-p", "x"], work),
        (["-p", "the quick brown fox jumps over the lazy dog", "-c", "8"], "context is 8: raise -c"),
        (["--tokens", "1,2,3,4,5,6,7,8,9,10", "-c", "8"], "prompt is 10 tokens, context is 8: raise -c"),
        (["--tokens", "1,2,999"], "outside the vocabulary"),
        (["-f", os.path.join(work, "missing.txt")], "cannot open"),
    ]
    for args, needle in failing:
        p = subprocess.run([stride, "run", "--backend", "cpu"] + (args if args[0] == "-m" else ["-m", model] + args),
                           env=clean_env(), capture_output=True, encoding="utf-8", errors="replace")
        check(p.returncode == 1 and needle in p.stderr,
              f"run {' '.join(args)}: exit {p.returncode} (want 1), stderr {p.stderr.strip()!r} (want {needle!r})")
    p = run(stride, model, "-p", "the quick brown fox jumps over the lazy dog", "-c", "8")
    check(re.search(r"prompt is \d+ tokens, context is 8: raise -c", p.stderr) is not None, f"{p.stderr!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(__file__), "..", "fixtures"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    test_id_mode(a.stride, a.fixtures, a.work)
    test_text_mode(a.stride, a.fixtures, a.work)
    test_errors(a.stride, a.fixtures, a.work)
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
