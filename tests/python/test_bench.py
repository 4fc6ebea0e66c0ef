"""stride bench: the report formats (markdown, CSV, JSON), their consistency with each other
and with the repetitions they carry, the on/off speedup table, and the usage errors, on
the tiny fixture models (CPU backend).

STRIDE_ROW_ALIAS=64 STRIDE_ROW_PAD=32 make `on` really pad the fixtures (their rows are
64..256 bytes, so no row is a multiple of the default 2048-byte alias). Speeds on a tiny
model say nothing; what is checked is the bookkeeping: every (model, policy, test) has r
repetitions with positive rates, rate = tokens / seconds, means and the speedups are those
recomputed from the repetitions.
"""
import argparse
import csv
import io
import json
import os
import re
import statistics
import subprocess
import sys

from harness import Checks, clean_env

CHECKS = Checks()
check = CHECKS.check

PAD_ENV = {"STRIDE_ROW_ALIAS": "64", "STRIDE_ROW_PAD": "32"}
REPS = 2


def bench(stride, *args, env=PAD_ENV):
    return subprocess.run([stride, "bench", "--backend", "cpu", *args], env=clean_env(env), capture_output=True,
                          encoding="utf-8", errors="replace")


def mean_sd(x):
    return statistics.fmean(x), (statistics.stdev(x) if len(x) > 1 else 0.0)


def close(a, b, rel=1e-4, abs_=1e-3):
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def md_tables(text):
    """The markdown tables of a report: lists of rows, each a list of cells."""
    tables, cur = [], None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cur is None:
                cur = []
                tables.append(cur)
            if not all(re.fullmatch(r"-+:?", c) for c in cells):
                cur.append(cells)
        else:
            cur = None
    return tables


def check_json(d, models, tests):
    """Structure of the JSON report and the arithmetic behind every number in it."""
    check(d.get("stride_version") and "commit" in d, f"version and commit keys: {list(d)}")
    dev = d.get("device", {})
    check(dev.get("name") and dev.get("backend") == "cpu" and "driver_version" in dev and "runtime_version" in dev,
          f"device info: {dev}")
    p = d.get("params", {})
    check(p.get("models") == models and p.get("pad_weights") == ["on", "off"] and p.get("tests") == tests
          and p.get("repetitions") == REPS and p.get("n_ubatch") == 512 and p.get("kv_type") == "f16",
          f"parameters: {p}")
    res = {(r["model_file"], r["pad_weights"], r["test"]): r for r in d.get("results", [])}
    check(len(res) == len(models) * 2 * len(tests) == len(d.get("results", [])),
          f"one result per (model, policy, test): {sorted(res)}")
    for m in models:
        for pol in ("on", "off"):
            for t in tests:
                r = res.get((m, pol, t))
                if not check(r is not None, f"result for {m} {pol} {t}"):
                    continue
                ok = len(r["seconds"]) == REPS and len(r["t_s"]) == REPS and all(v > 0 for v in r["t_s"])
                ok = ok and all(close(ts, r["n_tokens"] / s) for ts, s in zip(r["t_s"], r["seconds"]))
                mean, sd = mean_sd(r["t_s"])
                check(ok and close(r["avg_ts"], mean) and close(r["stddev_ts"], sd, abs_=1e-2),
                      f"{m} {pol} {t}: {REPS} positive repetitions, t/s = n / seconds, mean and sd: {r}")
                check(r["pad_enabled"] == (pol == "on") and (r["n_padded"] > 0) == (pol == "on"),
                      f"{m} {pol}: pad_enabled {r['pad_enabled']}, n_padded {r['n_padded']}")
    speed = {(s["model_file"], s["test"]): s for s in d.get("speedup", [])}
    check(len(speed) == len(models) * len(tests), f"one speedup per (model, test): {sorted(speed)}")
    for (m, t), s in speed.items():
        on, off = res.get((m, "on", t)), res.get((m, "off", t))
        if not on or not off:
            continue
        pct = [(a / b - 1.0) * 100.0 for a, b in zip(on["t_s"], off["t_s"])]
        mean, sd = mean_sd(pct)
        check(all(close(x, y, abs_=0.01) for x, y in zip(pct, s["per_rep_pct"]))
              and close(s["on_vs_off_pct"], mean, abs_=0.01) and close(s["sd_pct"], sd, abs_=0.01),
              f"speedup {m} {t}: {s} vs recomputed {mean:.4f} ± {sd:.4f} from {pct}")
    return res, speed


