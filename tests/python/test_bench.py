"""stride bench: the report formats (markdown, CSV, JSON), their consistency with each other
and with the repetitions they carry, the swept settings (--pad-weights, -b, -ub) and their
interleaving, the comparison tables (--compare: on vs off, auto vs the better of on and
off), the time to first token (--ttft), the SVG chart (--chart), and the usage errors, on
the tiny fixture models (CPU backend).

STRIDE_ROW_ALIAS=64 STRIDE_ROW_PAD=32 make `on` really pad the fixtures (their rows are
64..256 bytes, so no row is a multiple of the default 2048-byte alias). Speeds on a tiny
model say nothing; what is checked is the bookkeeping: every (model, setting, test) has r
repetitions with positive times, rate = tokens / seconds, the repetitions of the settings
ran interleaved after one warm-up each, and every mean, sd, percentage, table cell and
chart bar is the one recomputed here from the raw per-run samples of the JSON report.
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
import xml.etree.ElementTree as ET

from harness import Checks, clean_env

CHECKS = Checks()
check = CHECKS.check

PAD_ENV = {"STRIDE_ROW_ALIAS": "64", "STRIDE_ROW_PAD": "32"}
REPS = 2
SVG = "{http://www.w3.org/2000/svg}"


def bench(stride, *args, env=PAD_ENV):
    # one thread: OpenMP barriers on a loaded 2-core CI machine turn 0.5 ms runs into seconds
    return subprocess.run([stride, "bench", "--backend", "cpu", "-t", "1", *args], env=clean_env(env),
                          capture_output=True, encoding="utf-8", errors="replace")


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


def json_of(text):
    """The JSON report in a stream (-oe json writes it after any progress output)."""
    return json.loads(text[text.index("{"):])


def results_by_key(d):
    """Results keyed by (model, policy, n_batch, n_ubatch, test)."""
    return {(r["model_file"], r["pad_weights"], r["n_batch"], r["n_ubatch"], r["test"]): r for r in d["results"]}


def pct_pairs(a, b):
    """Per paired repetition, how much faster a is than b in percent: (time_b / time_a - 1) * 100."""
    return [(tb / ta - 1.0) * 100.0 for ta, tb in zip(a["seconds"], b["seconds"])]


def expected_compare(d):
    """The comparison cells recomputed from the raw samples: {(comparison, model, row): (mean, sd, b-policy)}."""
    p = d["params"]
    res = results_by_key(d)
    swept = len(p["n_batch"]) * len(p["n_ubatch"]) > 1
    out = {}
    for m in p["models"]:
        for t in p["tests"]:
            for b in p["n_batch"]:
                for ub in p["n_ubatch"]:
                    row = f"{t} b{b} ub{ub}" if swept else t
                    get = lambda pol: res.get((m, pol, b, ub, t))  # noqa: E731
                    if get("on") and get("off"):
                        out[("on_vs_off", m, row)] = (*mean_sd(pct_pairs(get("on"), get("off"))), "off")
                    if get("on") and get("off") and get("auto"):
                        best = "on" if statistics.fmean(get("on")["seconds"]) <= statistics.fmean(
                            get("off")["seconds"]) else "off"
                        out[("auto_vs_best", m, row)] = (*mean_sd(pct_pairs(get("auto"), get(best))), best)
    return out


def check_json(d, models, tests, policies, batches=(2048,), ubatches=(512,), skipped=()):
    """Structure of the JSON report and the arithmetic behind every number in it. skipped:
    the (model, test) pairs that do not fit the model's context, and so have no results."""
    check(d.get("stride_version") and "commit" in d and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", d.get("date", ""))
          and d.get("command", "").startswith("stride bench "), f"version, commit, date, command: {list(d)}")
    dev = d.get("device", {})
    check(dev.get("name") and dev.get("backend") == "cpu" and "driver_version" in dev and "runtime_version" in dev,
          f"device info: {dev}")
    p = d.get("params", {})
    check(p.get("models") == models and p.get("pad_weights") == policies and p.get("tests") == tests
          and p.get("repetitions") == REPS and p.get("n_batch") == list(batches) and p.get("n_ubatch") == list(ubatches)
          and p.get("kv_type") == "f16" and p.get("interleaved") is True and p.get("warmup_runs") == 1
          and "clock" in p, f"parameters: {p}")
    res = results_by_key(d)
    n_settings = len(policies) * len(batches) * len(ubatches)
    n_runs = sum((m, t) not in skipped for m in models for t in tests)
    check(len(res) == n_runs * n_settings == len(d.get("results", [])),
          f"one result per (model, setting, test): {len(res)} of {len(d.get('results', []))}")
    for m in models:
        for pol in policies:
            for b in batches:
                for ub in ubatches:
                    for t in tests:
                        r = res.get((m, pol, b, ub, t))
                        if (m, t) in skipped:
                            check(r is None, f"no result for {m} {t}: it does not fit the context")
                            continue
                        if not check(r is not None, f"result for {m} {pol} b{b} ub{ub} {t}"):
                            continue
                        ok = len(r["seconds"]) == REPS and len(r["t_s"]) == REPS and all(v > 0 for v in r["t_s"])
                        ok = ok and len(r["wall_seconds"]) == REPS and all(v > 0 for v in r["wall_seconds"])
                        ok = ok and all(close(ts, r["n_tokens"] / s) for ts, s in zip(r["t_s"], r["seconds"]))
                        mean, sd = mean_sd(r["t_s"])
                        check(ok and close(r["avg_ts"], mean) and close(r["stddev_ts"], sd, abs_=1e-2)
                              and r["arch"] in ("llama", "qwen3"),
                              f"{m} {pol} {t}: {REPS} positive repetitions, t/s = n / seconds, mean and sd: {r}")
                        if pol in ("on", "off"):
                            check(r["pad_enabled"] == (pol == "on") and (r["n_padded"] > 0) == (pol == "on"),
                                  f"{m} {pol}: pad_enabled {r['pad_enabled']}, n_padded {r['n_padded']}")
                        if r["kind"] == "ttft":
                            mean, sd = mean_sd([s * 1e3 for s in r["seconds"]])
                            check(r["seconds"] == r["wall_seconds"] and all(close(ms, s * 1e3) for ms, s in
                                                                            zip(r["ms"], r["seconds"]))
                                  and close(r["avg_ms"], mean) and close(r["stddev_ms"], sd),
                                  f"{m} {pol} {t}: TTFT ms = host wall seconds * 1000, mean and sd: {r}")
    for m in models:
        check_interleaving(d, m, [t for t in tests if (m, t) not in skipped], n_settings)
    want = expected_compare(d)
    got = {(c["comparison"], c["model_file"], c["row"]): c for c in d.get("compare", [])}
    check(set(got) == set(want) and len(got) == len(d.get("compare", [])),
          f"one comparison per (comparison, model, row): {sorted(got)} vs {sorted(want)}")
    for k, (mean, sd, b) in want.items():
        c = got.get(k)
        if c is None:
            continue
        check(close(c["pct"], mean, abs_=1e-3) and close(c["sd_pct"], sd, abs_=1e-3) and c["b"] == b
              and len(c["per_rep_pct"]) == REPS, f"comparison {k}: {c} vs recomputed {mean:.4f} ± {sd:.4f} vs {b}")
    return res, want


