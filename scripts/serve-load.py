#!/usr/bin/env python3
"""A bounded load generator for `stride serve` (or any OpenAI-compatible server): N
concurrent streams of /v1/completions with prompts of a given token length and a fixed
number of generated tokens (ignore_eos), for a fixed number of requests. Reports the
aggregate generated tokens per second, time to first token (TTFT) and inter-token latency
(ITL, between consecutive streamed chunks, per token) at p50/p90/p99, as JSON and as a
markdown table. Only the Python standard library (the streams spread over a few processes
so that the client keeps up); it talks to one address (loopback by default) and stops by
itself.

    scripts/serve-load.py --url http://127.0.0.1:8080 -c 64 -n 256 --prompt-tokens 128 \\
        --gen-tokens 128 --json out.json --markdown out.md

Prompts are token ids (random, from a fixed seed, below --vocab), so the prompt length is
exact; each stream's first request differs from the others, so the prefix cache does not
skip the prefill unless --shared-prefix asks for it."""
import argparse
import http.client
import json
import multiprocessing
import os
import random
import statistics
import sys
import threading
import time
import urllib.parse


def percentile(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def one_request(host, port, headers, body, timeout):
    """Streams one completion: (ttft, [gaps per token], tokens, error)."""
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.perf_counter()
    try:
        c.request("POST", "/v1/completions", body=json.dumps(body), headers=headers)
        r = c.getresponse()
        if r.status != 200:
            return None, [], 0, f"HTTP {r.status}: {r.read()[:200]!r}"
        ttft, last, gaps, tokens, buf = None, None, [], 0, b""
        usage_tokens = None
        while True:
            chunk = r.read1(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                if not event.startswith(b"data: ") or event == b"data: [DONE]":
                    continue
                d = json.loads(event[6:])
                if "error" in d:
                    return ttft, gaps, tokens, d["error"].get("message")
                if d.get("usage"):
                    usage_tokens = d["usage"]["completion_tokens"]
                if not d.get("choices"):
                    continue
                n = len(d["choices"][0].get("logprobs", {}).get("tokens", [])) if d["choices"][0].get("logprobs") else 1
                now = time.perf_counter()
                if ttft is None:
                    ttft = now - t0
                elif n > 0:
                    gaps.extend([(now - last) / n] * n)
                last = now
                tokens += n
        return ttft, gaps, usage_tokens if usage_tokens is not None else tokens, None
    except (OSError, http.client.HTTPException, ValueError) as e:
        return None, [], 0, str(e)
    finally:
        c.close()


def run_group(host, port, headers, jobs, n_threads, timeout, deadline):
    """One process's share: n_threads streams taking its jobs in turn until none is left
    or the deadline (time.monotonic) has passed."""
    lock = threading.Lock()
    results = []
    next_job = [0]

    def worker():
        while True:
            with lock:
                if next_job[0] >= len(jobs) or time.monotonic() > deadline:
                    return
                body = jobs[next_job[0]]
                next_job[0] += 1
            res = one_request(host, port, headers, body, timeout)
            with lock:
                results.append(res)

    threads = [threading.Thread(target=worker) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def run(args):
    u = urllib.parse.urlparse(args.url)
    host, port = u.hostname, u.port or 80
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    rng = random.Random(args.seed)
    shared = [rng.randrange(3, args.vocab) for _ in range(args.prompt_tokens)]
    jobs = []
    for i in range(args.requests):
        prompt = list(shared) if args.shared_prefix else [rng.randrange(3, args.vocab) for _ in range(args.prompt_tokens)]
        if args.shared_prefix:
            prompt[-1] = rng.randrange(3, args.vocab)
        job = {"prompt": prompt, "max_tokens": args.gen_tokens, "temperature": args.temperature,
               "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
               "logprobs": 0, "seed": i}
        for name in ("top_k", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repeat_penalty"):
            if getattr(args, name) is not None:
                job[name] = getattr(args, name)
        jobs.append(job)
    # The streams are spread over processes (threads within each): parsing a token's
    # event costs tens of microseconds of Python, and one interpreter's lock would cap
    # the client, not the server, near 20,000 tokens a second.
    n_proc = max(1, min(args.processes, args.concurrency))
    groups = [(host, port, headers, jobs[p::n_proc], args.concurrency // n_proc + (p < args.concurrency % n_proc),
               args.timeout) for p in range(n_proc)]
    with multiprocessing.get_context("fork").Pool(n_proc) as pool:
        t0 = time.monotonic()
        deadline = t0 + args.max_seconds
        results = [r for part in pool.starmap(run_group, [g + (deadline,) for g in groups]) for r in part]
        wall = time.monotonic() - t0
    ok = [r for r in results if r[3] is None]
    errors = [r[3] for r in results if r[3] is not None]
    ttfts = [r[0] for r in ok if r[0] is not None]
    gaps = [g for r in ok for g in r[1]]
    gen = sum(r[2] for r in ok)

    def ms(x):
        return None if x is None else round(x * 1000.0, 3)

    return {
        "url": args.url, "concurrency": args.concurrency, "client_processes": n_proc, "requests": len(results), "completed": len(ok),
        "errors": len(errors), "first_errors": errors[:5], "prompt_tokens": args.prompt_tokens,
        "gen_tokens": args.gen_tokens, "wall_s": round(wall, 3), "generated_tokens": gen,
        "generated_tok_per_s": round(gen / wall, 2) if wall > 0 else None,
        "requests_per_s": round(len(ok) / wall, 3) if wall > 0 else None,
        "ttft_ms": {"p50": ms(percentile(ttfts, 50)), "p90": ms(percentile(ttfts, 90)),
                    "p99": ms(percentile(ttfts, 99)), "mean": ms(statistics.fmean(ttfts)) if ttfts else None},
        "itl_ms": {"p50": ms(percentile(gaps, 50)), "p90": ms(percentile(gaps, 90)), "p99": ms(percentile(gaps, 99)),
                   "mean": ms(statistics.fmean(gaps)) if gaps else None},
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": " ".join(sys.argv),
    }


def markdown(r):
    rows = [
        ("streams", r["concurrency"]), ("requests (completed / errors)", f"{r['completed']} / {r['errors']}"),
        ("prompt / generated tokens", f"{r['prompt_tokens']} / {r['gen_tokens']}"), ("wall", f"{r['wall_s']} s"),
        ("aggregate generated tok/s", r["generated_tok_per_s"]),
        ("TTFT p50 / p90 / p99 (ms)", f"{r['ttft_ms']['p50']} / {r['ttft_ms']['p90']} / {r['ttft_ms']['p99']}"),
        ("ITL p50 / p90 / p99 (ms)", f"{r['itl_ms']['p50']} / {r['itl_ms']['p90']} / {r['itl_ms']['p99']}"),
    ]
    return "| measure | value |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--api-key")
    ap.add_argument("-c", "--concurrency", type=int, default=64, help="streams at once")
    ap.add_argument("-n", "--requests", type=int, default=256, help="requests in all")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=32000, help="prompt ids are drawn below this")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, help="sent with every request (default: not sent)")
    ap.add_argument("--top-p", type=float, help="sent with every request (default: not sent)")
    ap.add_argument("--min-p", type=float, help="sent with every request (default: not sent)")
    ap.add_argument("--frequency-penalty", type=float, help="sent with every request (default: not sent)")
    ap.add_argument("--presence-penalty", type=float, help="sent with every request (default: not sent)")
    ap.add_argument("--repeat-penalty", type=float, help="sent with every request (default: not sent)")
    ap.add_argument("--shared-prefix", action="store_true", help="every prompt but its last token the same")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600, help="seconds for one request")
    ap.add_argument("--max-seconds", type=float, default=1800, help="no new request after this")
    ap.add_argument("--processes", type=int, default=min(os.cpu_count() or 1, 8),
                    help="client processes the streams are spread over (default: the cores, at most 8)")
    ap.add_argument("--json", help="write the report here (default: stdout)")
    ap.add_argument("--markdown", help="write the table here")
    args = ap.parse_args()
    if not (1 <= args.concurrency <= 4096 and 1 <= args.requests <= 1_000_000 and args.prompt_tokens >= 1
            and args.gen_tokens >= 1 and 1 <= args.processes <= 256):
        ap.error("concurrency 1..4096, requests 1..1e6, prompt and generated tokens >= 1, processes 1..256")
    r = run(args)
    text = json.dumps(r, indent=2)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(r))
    print(markdown(r), file=sys.stderr)
    return 0 if r["errors"] == 0 and r["completed"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