def test_reports(stride, fixtures):
    models = [os.path.join(fixtures, "llama-f16.gguf"), os.path.join(fixtures, "qwen3-f16.gguf")]
    tests = ["pp16", "tg8", "pp16 @ d8", "tg8 @ d8"]
    common = ["-m", models[0], "-m", models[1], "-p", "16", "-n", "8", "-d", "0,8", "-r", str(REPS),
              "--pad-weights", "on,off"]

    # JSON alone
    p = bench(stride, *common, "-o", "json")
    if check(p.returncode == 0, f"bench -o json: exit {p.returncode}, {p.stderr.strip()}"):
        try:
            check_json(json.loads(p.stdout), models, tests)
        except (ValueError, KeyError, TypeError) as e:
            check(False, f"JSON report: {e}: {p.stdout[:400]!r}")

    # markdown and JSON of the same run (-oe): the tables are the JSON's numbers
    p = bench(stride, *common, "-o", "md", "-oe", "json")
    if not check(p.returncode == 0, f"bench -o md -oe json: exit {p.returncode}, {p.stderr[-400:]}"):
        return
    try:
        d = json.loads(p.stderr[p.stderr.index("{"):])
    except ValueError as e:
        check(False, f"-oe json: {e}: {p.stderr[:400]!r}")
        return
    res, speed = check_json(d, models, tests)
    tables = md_tables(p.stdout)
    if not check(len(tables) == 2, f"markdown: a results table and a speedup table: {p.stdout!r}"):
        return
    rows, sp = tables
    check(rows[0] == ["model", "size", "params", "backend", "pad", "test", "t/s"], f"results header {rows[0]}")
    check(len(rows) == 1 + len(models) * 2 * len(tests), f"one row per (model, policy, test): {len(rows) - 1}")
    for row in rows[1:]:
        path = next((m for m in models if os.path.basename(m) == row[0]), None)
        r = res.get((path, row[4], row[5]))
        mt = re.fullmatch(r"([\d.]+) ± ([\d.]+)", row[6])
        check(r is not None and mt is not None and abs(float(mt.group(1)) - r["avg_ts"]) <= 0.006
              and abs(float(mt.group(2)) - r["stddev_ts"]) <= 0.006 and row[3].startswith("cpu"),
              f"markdown row {row} matches the JSON {r and (r['avg_ts'], r['stddev_ts'])}")
    check(sp[0] == ["test"] + [os.path.basename(m) for m in models], f"speedup header {sp[0]}")
    check([row[0] for row in sp[1:]] == tests, f"speedup rows {[row[0] for row in sp[1:]]}")
    for row in sp[1:]:
        for m, cell in zip(models, row[1:]):
            mt = re.fullmatch(r"([+-][\d.]+)% ± ([\d.]+)", cell)
            s = res.get((m, "on", row[0])) and speed.get((m, row[0]))
            if not check(mt is not None and s is not None, f"speedup cell {m} {row[0]}: {cell!r}"):
                continue
            on, off = res[(m, "on", row[0])], res[(m, "off", row[0])]
            pct = [(a / b - 1.0) * 100.0 for a, b in zip(on["t_s"], off["t_s"])]
            mean, sd = mean_sd(pct)
            check(abs(float(mt.group(1)) - mean) <= 0.051 and abs(float(mt.group(2)) - sd) <= 0.051,
                  f"speedup cell {m} {row[0]} {cell} = recomputed {mean:+.3f}% ± {sd:.3f}")
    check("device: " in p.stdout and d["device"]["name"] in p.stdout, "markdown names the device")

    # CSV: one row per repetition, every column filled
    p = bench(stride, "-m", models[0], "-p", "16", "-n", "8", "-r", str(REPS), "--pad-weights", "on,off", "-o", "csv")
    if check(p.returncode == 0, f"bench -o csv: exit {p.returncode}, {p.stderr.strip()}"):
        rows = list(csv.DictReader(io.StringIO(p.stdout)))
        want = {"stride_version", "commit", "device", "backend", "driver_version", "model_file", "pad_weights",
                "pad_enabled", "n_padded", "test", "n_tokens", "depth", "n_ubatch", "rep", "seconds", "t_s"}
        check(rows and want <= set(rows[0]), f"CSV columns: {rows and list(rows[0])}")
        keys = sorted((r["pad_weights"], r["test"], r["rep"]) for r in rows)
        check(keys == sorted((pol, t, str(k)) for pol in ("on", "off") for t in ("pp16", "tg8") for k in range(REPS)),
              f"CSV: every (policy, test) with {REPS} repetitions: {keys}")
        check(all(float(r["t_s"]) > 0 and close(float(r["t_s"]), int(r["n_tokens"]) / float(r["seconds"]))
                  and r["model_file"] == models[0] for r in rows), "CSV rates positive and = n / seconds")

    # without both on and off there is no speedup table; auto names what it resolved to
    p = bench(stride, "-m", models[0], "-p", "8", "-n", "0", "-r", "1", "--pad-weights", "auto")
    tables = md_tables(p.stdout) if p.returncode == 0 else []
    check(len(tables) == 1 and len(tables[0]) == 2 and re.fullmatch(r"auto \((on|off)\)", tables[0][1][4]),
          f"--pad-weights auto: one table, pad 'auto (on|off)': {p.stdout!r} {p.stderr.strip()}")


