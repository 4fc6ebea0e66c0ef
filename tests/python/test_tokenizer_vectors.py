#!/usr/bin/env python3
"""`stride tokenize` reproduces the reference token ids of tests/tokenizer/*.vectors.json
(made by tests/tokenizer/make_vectors.py with transformers as the reference), and decoding
gives the text back.

For every vocabulary and every string:
  ids        `stride tokenize --parse-special` (BOS as the vocabulary says, special-token
             text parsed) equals the reference;
  ids_plain  `stride tokenize --no-bos` (nothing added, special-token text left as text)
             equals the reference;
  round trip the streaming decoder's text of ids_plain equals the string, byte for byte
             (no vocabulary here normalises text: SentencePiece's space prefix is removed
             again by the decoder, byte fallback and the byte-level alphabet are lossless).

The small vocabularies are committed, so their checks always run. Gemma 3's needs the
real model (models/gemma-3-270m-q4_k_m.gguf, from scripts/fetch-gemma3-270m.sh), which CI
does not have: without it that vocabulary is skipped with a message. A run that checks
nothing fails.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VECTORS = ["bpe-llama3", "bpe-qwen2", "spm-small", "gemma3"]
GEMMA = os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tokenize(stride, vocab, text_file, *flags):
    r = subprocess.run([stride, "tokenize", "-m", vocab, "-f", text_file, "--json", *flags],
                       capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("stride tokenize failed (%d): %s" % (r.returncode, r.stderr.decode(errors="replace")))
    return json.loads(r.stdout.decode("utf-8"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    text_file = os.path.join(args.work, "text.txt")
    checked = failed = 0
    for name in VECTORS:
        with open(os.path.join(ROOT, "tests", "tokenizer", name + ".vectors.json")) as f:
            vec = json.load(f)
        vocab = GEMMA if name == "gemma3" else os.path.join(ROOT, vec["vocab"])
        if not os.path.exists(vocab):
            print("SKIP %s: %s is missing (run scripts/fetch-gemma3-270m.sh to fetch it)" % (name, vocab))
            continue
        if sha256(vocab) != vec["vocab_sha256"]:
            print("FAIL %s: %s is not the file the vectors were made from (sha256 differs)" % (name, vocab))
            failed += 1
            continue
        bad = 0
        for case in vec["cases"]:
            s = case["text"]
            with open(text_file, "wb") as f:
                f.write(s.encode("utf-8"))
            got = tokenize(args.stride, vocab, text_file, "--parse-special")
            plain = tokenize(args.stride, vocab, text_file, "--no-bos")
            for what, ok, detail in (
                    ("ids", got["ids"] == case["ids"], (got["ids"], case["ids"])),
                    ("ids_plain", plain["ids"] == case["ids_plain"], (plain["ids"], case["ids_plain"])),
                    ("round trip", plain["text"] == s, (plain["text"], s))):
                checked += 1
                if not ok:
                    bad += 1
                    if bad <= 10:
                        print("FAIL %s %s for %r:\n  stride:   %.300r\n  expected: %.300r" % (name, what, s[:60], *detail))
        failed += bad
        print("%s %s: %d strings" % ("FAIL" if bad else "ok  ", name, len(vec["cases"])))
    print("%d checks, %d failed" % (checked, failed))
    if checked == 0:
        print("FAIL: nothing was checked")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
