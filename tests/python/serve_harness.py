"""A `stride serve` process for the server tests: started on a free port of 127.0.0.1
(--port 0, the port read from its start line), waited for on /health, stopped with
SIGTERM (a clean exit is checked). HTTP helpers over http.client."""
import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time

from harness import clean_env


class Server:
    def __init__(self, stride, model, *args, env=None, start_timeout=60):
        self.cmd = [stride, "serve", "-m", model, "--port", "0", "--backend", "cpu", *args]
        self.proc = subprocess.Popen(self.cmd, env=clean_env(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, encoding="utf-8", errors="replace")
        self.lines = []
        self.port = None
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.lines.append(line)
                hit = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if hit:
                    self.port = int(hit.group(1))
                    ready.set()
            ready.set()

        self.reader = threading.Thread(target=pump, daemon=True)
        self.reader.start()
        ready.wait(start_timeout)
        if self.port is None:
            self.proc.kill()
            raise RuntimeError(f"stride serve did not start: {''.join(self.lines)}")
        deadline = time.time() + start_timeout
        while time.time() < deadline:
            try:
                if self.get("/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        self.base = f"http://127.0.0.1:{self.port}"

    @property
    def output(self):
        return "".join(self.lines)

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=120):
        c = self.conn(timeout)
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            c.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def get(self, path, headers=None):
        return self.request("GET", path, headers=headers)

    def post(self, path, body, headers=None, timeout=120):
        status, data = self.request("POST", path, body, headers, timeout)
        try:
            return status, json.loads(data)
        except ValueError:
            return status, data

    def metrics(self, headers=None):
        status, text = self.get("/metrics", headers)
        out = {}
        for line in text.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def wait_idle(self, headers=None, timeout=30):
        """Waits until no sequence runs or waits and every KV block is free or cached."""
        deadline = time.time() + timeout
        m = {}
        while time.time() < deadline:
            m = self.metrics(headers)
            if (m.get("stride_requests_running") == 0 and m.get("stride_requests_waiting") == 0
                    and m.get('stride_kv_blocks{state="used"}') == 0):
                return m
            time.sleep(0.05)
        return m

    def stop(self, timeout=60):
        """SIGTERM; returns the exit code (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        self.reader.join(5)
        return self.proc.returncode


def synth(stride, preset, path, seed=1):
    if not os.path.exists(path):
        subprocess.run([stride, "synth", preset, "-o", path, "--type", "f32", "--seed", str(seed)], env=clean_env(),
                       check=True, capture_output=True)
    return path