def test_errors(stride, fixtures, work):
    model = os.path.join(fixtures, "llama-f16.gguf")
    usage = [
        ([], "no model given"),
        (["-m", model, "-p", "12x"], "-p: '12x' is not"),
        (["-m", model, "-n", "-1"], "-n: '-1' is not"),
        (["-m", model, "-d", "1,,2"], "-d: '1,,2' is not"),
        (["-m", model, "-r", "0"], "-r: '0' is not"),
        (["-m", model, "-ub", "x"], "-ub: 'x' is not"),
        (["-m", model, "--pad-weights", "on,maybe"], 'invalid value "maybe"'),
        (["-m", model, "--pad-weights", "on,off,on"], "'on' is listed twice"),
        (["-m", model, "-o", "xml"], "-o: 'xml' is not"),
        (["-m", model, "-p", "0", "-n", "0"], "nothing to measure"),
        (["-m", model, "-p", "16", "-n", "0", "-d", "120"], "pp16 @ d120 needs a context of 136 tokens"),
        (["-m", model, "-p", "0", "-n", "129"], "allows 128"),
        (["-m", model, "--kv-type", "q8"], "--kv-type"),
        (["-m", model, "--bogus"], "unknown argument '--bogus'"),
        (["-m", model, "-p"], "-p needs a value"),
    ]
    for args, needle in usage:
        p = bench(stride, *args)
        check(p.returncode == 2 and needle in p.stderr and p.stdout == "",
              f"bench {' '.join(args)}: exit {p.returncode} (want 2), stderr {p.stderr.strip()!r} (want {needle!r})")
    missing = os.path.join(work, "missing.gguf")
    p = bench(stride, "-m", missing, "-p", "8", "-n", "0")
    check(p.returncode == 1 and "cannot open" in p.stderr, f"missing model: exit {p.returncode}, {p.stderr.strip()!r}")
    p = bench(stride, "-m", model, "-p", "8", "-n", "0", env={"STRIDE_ROW_ALIAS": "100"})
    check(p.returncode == 2 and "STRIDE_ROW_ALIAS" in p.stderr, f"bad STRIDE_ROW_ALIAS: {p.returncode} {p.stderr!r}")
    p = subprocess.run([stride, "bench", "--help"], capture_output=True, encoding="utf-8")
    check(p.returncode == 0 and "--pad-weights LIST" in p.stdout and "interleave" in p.stdout, "bench --help")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(__file__), "..", "fixtures"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    test_reports(a.stride, a.fixtures)
    test_errors(a.stride, a.fixtures, a.work)
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
