"""scripts/batched-summary.py over real `stride bench` reports (CPU, a tiny model) and a
load report: the figures it prints are the reports' (each mean, each gap below one
sequence, the server's share of S_TG and the load's ceiling), and it fails on a load that
lost a request or on a missing report."""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

from harness import Checks, clean_env

CHECKS = Checks()
check = CHECKS.check
HERE = os.path.dirname(os.path.abspath(__file__))
SUMMARY = os.path.join(HERE, "..", "..", "scripts", "batched-summary.py")


def bench(stride, model, out, *args):
    cmd = [stride, "bench", "--backend", "cpu", "-t", "2", "-m", model, "-o", "json", *args]
    p = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True)
    if not check(p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr[-500:]}"):
        return None
    with open(out, "w") as f:
        f.write(p.stdout)
    return json.loads(p.stdout)


def summary(d):
    return subprocess.run([sys.executable, SUMMARY, d], capture_output=True, text=True)


def row(text, label):
    """The cells of the markdown row that starts with label."""
    for line in text.splitlines():
        if line.startswith("| " + label):
            return [c.strip() for c in line.strip().strip("|").split("|")]
    return None


def num(cell):
    return float(re.sub(r"[,%]", "", cell))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    d = os.path.join(a.work, "batched")
    os.makedirs(d)
    model = os.path.join(a.work, "tiny.gguf")
    subprocess.run([a.stride, "synth", "tiny-llama", "-o", model], check=True, capture_output=True)

    npp = ["-npp", "16", "-ntg", "8", "-r", "1"]
    reports = [
        bench(a.stride, model, os.path.join(d, "np.json"), "-np", "1,8", *npp, "--logits", "top"),
        bench(a.stride, model, os.path.join(d, "qwen3-8b-np.json"), "-np", "1,64", *npp),
        bench(a.stride, model, os.path.join(d, "np64-serve.json"), "-np", "64", *npp),
    ]
    for r in (1, 2):
        reports += [
            bench(a.stride, model, os.path.join(d, f"one-d128-{r}.json"), "-p", "0", "-n", "8", "-d", "16", "-r", "1"),
            bench(a.stride, model, os.path.join(d, f"b1-all-{r}.json"), "-np", "1", *npp, "--logits", "all"),
            bench(a.stride, model, os.path.join(d, f"b1-top-{r}.json"), "-np", "1", *npp, "--logits", "top"),
        ]
    if not check(all(reports), "every bench report written"):
        return CHECKS.exit_code()
    load = {"requests": 1024, "completed": 1024, "errors": 0, "generated_tok_per_s": 1234.5,
            "ttft_ms": {"p50": 7.5, "p90": 13.3, "p99": 55.6}, "itl_ms": {"p50": 2.0, "p90": 3.4, "p99": 4.3}}
    with open(os.path.join(d, "load.json"), "w") as f:
        json.dump(load, f)

    p = summary(d)
    check(p.returncode == 0, f"summary exit {p.returncode}: {p.stderr}")
    out = p.stdout

    def res(name, b=None):
        with open(os.path.join(d, name)) as f:
            rs = json.load(f)["results"]
        return [r for r in rs if b is None or r.get("b") == b]

    # every B of the sweep, its S_TG as the report has it
    for r in res("np.json"):
        cells = row(out, f"{r['b']} | {r['avg_s_pp']:,.0f}")
        check(cells is not None and num(cells[2]) == round(r["avg_s_tg"]), f"sweep row B={r['b']}: {cells}")
    # the B=1 means and their gaps below one sequence
    one = statistics.mean(r["avg_ts"] for k in (1, 2) for r in res(f"one-d128-{k}.json"))
    b1_all = statistics.mean(r["avg_s_tg"] for k in (1, 2) for r in res(f"b1-all-{k}.json", 1))
    b1_top = statistics.mean([r["avg_s_tg"] for k in (1, 2) for r in res(f"b1-top-{k}.json", 1)] +
                             [res("np.json", 1)[0]["avg_s_tg"]])
    for label, value, runs in (("B=1, `--logits all`", b1_all, 2), ("B=1, `--logits top`", b1_top, 3)):
        cells = row(out, label)
        ok = cells is not None and abs(num(cells[1]) - value) <= 0.05 and int(cells[2]) == runs
        ok = ok and abs(num(cells[3]) - 100 * (one - value) / one) <= 0.005
        check(ok, f"{label}: {cells} (mean {value:.2f} of {runs}, one sequence {one:.2f})")
    cells = row(out, "one sequence")
    check(cells is not None and abs(num(cells[1]) - one) <= 0.05, f"one sequence: {cells} ({one:.2f})")
    # the server against the bench's B=64 and the load's ceiling
    b64 = res("np64-serve.json", 64)[0]
    cells = row(out, "of it")
    check(cells is not None and abs(num(cells[1]) - 100 * 1234.5 / b64["avg_s_tg"]) <= 0.05, f"of it: {cells}")
    ceiling = 1 / (1 / b64["avg_s_tg"] + 1 / b64["avg_s_pp"]) / b64["avg_s_tg"]
    cells = row(out, "the load's ceiling")
    check(cells is not None and abs(num(cells[1]) - 100 * ceiling) <= 0.05, f"ceiling: {cells} ({ceiling:.4f})")
    check(row(out, "TTFT p50") is not None and "7.5 / 13.3 / 55.6" in out, "TTFT row")

    # a load that lost requests fails; a missing report fails with its name
    load["completed"], load["errors"] = 1000, 24
    with open(os.path.join(d, "load.json"), "w") as f:
        json.dump(load, f)
    p = summary(d)
    check(p.returncode == 1, f"a load with errors: exit {p.returncode}")
    os.remove(os.path.join(d, "qwen3-8b-np.json"))
    p = summary(d)
    check(p.returncode == 1 and "qwen3-8b-np.json" in p.stderr, f"a missing report: exit {p.returncode}, {p.stderr}")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
