"""stride bench -np (the batched mode, llama-batched-bench's form) on the tiny fixtures
(CPU backend): the JSON carries every case of every model and policy with its repetitions,
interleaved across the policies after a warm-up; every derived column (S_PP, S_TG, S,
N_KV) is the one recomputed here from the raw times; the S_TG roofline is recomputed here
from the GGUF (weights once, each sequence's keys and values, experts by expected use,
against 4.3 TB/s and 790 TFLOP/s); the markdown and CSV reports agree with the JSON; the
usage errors. Speeds on a tiny model say nothing: what is checked is the bookkeeping.
"""
import argparse
import csv
import io
import json
import os
import statistics
import subprocess
import sys

import gguf

from harness import Checks, clean_env

CHECKS = Checks()
check = CHECKS.check

PAD_ENV = {"STRIDE_ROW_ALIAS": "64", "STRIDE_ROW_PAD": "32"}
REPS = 2
COLUMNS = ["model", "size", "pad", "PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s",
           "S_TG roofline t/s", "of roofline", "T s", "S t/s"]


def bench(stride, *args):
    return subprocess.run([stride, "bench", "--backend", "cpu", "-t", "1", *args], env=clean_env(PAD_ENV),
                          capture_output=True, encoding="utf-8", errors="replace")


def close(a, b, rel=1e-6, abs_=0.0):
    return abs(a - b) <= max(rel * max(abs(a), abs(b), 1e-12), abs_)


def roofline(path, pp, tg, b, kv_bytes=2):
    """S_TG's roofline from the GGUF alone (bench_batched_report.c's formula)."""
    r = gguf.GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()

    def key(name, default=None):
        f = r.fields.get(f"{arch}.{name}")
        return default if f is None else int(f.parts[-1][0])

    names = {t.name for t in r.tensors}
    tied = "output.weight" not in names
    n_expert, n_used = key("expert_count", 0), key("expert_used_count", 0)
    dense = expert = flops = 0.0
    for t in r.tensors:
        if t.name == "token_embd.weight" and not tied:
            continue
        elems = 1
        for d in t.shape:
            elems *= int(d)
        if len(t.shape) == 3 and n_expert:
            expert += t.n_bytes
            flops += 2.0 * elems * n_used / n_expert
        else:
            dense += t.n_bytes
            if len(t.shape) >= 2 and int(t.shape[1]) > 1:
                flops += 2.0 * elems
    n_layer, n_head, n_head_kv = key("block_count"), key("attention.head_count"), key("attention.head_count_kv")
    hd = key("attention.key_length")
    kv_token = 2 * n_head_kv * hd * kv_bytes  # one layer's K and V of a token (f16)
    frac = 1.0 - (1.0 - n_used / n_expert) ** b if n_expert else 1.0
    t = 0.0
    for i in range(tg):
        keys = n_layer * (pp + i + 1)
        bytes_ = dense + expert * frac + b * keys * kv_token
        fl = b * (flops + keys * 4.0 * n_head * hd)
        t += max(bytes_ / 4.3e12, fl / 790e12)
    return b * tg / t


