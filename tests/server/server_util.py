"""Starts build/pagoda serve on a free port and talks to it without the openai client."""
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
PAGODA = Path(os.environ.get("PAGODA_BIN", ROOT / "build" / "pagoda"))
SMOLLM2 = Path(os.environ.get("PAGODA_SMOLLM2",
                              ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
MODEL_NAME = "smollm2"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A running `pagoda serve`; stop() sends SIGTERM and returns the exit code."""

    def __init__(self, *extra, env=None, probe_headers=None):
        if not PAGODA.exists():
            raise AssertionError(f"{PAGODA} is missing: build it first")
        if not SMOLLM2.exists():
            raise AssertionError(f"{SMOLLM2} is missing: run scripts/setup.sh")
        self.probe_headers = probe_headers or {}  # what /metrics needs (an API key)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [str(PAGODA), "serve", "-m", str(SMOLLM2), "--port", str(self.port),
                "--served-model-name", MODEL_NAME, "--threads", "2", "--max-model-len", "2048", "--kv-cache-memory", "256MiB",
                *map(str, extra)]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, **(env or {})})
        self.stderr_lines = []
        deadline = time.time() + 120
        while True:
            line = self.proc.stdout.readline()
            if "listening on" in line:
                break
            if not line or time.time() > deadline:
                self.proc.kill()
                raise AssertionError("pagoda serve did not start:\n" + self.proc.stderr.read())
        # Keep draining the pipes so the server never blocks on a full one.
        threading.Thread(target=self._drain, args=(self.proc.stdout, []), daemon=True).start()
        threading.Thread(target=self._drain, args=(self.proc.stderr, self.stderr_lines),
                         daemon=True).start()

    @staticmethod
    def _drain(pipe, sink):
        for line in pipe:
            sink.append(line)

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def request(self, method, path, body=None, headers=None, raw=None):
        """(status, headers, parsed JSON or text) of one request."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        text = r.read().decode()
        conn.close()
        try:
            payload = json.loads(text)
        except ValueError:
            payload = text
        return r.status, dict(r.getheaders()), payload

    def metrics(self):
        """{sample name + sorted labels: value} of /metrics, parsed by prometheus_client."""
        status, _, text = self.request("GET", "/metrics", headers=self.probe_headers)
        assert status == 200
        out = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "model_name"))
                out[(s.name, labels)] = s.value
        return out

    def wait_idle(self, timeout=30):
        """Waits until nothing runs or waits and the KV cache is empty; returns the metrics."""
        deadline = time.time() + timeout
        while True:
            m = self.metrics()
            if (m[("pagoda:num_requests_running", ())] == 0 and
                    m[("pagoda:num_requests_waiting", ())] == 0 and
                    m[("pagoda:kv_cache_usage_perc", ())] == 0):
                return m
            if time.time() > deadline:
                raise AssertionError(f"the server did not go idle: {m}")
            time.sleep(0.1)