def check_interleaving(d, m, tests, n_settings):
    """One model file: for each test in order, one untimed warm-up of every setting, then
    repetition k of every setting (in setting order) before repetition k + 1 of any."""
    runs = sorted((order, r["test"], (r["pad_weights"], r["n_batch"], r["n_ubatch"]), k)
                  for r in d["results"] if r["model_file"] == m for k, order in enumerate(r["run_order"]))
    per_test = n_settings * (REPS + 1)
    ok = len(runs) == len(tests) * n_settings * REPS
    for order, test, _, k in runs:
        it, pos = divmod(order, per_test)
        ok = ok and it < len(tests) and tests[it] == test and pos >= n_settings  # after the warm-ups
        ok = ok and (pos - n_settings) // n_settings == k  # repetition k of every setting, then k + 1
    seq = [setting for _, _, setting, _ in runs[:n_settings]]
    ok = ok and len(set(seq)) == n_settings and all(
        [setting for _, _, setting, _ in runs[i:i + n_settings]] == seq for i in range(0, len(runs), n_settings))
    check(ok, f"{os.path.basename(m)}: runs interleaved A B A B after a warm-up: {runs[:3 * n_settings]}")


CELL = re.compile(r"([+-][\d.]+)% ± ([\d.]+)(?: \(vs (on|off)\))?")