def test_reports(stride, fixtures):
    models = [os.path.join(fixtures, f) for f in ("llama-f32.gguf", "olmoe-f16.gguf")]
    args = ["-m", ",".join(models), "-np", "1,3", "-npp", "20", "-ntg", "5,7", "-r", str(REPS),
            "--pad-weights", "on,off"]
    p = bench(stride, *args, "-o", "json")
    if not check(p.returncode == 0, f"bench -np: {p.stderr}"):
        return
    j = json.loads(p.stdout)
    res = j["results"]
    check(j["params"]["mode"] == "batched" and len(j["params"]["cases"]) == 4 and j["params"]["logits"] == "all",
          f"params (on the CPU every logit to the host by default): {j['params']}")
    check(len(res) == 2 * 2 * 4, f"2 models x 2 policies x 4 cases: {len(res)}")
    want_cases = [(20, 5, 1), (20, 5, 3), (20, 7, 1), (20, 7, 3)]  # PP, then TG, then B
    for m in models:
        for pol in ("on", "off"):
            got = [(x["pp"], x["tg"], x["b"]) for x in res if x["model_file"] == m and x["pad_weights"] == pol]
            check(got == want_cases, f"{os.path.basename(m)} {pol}: cases {got}")
    for x in res:
        name = f"{os.path.basename(x['model_file'])} {x['pad_weights']} pp{x['pp']} tg{x['tg']} B{x['b']}"
        b, pp, tg = x["b"], x["pp"], x["tg"]
        ok = len(x["t_pp"]) == REPS and len(x["t_tg"]) == REPS and all(v > 0 for v in x["t_pp"] + x["t_tg"])
        check(ok, f"{name}: {REPS} positive times each")
        if not ok:
            continue
        s_pp = [b * pp / t for t in x["t_pp"]]
        s_tg = [b * tg / t for t in x["t_tg"]]
        s = [b * (pp + tg) / (a + c) for a, c in zip(x["t_pp"], x["t_tg"])]
        check(x["n_kv"] == b * (pp + tg), f"{name}: N_KV")
        for k, v in (("s_pp", s_pp), ("s_tg", s_tg), ("s", s)):
            # (the report prints them with 6 decimals: a sd below 1e-6 t/s reads 0)
            check(close(x[f"avg_{k}"], statistics.fmean(v), 1e-5) and close(x[f"stddev_{k}"], statistics.stdev(v), 1e-4, 1e-6)
                  if REPS > 1 else True, f"{name}: {k} mean and sd from the raw times: report "
                  f"{x[f'avg_{k}']} ± {x[f'stddev_{k}']}, recomputed {statistics.fmean(v)} ± {statistics.stdev(v)}")
        want = roofline(x["model_file"], pp, tg, b)
        check(close(x["s_tg_roofline"], want, 1e-5), f"{name}: roofline {x['s_tg_roofline']} vs {want}")
        check(all(w >= a + c for w, a, c in zip(x["wall_seconds"], x["t_pp"], x["t_tg"])) or
              j["device"]["backend"] != "cpu", f"{name}: the host clock brackets both phases")
    # interleaving: per model and case, the policies alternate in run order after the warm-ups
    for m in models:
        for c in want_cases:
            rows = {x["pad_weights"]: x for x in res if x["model_file"] == m and (x["pp"], x["tg"], x["b"]) == c}
            on, off = rows["on"]["run_order"], rows["off"]["run_order"]
            check(all(off[i] == on[i] + 1 for i in range(REPS)) and all(on[i + 1] == off[i] + 1 for i in range(REPS - 1)),
                  f"{c}: on and off interleaved: {on} {off}")
    big = roofline(models[0], 20, 5, 3) > roofline(models[0], 20, 5, 1)
    check(big, "three sequences have a higher S_TG roofline than one")

    # the markdown and CSV of a run against the JSON of the same run (-oe)
    p = bench(stride, *args, "-o", "md", "-oe", "json")
    res = json.loads(p.stderr)["results"] if p.returncode == 0 else []
    lines = [l for l in p.stdout.splitlines() if l.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")] if lines else []
    check(p.returncode == 0 and header == COLUMNS, f"markdown columns: {header}")
    check(len(res) == 16 and len(lines) == 2 + len(res), f"markdown rows: {len(lines) - 2}")
    check("S_TG roofline" in p.stdout and "4.3 TB/s" in p.stdout, "the roofline is explained under the table")
    for l in lines[2:]:
        cells = [c.strip() for c in l.strip("|").split("|")]
        x = [r for r in res if os.path.basename(r["model_file"]) == cells[0] and r["pad_weights"] == cells[2] and
             (r["pp"], r["tg"], r["b"]) == (int(cells[3]), int(cells[4]), int(cells[5]))]
        check(len(x) == 1 and cells[10].startswith(f"{x[0]['avg_s_tg']:.2f}") and
              cells[11] == f"{x[0]['s_tg_roofline']:.0f}", f"markdown row {cells}")

    p = bench(stride, *args, "-o", "csv", "-oe", "json")
    res = json.loads(p.stderr)["results"] if p.returncode == 0 else []
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    check(p.returncode == 0 and len(rows) == len(res) * REPS, f"csv: one row per repetition ({len(rows)})")
    for row in rows:
        x = [r for r in res if r["model_file"] == row["model_file"] and r["pad_weights"] == row["pad_weights"] and
             (r["pp"], r["tg"], r["b"]) == (int(row["pp"]), int(row["tg"]), int(row["b"]))]
        k = int(row["rep"])
        check(len(x) == 1 and close(float(row["t_tg"]), x[0]["t_tg"][k], 1e-6) and
              close(float(row["t_pp"]), x[0]["t_pp"][k], 1e-6), f"csv row {row['pp']} {row['tg']} {row['b']} {k}")


def test_profile(stride, fixtures):
    """--profile in the batched mode: the prefill's and the decode steps' per-op profiles of
    one more run per case; a decode step of B tokens runs each op once for all of them."""
    model = os.path.join(fixtures, "olmoe-f16.gguf")
    L = int(gguf.GGUFReader(model).fields["olmoe.block_count"].parts[-1][0])
    ntg = 4
    p = bench(stride, "-m", model, "-np", "2,4", "-npp", "16", "-ntg", str(ntg), "-r", "1", "--profile",
              "-o", "json")
    if not check(p.returncode == 0, f"-np --profile: rc {p.returncode}, {p.stderr[-300:]!r}"):
        return
    profiles = json.loads(p.stdout).get("profiles", [])
    check(sorted((x["b"], x["phase"]) for x in profiles) == [(2, "decode"), (2, "prefill"), (4, "decode"),
                                                             (4, "prefill")], f"two phases per case: {profiles}")
    for x in profiles:
        calls = {o["op"]: o["calls"] for o in x["ops"]}
        steps = ntg if x["phase"] == "decode" else x["steps"]
        check(x["steps"] == steps and steps >= 1 and calls.get("attention hd=16 H=4/4 paged") == L * steps
              and calls.get("topk_route E=8 k=2") == L * steps and calls.get("get_rows f16 K=64") == steps
              and all(o["seconds"] > 0 for o in x["ops"]),
              f"B={x['b']} {x['phase']}: {steps} steps, an attention and a routing a layer each: {calls}")


def test_logits_top(stride, fixtures):
    """--logits top: the decode steps pick each sequence's candidates on the backend (one
    top_k a step over the B rows), as the engine samples; every report says so."""
    model = os.path.join(fixtures, "llama-f32.gguf")
    ntg = 3
    args = ["-m", model, "-np", "2", "-npp", "8", "-ntg", str(ntg), "-r", "1", "--logits", "top"]
    p = bench(stride, *args, "--profile", "-o", "json")
    if not check(p.returncode == 0, f"--logits top: rc {p.returncode}, {p.stderr[-300:]!r}"):
        return
    j = json.loads(p.stdout)
    check(j["params"]["logits"] == "top", f"params: {j['params']}")
    decode = [x for x in j.get("profiles", []) if x["phase"] == "decode"]
    calls = {o["op"]: o["calls"] for x in decode for o in x["ops"]}
    top = [n for op, n in calls.items() if op.startswith("top_k ")]
    check(len(decode) == 1 and top == [ntg], f"one top_k a decode step: {calls}")
    p = bench(stride, *args, "-o", "csv")
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    check(p.returncode == 0 and len(rows) == 1 and rows[0]["logits"] == "top", f"csv: {rows}")
    p = bench(stride, *args, "-o", "md")
    check(p.returncode == 0 and "(--logits top)" in p.stdout, "the markdown says how the logits came back")


def test_errors(stride, fixtures):
    model = os.path.join(fixtures, "llama-f32.gguf")
    for args, what in ((["-np", "4", "-p", "64"], "single-sequence tests"),
                       (["-np", "4", "--ttft", "64"], "single-sequence tests"),
                       (["-np", "4", "--compare"], "single-sequence tests"),
                       (["-npp", "64"], "needs -np"),
                       (["-np", "0"], "-np"),
                       (["-np", "2,2"], "-np"),
                       (["-np", "2", "-ntg", "x"], "-ntg"),
                       (["-np", "2", "-ub", "8,16"], "one value"),
                       (["-np", "2", "--logits", "some"], "--logits"),
                       (["--logits", "all"], "needs -np"),
                       (["-np", "2", "-npp", "100", "-ntg", "100"], "context_length")):
        p = bench(stride, "-m", model, "-r", "1", *args)
        check(p.returncode == 2 and what in p.stderr, f"{args}: rc {p.returncode}, {p.stderr.strip()!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
    test_reports(a.stride, fixtures)
    test_profile(a.stride, fixtures)
    test_logits_top(a.stride, fixtures)
    test_errors(a.stride, fixtures)
    sys.exit(CHECKS.exit_code())


if __name__ == "__main__":
    main()
