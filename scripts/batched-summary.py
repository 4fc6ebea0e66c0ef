#!/usr/bin/env python3
"""The key figures of `scripts/gpu-check.sh batched` as markdown, from the JSON reports it
leaves in its folder (stride bench -np / -p 0 -n 128 -d 128 and scripts/serve-load.py):

    scripts/batched-summary.py DIR

  - S_PP and S_TG of llama-3.2-1b at each B (np.json), with the bench's roofline;
  - B=1 against one sequence at the same depths: the means of one-d128-*, b1-all-* and
    b1-top-* (with np.json's B=1), and how far below one sequence each B=1 mode is;
  - qwen3-8b at B=1 and B=64 (qwen3-8b-np.json);
  - the server's generated tok/s (load.json) against the bench's S_TG at B=64 measured just
    before (np64-serve.json), and against the load's ceiling 1 / (1/S_TG + 1/S_PP) (each
    generated token of the load comes with one prompt token), with TTFT and ITL.

Exit status 1 when a report is missing or unreadable, or the load lost a request."""
import glob
import json
import os
import statistics
import sys


def load(d, name):
    with open(os.path.join(d, name)) as f:
        return json.load(f)


def results(d, name):
    return load(d, name)["results"]


def by_b(d, name):
    return {r["b"]: r for r in results(d, name)}


def mean_of(d, pattern, key, b=None):
    vals = []
    for p in sorted(glob.glob(os.path.join(d, pattern))):
        vals += [r[key] for r in results(d, os.path.basename(p)) if b is None or r.get("b") == b]
    if not vals:
        raise FileNotFoundError(f"no {pattern} in {d}")
    return statistics.mean(vals), len(vals)


def np_table(rows):
    """S_PP and S_TG by B, with the bench's roofline."""
    print("| B | S_PP t/s | S_TG t/s | S_TG roofline | of roofline |")
    print("|---:|---:|---:|---:|---:|")
    for b in sorted(rows):
        r = rows[b]
        print(f"| {b} | {r['avg_s_pp']:,.0f} | {r['avg_s_tg']:,.0f} | {r['s_tg_roofline']:,.0f} | "
              f"{r['avg_s_tg'] / r['s_tg_roofline']:.1%} |")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    d = sys.argv[1]
    head = load(d, "np.json")
    dev = head.get("device", {}).get("name", "?")
    print(f"# Batched decode and the server: commit {head.get('commit', '?')}, {dev}, {head.get('date', '?')}\n")

    print("llama-3.2-1b, 128 prompt + 128 generated tokens a sequence, `--logits top`:\n")
    np_ = by_b(d, "np.json")
    np_table(np_)

    one, n_one = mean_of(d, "one-d128-*.json", "avg_ts")
    b1_all, n_all = mean_of(d, "b1-all-*.json", "avg_s_tg", 1)
    b1_top, n_top = mean_of(d, "b1-top-*.json", "avg_s_tg", 1)
    if 1 in np_:
        b1_top = (b1_top * n_top + np_[1]["avg_s_tg"]) / (n_top + 1)
        n_top += 1
    print("\nB=1 against one sequence at the same depths (128-255), tok/s (the mean of the runs):\n")
    print("| | tok/s | runs | below one sequence |")
    print("|---|---:|---:|---:|")
    print(f"| one sequence, `-p 0 -n 128 -d 128` | {one:,.1f} | {n_one} | |")
    print(f"| B=1, `--logits all` | {b1_all:,.1f} | {n_all} | {(one - b1_all) / one:.2%} |")
    print(f"| B=1, `--logits top` | {b1_top:,.1f} | {n_top} | {(one - b1_top) / one:.2%} |")

    print("\nqwen3-8b:\n")
    np_table(by_b(d, "qwen3-8b-np.json"))

    bench = by_b(d, "np64-serve.json")[64]
    lo = load(d, "load.json")
    s_tg, s_pp, got = bench["avg_s_tg"], bench["avg_s_pp"], lo["generated_tok_per_s"]
    ceiling = 1.0 / (1.0 / s_tg + 1.0 / s_pp)
    print("\n`stride serve -np 64 -c 512` under 64 streams (scripts/serve-load.py, 1,024 requests):\n")
    print("| | |")
    print("|---|---:|")
    print(f"| requests completed / errors | {lo['completed']:,} / {lo['errors']} |")
    print(f"| generated tok/s | {got:,.0f} |")
    print(f"| the bench's S_TG at B=64 just before | {s_tg:,.0f} |")
    print(f"| of it | {got / s_tg:.1%} |")
    print(f"| the load's ceiling 1 / (1/S_TG + 1/S_PP), of S_TG | {ceiling / s_tg:.1%} |")
    t, i = lo["ttft_ms"], lo["itl_ms"]
    print(f"| TTFT p50 / p90 / p99 ms | {t['p50']} / {t['p90']} / {t['p99']} |")
    print(f"| ITL p50 / p90 / p99 ms | {i['p50']} / {i['p90']} / {i['p99']} |")
    return 0 if lo["errors"] == 0 and lo["completed"] == lo["requests"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, KeyError, ValueError) as e:
        print(f"batched-summary: {e}", file=sys.stderr)
        sys.exit(1)