def check_compare_table(rows, want, comparison, models, row_names):
    """A markdown comparison table against the cells recomputed from the raw samples."""
    check(rows[0] == ["shape"] + [os.path.basename(m) for m in models], f"{comparison} header {rows[0]}")
    check([row[0] for row in rows[1:]] == row_names, f"{comparison} rows {[row[0] for row in rows[1:]]}")
    for row in rows[1:]:
        for m, cell in zip(models, row[1:]):
            mt = CELL.fullmatch(cell)
            w = want.get((comparison, m, row[0]))
            if not check(mt is not None and w is not None, f"{comparison} cell {m} {row[0]}: {cell!r}"):
                continue
            mean, sd, b = w
            check(abs(float(mt.group(1)) - mean) <= 0.051 and abs(float(mt.group(2)) - sd) <= 0.051
                  and (mt.group(3) is None) == (comparison == "on_vs_off")
                  and (mt.group(3) is None or mt.group(3) == b),
                  f"{comparison} cell {m} {row[0]} {cell} = recomputed {mean:+.3f}% ± {sd:.3f} vs {b}")


def test_reports(stride, fixtures):
    models = [os.path.join(fixtures, "llama-f16.gguf"), os.path.join(fixtures, "qwen3-f16.gguf")]
    tests = ["pp16", "tg8", "pp16 @ d8", "tg8 @ d8"]
    common = ["-m", models[0], "-m", models[1], "-p", "16", "-n", "8", "-d", "0,8", "-r", str(REPS),
              "--pad-weights", "on,off"]

    # markdown and JSON of the same run (-oe): the tables are the JSON's numbers
    p = bench(stride, *common, "-o", "md", "-oe", "json")
    if not check(p.returncode == 0, f"bench -o md -oe json: exit {p.returncode}, {p.stderr[-400:]}"):
        return
    try:
        d = json_of(p.stderr)
    except ValueError as e:
        check(False, f"-oe json: {e}: {p.stderr[:400]!r}")
        return
    res, want = check_json(d, models, tests, ["on", "off"])
    tables = md_tables(p.stdout)
    if not check(len(tables) == 2, f"markdown: a results table and a speedup table: {p.stdout!r}"):
        return
    rows, sp = tables
    check(rows[0] == ["model", "size", "params", "backend", "pad", "test", "t/s"], f"results header {rows[0]}")
    check(len(rows) == 1 + len(models) * 2 * len(tests), f"one row per (model, policy, test): {len(rows) - 1}")
    for row in rows[1:]:
        path = next((m for m in models if os.path.basename(m) == row[0]), None)
        r = res.get((path, row[4], 2048, 512, row[5]))
        mt = re.fullmatch(r"([\d.]+) ± ([\d.]+)", row[6])
        check(r is not None and mt is not None and abs(float(mt.group(1)) - r["avg_ts"]) <= 0.006
              and abs(float(mt.group(2)) - r["stddev_ts"]) <= 0.006 and row[3].startswith("cpu"),
              f"markdown row {row} matches the JSON {r and (r['avg_ts'], r['stddev_ts'])}")
    check_compare_table(sp, want, "on_vs_off", models, tests)
    check("device: " in p.stdout and d["device"]["name"] in p.stdout and d["date"] in p.stdout,
          "markdown names the device and the date")

    # CSV: one row per repetition, every column filled
    p = bench(stride, "-m", models[0], "-p", "16", "-n", "8", "-r", str(REPS), "--pad-weights", "on,off", "-o", "csv")
    if check(p.returncode == 0, f"bench -o csv: exit {p.returncode}, {p.stderr.strip()}"):
        rows = list(csv.DictReader(io.StringIO(p.stdout)))
        want = {"stride_version", "commit", "date", "device", "backend", "driver_version", "runtime_version",
                "model_file", "arch", "pad_weights", "pad_enabled", "n_padded", "test", "n_tokens", "depth", "n_batch",
                "n_ubatch", "rep", "seconds", "wall_seconds", "t_s", "ttft_ms"}
        check(rows and want <= set(rows[0]), f"CSV columns: {rows and list(rows[0])}")
        keys = sorted((r["pad_weights"], r["test"], r["rep"]) for r in rows)
        check(keys == sorted((pol, t, str(k)) for pol in ("on", "off") for t in ("pp16", "tg8") for k in range(REPS)),
              f"CSV: every (policy, test) with {REPS} repetitions: {keys}")
        check(all(float(r["t_s"]) > 0 and close(float(r["t_s"]), int(r["n_tokens"]) / float(r["seconds"]))
                  and r["model_file"] == models[0] and r["n_batch"] == "2048" and r["n_ubatch"] == "512"
                  for r in rows), "CSV rates positive and = n / seconds")

    # without both on and off there is no comparison; auto names what it resolved to
    p = bench(stride, "-m", models[0], "-p", "8", "-n", "0", "-r", "1", "--pad-weights", "auto")
    tables = md_tables(p.stdout) if p.returncode == 0 else []
    check(len(tables) == 1 and len(tables[0]) == 2 and re.fullmatch(r"auto \((on|off)\)", tables[0][1][4]),
          f"--pad-weights auto: one table, pad 'auto (on|off)': {p.stdout!r} {p.stderr.strip()}")


