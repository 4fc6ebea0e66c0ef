"""A bounded load test of stride serve on loopback: 64 concurrent clients, each sending
several requests (chat and completions, streaming and not, random prompt lengths), a
quarter of the streams cancelled mid-way by closing the connection. Every response must
complete, or be cancelled as asked; the server must stay up; at the end /metrics must show
no sequence running or waiting and no KV block held; SIGTERM must end it cleanly (under
AddressSanitizer, when --stride is an ASan build: no leak or error report). Then the load
generator scripts/serve-load.py runs a short bounded measurement against the same server."""
import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading

from harness import Checks, clean_env
from serve_harness import Server, synth

CHECKS = Checks()
check = CHECKS.check
HERE = os.path.dirname(os.path.abspath(__file__))
CLIENTS, PER_CLIENT = 64, 3


def client_main(srv, idx, out):
    rng = random.Random(idx)
    for k in range(PER_CLIENT):
        words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "x", "yz"]) for _ in range(rng.randint(1, 120)))
        chat = rng.random() < 0.5
        stream = rng.random() < 0.6
        cancel = stream and rng.random() < 0.25
        max_tokens = rng.randint(4, 40) if not cancel else 400
        body = {"max_tokens": max_tokens, "stream": stream, "temperature": rng.choice([0, 0.8]), "seed": idx,
                "ignore_eos": True}
        if chat:
            body["messages"] = [{"role": "user", "content": words}]
        else:
            body["prompt"] = words
        path = "/v1/chat/completions" if chat else "/v1/completions"
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=300)
        try:
            c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                out.append(("error", f"HTTP {r.status} {r.read()[:200]!r}"))
                continue
            if not stream:
                d = json.loads(r.read())
                ok = d["choices"][0]["finish_reason"] == "length" and d["usage"]["completion_tokens"] == max_tokens
                out.append(("done" if ok else "error", d if not ok else None))
                continue
            events, buf, finish = 0, b"", None
            while True:
                chunk = r.read1(65536)
                if not chunk:
                    break
                buf += chunk
                while b"\n\n" in buf:
                    ev, buf = buf.split(b"\n\n", 1)
                    if ev == b"data: [DONE]":
                        continue
                    d = json.loads(ev[6:])
                    events += 1
                    if d["choices"] and d["choices"][0].get("finish_reason"):
                        finish = d["choices"][0]["finish_reason"]
                if cancel and events >= 2:
                    break
            if cancel:
                c.sock.shutdown(socket.SHUT_RDWR)
                out.append(("cancelled", None))
            else:
                out.append(("done" if finish == "length" else "error", finish))
        except (OSError, http.client.HTTPException, ValueError) as e:
            out.append(("error", repr(e)))
        finally:
            c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    model = synth(args.stride, "tiny-llama", os.path.join(args.work, "tiny-llama.gguf"))
    env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=23", "UBSAN_OPTIONS": "print_stacktrace=1"}
    srv = Server(args.stride, model, "--chat-template", "chatml", "-c", "1024", "-np", "8", "-b", "256",
                 "--kv-blocks", "64", "--queue", "256", env=env)
    rc = None
    try:
        outcomes = []
        threads = [threading.Thread(target=client_main, args=(srv, i, outcomes)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        kinds = [o[0] for o in outcomes]
        errors = [o for o in outcomes if o[0] == "error"]
        check(len(outcomes) == CLIENTS * PER_CLIENT, f"every request answered: {len(outcomes)}")
        check(not errors, f"every request completed or was cancelled as asked: {errors[:5]}")
        check(kinds.count("cancelled") >= 5, f"some streams were cancelled mid-way: {kinds.count('cancelled')}")
        print(f"load: {kinds.count('done')} completed, {kinds.count('cancelled')} cancelled", flush=True)
        check(srv.get("/health")[0] == 200, "the server stays up")
        m = srv.wait_idle(timeout=60)
        check(m.get("stride_requests_running") == 0 and m.get("stride_requests_waiting") == 0,
              f"nothing runs or waits at the end: {m}")
        check(m.get('stride_kv_blocks{state="used"}') == 0 and
              m.get('stride_kv_blocks{state="free"}', 0) + m.get('stride_kv_blocks{state="cached"}', 0) ==
              m.get("stride_kv_blocks_total"), f"every KV block free (or cached for reuse) at the end: {m}")
        check(m.get("stride_preemptions_total", 0) >= 0 and m.get("stride_requests_disconnected_total", 0) >= 5,
              f"the cancelled streams were seen: {m.get('stride_requests_disconnected_total')}")

        # the load generator, bounded, against the same server
        out_json, out_md = os.path.join(args.work, "load.json"), os.path.join(args.work, "load.md")
        p = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "scripts", "serve-load.py"), "--url",
                            f"http://127.0.0.1:{srv.port}", "-c", "16", "-n", "48", "--prompt-tokens", "40",
                            "--gen-tokens", "24", "--vocab", "512", "--max-seconds", "120", "--json", out_json,
                            "--markdown", out_md], capture_output=True, encoding="utf-8", timeout=300)
        r = json.load(open(out_json)) if os.path.exists(out_json) else {}
        check(p.returncode == 0 and r.get("completed") == 48 and r.get("generated_tokens") == 48 * 24,
              f"serve-load.py: 48 requests of 24 tokens: {p.stderr[-800:]} {r}")
        check(r.get("generated_tok_per_s", 0) > 0 and r["ttft_ms"]["p99"] >= r["ttft_ms"]["p50"] > 0 and
              r["itl_ms"]["p50"] is not None, f"serve-load.py reports tok/s, TTFT and ITL: {r}")
        check("aggregate generated tok/s" in open(out_md).read(), "serve-load.py writes the markdown table")
        print(p.stderr, flush=True)
        m = srv.wait_idle(timeout=60)
        check(m.get('stride_kv_blocks{state="used"}') == 0, f"every KV block free after the load generator: {m}")
    finally:
        rc = srv.stop(120)
    check(rc == 0, f"SIGTERM ends the server cleanly: exit {rc}\n{srv.output[-3000:]}")
    check("Sanitizer" not in srv.output and "runtime error" not in srv.output,
          f"no sanitizer report: {srv.output[-3000:]}")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
