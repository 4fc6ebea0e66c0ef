#!/usr/bin/env python3
"""Hostile model files: each well-formed GGUF whose model is wrong (tests/data/
make_hostile_models.py, written here at test time) must be refused cleanly by the command
that loads it: exit status 1..127, exactly one line on stderr, `stride <cmd>: ...`,
naming the problem (every expected needle), no sanitizer report, no assert, no raw escape
byte from the file. `stride inspect --layout` must still show them (it reads the file, it
does not run the model), escaping what they hold.

The valid base model of every architecture, and variants the forward pass runs (quantized
products, tied output, separate q/k/v in phi3, no tokenizer, ...), must load and run: a
refusal must come from the one defect of its case. ctest runs this on the release build
and, labelled `unit`, on the ASan + UBSan build (.ci/run).
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
import make_hostile_models as hm  # noqa: E402

from harness import Checks, clean_env  # noqa: E402

CHECKS = Checks()
check = CHECKS.check

MIN_CASES = 60
SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", "runtime error:",
                   "assertion failed", "Sanitizer", "Aborted", "core dumped")
LOAD_FLAGS = ["--backend", "cpu", "--pad-weights", "off"]


def stride(binary, args, timeout=120):
    p = subprocess.run([binary] + args, env=clean_env(), capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"), p.stderr


def command(binary, cmd, model, ids_file):
    if cmd == "run":
        return ["run", "-m", model, *LOAD_FLAGS, "--tokens", "1,2,3", "-n", "2"]
    if cmd == "perplexity":
        return ["perplexity", "-m", model, *LOAD_FLAGS, "-c", "8", "--tokens", ids_file]
    if cmd == "bench":
        return ["bench", "-m", model, "--backend", "cpu", "--pad-weights", "off", "-p", "4", "-n", "2", "-r", "1"]
    raise ValueError(cmd)


def clean(stderr_text, raw):
    return not any(s in stderr_text for s in SANITIZER_MARKS) and b"\x1b" not in raw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    manifest = hm.write_corpus(os.path.join(a.work, "corpus"))
    ids_file = os.path.join(a.work, "ids.txt")
    with open(ids_file, "w") as f:
        f.write(",".join(str(3 + i % 29) for i in range(24)))

    # every base model runs, with every command the cases use
    for b in manifest["base"]:
        for cmd in ("run", "perplexity"):
            rc, out, err, raw = stride(a.stride, command(a.stride, cmd, b["path"], ids_file))
            check(rc == 0 and clean(err, raw), f"base {b['name']} {cmd}: exit {rc}, {err.strip()[-300:]!r}")
    rc, out, err, raw = stride(a.stride, command(a.stride, "bench", manifest["base"][1]["path"], ids_file))
    check(rc == 0 and clean(err, raw), f"base qwen3 bench: exit {rc}, {err.strip()[-300:]!r}")
    for v in manifest["valid"]:
        rc, out, err, raw = stride(a.stride, command(a.stride, "run", v["path"], ids_file))
        check(rc == 0 and clean(err, raw), f"valid variant {v['name']}: exit {rc}, {err.strip()[-300:]!r}")

    cases = manifest["cases"]
    check(len(cases) >= MIN_CASES, f"{len(cases)} hostile cases, want at least {MIN_CASES}")
    check({c["arch"] for c in cases} >= set(hm.ARCHS), f"cases cover {sorted({c['arch'] for c in cases})}")
    outcomes = {}
    for c in cases:
        rc, out, err, raw = stride(a.stride, command(a.stride, c["cmd"], c["path"], ids_file))
        lines = err.strip().splitlines()
        missing = [n for n in c["needles"] if n not in err]
        ok = check(1 <= rc <= 127 and len(lines) == 1 and lines[0].startswith(f"stride {c['cmd']}: ")
                   and not missing and clean(err, raw),
                   f"{c['name']} ({c['cmd']}): exit {rc}, stderr {err.strip()!r}, missing {missing}")
        outcomes[c["name"]] = "refused" if ok else "WRONG"
        # inspect shows any well-formed file whatever its model says (the planner refuses only
        # a general.architecture that is not a string, cleanly)
        rc, out, err, raw = stride(a.stride, ["inspect", c["path"], "--layout", "--device-kind", "cpu"])
        check((rc == 0 or (rc == 1 and len(err.strip().splitlines()) == 1)) and clean(err, raw) and "\x1b" not in out,
              f"inspect {c['name']}: exit {rc}, {err.strip()[-300:]!r}")
    n_ok = sum(1 for v in outcomes.values() if v == "refused")
    print(f"hostile models: {n_ok} of {len(cases)} refused cleanly; {len(manifest['valid'])} valid variants and "
          f"{len(manifest['base'])} base models checked")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