def test_batch_sweep(stride, fixtures):
    """-b and -ub as swept parameters: every (policy, -b, -ub) a setting of its own,
    interleaved, with its own rows in the tables and its own comparison cells."""
    model = os.path.join(fixtures, "llama-f16.gguf")
    batches, ubatches = [8, 16], [4, 16]
    tests = ["pp16", "tg4"]
    p = bench(stride, "-m", model, "-p", "16", "-n", "4", "-r", str(REPS), "--pad-weights", "on,off",
              "-b", "8,16", "-ub", "4,16", "-o", "md", "-oe", "json")
    if not check(p.returncode == 0, f"bench -b 8,16 -ub 4,16: exit {p.returncode}, {p.stderr[-400:]}"):
        return
    d = json_of(p.stderr)
    res, want = check_json(d, [model], tests, ["on", "off"], batches, ubatches)
    tables = md_tables(p.stdout)
    if not check(len(tables) == 2, f"-b/-ub markdown: results and comparison: {p.stdout!r}"):
        return
    rows, sp = tables
    check(rows[0] == ["model", "size", "params", "backend", "pad", "n_batch", "n_ubatch", "test", "t/s"],
          f"-b/-ub results header {rows[0]}")
    got = sorted((r[4], int(r[5]), int(r[6]), r[7]) for r in rows[1:])
    check(got == sorted((pol, b, ub, t) for pol in ("on", "off") for b in batches for ub in ubatches for t in tests),
          f"one row per (policy, -b, -ub, test): {got}")
    row_names = [f"{t} b{b} ub{ub}" for t in tests for b in batches for ub in ubatches]
    check_compare_table(sp, want, "on_vs_off", [model], row_names)


