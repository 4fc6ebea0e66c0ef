"""stride run --parallel N: N copies of the prompt through the batched engine, seeds seed,
seed + 1, ...; each sequence must print exactly what a plain `stride run` (one sequence on
a session) prints with that seed, in id mode and in text mode; the usage errors.
"""
import argparse
import json
import os
import subprocess
import sys

from harness import Checks, clean_env

CHECKS = Checks()
check = CHECKS.check


def run(stride, model, *args):
    return subprocess.run([stride, "run", "-m", model, "--backend", "cpu", "-t", "1", *args], env=clean_env(),
                          capture_output=True, encoding="utf-8", errors="replace")


def test_ids(stride, fixtures):
    ref = json.load(open(os.path.join(fixtures, "llama-f32.ref.json")))
    model = os.path.join(fixtures, "llama-f32.gguf")
    prompt = ",".join(map(str, ref["prompt"]))
    greedy = ref["greedy"]
    p = run(stride, model, "--tokens", prompt, "-n", str(len(greedy)), "--temp", "0", "--parallel", "4")
    lines = p.stdout.splitlines()
    check(p.returncode == 0 and len(lines) == 4, f"--parallel 4 prints 4 sequences: {p.stdout!r} {p.stderr}")
    check(all([int(t) for t in line.split()] == greedy for line in lines), f"greedy, every sequence: {lines}")
    check("engine" in p.stderr and "4 sequences" in p.stderr, f"the engine's sizes are reported: {p.stderr!r}")

    sampling = ["--temp", "1.2", "--top-k", "0", "--top-p", "1", "--min-p", "0", "--repeat-penalty", "1.3"]
    p = run(stride, model, "--tokens", prompt, "-n", "24", "--seed", "11", "--parallel", "3", *sampling)
    lines = p.stdout.splitlines()
    check(p.returncode == 0 and len(lines) == 3, f"--parallel 3 sampled: {p.stderr}")
    for i, line in enumerate(lines):
        one = run(stride, model, "--tokens", prompt, "-n", "24", "--seed", str(11 + i), *sampling)
        check(one.returncode == 0 and line.split() == one.stdout.split(),
              f"sequence {i} is the plain run with seed {11 + i}: {line} vs {one.stdout.strip()}")
    check(len(set(lines)) == 3, "different seeds, different sequences")

    # a full context ends every sequence: 20 - 12 + 1 tokens (the last one sampled, not fed)
    p = run(stride, model, "--tokens", prompt, "-n", "-1", "--temp", "0", "-c", "20", "--parallel", "2")
    lines = p.stdout.splitlines()
    check(p.returncode == 0 and [len(l.split()) for l in lines] == [9, 9], f"-c 20 -n -1: {p.stdout!r} {p.stderr}")
    check(all(l.split() == [str(t) for t in greedy[:9]] for l in lines), "and they are the greedy tokens")


def test_text(stride, fixtures):
    model = os.path.join(fixtures, "qwen3-f32.gguf")
    p = run(stride, model, "-p", "Hello there", "-n", "12", "--seed", "5", "--parallel", "2", "--echo")
    check(p.returncode == 0, f"text mode: {p.stderr}")
    blocks = p.stdout.split("--- sequence ")[1:]
    check(len(blocks) == 2, f"two sequences, each under its header: {p.stdout!r}")
    for i, block in enumerate(blocks):
        header, _, text = block.partition("---\n")
        check(header.startswith(f"{i + 1}/2 (seed {5 + i}):"), f"header {header!r}")
        one = run(stride, model, "-p", "Hello there", "-n", "12", "--seed", str(5 + i), "--echo")
        check(one.returncode == 0 and text == one.stdout, f"sequence {i}: {text!r} vs {one.stdout!r}")


def test_errors(stride, fixtures):
    model = os.path.join(fixtures, "llama-f32.gguf")
    for args, what in ((["--parallel", "0"], "not a number of sequences"),
                       (["--parallel", "x"], "not a number of sequences"),
                       (["--parallel", "2", "--logits-out", "x.npy"], "--logits-out"),
                       (["--parallel", "2", "--decode-tokens", "1"], "--decode-tokens"),
                       (["--parallel", "2", "-n", "0"], "generates nothing")):
        p = run(stride, model, "--tokens", "1,2,3", *args)
        check(p.returncode == 2 and what in p.stderr, f"{args}: rc {p.returncode}, {p.stderr!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
    test_ids(a.stride, fixtures)
    test_text(a.stride, fixtures)
    test_errors(a.stride, fixtures)
    sys.exit(CHECKS.exit_code())


if __name__ == "__main__":
    main()
