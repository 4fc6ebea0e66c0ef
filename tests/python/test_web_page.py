"""The web chat page at / in a real browser: headless Chromium from Debian, driven over
the Chrome DevTools Protocol (the `websockets` package): the page loads and shows the
model's name, a prompt typed into the box and sent streams an answer into the page (the
text grows over several reads), and the stop button stops a long answer."""
import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import websockets

from harness import Checks
from serve_harness import Server, synth

CHECKS = Checks()
check = CHECKS.check


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Tab:
    def __init__(self, ws):
        self.ws, self.next_id = ws, 0

    async def call(self, method, **params):
        self.next_id += 1
        my = self.next_id
        await self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            msg = json.loads(await asyncio.wait_for(self.ws.recv(), 30))
            if msg.get("id") == my:
                if "error" in msg:
                    raise RuntimeError(msg["error"])
                return msg.get("result", {})

    async def eval(self, expr):
        r = await self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        return r.get("result", {}).get("value")

    async def wait_for(self, expr, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = await self.eval(expr)
            if v:
                return v
            await asyncio.sleep(0.05)
        return None


async def drive(port, devtools_port, model_id):
    tabs = json.load(urllib.request.urlopen(f"http://127.0.0.1:{devtools_port}/json/list"))
    page = [t for t in tabs if t.get("type") == "page"][0]
    async with websockets.connect(page["webSocketDebuggerUrl"], max_size=2 ** 24) as ws:
        tab = Tab(ws)
        await tab.call("Page.enable")
        await tab.call("Page.navigate", url=f"http://127.0.0.1:{port}/")
        name = await tab.wait_for(f"document.getElementById('model') && "
                                  f"document.getElementById('model').textContent === {json.dumps(model_id)} && "
                                  f"document.getElementById('model').textContent")
        check(name == model_id, f"the page shows the model's name: {name!r}")
        # The random tiny model may end a turn at any token, within a few milliseconds: the
        # page's requests get fields merged in (window.extra) so that the answers run to a
        # set length, long enough to be seen growing and to be stopped.
        await tab.eval("(() => { const f = window.fetch; window.fetch = (u, o) => {"
                       " if (o && o.body && window.extra) o = Object.assign({}, o, {body:"
                       " JSON.stringify(Object.assign(JSON.parse(o.body), window.extra))});"
                       " return f(u, o); }; return true })()")
        # type a prompt, send it, watch the answer grow: a MutationObserver records the length
        # of every text the page put into the answer (each a text node of its own, which keeps
        # its text when replaced), so that how fast the answer streams does not matter
        await tab.eval("window.shown = []; new MutationObserver((records) => { for (const r of records)"
                       " if (r.target.id === 'answer-1') for (const n of r.addedNodes)"
                       " window.shown.push(n.textContent.length); })"
                       ".observe(document.getElementById('log'), {childList: true, subtree: true}); true")
        await tab.eval("window.extra = {ignore_eos: true, max_tokens: 400};"
                       "document.getElementById('prompt').value = 'hello from the browser';"
                       "document.getElementById('send').click(); true")
        done = await tab.wait_for("(() => { const a = document.getElementById('answer-1');"
                                  " return a && a.dataset.done === '1' })()", 60)
        check(done, "the answer finished")
        text = await tab.eval("document.getElementById('answer-1').textContent")
        status = await tab.eval("document.getElementById('status').textContent")
        shown = await tab.eval("window.shown") or []
        check(bool(text) and len(text) > 20, f"an answer was streamed into the page: {text!r}")
        grew = len(set(shown)) >= 3 and all(a <= b for a, b in zip(shown, shown[1:])) and shown[-1] == len(text)
        check(grew, f"the text grew while streaming, ending as the answer (lengths shown: {shown[:20]}"
                    f"{' ...' if len(shown) > 20 else ''} of {len(text)})")
        check(status.startswith("done"), f"the page says it is done: {status!r}")
        user = await tab.eval("document.querySelector('.msg.user').textContent")
        check(user == "hello from the browser", f"the prompt shows as the user's message: {user!r}")
        # a second, long answer, stopped with the stop button
        await tab.eval("window.extra = {ignore_eos: true, max_tokens: 3000};"
                       "document.getElementById('prompt').value = 'and a long one';"
                       "document.getElementById('send').click(); true")
        await tab.wait_for("document.getElementById('answer-3') && "
                           "document.getElementById('answer-3').textContent.length > 10")
        await tab.eval("document.getElementById('stop').click(); true")
        stopped = await tab.wait_for("document.getElementById('status').textContent === 'stopped'", 30)
        check(stopped, "the stop button stops the answer")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    chromium = find_chromium()
    if not chromium:
        print("FAIL: no chromium on PATH (Debian: apt-get install chromium; scripts/install-deps.sh does)")
        print("0 passed, 1 failed")
        return 1
    model = synth(args.stride, "tiny-llama", os.path.join(args.work, "tiny-llama.gguf"))
    srv = Server(args.stride, model, "--chat-template", "chatml", "-c", "4096", "-np", "2", "--alias", "tiny-web")
    profile = tempfile.mkdtemp(prefix="stride-chromium-")
    browser = None
    try:
        browser = subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                                    "--disable-dev-shm-usage", "--no-first-run", "--remote-debugging-port=0",
                                    f"--user-data-dir={profile}", "about:blank"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.time() + 60
        while not os.path.exists(port_file) and time.time() < deadline:
            time.sleep(0.1)
        if not check(os.path.exists(port_file), "chromium started with its DevTools port"):
            return CHECKS.exit_code()
        devtools_port = int(open(port_file).read().split()[0])
        asyncio.run(drive(srv.port, devtools_port, "tiny-web"))
        m = srv.wait_idle()
        check(m.get('stride_kv_blocks{state="used"}') == 0, f"the stopped answer's blocks are free: {m}")
    finally:
        if browser:
            browser.terminate()
            try:
                browser.wait(20)
            except subprocess.TimeoutExpired:
                browser.kill()
        shutil.rmtree(profile, ignore_errors=True)
        rc = srv.stop()
    check(rc == 0, f"the server exits cleanly: {rc}")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