def test_compare_ttft_chart(stride, fixtures, work):
    """--compare with on, off and auto, TTFT at two depths, and the chart of the same run."""
    models = [os.path.join(fixtures, "llama-f16.gguf"), os.path.join(fixtures, "qwen3-f16.gguf")]
    tests = ["pp16", "pp32", "tg8", "ttft16 @ d0", "ttft16 @ d8"]
    svg = os.path.join(work, "bench-chart.svg")
    if os.path.exists(svg):
        os.remove(svg)
    common = ["-m", ",".join(models), "-p", "16,32", "-n", "8", "-r", str(REPS), "--pad-weights", "on,off,auto",
              "--ttft", "16", "--ttft-depth", "0,8", "--compare"]
    p = bench(stride, *common, "--chart", svg, "-o", "md", "-oe", "json")
    if not check(p.returncode == 0, f"bench --compare --ttft --chart: exit {p.returncode}, {p.stderr[-400:]}"):
        return
    d = json_of(p.stderr)
    res, want = check_json(d, models, tests, ["on", "off", "auto"])
    check(d["params"].get("compare") is True, "JSON params record --compare")

    # TTFT at each depth, for every model and policy
    for m in models:
        for pol in ("on", "off", "auto"):
            depths = sorted(r["depth"] for k, r in res.items() if k[0] == m and k[1] == pol and r["kind"] == "ttft")
            check(depths == [0, 8], f"TTFT of {os.path.basename(m)} {pol} at depths 0 and 8: {depths}")

    # markdown: the seed-form tables only (no per-setting table), then the TTFT table
    tables = md_tables(p.stdout)
    if check(len(tables) == 3, f"--compare markdown: on vs off, auto vs best, TTFT: {p.stdout!r}"):
        on_off, auto, ttft = tables
        check_compare_table(on_off, want, "on_vs_off", models, tests)
        check_compare_table(auto, want, "auto_vs_best", models, tests)
        check(ttft[0] == ["test", "pad"] + [os.path.basename(m) for m in models], f"TTFT header {ttft[0]}")
        check([(row[0], row[1].split(" ")[0]) for row in ttft[1:]]
              == [(t, pol) for t in ("ttft16 @ d0", "ttft16 @ d8") for pol in ("on", "off", "auto")],
              f"TTFT rows: every depth and policy: {[row[:2] for row in ttft[1:]]}")
        for row in ttft[1:]:
            for m, cell in zip(models, row[2:]):
                r = res.get((m, row[1].split(" ")[0], 2048, 512, row[0]))
                mt = re.fullmatch(r"([\d.]+) ± ([\d.]+)", cell)
                check(r is not None and mt is not None and abs(float(mt.group(1)) - r["avg_ms"]) <= 0.006
                      and abs(float(mt.group(2)) - r["stddev_ms"]) <= 0.006,
                      f"TTFT cell {m} {row[:2]} {cell} matches the JSON {r and (r['avg_ms'], r['stddev_ms'])}")
    worst = min(w[0] for k, w in want.items() if k[0] == "auto_vs_best")
    verdict = re.search(r"auto within 2% of the better of on and off in every cell: (yes|no) \(lowest ([+-][\d.]+)%",
                        p.stdout)
    check(verdict and verdict.group(1) == ("yes" if worst >= -2.0 else "no")
          and abs(float(verdict.group(2)) - worst) <= 0.051, f"auto verdict line vs lowest cell {worst:+.2f}%")

    # the chart: one bar per (shape, model) with the on-vs-off value, on the zero line
    check_chart(svg, want, models, tests)

    # CSV --compare: one line per (comparison, row, model), the same cells
    p = bench(stride, *common, "-o", "csv", "-oe", "json")
    if check(p.returncode == 0, f"bench --compare -o csv: exit {p.returncode}, {p.stderr[-400:]}"):
        want = expected_compare(json_of(p.stderr))
        rows = list(csv.DictReader(io.StringIO(p.stdout)))
        got = {(r["comparison"], r["model_file"], r["row"]): r for r in rows}
        check(set(got) == set(want) and len(rows) == len(want), f"CSV comparison rows {sorted(got)}")
        for k, (mean, sd, b) in want.items():
            r = got.get(k)
            check(r is not None and close(float(r["pct"]), mean) and close(float(r["sd_pct"]), sd) and r["b"] == b
                  and len(r["per_rep_pct"].split(";")) == REPS, f"CSV comparison {k}: {r} vs {mean:.4f} ± {sd:.4f}")


def check_chart(path, want, models, rows, skipped=()):
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        check(False, f"chart {path}: well-formed SVG: {e}")
        return
    check(root.tag == SVG + "svg", f"chart root element {root.tag}")
    bars = [e for e in root.iter(SVG + "rect") if e.get("class") == "bar"]
    keys = sorted((b.get("data-shape"), b.get("data-model")) for b in bars)
    check(keys == sorted(k for k in ((r, os.path.basename(m)) for r in rows for m in models) if k not in skipped),
          f"chart: one bar per (shape, model): {keys}")
    zero = [e for e in root.iter(SVG + "line") if e.get("class") == "zero"]
    if not check(len(zero) == 1 and zero[0].get("y1") == zero[0].get("y2"), "chart: one horizontal zero line"):
        return
    y0 = float(zero[0].get("y1"))
    by_name = {os.path.basename(m): m for m in models}
    for b in bars:
        mean, sd, _ = want.get(("on_vs_off", by_name.get(b.get("data-model")), b.get("data-shape")), (None, None, None))
        y, h = float(b.get("y")), float(b.get("height"))
        on_line = abs((y + h if mean is not None and mean >= 0 else y) - y0) <= 0.2
        check(mean is not None and abs(float(b.get("data-value")) - mean) <= 1e-3 and on_line,
              f"chart bar {b.get('data-shape')} {b.get('data-model')}: value {b.get('data-value')} vs {mean}, "
              f"from the zero line {y0}: y {y} h {h}")
    texts = " ".join("".join(t.itertext()) for t in root.iter(SVG + "text"))
    check("speedup, on vs off (%)" in texts and "shape" in texts and all(r in texts for r in rows)
          and all(os.path.basename(m) in texts for m in models), f"chart: axis labels, shapes, legend: {texts[:300]!r}")


