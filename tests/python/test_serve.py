"""stride serve through the official `openai` client and raw HTTP, on a tiny synthetic
model on the CPU backend: chat and text completions, streaming and not, stop strings,
seeds, n, logprobs, usage, every error status, hostile requests (the server keeps
serving), a client that goes away, /tokenize, /metrics, the web page, SIGTERM draining;
and the same greedy text through `stride serve`, `stride chat` and `stride run`."""
import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time

import openai

from harness import Checks, clean_env
from serve_harness import Server, synth

CHECKS = Checks()
check = CHECKS.check
KEY = "test-key-123"
AUTH = {"Authorization": f"Bearer {KEY}"}


def chatml(messages):
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


def client(srv, key=KEY):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key=key, max_retries=0, timeout=120)


def expect_status(fn, status, what):
    try:
        fn()
    except openai.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        ok = e.status_code == status and isinstance(body.get("message", None), str)
        return check(ok, f"{what}: status {e.status_code} (expected {status}), error {e.body}")
    return check(False, f"{what}: no error (expected {status})")


def test_basics(srv, model_id):
    c = client(srv)
    models = c.models.list()
    check([m.id for m in models.data] == [model_id], f"/v1/models lists the model: {models}")
    msgs = [{"role": "user", "content": "hello there"}]
    r = c.chat.completions.create(model=model_id, messages=msgs, max_tokens=12, temperature=0)
    ch = r.choices[0]
    check(r.object == "chat.completion" and ch.message.role == "assistant" and isinstance(ch.message.content, str),
          f"a chat completion: {r}")
    check(ch.finish_reason in ("length", "stop"), f"finish_reason: {ch.finish_reason}")
    status, tok = srv.post("/tokenize", {"content": chatml(msgs), "add_special": True}, AUTH)
    check(status == 200 and r.usage.prompt_tokens == len(tok["tokens"]),
          f"usage.prompt_tokens {r.usage.prompt_tokens} = the rendered prompt's {len(tok.get('tokens', []))} tokens")
    if ch.finish_reason == "length":
        check(r.usage.completion_tokens == 12, f"usage.completion_tokens = max_tokens: {r.usage}")
    check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, f"total_tokens: {r.usage}")

    # streaming gives the same greedy text, role first, finish last, usage on request
    chunks = list(c.chat.completions.create(model=model_id, messages=msgs, max_tokens=12, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(k.choices[0].delta.content or "" for k in chunks if k.choices)
    check(text == ch.message.content, f"streamed chat text = non-streamed: {text!r} vs {ch.message.content!r}")
    check(chunks[0].choices[0].delta.role == "assistant", f"the first chunk carries the role: {chunks[0]}")
    finals = [k.choices[0].finish_reason for k in chunks if k.choices and k.choices[0].finish_reason]
    check(finals == [ch.finish_reason], f"one final chunk with the finish reason: {finals}")
    check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == r.usage.completion_tokens,
          f"include_usage: the last chunk carries usage: {chunks[-1]}")

    # completions: the same text streamed and not; logprobs
    p = "the quick brown fox"
    r = c.completions.create(model=model_id, prompt=p, max_tokens=16, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    # (alternatives whose text is the same, such as byte tokens shown as U+FFFD, share a key)
    check(r.object == "text_completion" and r.usage.completion_tokens == 16 and len(lp.tokens) == 16 and
          len(lp.token_logprobs) == 16 and all(1 <= len(t) <= 3 for t in lp.top_logprobs) and
          all(abs(max(t.values()) - v) < 1e-6 for t, v in zip(lp.top_logprobs, lp.token_logprobs)),
          f"completion logprobs: one entry per token, the greedy token the most likely: {r}")
    check(all(v <= 0 for v in lp.token_logprobs), f"logprobs are <= 0: {lp.token_logprobs}")
    s = c.completions.create(model=model_id, prompt=p, max_tokens=16, temperature=0, stream=True)
    check("".join(k.choices[0].text for k in s) == r.choices[0].text, "streamed completion = non-streamed")
    cl = c.chat.completions.create(model=model_id, messages=msgs, max_tokens=4, temperature=0, logprobs=True,
                                   top_logprobs=2)
    check(cl.choices[0].logprobs is not None and len(cl.choices[0].logprobs.content) == cl.usage.completion_tokens
          and all(len(t.top_logprobs) == 2 for t in cl.choices[0].logprobs.content), f"chat logprobs: {cl}")
    return r.choices[0].text


def test_sampling(srv, model_id):
    c = client(srv)
    kw = dict(model=model_id, prompt="once upon a time", max_tokens=24, temperature=1.0, top_p=1.0)
    a = c.completions.create(seed=42, **kw).choices[0].text
    b = c.completions.create(seed=42, **kw).choices[0].text
    d = c.completions.create(seed=43, **kw).choices[0].text
    check(a == b, f"the same seed reproduces: {a!r} vs {b!r}")
    check(a != d, f"another seed differs: {a!r} vs {d!r}")
    e = c.completions.create(seed=42, stream=True, **kw)
    check("".join(k.choices[0].text for k in e) == a, "the seed reproduces when streaming too")
    r = c.completions.create(n=3, seed=7, extra_body={"top_k": 50, "min_p": 0.01}, **kw)
    texts = [ch.text for ch in sorted(r.choices, key=lambda x: x.index)]
    check(len(texts) == 3 and len(set(texts)) > 1 and r.usage.completion_tokens == 72,
          f"n=3: three choices, sampled apart, usage counts them all: {texts} {r.usage}")
    # OpenAI's frequency and presence penalties: greedy text that repeats itself changes
    # under them, and the same penalized request gives the same text again
    g = dict(model=model_id, prompt="once upon a time", max_tokens=48, temperature=0)
    plain = c.completions.create(**g).choices[0].text
    pen = [c.completions.create(frequency_penalty=2.0, presence_penalty=2.0, **g).choices[0].text for _ in range(2)]
    words = plain.split()
    check(len(set(words)) < len(words), f"the plain greedy text repeats a word: {plain!r}")
    check(pen[0] == pen[1] and pen[0] != plain, f"penalties change greedy text, reproducibly: {pen} vs {plain!r}")


def test_server_sampling(stride, model, small):
    """A server's sampling flags are what a request names nothing of: `small` runs with
    --top-k 1, so a request at temperature 1 with no top_k gives the greedy text whatever
    its seed, and one that names its own top_k samples; bad values are refused at start."""
    c = client(small, key="none-needed")
    kw = dict(model="small", prompt="once upon a time", max_tokens=16)
    greedy = c.completions.create(temperature=0, **kw).choices[0].text
    texts = [c.completions.create(temperature=1.0, seed=s, **kw).choices[0].text for s in (1, 2)]
    check(texts == [greedy, greedy], f"--top-k 1: temperature 1 without top_k is greedy: {texts} vs {greedy!r}")
    own = [c.completions.create(temperature=1.0, seed=s, extra_body={"top_k": 50}, **kw).choices[0].text
           for s in (1, 2)]
    check(own[0] != own[1], f"a request's own top_k wins over the server's: {own}")
    for flags, needle in ((["--top-p", "1.5"], "top-p"), (["--temp", "-1"], "temperature"),
                          (["--seed", "3"], "--seed")):
        bad = subprocess.run([stride, "serve", "-m", model, *flags], env=clean_env(), capture_output=True,
                             encoding="utf-8", timeout=60)
        check(bad.returncode != 0 and needle in bad.stderr, f"serve {' '.join(flags)}: refused: {bad.stderr}")


def test_stop(srv, model_id, greedy_text):
    c = client(srv)
    p = "the quick brown fox"
    runs = [(mt.start(), mt.group()) for mt in re.finditer(r"[a-z]{2,}", greedy_text) if mt.start() >= 3]
    if not check(runs, f"the greedy text has a word to stop at: {greedy_text!r}"):
        return
    at, word = runs[0]
    want = greedy_text[:greedy_text.index(word)]
    r = c.completions.create(model=model_id, prompt=p, max_tokens=16, temperature=0, stop=[word, "zzzzzz"])
    check(r.choices[0].text == want and r.choices[0].finish_reason == "stop",
          f"stop {word!r}: text cut before it: {r.choices[0].text!r} vs {want!r}, {r.choices[0].finish_reason}")
    s = c.completions.create(model=model_id, prompt=p, max_tokens=16, temperature=0, stop=word, stream=True)
    parts = list(s)
    text = "".join(k.choices[0].text for k in parts)
    check(text == want and word not in text, f"streamed stop: {text!r} vs {want!r} (nothing of the stop string sent)")
    check(parts[-1].choices[0].finish_reason == "stop", f"streamed stop finishes 'stop': {parts[-1]}")


def test_errors(srv, small, model_id):
    c = client(srv)
    msgs = [{"role": "user", "content": "hi"}]
    expect_status(lambda: client(srv, "wrong").models.list(), 401, "a wrong API key")
    st, body = srv.request("GET", "/v1/models")
    check(st == 401, f"no API key: {st}")
    expect_status(lambda: c.chat.completions.create(model="gpt-nope", messages=msgs), 404, "an unknown model")
    bad = [dict(temperature=-1), dict(temperature=3), dict(top_p=0), dict(top_p=1.5), dict(max_tokens=0),
           dict(max_tokens=10 ** 9), dict(n=100), dict(extra_body={"min_p": 1.0}), dict(extra_body={"top_k": -5}),
           dict(stop=[""]), dict(stop=["s"] * 40), dict(extra_body={"tools": [{"type": "function"}]}),
           dict(presence_penalty=3.0), dict(frequency_penalty=-2.5), dict(extra_body={"temperature": "NaN"}),
           dict(seed=2 ** 70)]
    for kw in bad:
        expect_status(lambda: c.chat.completions.create(model=model_id, messages=msgs, **kw), 400, f"chat {kw}")
    for m in ([], [{"role": "tool", "content": "x"}], [{"role": "user"}], [{"content": "x"}],
              [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]):
        expect_status(lambda: c.chat.completions.create(model=model_id, messages=m), 400, f"messages {m}")
    expect_status(lambda: c.completions.create(model=model_id, prompt=[[1, 2], [3]]), 400, "two prompts")
    expect_status(lambda: c.completions.create(model=model_id, prompt=[1, 10 ** 6]), 400, "a token id out of range")
    expect_status(lambda: c.completions.create(model=model_id, prompt="x", echo=True), 400, "echo")
    expect_status(lambda: c.completions.create(model=model_id, prompt="x " * 40000), 413, "a body over --max-body")
    expect_status(lambda: client(small).completions.create(model="small", prompt="word " * 900, max_tokens=4), 400,
                  "a prompt longer than the context")

    # 429: one row, a queue of one, three long requests at once
    sc = client(small)
    import concurrent.futures as cf
    with cf.ThreadPoolExecutor(4) as pool:
        futs = [pool.submit(lambda: sc.completions.create(model="small", prompt="a b c", max_tokens=400,
                                                          extra_body={"ignore_eos": True})) for _ in range(4)]
        statuses = []
        for f in futs:
            try:
                f.result()
                statuses.append(200)
            except openai.APIStatusError as e:
                statuses.append(e.status_code)
    check(statuses.count(429) >= 1 and statuses.count(200) >= 1,
          f"a full queue answers 429 and the others complete: {statuses}")


def raw(srv, data, read_timeout=10):
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=read_timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


def status_of(resp):
    m = re.match(rb"HTTP/1\.[01] (\d+)", resp)
    return int(m.group(1)) if m else None


def test_hostile(srv, model_id):
    h = "Authorization: Bearer " + KEY + "\r\n"

    def post(body, extra=""):
        return raw(srv, (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\n{h}Connection: close\r\n{extra}"
                         f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)

    cases = {
        "malformed JSON": (b'{"prompt": "x",', 400),
        "not an object": (b'[1, 2]', 400),
        "invalid UTF-8": (b'{"prompt": "\xff\xfe\xfd"}', 400),
        "a NUL in a string": (b'{"prompt": "a\\u0000b"}', 400),
        "NaN": (b'{"prompt": "x", "temperature": NaN}', 400),
        "a huge number": (b'{"prompt": "x", "temperature": 1e999}', 400),
        "negative max_tokens": (b'{"prompt": "x", "max_tokens": -5}', 400),
        "deep nesting over the limit": (b'{"prompt": ' + b"[" * 50000 + b"]" * 50000 + b"}", 413),
        "deep nesting under the limit": (b'{"prompt": "x", "a": ' + b"[" * 10000 + b"]" * 10000 + b"}", 400),
        "duplicate keys": (b'{"prompt": "x", "prompt": "y"}', 400),
    }
    for what, (body, want) in cases.items():
        r = post(body)
        check(status_of(r) == want and b'"error"' in r, f"{what}: {status_of(r)} (expected {want}): {r[:300]!r}")
    r = raw(srv, f"POST /v1/completions HTTP/1.1\r\nHost: x\r\n{h}Content-Length: 100000000\r\n\r\n".encode())
    check(status_of(r) == 413, f"a declared body over the limit is 413 at once: {r[:200]!r}")
    r = raw(srv, f"GET /v1/completions HTTP/1.1\r\nHost: x\r\n{h}Connection: close\r\n\r\n".encode())
    check(status_of(r) == 405, f"a GET on a POST endpoint is 405: {r[:200]!r}")
    r = raw(srv, b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    check(status_of(r) == 404, f"an unknown path is 404: {r[:200]!r}")
    r = raw(srv, b"GARBAGE\r\n\r\n")
    check(status_of(r) in (400, None), f"garbage gets 400 or a closed connection: {r[:100]!r}")
    r = raw(srv, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
    check(status_of(r) in (413, 431, None), f"an oversized head is refused: {r[:100]!r}")

    # a truncated body: the client stops sending, the server closes it after the timeout
    t0 = time.time()
    r = raw(srv, f"POST /v1/completions HTTP/1.1\r\nHost: x\r\n{h}Content-Length: 100\r\n\r\n{{\"pro".encode(), 20)
    check(time.time() - t0 < 8 and status_of(r) is None, f"a truncated body is closed after the timeout "
                                                         f"({time.time() - t0:.1f} s): {r[:100]!r}")

    # slow-loris: a head trickled a byte at a time is closed within the timeout (2 s),
    # and the server answers others meanwhile
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    t0, closed_after = time.time(), None
    served = 0
    for i, byte in enumerate(head):
        try:
            s.send(bytes([byte]))
        except OSError:
            closed_after = time.time() - t0
            break
        if i % 4 == 0 and srv.get("/health")[0] == 200:
            served += 1
        time.sleep(0.15)
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                closed_after = time.time() - t0
                break
        except BlockingIOError:
            pass
        except OSError:
            closed_after = time.time() - t0
            break
        s.setblocking(True)
    s.close()
    check(closed_after is not None and closed_after < 5, f"a slow-loris head is closed within the timeout: "
                                                          f"{closed_after}")
    check(served >= 2, f"others were served while it trickled: {served}")
    m = srv.metrics(AUTH)
    check(m.get("stride_http_slow_connections_closed_total", 0) >= 1, f"the watchdog counted it: {m}")
    r = client(srv).completions.create(model=model_id, prompt="still alive", max_tokens=4)
    check(len(r.choices) == 1, "the server keeps serving after the hostile requests")


def test_disconnect(srv, model_id):
    before = srv.metrics(AUTH)
    c = srv.conn()
    # The client leaves after the first chunk of four choices of 1,500 tokens (~1.2 MB of
    # stream, 6,000 tokens of work) through a receive window of a few KiB, so that neither
    # the generation nor the stream can reach its end first, however fast a tiny model is
    # (with the default buffers it could write a one-choice stream whole before the client
    # left: nothing would be cancelled).
    c.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.sock.settimeout(60)
    c.sock.connect(("127.0.0.1", srv.port))
    body = json.dumps({"model": model_id, "prompt": "a", "max_tokens": 1500, "n": 4, "stream": True,
                       "ignore_eos": True})
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json", **AUTH})
    r = c.getresponse()
    got = r.read1(200) if hasattr(r, "read1") else r.read(200)
    check(r.status == 200 and b"data:" in got, f"the stream starts: {r.status} {got[:100]!r}")
    # the response's file holds the socket open after the connection's close: closed too, so
    # that the socket goes (a reset: unread data) rather than idling with a full window while
    # the server waits to write and the generation runs to its end
    c.sock.shutdown(socket.SHUT_RDWR)
    r.close()
    c.close()
    m = srv.wait_idle(AUTH)
    generated = m["stride_generation_tokens_total"] - before["stride_generation_tokens_total"]
    check(m.get("stride_requests_disconnected_total", 0) >= before.get("stride_requests_disconnected_total", 0) + 1,
          f"the server saw the client go: {m.get('stride_requests_disconnected_total')} (before "
          f"{before.get('stride_requests_disconnected_total')}; {generated} tokens generated since)")
    check(generated < 4 * 1500, f"the sequences were cancelled, not generated to the end: {generated} tokens")
    check(m.get('stride_kv_blocks{state="used"}') == 0, f"its blocks are free: {m}")


def test_misc(srv, model_id):
    st, tok = srv.post("/tokenize", {"content": "hello world", "with_pieces": True}, AUTH)
    check(st == 200 and all("id" in t and "piece" in t for t in tok["tokens"]), f"/tokenize with pieces: {tok}")
    st, tok = srv.post("/tokenize", {"content": "hello world"}, AUTH)
    st2, de = srv.post("/detokenize", {"tokens": tok["tokens"]}, AUTH)
    check(st2 == 200 and de.get("content") == "hello world", f"/detokenize inverts /tokenize: {de}")
    st, de = srv.post("/detokenize", {"tokens": [10 ** 9]}, AUTH)
    check(st == 400, f"/detokenize refuses an unknown id: {st} {de}")
    st, page = srv.get("/")
    check(st == 200 and b"stride chat" in page and b"/v1/chat/completions" in page, "the web page is served at /")
    st, h = srv.get("/health")
    check(st == 200, f"/health: {st}")
    m = srv.metrics(AUTH)
    for name in ("stride_requests_running", "stride_requests_waiting", "stride_prompt_tokens_total",
                 "stride_generation_tokens_total", 'stride_kv_blocks{state="used"}', 'stride_kv_blocks{state="free"}',
                 "stride_kv_blocks_total", "stride_prompt_tokens_per_second", "stride_generation_tokens_per_second"):
        check(name in m, f"/metrics has {name}")
    check(m["stride_generation_tokens_per_second"] > 0, f"generation speed is measured: {m}")
    where = {w: m.get(f'stride_sampled_tokens_total{{where="{w}"}}', -1) for w in ("candidates", "device", "row")}
    check(where["row"] > 0 and where["candidates"] == 0 and where["device"] == 0 and
          sum(where.values()) == m["stride_generation_tokens_total"] and m["stride_logits_rows_drawn_late_total"] == 0,
          f"on the CPU every token is sampled from its whole row: {where} of {m['stride_generation_tokens_total']}")


def test_same_text(stride, model, srv, model_id):
    """The same greedy request through serve, chat and run gives the same text."""
    c = client(srv)
    env = clean_env()
    for prompt in ("hello world", "the cat sat on the mat"):
        r = c.completions.create(model=model_id, prompt=prompt, max_tokens=20, temperature=0)
        p = subprocess.run([stride, "run", "-m", model, "--backend", "cpu", "-p", prompt, "-n", "20", "--temp", "0"],
                           env=env, capture_output=True, encoding="utf-8", errors="replace")
        check(p.returncode == 0 and p.stdout[:-1] == r.choices[0].text,
              f"completion {prompt!r}: serve {r.choices[0].text!r} vs run {p.stdout!r}")
    msgs = [{"role": "user", "content": "hello there friend"}]
    r = c.chat.completions.create(model=model_id, messages=msgs, max_tokens=20, temperature=0)
    p = subprocess.run([stride, "chat", "-m", model, "--backend", "cpu", "--chat-template", "chatml", "--temp", "0",
                        "-n", "20"], input="hello there friend\n", env=env, capture_output=True, encoding="utf-8",
                       errors="replace")
    chat_text = p.stdout[:-2] if p.stdout.endswith("\n\n") else p.stdout
    check(p.returncode == 0 and chat_text == r.choices[0].message.content,
          f"chat: serve {r.choices[0].message.content!r} vs stride chat {p.stdout!r} {p.stderr}")
    q = subprocess.run([stride, "run", "-m", model, "--backend", "cpu", "-p", chatml(msgs), "-n", "20", "--temp", "0"],
                       env=env, capture_output=True, encoding="utf-8", errors="replace")
    check(q.returncode == 0 and q.stdout[:-1] == r.choices[0].message.content,
          f"chat: serve {r.choices[0].message.content!r} vs run of the rendered prompt {q.stdout!r}")


def test_chat_command(stride, model):
    """stride chat keeps the history: the second turn finds the first in the KV cache."""
    first = "tell me a long story about " + "a brave little robot and its friends " * 6
    p = subprocess.run([stride, "chat", "-m", model, "--backend", "cpu", "--chat-template", "chatml", "--temp", "0",
                        "-n", "8", "--stats", "--system", "be brief"], input=f"{first}\nand then?\n/clear\nhi\n/exit\n",
                       env=clean_env(), capture_output=True, encoding="utf-8", errors="replace")
    stats = re.findall(r"\[(\d+) prompt tokens, (\d+) from the cache", p.stderr)
    check(p.returncode == 0 and len(stats) == 3, f"three answers (two turns, /clear, one turn): {p.stderr}")
    if len(stats) == 3:
        (n1, c1), (n2, c2), (n3, c3) = [(int(a), int(b)) for a, b in stats]
        check(n2 > n1 and c2 >= 64 and c2 >= (n1 // 64) * 64, f"turn 2 reuses turn 1's blocks: {stats}")
        check(n3 < n1, f"/clear starts over: {stats}")
    check(p.stdout.count("\n\n") >= 3, f"each answer ends with an empty line: {p.stdout!r}")
    bad = subprocess.run([stride, "chat", "-m", model, "--backend", "cpu"], input="hi\n", env=clean_env(),
                         capture_output=True, encoding="utf-8")
    check(bad.returncode != 0 and "--chat-template" in bad.stderr, f"no template: a clear error: {bad.stderr}")
    bad = subprocess.run([stride, "serve", "-m", model, "--chat-template", "jinja"], env=clean_env(),
                         capture_output=True, encoding="utf-8", timeout=60)
    check(bad.returncode != 0 and "--chat-template" in bad.stderr, f"an unknown template name: {bad.stderr}")


def test_drain(small):
    """SIGTERM: the request in flight finishes, a new one on a kept-alive connection gets
    503, and the server exits cleanly."""
    import threading
    keep = small.conn()
    keep.request("GET", "/health")
    keep.getresponse().read()
    result = {}

    def long_request():
        result["r"] = small.post("/v1/completions", {"prompt": "a", "max_tokens": 300, "ignore_eos": True})

    t = threading.Thread(target=long_request)
    t.start()
    time.sleep(0.3)
    small.proc.send_signal(__import__("signal").SIGTERM)
    time.sleep(0.2)
    try:
        keep.request("POST", "/v1/completions", body=json.dumps({"prompt": "b"}),
                     headers={"Content-Type": "application/json"})
        st = keep.getresponse().status
    except (OSError, http.client.HTTPException):
        st = "closed"
    t.join(60)
    status, body = result.get("r", (None, None))
    check(status == 200 and body["usage"]["completion_tokens"] == 300,
          f"the request in flight finished: {status} {str(body)[:200]}")
    check(st in (503, "closed"), f"a new request while draining: {st}")
    rc = small.stop()
    check(rc == 0 and "stopped" in small.output, f"a clean exit after draining: {rc} {small.output[-500:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    model = synth(args.stride, "tiny-llama", os.path.join(args.work, "tiny-llama.gguf"))
    srv = Server(args.stride, model, "--chat-template", "chatml", "-c", "2048", "-np", "4", "--api-key", KEY,
                 "--max-body", "65536", "--timeout", "2", "--alias", "tiny")
    small = Server(args.stride, model, "--chat-template", "chatml", "-c", "512", "-np", "1", "--queue", "1",
                   "--alias", "small", "--top-k", "1")
    try:
        text = test_basics(srv, "tiny")
        test_sampling(srv, "tiny")
        test_server_sampling(args.stride, model, small)
        test_stop(srv, "tiny", text)
        test_errors(srv, small, "tiny")
        test_hostile(srv, "tiny")
        test_disconnect(srv, "tiny")
        test_misc(srv, "tiny")
        test_same_text(args.stride, model, srv, "tiny")
        test_chat_command(args.stride, model)
        m = srv.wait_idle(AUTH)
        check(m.get('stride_kv_blocks{state="used"}') == 0, f"every KV block free at the end: {m}")
        test_drain(small)
    finally:
        rc = srv.stop()
        small.stop()
    check(rc == 0, f"the server exits 0 on SIGTERM: {rc}\n{srv.output[-2000:]}")
    check("AddressSanitizer" not in srv.output and "runtime error" not in srv.output,
          f"no sanitizer report: {srv.output[-3000:]}")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