def test_context_skip(stride, fixtures, work):
    """Several models with different contexts: a test that does not fit one model is skipped
    for it (n/a in the tables, no result, no bar) and measured for the others."""
    small = os.path.join(fixtures, "llama-f16.gguf")  # context_length 128
    large = os.path.join(work, "tiny-qwen3.gguf")  # context_length 4096
    p = subprocess.run([stride, "synth", "tiny-qwen3", "-o", large], env=clean_env(), capture_output=True,
                       encoding="utf-8", errors="replace")
    if not check(p.returncode == 0, f"stride synth tiny-qwen3: {p.returncode} {p.stderr[-300:]}"):
        return
    models = [small, large]
    tests = ["pp16", "tg4", "pp16 @ d120", "tg4 @ d120", "ttft16 @ d0", "ttft16 @ d120"]
    skipped = {(small, "pp16 @ d120"), (small, "ttft16 @ d120")}
    svg = os.path.join(work, "bench-skip.svg")
    p = bench(stride, "-m", small, "-m", large, "-p", "16", "-n", "4", "-d", "0,120", "--ttft", "16", "-r", str(REPS),
              "--pad-weights", "on,off", "--chart", svg, "-o", "md", "-oe", "json")
    if not check(p.returncode == 0, f"bench with a test too long for one model: {p.returncode} {p.stderr[-400:]}"):
        return
    check("n/a for llama-f16.gguf (longer than its context_length): pp16 @ d120, ttft16 @ d120" in p.stdout
          and "note:" not in p.stderr, f"the markdown names the skipped tests (stderr holds the JSON only): {p.stdout!r}")
    d = json_of(p.stderr)
    check(d.get("skipped") == [{"model_file": small, "test": t, "reason": "context_length"}
                               for t in ("pp16 @ d120", "ttft16 @ d120")], f"JSON skipped: {d.get('skipped')}")
    _, want = check_json(d, models, tests, ["on", "off"], skipped=skipped)
    tables = md_tables(p.stdout)
    if check(len(tables) == 3, f"results, comparison and TTFT tables: {p.stdout!r}"):
        rows, sp, ttft = tables
        check(not any(row[0] == "llama-f16.gguf" and row[5] == "pp16 @ d120" for row in rows[1:])
              and any(row[0] == "tiny-qwen3.gguf" and row[5] == "pp16 @ d120" for row in rows[1:]),
              "results table: the skipped test has no row for the small model only")
        check([row[1] for row in sp[1:] if row[0] in ("pp16 @ d120", "ttft16 @ d120")] == ["n/a", "n/a"]
              and all(row[2] != "n/a" for row in sp[1:]) and all(row[1] != "n/a" for row in sp[1:]
                                                                   if row[0] not in ("pp16 @ d120", "ttft16 @ d120")),
              f"comparison: n/a exactly for the skipped cells: {sp}")
        check_compare_table([[c for c in row] for row in sp if "n/a" not in row], want, "on_vs_off", models,
                            [t for t in tests if (small, t) not in skipped])
        check([row[2] for row in ttft[1:] if row[0] == "ttft16 @ d120"] == ["n/a", "n/a"],
              f"TTFT table: n/a for the skipped depth: {ttft}")
    check_chart(svg, want, models, tests, skipped={(t, os.path.basename(m)) for m, t in skipped})
    p = bench(stride, "-m", small, "-m", large, "-p", "16", "-n", "0", "-d", "120", "-r", "1", "--pad-weights", "off")
    check(p.returncode == 0 and f"note: {small} allows 128 tokens of context (its context_length): skipping "
          "pp16 @ d120 (n/a in the reports)" in p.stderr, f"without -oe, a note on stderr: {p.stderr!r}")


def block_count(path):
    """The model's layers, from its GGUF metadata."""
    import gguf
    r = gguf.GGUFReader(path)
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    return int(r.fields[f"{arch}.block_count"].parts[-1][0])


def test_profile(stride, fixtures):
    """--profile: one more run of each pp and tg test with every op timed; the op counts of
    a step follow from the architecture (the CPU backend runs the plain ops), and the
    markdown table carries the JSON's figures per token (tg) or per prompt (pp)."""
    llama, olmoe = os.path.join(fixtures, "llama-f16.gguf"), os.path.join(fixtures, "olmoe-f16.gguf")
    n_gen = 8
    p = bench(stride, "-m", f"{llama},{olmoe}", "-p", "16", "-n", str(n_gen), "--ttft", "8", "-r", str(REPS),
              "--profile", "--pad-weights", "off", "-o", "md", "-oe", "json")
    if not check(p.returncode == 0, f"bench --profile: exit {p.returncode}, {p.stderr[-400:]!r}"):
        return
    d = json_of(p.stderr)
    profiles = {(os.path.basename(x["model_file"]), x["test"]): x for x in d.get("profiles", [])}
    check(set(profiles) == {(os.path.basename(m), t) for m in (llama, olmoe) for t in ("pp16", "tg8")},
          f"one profile per model and pp/tg test (not TTFT): {sorted(profiles)}")
    for (model, test), x in profiles.items():
        steps = n_gen if test.startswith("tg") else 1
        ops = {o["op"]: o for o in x["ops"]}
        L = block_count(os.path.join(fixtures, model))
        calls = lambda prefix: sum(o["calls"] for k, o in ops.items() if k.startswith(prefix))
        check(x["steps"] == steps and x["complete"] is True, f"{model} {test}: {x['steps']} steps (want {steps})")
        check(all(o["calls"] > 0 and o["seconds"] > 0 and o["bytes"] >= 0 and o["flops"] >= 0 for o in x["ops"]),
              f"{model} {test}: every op ran, with a positive time: {x['ops']}")
        check(calls("get_rows") == steps and calls("attention") == L * steps,
              f"{model} {test}: one embedding lookup a step, one attention a layer: {sorted(ops)}")
        head = ops.get("mul_mat f16 K=64 N=384")  # the output head: 384 rows of 64 f16
        check(head is not None and head["calls"] == steps and head["bytes"] >= 384 * 64 * 2 * steps
              and head["flops"] >= 2 * 384 * 64 * steps, f"{model} {test}: the output head once a step: {head}")
        if model.startswith("llama"):
            check(calls("rms_norm D=64") == (2 * L + 1) * steps and calls("mul_mat f16 K=64 N=32") == 2 * L * steps,
                  f"{model} {test}: two norms a layer and the final one; k and v products: {ops}")
        else:
            check(calls("topk_route E=8 k=2") == L * steps and calls("moe_combine D=64 k=2") == L * steps
                  and calls("mul_mat_id f16 K=64 N=32 E=8 k=2") == 2 * L * steps
                  and calls("mul_mat_id f16 K=32 N=64 E=8 k=2") == L * steps,
                  f"{model} {test}: routing, gate and up, down and the combination a layer: {sorted(ops)}")
    # the markdown: a table per profile whose rows are the JSON's ops per token / prompt
    tables = [t for t in md_tables(p.stdout) if t[0][0] == "op"]
    heads = re.findall(r"### Per-op profile: (\S+), pad off, ub 512, (\S+) \(per (token|prompt)\)", p.stdout)
    check(len(heads) == 4 and len(tables) == 4, f"a table per profile: {heads}")
    for (model, test, per), rows in zip(heads, tables):
        x = profiles.get((model, test))
        if x is None:
            continue
        n = n_gen if per == "token" else 1
        body = {row[0]: row for row in rows[1:] if not row[0].startswith(("**", "the timed"))}
        total = sum(o["seconds"] for o in x["ops"]) / n * 1e6
        ok = set(body) == {o["op"] for o in x["ops"]}
        for o in x["ops"]:
            row = body.get(o["op"])
            ok = ok and row is not None and close(float(row[1]), o["calls"] / n, rel=1e-3) \
                and close(float(row[2]), o["seconds"] / n * 1e6, rel=2e-3, abs_=0.06)
        allrow = [row for row in rows if row[0] == "**all ops**"]
        ok = ok and len(allrow) == 1 and close(float(allrow[0][2].strip("*")), total, rel=2e-3, abs_=0.06)
        check(ok, f"{model} {test}: the table's calls and us are the JSON's per {per}: {rows[:3]}")


def test_errors(stride, fixtures, work):
    model = os.path.join(fixtures, "llama-f16.gguf")
    missing_dir = os.path.join(work, "no-such-dir", "chart.svg")
    usage = [
        ([], "no model given"),
        (["-m", model, "-p", "12x"], "-p: '12x' is not"),
        (["-m", model, "-n", "-1"], "-n: '-1' is not"),
        (["-m", model, "-d", "1,,2"], "-d: '1,,2' is not"),
        (["-m", model, "-r", "0"], "-r: '0' is not"),
        (["-m", model, "-ub", "x"], "-ub: 'x' is not"),
        (["-m", model, "-ub", "0"], "-ub: '0' is not"),
        (["-m", model, "-ub", "4,4"], "-ub: '4,4' is not a comma-separated list of distinct"),
        (["-m", model, "-b", "0"], "-b: '0' is not"),
        (["-m", model, "-b", "8,x"], "-b: '8,x' is not"),
        (["-m", model, "-b", "8,8"], "-b: '8,8' is not a comma-separated list of distinct"),
        (["-m", model, "-b"], "-b needs a value"),
        (["-m", model, "--ttft", "0"], "--ttft: '0' is not"),
        (["-m", model, "--ttft", "8,"], "--ttft: '8,' is not"),
        (["-m", model, "--ttft-depth", "8"], "--ttft-depth needs --ttft"),
        (["-m", model, "--ttft", "8", "--ttft-depth", "a"], "--ttft-depth: 'a' is not"),
        (["-m", model, "-p", "16", "-n", "0", "--ttft", "100", "--ttft-depth", "64"], "ttft100 @ d64 needs a context of 164 tokens"),
        (["-m", model, "--compare", "--pad-weights", "on,auto"], "--compare compares padding on with off"),
        (["-m", model, "--compare"], "--compare compares padding on with off"),
        (["-m", model, "--chart", os.path.join(work, "x.svg"), "--pad-weights", "off"],
         "--chart compares padding on with off"),
        (["-m", model, "--chart", missing_dir, "--pad-weights", "on,off"], "--chart: cannot write"),
        (["-m", model, "--chart"], "--chart needs a value"),
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
    check(not os.path.exists(os.path.join(work, "x.svg")), "a refused --chart leaves no file")
    missing = os.path.join(work, "missing.gguf")
    p = bench(stride, "-m", missing, "-p", "8", "-n", "0")
    check(p.returncode == 1 and "cannot open" in p.stderr, f"missing model: exit {p.returncode}, {p.stderr.strip()!r}")
    p = bench(stride, "-m", model, "-p", "8", "-n", "0", env={"STRIDE_ROW_ALIAS": "100"})
    check(p.returncode == 2 and "STRIDE_ROW_ALIAS" in p.stderr, f"bad STRIDE_ROW_ALIAS: {p.returncode} {p.stderr!r}")
    p = subprocess.run([stride, "bench", "--help"], capture_output=True, encoding="utf-8")
    check(p.returncode == 0 and all(f in p.stdout for f in ("--pad-weights LIST", "interleave", "-b, --batch-size",
                                                             "-ub, --ubatch-size LIST", "--ttft LIST", "--ttft-depth",
                                                             "--compare", "--chart FILE.svg", "--profile")),
          "bench --help")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(__file__), "..", "fixtures"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    test_reports(a.stride, a.fixtures)
    test_batch_sweep(a.stride, a.fixtures)
    test_compare_ttft_chart(a.stride, a.fixtures, a.work)
    test_context_skip(a.stride, a.fixtures, a.work)
    test_profile(a.stride, a.fixtures)
    test_errors(a.stride, a.fixtures, a.work)
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
